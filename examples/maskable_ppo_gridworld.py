"""MaskablePPO (sb3-contrib) on GridWorld: a top-down camera image, a goal signal and action masks.

    python examples/maskable_ppo_gridworld.py
    python examples/maskable_ppo_gridworld.py --timesteps 300000 --seed 1

Each of the 9 agents sees a 36x36 RGB image of its room (a channel-first uint8 image, so SB3
uses its CNN) and a one-hot goal signal (which of the two goals to reach): a Dict observation,
hence "MultiInputPolicy". The scene masks moves into walls. UnityVecEnv turns ML-Agents' masks
(True = blocked, per branch) into sb3-contrib's (True = allowed, one flat vector per slot), which
MaskablePPO reads through ``env_method("action_masks")``. Reaching the right goal gives +1, the
wrong one -1, and every step costs 0.01.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecMonitor

import unity_sb3


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--timesteps", type=int, default=300_000, help="agent decisions to train on, all agents"
    )
    parser.add_argument("--n-steps", type=int, default=128, help="rollout length per agent")
    parser.add_argument("--eval-episodes", type=int, default=27)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-path", default="results/maskable_ppo_gridworld/model")
    args = parser.parse_args(argv)

    # SB3's NatureCNN needs images of at least 36x36 pixels; the scene renders 32x32 by default.
    env = VecMonitor(unity_sb3.UnityVecEnv("GridWorld", open_kwargs={"image_size": 36, "seed": args.seed}))
    print(f"{env.num_envs} slots, observations {env.observation_space}, actions {env.action_space}")
    masks = np.array(env.env_method("action_masks"), dtype=int)
    print(f"allowed actions (stay, up, down, left, right), one row per slot:\n{masks}")

    model = MaskablePPO(
        "MultiInputPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=min(256, args.n_steps * env.num_envs),
        n_epochs=4,
        gamma=0.95,
        ent_coef=0.01,
        policy_kwargs=dict(net_arch=[128, 128]),
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
