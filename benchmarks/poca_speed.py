"""POCA's learner time per agent-step, this tree against another source tree, with PPO for scale.

The learner time of a run is its ``learn`` wall time minus the time spent inside the env's
``step``/``reset`` (timed by a thin ``VecEnvWrapper``): acting, rollout bookkeeping, targets and
updates. Each run is a fresh process (one torch thread) on an in-process scene with the settings
of the learning benchmarks: Escape as ``poca_escape.py`` (12 agents, static guard) and Ball3D as
``poca_ball3d.py`` (12 agents, groups of one). The same is reported in CPU time (the process's
CPU seconds minus those spent in the env), which other jobs on a shared machine disturb far less
than wall time. With ``--baseline DIR`` every POCA run is repeated
with the ``unity_sb3`` of the source tree DIR (e.g. ``git worktree add /tmp/before <commit>``),
the two interleaved round by round so that load on the machine hits both alike; the table gives
medians over the rounds and the ratio baseline / this tree.

    python benchmarks/poca_speed.py --baseline /tmp/before --rounds 3

Writes ``benchmarks/results/poca_speed.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

HERE = Path(__file__).resolve().parents[1]
SCENES = ("Escape", "Ball3D")


def _timed_env(scene: str, seed: int) -> Any:
    """The benchmark scene inside a wrapper that adds up the seconds spent in the env."""
    from poca_escape import make_env
    from stable_baselines3.common.vec_env import VecEnvWrapper

    from unity_sb3 import UnityVecEnv
    from unity_sb3.scenes import make_scene

    class EnvTimer(VecEnvWrapper):
        """Adds up the wall seconds of ``reset`` and ``step`` (``seconds``)."""

        seconds = 0.0
        cpu_seconds = 0.0

        def reset(self) -> Any:
            start, cpu_start = time.perf_counter(), time.process_time()
            obs = self.venv.reset()
            self.seconds += time.perf_counter() - start
            self.cpu_seconds += time.process_time() - cpu_start
            return obs

        def step_wait(self) -> Any:
            start, cpu_start = time.perf_counter(), time.process_time()
            result = self.venv.step_wait()
            self.seconds += time.perf_counter() - start
            self.cpu_seconds += time.process_time() - cpu_start
            return result

    if scene == "Escape":
        return EnvTimer(make_env(seed, num_agents=12, guard_move_prob=0.0))
    return EnvTimer(UnityVecEnv(make_scene("Ball3D", seed=seed)))


def _model(algo: str, scene: str, env: Any, seed: int) -> Any:
    """POCA or PPO with the settings of ``poca_escape.py`` / ``poca_ball3d.py``."""
    if scene == "Escape":
        from poca_escape import make_model

        return make_model(algo, env, seed)
    from poca_ball3d import SETTINGS

    from unity_sb3 import POCA, PPO

    if algo == "poca":
        return POCA("MlpPolicy", env, schedule="constant", seed=seed, **SETTINGS)
    return PPO("MlpPolicy", env, seed=seed, **SETTINGS)


def measure_here(algo: str, scene: str, steps: int, seed: int) -> dict[str, float]:
    """Train once in this process; the learner's and the env's seconds.

    :param steps: agent-steps (SB3 timesteps) to train.
    :return: ``learn_s`` (wall), ``env_s`` (inside the env), ``learner_us_per_step``.
    """
    import torch as th

    th.set_num_threads(1)
    env = _timed_env(scene, seed)
    model = _model(algo, scene, env, seed)
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(steps)
    learn_s = time.perf_counter() - start
    learn_cpu_s = time.process_time() - cpu_start
    env.close()
    learner_s = learn_s - env.seconds
    return {
        "learn_s": learn_s,
        "env_s": env.seconds,
        "learner_us_per_step": learner_s / model.num_timesteps * 1e6,
        "learner_cpu_us_per_step": (learn_cpu_s - env.cpu_seconds) / model.num_timesteps * 1e6,
    }


def measure(tree: Path, algo: str, scene: str, steps: int, seed: int) -> dict[str, float]:
    """:func:`measure_here` in a fresh process importing ``unity_sb3`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, __file__, "--worker", algo, scene, "--steps", str(steps), "--seed", str(seed)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps", type=int, default=12_288, help="agent-steps per run (4 rollouts of 12 x 256)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs per configuration (medians are reported)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenes", nargs="+", default=list(SCENES), choices=SCENES)
    parser.add_argument("--baseline", type=Path, default=None, help="source tree to compare POCA with")
    parser.add_argument("--worker", nargs=2, metavar=("ALGO", "SCENE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure_here(*args.worker, args.steps, args.seed)))
        return
    if args.baseline is not None and not (args.baseline / "unity_sb3" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline} is not a source tree holding unity_sb3/ (a git worktree?)")

    configs = [("poca", "this tree", HERE), ("ppo", "this tree", HERE)]
    if args.baseline is not None:
        configs.insert(0, ("poca", "baseline", args.baseline))
    runs: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    for round_ in range(args.rounds):
        for scene in args.scenes:
            for algo, label, tree in configs:
                result = measure(tree, algo, scene, args.steps, args.seed)
                runs.setdefault((scene, algo, label), []).append(result)
                print(
                    f"round {round_} {scene:6s} {algo} ({label}): "
                    f"{result['learner_us_per_step']:.0f} us/agent-step learner "
                    f"({result['learner_cpu_us_per_step']:.0f} CPU), {result['learn_s']:.1f} s learn",
                    flush=True,
                )

    rows = []
    for (scene, algo, label), results in runs.items():
        row: dict[str, Any] = {
            "scene": scene,
            "algo": algo,
            "tree": label,
            "learner us/agent-step": float(np.median([r["learner_us_per_step"] for r in results])),
            "learner CPU us/agent-step": float(np.median([r["learner_cpu_us_per_step"] for r in results])),
            "learn s": float(np.median([r["learn_s"] for r in results])),
            "env s": float(np.median([r["env_s"] for r in results])),
        }
        rows.append(row)
    for row in rows:
        for column, suffix in (("learner us/agent-step", ""), ("learner CPU us/agent-step", " (CPU)")):
            same_scene = {(r["algo"], r["tree"]): r[column] for r in rows if r["scene"] == row["scene"]}
            row["x PPO" + suffix] = row[column] / same_scene[("ppo", "this tree")]
            if row["algo"] == "poca" and row["tree"] == "this tree" and ("poca", "baseline") in same_scene:
                row["baseline / this" + suffix] = same_scene[("poca", "baseline")] / row[column]
    columns = list(dict.fromkeys(key for row in rows for key in row))
    print_table(
        rows,
        columns,
        title=f"Learner time per agent-step, {args.steps} steps, medians of {args.rounds}",
    )
    path = write_results(
        "poca_speed",
        rows,
        steps=args.steps,
        rounds=args.rounds,
        seed=args.seed,
        baseline=str(args.baseline) if args.baseline else None,
        runs=[{"scene": s, "algo": a, "tree": t, "results": r} for (s, a, t), r in runs.items()],
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
