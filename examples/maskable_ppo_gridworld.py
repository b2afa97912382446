"""MaskablePPO (sb3-contrib) on GridWorld: a top-down camera image, a goal signal and action masks.

    python examples/maskable_ppo_gridworld.py
    python examples/maskable_ppo_gridworld.py --timesteps 300000 --seed 1
    python examples/maskable_ppo_gridworld.py --no-goal-conditioning   # goal concatenated instead

Each of the 9 agents sees a 32x32 RGB image of its room (a channel-first uint8 image) and a
one-hot goal signal (which of the two goals to reach): a Dict observation, hence
"MultiInputPolicy". SB3's NatureCNN needs images of at least 36x36 pixels, so the policy uses
``unity_sb3.networks.UnityMultiInputExtractor`` with ML-Agents' "simple" visual encoder (20x20 and
up), and the goal signal conditions the image features through a hypernetwork layer, as
ML-Agents' ``conditioning_type: hyper`` does (``goal_keys=["GoalSensor"]``).
The scene masks moves into walls. UnityVecEnv turns ML-Agents' masks (True = blocked, per
branch) into sb3-contrib's (True = allowed, one flat vector per slot), which MaskablePPO reads
through ``env_method("action_masks")``. Reaching the right goal gives +1, the wrong one -1, and
every step costs 0.01 (a random policy averages about -0.3 per episode, a perfect one just under 1).

Measured (2 shared CPU cores, one torch thread): the mean reward of the last 50 training episodes
first reaches 0.8 after 46k (seed 0) and 52k (seed 1) steps, and stays at 0.85-0.97 from 70k on.
The default 100k steps (9.7 min next to another training run) evaluate at 0.98 +/- 0.02 over 27
episodes. With ``--no-goal-conditioning`` (tried at learning rate 3e-4) it did not learn within
200k steps (-0.1 to -0.4).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecMonitor

import unity_sb3
from unity_sb3.networks import UnityMultiInputExtractor


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--timesteps", type=int, default=100_000, help="agent decisions to train on, all agents"
    )
    parser.add_argument("--n-steps", type=int, default=128, help="rollout length per agent")
    parser.add_argument("--eval-episodes", type=int, default=27)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-goal-conditioning",
        action="store_true",
        help="concatenate the goal signal to the image features instead of conditioning them on it",
    )
    parser.add_argument("--save-path", default="results/maskable_ppo_gridworld/model")
    args = parser.parse_args(argv)

    env = VecMonitor(unity_sb3.UnityVecEnv("GridWorld", open_kwargs={"seed": args.seed}))
    print(f"{env.num_envs} slots, observations {env.observation_space}, actions {env.action_space}")
    masks = np.array(env.env_method("action_masks"), dtype=int)
    print(f"allowed actions (stay, up, down, left, right), one row per slot:\n{masks}")

    model = MaskablePPO(
        "MultiInputPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=min(256, args.n_steps * env.num_envs),
        n_epochs=4,
        learning_rate=1e-3,
        gamma=0.9,
        ent_coef=0.01,
        policy_kwargs=dict(
            net_arch=[128],
            features_extractor_class=UnityMultiInputExtractor,
            features_extractor_kwargs=dict(
                encoder="simple", goal_keys=[] if args.no_goal_conditioning else ["GoalSensor"]
            ),
        ),
        seed=args.seed,
        verbose=1,
    )
    model.learn(total_timesteps=args.timesteps)
    Path(args.save_path).parent.mkdir(parents=True, exist_ok=True)
    model.save(args.save_path)

    # sb3-contrib's evaluate_policy asks the env for masks before every action
    mean, std = evaluate_policy(
        model, env, n_eval_episodes=args.eval_episodes, deterministic=True, use_masking=True
    )
    print(
        f"saved to {args.save_path}.zip; mean reward over {args.eval_episodes} episodes: {mean:.2f} +/- {std:.2f}"
    )
    env.close()
    return float(mean)


if __name__ == "__main__":
    main()
