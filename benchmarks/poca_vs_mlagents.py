"""POCA against ML-Agents' own POCA trainer on Unity's two-agent learning-test scene, side by side.

Unity's ``test_simple_rl.py::test_simple_poca`` trains its POCA trainer on ``MultiAgentEnvironment``
(``simple_test_envs.py``: two agents of one group, each walking a line towards its goal, the group
reward when the last arrives) with ``poca_dummy_config()`` (lr 5e-3 constant, batch 16, buffer
64, one layer of 32, 3000 steps) and passes when the mean of the last 5 end rewards is above 0.9.
This script runs, interleaved, for several training seeds and both action kinds of the test:

(a) ML-Agents' trainer, unchanged: ``check_environment_trains`` (TrainerFactory +
    TrainerController + SimpleEnvManager) on Unity's ``MultiAgentEnvironment``, in a separate
    Python (``--mlagents-python``) that has the ``mlagents`` 1.1.0 and ``mlagents-envs`` 1.1.0
    packages, with Unity's test helpers (``dummy_config.py``, ``check_env_trains.py``,
    ``simple_test_envs.py`` of ``ml-agents/mlagents/trainers/tests/``) under ``--mlagents-src``
    (the repository layout: ``<src>/ml-agents/mlagents/trainers/tests/``). Neither is part of this
    project. The worker changes four things at run time, none of them in Unity's files: it puts
    ``<src>/ml-agents/mlagents/trainers`` on ``mlagents.trainers.__path__`` (the wheel has no
    ``tests`` package); it registers a stand-in for ``tests/test_rpc_utils.py``, whose one
    import there serves only ``RecordEnvironment`` (unused here); it registers the built-in
    trainers as Unity's test fixture does (``get_default_trainer_types``); and it makes the
    final ONNX export a no-op (torch 2.13's exporter needs onnxscript, whose protobuf and numpy
    contradict mlagents 1.1.0's pins; the export is not training and our side exports nothing).
(b) ``unity_sb3.POCA`` through ``UnityVecEnv`` on ``tests/goal_line.py::GoalLineTeam``, our own
    re-creation of ``MultiAgentEnvironment`` with its quirks. Every run first steps both envs (in
    the ML-Agents Python) with the same random actions for 20,000 steps and asserts identical
    batches (``--skip-check-env`` skips that). The settings are the same ML-Agents config mapped by
    ``unity_sb3.config.mlagents`` (what ``unity-sb3 train`` does with the YAML).

Budget and counts: both stop at 3000 agent-steps (ML-Agents: its ``max_steps`` on its trainer's
step count; ours: a callback stops when the env has made 3000 agent moves). ``agent steps`` is
counted in the env on both sides (moves made), so the budgets can be compared. ``steps to 0.9`` is
that count when the mean of the last 5 end rewards (the test's criterion) first exceeds 0.9.
``wall s`` is the training call alone, one torch thread, each run a fresh process: ML-Agents'
``check_environment_trains`` (trainer and policy creation included), ours the env, model
creation and ``learn``; ``CPU s`` is the process time of the same span (steadier than wall time
on a loaded machine). Both import ``torch._dynamo`` before the clock starts (torch's first
optimizer imports it: 2-3 s here, the same one-time cost of torch for both; ``--cold`` leaves it
in); the JSON lists what else each run imported inside the clock.

    python benchmarks/poca_vs_mlagents.py --mlagents-python /tmp/mla_venv/bin/python \\
        --mlagents-src /tmp/mla_src --seeds 1337 0 1 2 3

Writes ``benchmarks/results/poca_vs_mlagents.json`` and prints a table.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import print_table, write_results  # noqa: E402

BEHAVIOR = "1D"
THRESHOLD = 0.9
LAST_N = 5
_RUN_KEYS = ("algo", "n_timesteps", "policy", "normalize", "open_kwargs", "summary_freq")


def steps_to_threshold(ends: list[tuple[int, float]]) -> int | None:
    """Agent-steps at which the mean of the last ``LAST_N`` end rewards first exceeds ``THRESHOLD``.

    :param ends: ``(agent steps so far, end reward)`` in the order the ends happened.
    """
    for k in range(LAST_N, len(ends) + 1):
        window = [r for _, r in ends[k - LAST_N : k]]
        if sum(window) / LAST_N > THRESHOLD:
            return ends[k - 1][0]
    return None


def summarize(ends: list[tuple[int, float]], agent_steps: int, wall_s: float, cpu_s: float) -> dict[str, Any]:
    last = [r for _, r in ends[-LAST_N:]]
    final = sum(last) / len(last) if last else float("nan")
    return {
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "agent_steps": agent_steps,
        "episodes": len(ends),
        "steps_to_threshold": steps_to_threshold(ends),
        "final_reward": final,
        "passed": bool(final > THRESHOLD),
    }


def _warm_up(cold: bool) -> float:
    """Import ``torch._dynamo`` now unless ``cold``: torch's first optimizer imports it (2-3 s on a
    loaded 2-core box), a one-time cost of torch that both trainers would pay inside the clock.

    :return: the seconds the import took (0 when ``cold``).
    """
    if cold:
        return 0.0
    start = time.perf_counter()
    import torch._dynamo  # noqa: F401

    return time.perf_counter() - start


def _imported_since(before: set[str]) -> list[str]:
    """Package names (two levels) of the modules imported since ``before`` (a copy of ``sys.modules``' keys)."""
    return sorted({".".join(name.split(".")[:2]) for name in set(sys.modules) - before})


# ------------------------------------------------------------------ ML-Agents' side (its Python)
def _import_unity_tests(src: Path) -> None:
    """Make Unity's test helpers under ``src`` importable as ``mlagents.trainers.tests`` (see the docstring)."""
    import types

    import mlagents.trainers

    tests = src / "ml-agents" / "mlagents" / "trainers"
    if not (tests / "tests" / "simple_test_envs.py").is_file():
        raise SystemExit(f"--mlagents-src {src}: no ml-agents/mlagents/trainers/tests/simple_test_envs.py")
    mlagents.trainers.__path__.append(str(tests))
    stand_in = types.ModuleType("mlagents.trainers.tests.test_rpc_utils")

    def proto_from_steps_and_action(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("RecordEnvironment is not used by this benchmark")

    stand_in.proto_from_steps_and_action = proto_from_steps_and_action  # type: ignore[attr-defined]
    sys.modules[stand_in.__name__] = stand_in


def run_mlagents(src: Path, seed: int, discrete: bool, budget: int, cold: bool = False) -> dict[str, Any]:
    """Unity's ``test_simple_poca`` with its trainer, timed; counts kept in the env."""
    import contextlib
    import io

    import attr
    from mlagents.plugins.trainer_type import get_default_trainer_types
    from mlagents.torch_utils import torch
    from mlagents.trainers.torch_entities import model_serialization

    torch.set_num_threads(1)
    _import_unity_tests(src)
    from mlagents.trainers.tests.check_env_trains import check_environment_trains
    from mlagents.trainers.tests.dummy_config import poca_dummy_config
    from mlagents.trainers.tests.simple_test_envs import MultiAgentEnvironment

    get_default_trainer_types()
    model_serialization.ModelSerializer.export_policy_model = lambda self, path: None

    env = MultiAgentEnvironment([BEHAVIOR], action_sizes=(0, 1) if discrete else (1, 0), num_agents=2)
    moves = [0]
    ends: list[tuple[int, float]] = []
    for sub in env.envs.values():  # count moves: wrap each agent's own _take_action

        def counted(name: str, _take=sub._take_action) -> bool:
            moves[0] += 1
            return _take(name)

        sub._take_action = counted
    step = env.step

    def step_and_record() -> None:
        before = len(env.final_rewards[BEHAVIOR])
        step()
        ends.extend((moves[0], float(r)) for r in env.final_rewards[BEHAVIOR][before:])

    env.step = step_and_record
    config = attr.evolve(poca_dummy_config(), max_steps=budget)
    log = io.StringIO()
    warm_s = _warm_up(cold)
    before = set(sys.modules)
    start, cpu_start = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(log):
        try:
            check_environment_trains(env, {BEHAVIOR: config}, training_seed=seed)
            unity_assert = True
        except AssertionError:
            unity_assert = False
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        **summarize(ends, moves[0], wall, cpu),
        "unity_test_passed": unity_assert,
        "warm_up_import_s": warm_s,
        "imported_in_run": _imported_since(before),
    }


def check_env(src: Path, steps: int = 20_000) -> dict[str, Any]:
    """Step Unity's ``MultiAgentEnvironment`` and our ``GoalLineTeam`` with the same random actions;
    assert identical batches (observations, rewards, ids, groups, group rewards, masks, ends)."""
    import numpy as np
    from mlagents_envs.base_env import ActionTuple

    _import_unity_tests(src)
    from mlagents.trainers.tests.simple_test_envs import MultiAgentEnvironment

    sys.path.insert(0, str(ROOT / "tests"))
    from goal_line import GoalLineTeam

    def fields(steps_: Any) -> list[np.ndarray]:
        dec, term = steps_
        mask = [] if dec.action_mask is None else list(dec.action_mask)
        parts = [*dec.obs, dec.reward, dec.agent_id, dec.group_id, dec.group_reward, *mask]
        parts += [*term.obs, term.reward, term.agent_id, term.group_id, term.group_reward, term.interrupted]
        return [np.asarray(p, dtype=np.float64) for p in parts]

    out = {}
    for discrete in (False, True):
        theirs = MultiAgentEnvironment([BEHAVIOR], action_sizes=(0, 1) if discrete else (1, 0), num_agents=2)
        ours = GoalLineTeam(2, discrete=discrete)
        rng = np.random.default_rng(0)
        theirs.reset()
        ours.reset()
        for t in range(steps):
            a, b = fields(theirs.get_steps(BEHAVIOR)), fields(ours.get_steps(BEHAVIOR))
            same = len(a) == len(b) and all(x.shape == y.shape and np.allclose(x, y) for x, y in zip(a, b))
            if not same:
                raise AssertionError(
                    f"batches differ at step {t} ({'discrete' if discrete else 'continuous'})"
                )
            n = len(a[2])
            if discrete:
                action = ActionTuple(discrete=rng.integers(0, 2, size=(n, 1)).astype(np.int32))
            else:  # drift towards +1 in the second half, so both kinds of ends happen
                action = ActionTuple(
                    continuous=rng.normal(0.15 if 2 * t > steps else 0.0, 0.3, (n, 1)).astype(np.float32)
                )
            theirs.set_actions(BEHAVIOR, action)
            ours.set_actions(BEHAVIOR, action)
            theirs.step()
            ours.step()
        assert np.allclose(theirs.final_rewards[BEHAVIOR], ours.final_rewards)
        out["discrete" if discrete else "continuous"] = {"steps": steps, "ends": len(ours.final_rewards)}
    return out


# ------------------------------------------------------------------ our side (this project's Python)
def run_ours(seed: int, discrete: bool, budget: int, cold: bool = False) -> dict[str, Any]:
    """``unity_sb3.POCA`` on ``GoalLineTeam`` with the mapped ML-Agents settings, timed."""
    import torch as th
    from stable_baselines3.common.callbacks import BaseCallback

    from unity_sb3 import POCA, UnityVecEnv
    from unity_sb3.config.mlagents import convert_mlagents_config
    from unity_sb3.config.model_args import prepare_model_args

    sys.path.insert(0, str(ROOT / "tests"))
    from goal_line import GoalLineTeam

    th.set_num_threads(1)
    from unity_learning import POCA_CONFIG  # Unity's poca_dummy_config() as an ML-Agents trainer config

    hyper = convert_mlagents_config({"behaviors": {BEHAVIOR: POCA_CONFIG}}).as_hyperparams()
    for key in _RUN_KEYS:
        hyper.pop(key, None)
    ends: list[tuple[int, float]] = []

    class Budget(BaseCallback):
        """Records end rewards with the env's move count; stops at ``budget`` moves."""

        def __init__(self, scene: GoalLineTeam) -> None:
            super().__init__()
            self.scene = scene
            self.seen = 0

        def _on_step(self) -> bool:
            new = self.scene.final_rewards[self.seen :]
            ends.extend((self.scene.agent_steps, float(r)) for r in new)
            self.seen += len(new)
            return self.scene.agent_steps < budget

    warm_s = _warm_up(cold)
    before = set(sys.modules)
    start, cpu_start = time.perf_counter(), time.process_time()
    scene = GoalLineTeam(2, discrete=discrete)
    env = UnityVecEnv(scene)
    policy, kwargs = prepare_model_args("poca", "auto", hyper, env)
    model = POCA(policy, env, seed=seed, **kwargs)
    model.learn(total_timesteps=100 * budget, callback=Budget(scene))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    env.close()
    return {
        **summarize(ends, scene.agent_steps, wall, cpu),
        "sb3_timesteps": model.num_timesteps,
        "warm_up_import_s": warm_s,
        "imported_in_run": _imported_since(before),
    }


# ------------------------------------------------------------------ driver
def _worker(
    python: str, args: list[str], env: dict[str, str] | None = None, script: Path | None = None
) -> dict[str, Any]:
    """Run ``script`` (default: this file) with ``python`` and ``args``; its last stdout line as JSON."""
    command = [python, str(script or Path(__file__).resolve()), *args]
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _git_head() -> str:
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "unity_sb3"], capture_output=True, text=True
    )
    return head.stdout.strip() + (" (unity_sb3/ has uncommitted changes)" if dirty.stdout.strip() else "")


def _median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mlagents-python", help="a Python with mlagents 1.1.0 and mlagents-envs 1.1.0")
    parser.add_argument(
        "--mlagents-src", type=Path, help="holds ml-agents/mlagents/trainers/tests/ of Unity's repository"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[1337, 0, 1, 2, 3], help="training seeds (Unity's test: 1337)"
    )
    parser.add_argument(
        "--actions", nargs="+", default=["continuous", "discrete"], choices=["continuous", "discrete"]
    )
    parser.add_argument("--budget", type=int, default=3000, help="agent-steps per run (Unity's test: 3000)")
    parser.add_argument("--skip-check-env", action="store_true", help="do not compare the two envs first")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="leave torch._dynamo's import (torch's first optimizer) inside the clock",
    )
    parser.add_argument("--worker", choices=["mlagents", "ours", "check-env"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "mlagents":
        print(
            json.dumps(
                run_mlagents(
                    args.mlagents_src, args.seed, args.actions == ["discrete"], args.budget, args.cold
                )
            )
        )
        return
    if args.worker == "check-env":
        print(json.dumps(check_env(args.mlagents_src)))
        return
    if args.worker == "ours":
        print(json.dumps(run_ours(args.seed, args.actions == ["discrete"], args.budget, args.cold)))
        return
    if not args.mlagents_python or not args.mlagents_src:
        parser.error("--mlagents-python and --mlagents-src are required")

    head = _git_head()
    print(f"unity_sb3 at {head}; load average {os.getloadavg()}", flush=True)
    common = ["--mlagents-src", str(args.mlagents_src), "--budget", str(args.budget)] + (
        ["--cold"] if args.cold else []
    )
    env_check = None
    if not args.skip_check_env:
        env_check = _worker(args.mlagents_python, ["--worker", "check-env", *common])
        print(f"envs identical under the same random actions: {env_check}", flush=True)
    runs: list[dict[str, Any]] = []
    for round_, seed in enumerate(args.seeds):
        for actions in args.actions:
            order = ["mlagents", "ours"] if round_ % 2 == 0 else ["ours", "mlagents"]
            for trainer in order:
                worker = ["--worker", trainer, "--seed", str(seed), "--actions", actions, *common]
                python = args.mlagents_python if trainer == "mlagents" else sys.executable
                result = _worker(python, worker)
                result.update(trainer=trainer, seed=seed, actions=actions)
                runs.append(result)
                print(
                    f"seed {seed:5d} {actions:10s} {trainer:8s}: {result['wall_s']:5.1f} s ({result['cpu_s']:.1f} s CPU), "
                    f"{result['agent_steps']} agent-steps, to 0.9 at {result['steps_to_threshold']}, "
                    f"final {result['final_reward']:.2f}",
                    flush=True,
                )

    rows = []
    for actions in args.actions:
        walls, cpus = {}, {}
        for trainer in ("mlagents", "ours"):
            mine = [r for r in runs if r["trainer"] == trainer and r["actions"] == actions]
            walls[trainer] = _median([r["wall_s"] for r in mine])
            cpus[trainer] = _median([r["cpu_s"] for r in mine])
            reached = [r["steps_to_threshold"] for r in mine]
            rows.append(
                {
                    "actions": actions,
                    "trainer": "ML-Agents POCA" if trainer == "mlagents" else "unity_sb3.POCA",
                    "runs": len(mine),
                    "wall s (median)": walls[trainer],
                    "CPU s (median)": cpus[trainer],
                    "agent-steps (median)": _median([r["agent_steps"] for r in mine]),
                    "steps to 0.9 (median)": _median(reached),
                    "reached 0.9": sum(s is not None for s in reached),
                    "final reward (median)": _median([r["final_reward"] for r in mine]),
                    "passed": sum(r["passed"] for r in mine),
                }
            )
        rows[-1]["wall ours / ML-Agents"] = walls["ours"] / walls["mlagents"]
        rows[-1]["CPU ours / ML-Agents"] = cpus["ours"] / cpus["mlagents"]
    columns = [*rows[0], "wall ours / ML-Agents", "CPU ours / ML-Agents"]
    print_table(rows, columns, title=f"{args.budget} agent-steps, seeds {args.seeds}")
    path = write_results(
        "poca_vs_mlagents",
        rows,
        unity_sb3=head,
        budget=args.budget,
        seeds=args.seeds,
        cold=args.cold,
        env_check=env_check,
        mlagents_python=args.mlagents_python,
        runs=runs,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
