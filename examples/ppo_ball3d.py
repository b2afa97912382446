"""PPO on Ball3D: the scene's 12 agents are the 12 slots of one Stable-Baselines3 VecEnv.

    python examples/ppo_ball3d.py                    # the embedded scene, in this process (fastest)
    python examples/ppo_ball3d.py --player           # the same scene in a stand-in Unity player
                                                     # process, over the real ML-Agents gRPC protocol

Trains SB3's own PPO, saves the model, loads it back and evaluates it. An agent earns +0.1 per
decision while its ball stays on the platform; an episode lasts at most 1000 decisions, so 100
is a perfect score. A Unity build or the Editor work the same way: pass its path or "editor"
instead of "Ball3D" (see connect_unity_build.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecMonitor

import unity_sb3


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--timesteps", type=int, default=100_000, help="agent decisions to train on, all agents"
    )
    parser.add_argument("--n-steps", type=int, default=256, help="PPO rollout length per agent")
    parser.add_argument("--eval-episodes", type=int, default=12)
    parser.add_argument("--player", action="store_true", help="run the scene in the stand-in Unity player")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-path", default="results/ppo_ball3d/model", help="where the model is saved")
    args = parser.parse_args(argv)

    # Every agent of the behavior becomes a slot. "auto" runs an embedded scene in this process;
    # builds and the Editor always talk gRPC (on port 5005, or the next free one).
    open_kwargs = {
        "seed": args.seed,
        "transport": "player" if args.player else "auto",
        "find_free_port": True,
    }
    env = VecMonitor(unity_sb3.UnityVecEnv("Ball3D", open_kwargs=open_kwargs))
    print(f"{env.num_envs} slots, observations {env.observation_space}, actions {env.action_space}")

    model = PPO(
        "MlpPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=min(512, args.n_steps * env.num_envs),
        n_epochs=3,
        learning_rate=3e-4,
        ent_coef=0.001,
        policy_kwargs=dict(net_arch=[64, 64]),
        seed=args.seed,
        verbose=1,
    )
    model.learn(total_timesteps=args.timesteps)
    Path(args.save_path).parent.mkdir(parents=True, exist_ok=True)
    model.save(args.save_path)
    del model

    model = PPO.load(args.save_path, env=env)
    mean, std = evaluate_policy(model, env, n_eval_episodes=args.eval_episodes, deterministic=True)
    print(
        f"saved to {args.save_path}.zip; mean reward over {args.eval_episodes} episodes: {mean:.2f} +/- {std:.2f}"
    )
    env.close()
    return float(mean)


if __name__ == "__main__":
    main()
