"""POCA vs independent PPO on the Escape scene (one agent must die to drop the key).

Both train on the same UnityVecEnv slots (``add_group_reward=True``: the group reward is in
every living member's reward, the only way independent PPO sees it; POCA takes it back out and
counts it once per agent per step, so the setting does not change what POCA learns). Independent PPO is
``unity_sb3.PPO`` without reward signals: like POCA it leaves the placeholder steps of dead
agents out of its losses (SB3's PPO would train on them). With ``--guard-move-prob 0`` the guard
stands still, so the key only drops when an agent walks into it. The metric is the group
success rate: group episodes that reach the door / all group episodes (successes + time-outs),
measured from the training rollouts (curve) and by a final evaluation with the stochastic policy.

    python benchmarks/poca_escape.py --seeds 0 1 2 --timesteps 300000 --jobs 2
    python benchmarks/poca_escape.py --guard-move-prob 0 --name poca_escape_static_guard --jobs 2

Writes ``benchmarks/results/<name>.{json,png}`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _curves import run_tasks

from unity_sb3 import POCA, PPO, UnityVecEnv
from unity_sb3.scenes import make_scene

RESULTS = Path(__file__).resolve().parent / "results"


class GroupOutcomes:
    """Counts group successes and time-outs from VecEnv step outputs."""

    def __init__(self) -> None:
        self.successes = 0
        self.timeouts = 0

    def update(self, dones: np.ndarray, infos: list[dict]) -> None:
        won = {info.get("group_id") for info in infos if info.get("group_reward", 0.0) > 0}
        timed_out = {
            info.get("group_id")
            for d, info in zip(dones, infos)
            if d and info.get("TimeLimit.truncated", False)
        }
        self.successes += len(won)
        self.timeouts += len(timed_out - won)

    @property
    def rate(self) -> float:
        total = self.successes + self.timeouts
        return self.successes / total if total else float("nan")


class SuccessCurve(BaseCallback):
    """Success rate per ``every`` timesteps of training."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every = every
        self.points: list[tuple[int, float]] = []
        self._window = GroupOutcomes()
        self._next = every

    def _on_step(self) -> bool:
        self._window.update(self.locals["dones"], self.locals["infos"])
        if self.num_timesteps >= self._next:
            self.points.append((self.num_timesteps, self._window.rate))
            self._window = GroupOutcomes()
            self._next += self.every
        return True


def make_env(seed: int, num_agents: int, guard_move_prob: float | None = None) -> UnityVecEnv:
    """Escape through ``UnityVecEnv``; ``guard_move_prob`` None keeps the scene's default (0.25)."""
    params = {} if guard_move_prob is None else {"guard_move_prob": guard_move_prob}
    scene = make_scene("Escape", seed=seed, num_agents=num_agents, **params)
    return UnityVecEnv(scene, add_group_reward=True)


def make_model(algo: str, env: UnityVecEnv, seed: int):
    if algo == "poca":
        return POCA("MlpPolicy", env, n_steps=256, batch_size=512, n_epochs=3, learning_rate=3e-4, seed=seed)
    return PPO(
        "MlpPolicy",
        env,
        n_steps=256,
        batch_size=512,
        n_epochs=3,
        learning_rate=3e-4,
        ent_coef=5e-3,
        seed=seed,
        policy_kwargs=dict(net_arch=[128, 128]),
    )


def evaluate(model, seed: int, num_agents: int, steps: int, guard_move_prob: float | None) -> float:
    env = make_env(10_000 + seed, num_agents, guard_move_prob)
    outcomes = GroupOutcomes()
    obs = env.reset()
    for _ in range(steps):
        actions, _ = model.predict(obs, deterministic=False)
        obs, _, dones, infos = env.step(actions)
        outcomes.update(dones, infos)
    env.close()
    return outcomes.rate


def run(
    algo: str,
    seed: int,
    timesteps: int,
    num_agents: int,
    eval_steps: int,
    guard_move_prob: float | None,
    threads: int,
) -> dict:
    th.set_num_threads(threads)
    th.manual_seed(seed)
    env = make_env(seed, num_agents, guard_move_prob)
    model = make_model(algo, env, seed)
    curve = SuccessCurve(every=max(timesteps // 20, 1))
    start = time.perf_counter()
    model.learn(timesteps, callback=curve)
    seconds = time.perf_counter() - start
    env.close()
    rate = evaluate(model, seed, num_agents, eval_steps, guard_move_prob)
    return {
        "algo": algo,
        "seed": seed,
        "final_success": rate,
        "curve": curve.points,
        "train_seconds": seconds,
    }


def plot(runs: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for algo, color in (("poca", "tab:blue"), ("ppo", "tab:orange")):
        curves = [r["curve"] for r in runs if r["algo"] == algo and r["curve"]]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        x = np.array([p[0] for p in curves[0][:n]])
        y = np.array([[p[1] for p in c[:n]] for c in curves])
        for row in y:
            ax.plot(x, row, color=color, alpha=0.25)
        ax.plot(x, np.nanmean(y, axis=0), color=color, label=f"{algo.upper()} (mean of {len(curves)} seeds)")
    ax.set_xlabel("timesteps (agent slots x steps)")
    ax.set_ylabel("group success rate")
    ax.set_title(title)
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--timesteps", type=int, default=300_000)
    parser.add_argument("--num-agents", type=int, default=12, help="multiple of 3 (one group per 3)")
    parser.add_argument("--eval-steps", type=int, default=1000)
    parser.add_argument("--algos", nargs="+", default=["poca", "ppo"], choices=["poca", "ppo"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument(
        "--guard-move-prob",
        type=float,
        default=None,
        help="Escape guard_move_prob (default: the scene's, 0.25)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes)")
    parser.add_argument("--name", default="poca_escape", help="stem of the JSON / PNG outputs")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    tasks = [
        (algo, seed, args.timesteps, args.num_agents, args.eval_steps, args.guard_move_prob, args.threads)
        for seed in args.seeds
        for algo in args.algos
    ]
    runs = run_tasks(run, tasks, args.jobs)
    for result in runs:
        print(
            f"{result['algo']:5s} seed {result['seed']}: success {result['final_success']:.2f} "
            f"({result['train_seconds']:.0f} s)",
            flush=True,
        )
    summary = {}
    print(f"\n{'algo':6s} {'seeds':>5s} {'success mean':>13s} {'min':>6s} {'max':>6s}")
    for algo in args.algos:
        rates = [r["final_success"] for r in runs if r["algo"] == algo]
        summary[algo] = {
            "mean": float(np.mean(rates)),
            "min": float(np.min(rates)),
            "max": float(np.max(rates)),
        }
        print(f"{algo:6s} {len(rates):5d} {summary[algo]['mean']:13.2f} {min(rates):6.2f} {max(rates):6.2f}")
    config = {
        "timesteps": args.timesteps,
        "num_agents": args.num_agents,
        "eval_steps": args.eval_steps,
        "guard_move_prob": args.guard_move_prob,
    }
    (RESULTS / f"{args.name}.json").write_text(
        json.dumps({"config": config, "summary": summary, "runs": runs}, indent=1)
    )
    guard = "scene default" if args.guard_move_prob is None else args.guard_move_prob
    plot(runs, RESULTS / f"{args.name}.png", f"Escape (guard_move_prob {guard}): POCA vs independent PPO")
    print(f"wrote {RESULTS / args.name}.json and {args.name}.png")


if __name__ == "__main__":
    main()
