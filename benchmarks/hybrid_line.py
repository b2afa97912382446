"""Hybrid actions on HybridLine (ML-Agents' hybrid learning test): PPO and POCA with the hybrid
policy vs PPO on UnityVecEnv's Box fallback (hybrid="box": the branch value binned from a float).

Every run uses ``ppo.yml``'s HybridLine hyperparameters (POCA the same numbers) on 8 agents and
reports the agent-steps until the mean reward of the last 100 episodes reaches Unity's threshold
(0.9; the best return is 1.05), the mean of the last 100 training episodes, and the deterministic
policy's mean return over 200 steps after training. ``python benchmarks/hybrid_line.py --seeds 0 1 2``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecMonitor

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_results

from unity_sb3.algorithms.poca import POCA
from unity_sb3.algorithms.ppo.ppo import PPO
from unity_sb3.scenes import make_scene
from unity_sb3.wrappers.vec_env import UnityVecEnv

THRESHOLD = 0.9
KWARGS = dict(n_steps=128, batch_size=64, n_epochs=3, learning_rate=1e-3, gamma=0.99, gae_lambda=0.95)


class Threshold(BaseCallback):
    """Records the agent-step at which the last 100 episodes' mean reward first reaches THRESHOLD."""

    def __init__(self) -> None:
        super().__init__()
        self.reached: int | None = None

    def _on_step(self) -> bool:
        buffer = self.model.ep_info_buffer
        if self.reached is None and len(buffer) >= 50 and np.mean([e["r"] for e in buffer]) >= THRESHOLD:
            self.reached = self.num_timesteps
        return True


def evaluate(model, env, steps: int = 200) -> float:
    obs, returns = env.reset(), []
    for _ in range(steps):
        actions, _ = model.predict(obs, deterministic=True)
        obs, _, _, infos = env.step(actions)
        returns += [info["episode"]["r"] for info in infos if "episode" in info]
    return float(np.mean(returns)) if returns else float("nan")


def run(algo: str, seed: int, steps: int) -> dict:
    th.manual_seed(seed)
    hybrid = "box" if algo == "PPO (Box fallback)" else "tuple"
    env = VecMonitor(UnityVecEnv(make_scene("HybridLine", seed=seed, num_agents=8), hybrid=hybrid))
    cls = POCA if algo == "POCA" else PPO
    model = cls("MlpPolicy", env, seed=seed, policy_kwargs=dict(net_arch=[64, 64]), **KWARGS)
    callback = Threshold()
    start = time.perf_counter()
    model.learn(steps, callback=callback)
    seconds = time.perf_counter() - start
    row = {
        "algo": algo,
        "seed": seed,
        "steps to 0.9": callback.reached,
        "last-100 mean": float(np.mean([e["r"] for e in model.ep_info_buffer])),
        "deterministic": evaluate(model, env),
        "seconds": seconds,
    }
    env.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--algos", nargs="+", default=["PPO", "POCA", "PPO (Box fallback)"])
    args = parser.parse_args()
    th.set_num_threads(1)
    rows = [run(algo, seed, args.steps) for algo in args.algos for seed in args.seeds]
    columns = ["algo", "seed", "steps to 0.9", "last-100 mean", "deterministic", "seconds"]
    print_table(rows, columns, title=f"HybridLine, {args.steps} agent-steps")
    write_results("hybrid_line", rows, steps=args.steps)


if __name__ == "__main__":
    main()
