"""PPO alone vs PPO + behavioral cloning on the embedded Ball3D scene, several seeds.

The scripted expert of Ball3D is recorded into a ``.demo`` file (``record_demo``); then, for
each seed, the same PPO (hyperparameters of ``unity_sb3/config/hyperparams/ppo.yml``, with a shorter
rollout) learns the scene

- ``ppo``: from scratch;
- ``ppo+bc``: with ML-Agents' ``behavioral_cloning`` term (strength 1.0, annealed to 0 over
  the first half of the budget) read from the demo;
- ``pretrain+ppo+bc``: the same, after :func:`unity_sb3.pretrain_bc` with critic warm-up.

Measured: environment steps (agent decisions, summed over the 12 agents) until the mean
reward of the episodes finished during a rollout (stochastic actions, as training reports it)
first reaches ``--threshold`` (default: 90% of the perfect score), and the whole learning
curve. Writes ``benchmarks/results/bc_ball3d.json`` and ``bc_ball3d.png`` (both learning curves:
mean over seeds, min-max band) and prints a table.

Usage::

    python benchmarks/bc_ball3d.py [--seeds 0 1 2] [--timesteps 150000] [--variants ppo ppo+bc]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from _common import RESULTS_DIR, print_table, write_results
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecMonitor

from unity_sb3 import PPO, UnityVecEnv, pretrain_bc
from unity_sb3.demos.reader import record_demo
from unity_sb3.scenes import make_scene

VARIANTS = ("ppo", "ppo+bc", "pretrain+ppo+bc")
DECISION_PERIOD = 5  # Ball3D: physics steps per decision; +0.1 reward per decision


class Curve(BaseCallback):
    """``(num_timesteps, mean reward of the episodes that ended in the rollout)`` per rollout."""

    def __init__(self) -> None:
        super().__init__()
        self.points: list[tuple[int, float]] = []
        self._rewards: list[float] = []

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            episode = info.get("episode")
            if episode is not None:
                self._rewards.append(float(episode["r"]))
        return True

    def _on_rollout_end(self) -> None:
        if self._rewards:
            self.points.append((int(self.num_timesteps), float(np.mean(self._rewards))))
        self._rewards = []


def ppo_kwargs(seed: int) -> dict:
    return dict(
        n_steps=256,
        batch_size=512,
        n_epochs=3,
        learning_rate=3e-4,
        gamma=0.99,
        gae_lambda=0.95,
        ent_coef=0.001,
        clip_range=0.2,
        policy_kwargs=dict(net_arch=[64, 64]),
        seed=seed,
        verbose=0,
        device="cpu",
    )


def run(variant: str, seed: int, demo: str, args: argparse.Namespace) -> dict:
    scene = make_scene("Ball3D", seed=1000 + seed, num_agents=12, max_steps=args.max_steps)
    env = VecMonitor(UnityVecEnv(scene))
    bc = None
    if variant != "ppo":
        bc = {"demo_path": demo, "strength": args.strength, "steps": args.timesteps // 2}
    model = PPO("MlpPolicy", env, behavioral_cloning=bc, **ppo_kwargs(seed))
    start = time.perf_counter()
    if variant == "pretrain+ppo+bc":
        pretrain_bc(model, demo, epochs=args.pretrain_epochs, critic_warmup=True, seed=seed)
    curve = Curve()
    model.learn(args.timesteps, callback=curve)
    seconds = time.perf_counter() - start
    env.close()
    reached = next((steps for steps, reward in curve.points if reward >= args.threshold), None)
    return {
        "variant": variant,
        "seed": seed,
        "steps_to_threshold": reached,
        "final_reward": curve.points[-1][1] if curve.points else None,
        "seconds": seconds,
        "curve": curve.points,
    }


def plot(rows: list[dict], path: Path, threshold: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for variant in dict.fromkeys(r["variant"] for r in rows):
        curves = [r["curve"] for r in rows if r["variant"] == variant and r["curve"]]
        grid = np.linspace(0, min(c[-1][0] for c in curves), 100)
        values = np.array([np.interp(grid, [p[0] for p in c], [p[1] for p in c]) for c in curves])
        ax.plot(grid, values.mean(axis=0), label=f"{variant} ({len(curves)} seeds)")
        ax.fill_between(grid, values.min(axis=0), values.max(axis=0), alpha=0.2)
    ax.axhline(threshold, color="grey", linestyle="--", linewidth=1, label="threshold")
    ax.set_xlabel("environment steps (agent decisions)")
    ax.set_ylabel("mean episode reward (training)")
    ax.set_title("Ball3D: PPO alone vs PPO + behavioral cloning")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--timesteps", type=int, default=150_000)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--max-steps", type=int, default=1000, help="Ball3D max_steps (physics steps)")
    parser.add_argument("--threshold", type=float, default=None, help="default: 90%% of the perfect score")
    parser.add_argument("--demo-episodes", type=int, default=24)
    parser.add_argument("--strength", type=float, default=1.0)
    parser.add_argument("--pretrain-epochs", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    perfect = 0.1 * args.max_steps / DECISION_PERIOD
    if args.threshold is None:
        args.threshold = 0.9 * perfect
    with tempfile.TemporaryDirectory() as tmp:
        demo = str(Path(tmp) / "ExpertBall3D.demo")
        expert = make_scene("Ball3D", seed=12345, num_agents=12, max_steps=args.max_steps)
        name = next(iter(expert.behavior_specs))
        meta = record_demo(
            expert, name, lambda s: expert.expert_actions(name, s), demo, n_episodes=args.demo_episodes
        )
        expert.close()
        print(
            f"expert demo: {meta.number_steps} records, {meta.number_episodes} episodes, mean reward {meta.mean_reward:.2f}"
        )
        rows = []
        for seed in args.seeds:
            for variant in args.variants:
                row = run(variant, seed, demo, args)
                rows.append(row)
                print(
                    f"{variant:>16} seed {seed}: threshold at {row['steps_to_threshold']} steps, "
                    f"final {row['final_reward']:.2f}, {row['seconds']:.0f} s",
                    flush=True,
                )
    summary = []
    for variant in args.variants:
        mine = [r for r in rows if r["variant"] == variant]
        reached = [r["steps_to_threshold"] for r in mine if r["steps_to_threshold"] is not None]
        summary.append(
            {
                "variant": variant,
                "seeds": len(mine),
                "solved": f"{len(reached)}/{len(mine)}",
                "median steps to threshold": float(np.median(reached)) if reached else None,
                "max steps to threshold": max(reached) if reached else None,
                "mean final reward": float(np.mean([r["final_reward"] for r in mine])),
            }
        )
    print_table(
        summary,
        [
            "variant",
            "seeds",
            "solved",
            "median steps to threshold",
            "max steps to threshold",
            "mean final reward",
        ],
        title=f"Ball3D (max_steps={args.max_steps}, perfect {perfect:.0f}, threshold {args.threshold:.1f}, "
        f"budget {args.timesteps} steps)",
    )
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    png = RESULTS_DIR / "bc_ball3d.png"
    plot(rows, png, args.threshold)
    write_results("bc_ball3d", rows, args=vars(args), expert_mean_reward=meta.mean_reward, summary=summary)
    print(f"plot: {png}")


if __name__ == "__main__":
    main()
