"""Cost of ``UnityVecEnv`` over the raw ``BaseEnv`` loop it replaces (same run, side by side).

For Ball3D with 12, 64 and 256 agents, a random-action loop runs on the raw ``BaseEnv``
(``get_steps`` -> ``set_actions`` -> ``step``) and through ``UnityVecEnv`` (``step(actions)``),
alternating in short rounds so machine load hits both alike; the ratio is the median of the
per-round ratios. Both are counted in Unity steps per second (``BaseEnv.step`` calls: the
wrapper also steps Unity between decisions), so the ratio wrapped/raw is the fraction of the
raw speed the wrapper keeps. Loops are timed in CPU seconds, robust on a shared machine: of
this process in-process, of this process plus the player process through the player (the
protocol's waiting is the same in both loops; wall-clock rates are reported too).
Two transports:

- ``inprocess``: the embedded scene as a Python object (the wrapper's cost is most visible);
- ``player``: the stand-in Unity player over the real gRPC protocol, which costs what a real
  Unity build costs; the targets (>= 0.9 at 12 agents, >= 0.95 at 256) are meant for this one.

With ``--baseline DIR`` (e.g. ``git worktree add /tmp/before COMMIT``) the whole measurement runs in
separate processes, ``--repeats`` times for this source tree and for ``DIR``'s, alternating; the
table gives each tree's median ratio and the range over its processes.

Writes ``benchmarks/results/wrapper_overhead.json``.

Usage::

    python benchmarks/wrapper_overhead.py [--agents 12 64 256] [--seconds 1.5] [--rounds 3]
        [--transports inprocess player] [--baseline DIR [--repeats 3]]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# where unity_sb3 is imported from: this tree, or the --baseline tree in its processes (ROOT_VARIABLE)
sys.path.insert(0, os.environ.get("WRAPPER_OVERHEAD_ROOT", str(Path(__file__).resolve().parents[1])))

import numpy as np

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from _common import print_table, write_results
from mlagents_envs.base_env import ActionTuple, BaseEnv

from unity_sb3.open import open_unity
from unity_sb3.wrappers.vec_env import UnityVecEnv

SCENE = "Ball3D"
ROOT_VARIABLE = "WRAPPER_OVERHEAD_ROOT"


class StepCounter:
    """Counts ``step()`` calls of a ``BaseEnv`` (patched on the instance, so both loops pay it)."""

    def __init__(self, env: BaseEnv) -> None:
        self.count = 0
        original = env.step

        def step() -> None:
            self.count += 1
            original()

        env.step = step  # type: ignore[method-assign]


def player_cpu_clock(pid: int):
    """CPU seconds of this process plus those of process ``pid`` (Linux ``/proc``)."""
    import os

    ticks = os.sysconf("SC_CLK_TCK")
    stat_path = f"/proc/{pid}/stat"

    def clock() -> float:
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return time.process_time() + (int(fields[11]) + int(fields[12])) / ticks

    return clock


def raw_loop(
    env: BaseEnv, behavior: str, seconds: float, rng: np.random.Generator, counter: StepCounter, clock
) -> tuple[float, float]:
    """Unity steps per clock second and per wall second of the plain random-action loop."""
    size = env.behavior_specs[behavior].action_spec.continuous_size
    start_count, start, wall = counter.count, clock(), time.perf_counter()
    while clock() - start < seconds:
        for _ in range(20):
            dec, _ = env.get_steps(behavior)
            env.set_actions(
                behavior, ActionTuple(continuous=rng.uniform(-1, 1, (len(dec), size)).astype(np.float32))
            )
            env.step()
    steps = counter.count - start_count
    return steps / (clock() - start), steps / (time.perf_counter() - wall)


def wrapped_loop(
    venv: UnityVecEnv, seconds: float, rng: np.random.Generator, counter: StepCounter, clock
) -> tuple[float, float, float]:
    """Unity steps per clock second and per wall second, and wrapper steps per clock second."""
    venv.reset()
    shape = (venv.num_envs, *venv.action_space.shape)
    start_count, start, wall, calls = counter.count, clock(), time.perf_counter(), 0
    while clock() - start < seconds:
        for _ in range(20):
            venv.step(rng.uniform(-1, 1, shape).astype(np.float32))
        calls += 20
    elapsed, wall_elapsed = clock() - start, time.perf_counter() - wall
    steps = counter.count - start_count
    return steps / elapsed, steps / wall_elapsed, calls / elapsed


def measure(transport: str, agents: int, seconds: float, rounds: int, worker_id: int) -> dict:
    env = open_unity(SCENE, transport=transport, worker_id=worker_id, num_agents=agents)
    process = getattr(env, "process", None)
    clock = time.process_time if process is None else player_cpu_clock(process.pid)
    try:
        behavior = next(iter(env.behavior_specs))
        counter = StepCounter(env)
        venv = UnityVecEnv(env, behavior)
        venv.warn_inactive = False
        rng = np.random.default_rng(0)
        raw, wrapped, calls, raw_wall, wrapped_wall = [], [], [], [], []
        wrapped_loop(venv, min(seconds, 0.3), rng, counter, clock)  # warm-up
        for _ in range(rounds):
            env.reset()
            steps, wall_steps = raw_loop(env, behavior, seconds, rng, counter, clock)
            raw.append(steps)
            raw_wall.append(wall_steps)
            steps, wall_steps, wrapper_steps = wrapped_loop(venv, seconds, rng, counter, clock)
            wrapped.append(steps)
            wrapped_wall.append(wall_steps)
            calls.append(wrapper_steps)
        ratios = [w / r for w, r in zip(wrapped, raw)]
        wall_ratios = [w / r for w, r in zip(wrapped_wall, raw_wall)]
        return {
            "transport": transport,
            "clock": "cpu" if process is None else "cpu incl. player",
            "agents": agents,
            "slots": venv.num_envs,
            "raw_unity_steps_per_s": statistics.median(raw),
            "wrapped_unity_steps_per_s": statistics.median(wrapped),
            "wrapper_steps_per_s": statistics.median(calls),
            "ratio": statistics.median(ratios),
            "ratio_per_round": ratios,
            "raw_unity_steps_per_wall_s": statistics.median(raw_wall),
            "wrapped_unity_steps_per_wall_s": statistics.median(wrapped_wall),
            "wall_ratio": statistics.median(wall_ratios),
        }
    finally:
        env.close()


def _rows_of(root: Path, args: argparse.Namespace) -> list[dict]:
    """The rows of one whole measurement in a process importing unity_sb3 from ``root`` (its player
    processes too)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        argv = [sys.executable, __file__, "--rows-json", str(out), "--seconds", str(args.seconds)]
        argv += ["--rounds", str(args.rounds), "--worker-id", str(args.worker_id)]
        argv += ["--agents", *map(str, args.agents), "--transports", *args.transports]
        path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
        subprocess.run(argv, env={**os.environ, ROOT_VARIABLE: str(root), "PYTHONPATH": path}, check=True)
        return json.loads(out.read_text())


def compare(args: argparse.Namespace) -> None:
    """This tree against ``args.baseline``: ``args.repeats`` processes each, alternating."""
    roots = {"after": Path(__file__).resolve().parents[1], "before": args.baseline.resolve()}
    runs: dict[str, list[list[dict]]] = {side: [] for side in roots}
    for _ in range(args.repeats):
        for side, root in roots.items():
            runs[side].append(_rows_of(root, args))
    rows = []
    for k, first in enumerate(runs["after"][0]):
        row: dict = {"transport": first["transport"], "agents": first["agents"]}
        for side in roots:
            ratios = [run[k]["ratio"] for run in runs[side]]
            row[f"{side}_ratio"] = statistics.median(ratios)
            row[f"{side}_range"] = f"{min(ratios):.3f}-{max(ratios):.3f}"
            row[f"{side}_ratios"] = ratios
            row[f"{side}_raw_unity_steps_per_s"] = statistics.median(
                run[k]["raw_unity_steps_per_s"] for run in runs[side]
            )
        rows.append(row)
    columns = ["transport", "agents", "after_ratio", "after_range", "before_ratio", "before_range"]
    columns += ["after_raw_unity_steps_per_s", "before_raw_unity_steps_per_s"]
    print_table(
        rows,
        columns,
        title=f"UnityVecEnv overhead on {SCENE}, this tree (after) vs {args.baseline} (before): "
        f"median of {args.repeats} processes each (ratio = wrapped / raw)",
    )
    path = write_results(
        "wrapper_overhead",
        rows,
        scene=SCENE,
        seconds=args.seconds,
        rounds=args.rounds,
        repeats=args.repeats,
        baseline=str(args.baseline),
        targets={"12": 0.9, "256": 0.95},
    )
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, nargs="+", default=[12, 64, 256])
    parser.add_argument("--seconds", type=float, default=0.5, help="per measurement")
    parser.add_argument("--rounds", type=int, default=9, help="alternating raw/wrapped rounds (median)")
    parser.add_argument("--transports", nargs="+", default=["inprocess", "player"])
    parser.add_argument("--worker-id", type=int, default=41, help="port offset for the player")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="DIR",
        help="also measure this source tree's UnityVecEnv",
    )
    parser.add_argument("--repeats", type=int, default=3, help="with --baseline: processes per tree")
    parser.add_argument("--rows-json", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    if args.baseline is not None:
        compare(args)
        return
    rows = []
    for transport in args.transports:
        for agents in args.agents:
            row = measure(transport, agents, args.seconds, args.rounds, args.worker_id)
            rows.append(row)
            print(
                f"{transport:9s} {agents:4d} agents: raw {row['raw_unity_steps_per_s']:8.0f} "
                f"wrapped {row['wrapped_unity_steps_per_s']:8.0f} Unity steps/s  ratio {row['ratio']:.3f}",
                flush=True,
            )
    if args.rows_json is not None:  # one process of --baseline's comparison
        args.rows_json.write_text(json.dumps(rows))
        return
    columns = [
        "transport",
        "clock",
        "agents",
        "raw_unity_steps_per_s",
        "wrapped_unity_steps_per_s",
        "wrapper_steps_per_s",
        "ratio",
        "wall_ratio",
    ]
    print_table(
        rows, columns, title=f"UnityVecEnv overhead on {SCENE} (random actions; ratio = wrapped / raw)"
    )
    path = write_results(
        "wrapper_overhead",
        rows,
        scene=SCENE,
        seconds=args.seconds,
        rounds=args.rounds,
        targets={"12": 0.9, "256": 0.95},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
