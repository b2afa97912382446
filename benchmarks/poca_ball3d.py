"""POCA with groups of one vs PPO on Ball3D: does the centralised machinery cost anything alone?

Ball3D's agents have no group (``group_id`` 0), so POCA makes each a group of one: its critic
sees one member and its baseline none, and POCA should learn as PPO does. Both algorithms train
``unity_sb3`` classes on the same in-process ``UnityVecEnv`` (12 agents) with the same settings
(n_steps 256 per slot, batch 256, 3 epochs, lr 3e-4, entropy 0.001, net [64, 64], constant
schedules) and observations normalised by running statistics (``VecNormalize``, rewards left
alone), as Unity's ``config/ppo/3DBall.yaml`` and ``poca`` configs do (``normalize: true``): the
faithful Ball3D's velocities and positions span very different scales, and without it both learn
several times slower. Metrics: mean return of the episodes that ended in each window of training steps
(an episode scores at most 100), the first step at which it reached ``--threshold``, its mean
over the last third of training, and a deterministic evaluation return.

    python benchmarks/poca_ball3d.py --jobs 2          # 3 seeds x {poca, ppo}, 150k steps

Writes ``benchmarks/results/poca_ball3d.{json,png}`` and prints a table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, print_table, write_results
from _curves import EpisodeRecorder, plot_curves, run_tasks, windowed_mean

from unity_sb3 import POCA, PPO, UnityVecEnv
from unity_sb3.scenes import make_scene

SETTINGS: dict[str, Any] = {
    "n_steps": 256,
    "batch_size": 256,
    "n_epochs": 3,
    "learning_rate": 3e-4,
    "ent_coef": 0.001,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "policy_kwargs": {"net_arch": [64, 64]},
}


def evaluate(model, normalizer: VecNormalize, seed: int, steps: int) -> float:
    """Mean return of the episodes a deterministic policy finishes in ``steps`` steps (partial ones if none).

    :param normalizer: the training env's observation normaliser (its statistics are only read).
    """
    env = UnityVecEnv(make_scene("Ball3D", seed=seed))
    obs = env.reset()
    total = np.zeros(env.num_envs)
    returns: list[float] = []
    for _ in range(steps):
        actions, _ = model.predict(normalizer.normalize_obs(obs), deterministic=True)
        obs, rewards, dones, _ = env.step(actions)
        total += rewards
        returns.extend(total[dones].tolist())
        total[dones] = 0.0
    env.close()
    return float(np.mean(returns)) if returns else float(total.mean())


def run(algo: str, seed: int, steps: int, window: int, threshold: float) -> dict[str, Any]:
    th.set_num_threads(1)
    env = VecNormalize(VecMonitor(UnityVecEnv(make_scene("Ball3D", seed=seed))), norm_reward=False)
    if algo == "poca":
        model = POCA("MlpPolicy", env, schedule="constant", seed=seed, **SETTINGS)
    else:
        model = PPO("MlpPolicy", env, seed=seed, **SETTINGS)
    recorder = EpisodeRecorder()
    start = time.perf_counter()
    model.learn(steps, callback=recorder)
    seconds = time.perf_counter() - start
    env.close()
    curve = windowed_mean(recorder.episodes, steps, window)
    reached = next(
        ((k + 1) * window for k, value in enumerate(curve) if value is not None and value >= threshold), None
    )
    return {
        "algo": algo,
        "seed": seed,
        "curve": curve,
        "steps_to_threshold": reached,
        "last_third_return": float(np.mean([v for v in curve[-max(len(curve) // 3, 1) :] if v is not None])),
        "eval_return": evaluate(model, env, 1000 + seed, 1000),
        "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=150_000, help="training steps per run (all agents)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--algos", nargs="+", default=["poca", "ppo"], choices=["poca", "ppo"])
    parser.add_argument("--window", type=int, default=10_000, help="steps per point of the curve")
    parser.add_argument(
        "--threshold", type=float, default=90.0, help="windowed mean return that counts as solved (max 100)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one CPU thread each)")
    args = parser.parse_args(argv)

    tasks = [
        (algo, seed, args.steps, args.window, args.threshold) for algo in args.algos for seed in args.seeds
    ]
    rows = run_tasks(run, tasks, args.jobs)
    for row in rows:
        print(
            f"{row['algo']:>4} seed {row['seed']}: threshold at {row['steps_to_threshold']}, "
            f"eval return {row['eval_return']:.1f} ({row['seconds']} s)",
            flush=True,
        )
    summary = []
    for algo in args.algos:
        mine = [r for r in rows if r["algo"] == algo]
        reached = [r["steps_to_threshold"] for r in mine if r["steps_to_threshold"] is not None]
        summary.append(
            {
                "algo": algo,
                "seeds": len(mine),
                "seeds solved": len(reached),
                "steps to threshold (median)": float(np.median(reached)) if reached else None,
                "last third return (mean)": float(np.mean([r["last_third_return"] for r in mine])),
                "eval return (mean)": float(np.mean([r["eval_return"] for r in mine])),
                "seconds (mean)": float(np.mean([r["seconds"] for r in mine])),
            }
        )
    print_table(
        summary,
        list(summary[0]),
        title=f"Ball3D groups of one, {args.steps} steps, threshold {args.threshold}",
    )
    path = write_results("poca_ball3d", rows, summary=summary, settings={**vars(args), **SETTINGS})
    png = RESULTS_DIR / "poca_ball3d.png"
    curves = {algo.upper(): [r["curve"] for r in rows if r["algo"] == algo] for algo in args.algos}
    title = "Ball3D, groups of one: POCA vs PPO (mean, min-max over seeds)"
    plot_curves(curves, args.window, png, "mean episode return", title, hline=args.threshold)
    print(f"wrote {path} and {png}")


if __name__ == "__main__":
    main()
