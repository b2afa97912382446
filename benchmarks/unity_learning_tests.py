"""Unity's learning tests (``test_simple_rl.py``, ``test_hybrid.py``): how often each trainer passes.

Each case is one of Unity's ``test_simple_rl.py`` / ``test_hybrid.py`` tests (the simple, 2-D, visual
and advanced-encoder cases of PPO, SAC and POCA; memory; variable-length observations with goal
signals; hybrid actions; not GAIL and self-play, which only ``tests/test_unity_learning_tests.py``
runs): a scene of ``simple_test_envs.py``, one of Unity's dummy trainer configs evolved as the test
evolves it, a budget (``max_steps``) and the check of ``check_environment_trains``: the mean of the
last 5 training episodes' rewards above the test's threshold (0.9; 0.8 for ``2d_sac``, 0.5 for the
advanced encoders). Unity runs
each test with one training seed; this script runs each case for several seeds, interleaved, with

(a) ML-Agents' own trainer (``--mlagents-python``: a Python with the ``mlagents`` 1.1.0 package;
    ``--mlagents-src``: Unity's test helpers, as for ``poca_vs_mlagents.py``, whose docstring says
    what the worker changes at run time), and
(b) this project, the same case as ``tests/test_unity_learning_tests.py`` runs it: the config mapped
    by ``unity_sb3.config.mlagents``, the scene re-created in ``tests/goal_line.py``.

Prints, per case, how many seeds each trainer passes and the median of the last-5 mean. Each run is
a fresh process with one torch thread. First, in ML-Agents' Python, Unity's scenes and ours are
stepped with the same random actions and goal draws and every batch compared (``--skip-check-env``
skips that).

    python benchmarks/unity_learning_tests.py --mlagents-python /tmp/mla_venv/bin/python \\
        --mlagents-src /tmp/mla_src --cases recurrent_sac-continuous hybrid_visual_ppo-1 --seeds 1337 0 1 2

Without ``--mlagents-python`` only this project's side runs. Writes
``benchmarks/results/unity_learning_tests.json`` (``--name`` picks another stem, so that invocations
run side by side do not overwrite each other's runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import print_table, write_results  # noqa: E402
from poca_vs_mlagents import BEHAVIOR, LAST_N, THRESHOLD, _git_head, _import_unity_tests, _worker  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One of Unity's learning tests with one parametrisation.

    :param scene: ``"simple"`` (``SimpleEnvironment``), ``"memory"`` (``MemoryEnvironment``) or
        ``"team"`` (``MultiAgentEnvironment``, 2 agents).
    :param trainer: ``"ppo"``, ``"sac"`` or ``"poca"`` (Unity's dummy config of that name).
    :param scene_kwargs: the scene's arguments (``action_sizes``, ``step_size``, ``num_visual``, ...).
    :param hyperparameters: changes to the dummy config's hyperparameters.
    :param memory: ``network_settings.memory`` (``memory_size``, ``sequence_length``), or None.
    :param hyper_goals: ``network_settings.goal_conditioning_type: hyper`` (the default anyway).
    :param network: other changes to the dummy config's ``network_settings`` (``vis_encode_type``, ...).
    :param threshold: the test's ``success_threshold`` on the last-5 mean (Unity: 0.9 unless said).
    :param max_steps: the budget in agent-steps.
    :param unity_seed: the training seed of Unity's test.
    """

    scene: str
    trainer: str
    scene_kwargs: dict[str, Any] = field(default_factory=dict)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, int] | None = None
    hyper_goals: bool = False
    max_steps: int | None = None
    unity_seed: int = 1337
    network: dict[str, Any] = field(default_factory=dict)
    threshold: float = THRESHOLD


def cases() -> dict[str, Case]:
    """Unity's tests by name (``<test>-<parametrisation>``), with the settings the tests give."""
    out: dict[str, Case] = {}
    actions = {"continuous": (1, 0), "discrete": (0, 1)}
    recurrent_on_policy = {"learning_rate": 1.0e-3, "batch_size": 64, "buffer_size": 128}
    for kind, sizes in actions.items():
        out[f"recurrent_ppo-{kind}"] = Case(
            "memory", "ppo", {"action_sizes": sizes}, recurrent_on_policy, {"memory_size": 16}, max_steps=6000
        )
        out[f"recurrent_poca-{kind}"] = Case(
            "memory",
            "poca",
            {"action_sizes": sizes},
            recurrent_on_policy,
            {"memory_size": 16},
            max_steps=6000,
        )
        out[f"recurrent_sac-{kind}"] = Case(
            "memory",
            "sac",
            {"action_sizes": sizes, "step_size": 0.2 if kind == "continuous" else 0.5},
            {"batch_size": 256, "learning_rate": 3e-4, "buffer_init_steps": 1000, "steps_per_update": 2},
            {"memory_size": 16, "sequence_length": 16},
            max_steps=4000,
        )
        for var in (1, 2):
            out[f"var_len_obs_sac-{kind}-var{var}"] = Case(
                "simple",
                "sac",
                {
                    "action_sizes": sizes,
                    "num_visual": 0,
                    "num_vector": 0,
                    "num_var_len": var,
                    "step_size": 0.2,
                },
                {"batch_size": 16, "learning_rate": 3e-4},
            )
        for vis in (0, 1):
            for vec in (0, 1):
                for var in (1, 2):
                    grid = {"num_visual": vis, "num_vector": vec, "num_var_len": var, "goal_indices": [0]}
                    out[f"var_len_obs_and_goal_ppo-{kind}-vis{vis}-vec{vec}-var{var}"] = Case(
                        "simple",
                        "ppo",
                        {"action_sizes": sizes, "step_size": 0.2, **grid},
                        {"learning_rate": 3.0e-4},
                        hyper_goals=True,
                    )
                    if kind == "discrete":
                        out[f"var_len_obs_and_goal_poca-vis{vis}-vec{vec}-var{var}"] = Case(
                            "team",
                            "poca",
                            {"action_sizes": sizes, "step_size": 0.2, **grid},
                            {"learning_rate": 3.0e-4},
                            hyper_goals=True,
                            max_steps=25000,
                        )
    for c, d in ((1, 1), (2, 2), (1, 2), (2, 1)):
        scene = {"action_sizes": (c, d), "step_size": 0.8}
        out[f"hybrid_ppo-{c}c{d}d"] = Case(
            "simple",
            "ppo",
            scene,
            {"batch_size": 64, "buffer_size": 1024, "learning_rate": 1e-3},
            max_steps=20000,
        )
        out[f"hybrid_sac-{c}c{d}d"] = Case(
            "simple",
            "sac",
            scene,
            {"buffer_size": 50000, "batch_size": 256, "buffer_init_steps": 0},
            max_steps=8000,
        )
    for vis, ppo_seed, sac_seed in ((1, 1336, 1337), (2, 1338, 1338)):
        scene = {"action_sizes": (1, 1), "num_visual": vis, "num_vector": 0}
        out[f"hybrid_visual_ppo-{vis}"] = Case(
            "simple",
            "ppo",
            scene,
            {"batch_size": 64, "buffer_size": 1024, "learning_rate": 1e-4},
            max_steps=8000,
            unity_seed=ppo_seed,
        )
        out[f"hybrid_visual_sac-{vis}"] = Case(
            "simple",
            "sac",
            scene,
            {"buffer_size": 50000, "batch_size": 128, "learning_rate": 3.0e-4},
            max_steps=3000,
            unity_seed=sac_seed,
        )
    _add_basic_cases(out)
    memory_scene = {"action_sizes": (1, 1), "step_size": 0.5}
    out["hybrid_recurrent_ppo"] = Case(
        "memory",
        "ppo",
        memory_scene,
        {"learning_rate": 1.0e-3, "batch_size": 64, "buffer_size": 512},
        {"memory_size": 16},
        max_steps=5000,
    )
    out["hybrid_recurrent_sac"] = Case(
        "memory",
        "sac",
        memory_scene,
        {"batch_size": 256, "learning_rate": 3e-4, "buffer_init_steps": 1000, "steps_per_update": 2},
        {"memory_size": 16, "sequence_length": 16},
        max_steps=4000,
        unity_seed=1212,
    )
    return out


def _add_basic_cases(out: dict[str, Case]) -> None:
    """Unity's basic ``test_simple_rl.py`` cases (simple, 2-D, visual, advanced encoders, POCA) into ``out``."""
    actions = {"continuous": (1, 0), "discrete": (0, 1)}
    for kind, sizes in actions.items():
        out[f"simple_ppo-{kind}"] = Case("simple", "ppo", {"action_sizes": sizes})
        out[f"simple_sac-{kind}"] = Case("simple", "sac", {"action_sizes": sizes})
        out[f"simple_poca-{kind}"] = Case("team", "poca", {"action_sizes": sizes})
        two = (2 * sizes[0], 2 * sizes[1])
        out[f"2d_ppo-{kind}"] = Case(
            "simple",
            "ppo",
            {"action_sizes": two, "step_size": 0.8},
            {"batch_size": 64, "buffer_size": 640},
            max_steps=10000,
        )
        out[f"2d_sac-{kind}"] = Case(
            "simple",
            "sac",
            {"action_sizes": two, "step_size": 0.8},
            {"buffer_init_steps": 2000},
            max_steps=3000,
            threshold=0.8,
        )
        for vis in (1, 2):
            scene = {"action_sizes": sizes, "num_visual": vis, "num_vector": 0, "step_size": 0.2}
            for shared in (True, False):
                out[f"visual_ppo-{kind}-vis{vis}-{'shared' if shared else 'separate'}"] = Case(
                    "simple", "ppo", scene, {"learning_rate": 3.0e-4, "shared_critic": shared}
                )
            out[f"visual_sac-{kind}-vis{vis}"] = Case(
                "simple", "sac", scene, {"batch_size": 16, "learning_rate": 3e-4}
            )
    for vis in (1, 2):
        out[f"visual_poca-vis{vis}"] = Case(
            "team", "poca", {"action_sizes": (0, 1), "num_visual": vis}, {"learning_rate": 3.0e-4}
        )
        for encoder, shape in (("resnet", (3, 36, 36)), ("nature_cnn", (3, 36, 36)), ("match3", (5, 5, 5))):
            scene = {
                "action_sizes": (0, 1),
                "num_visual": vis,
                "num_vector": 0,
                "step_size": 0.5,
                "vis_obs_size": shape,
            }
            # Unity evolves SAC's network settings (1 x 16) for both trainers
            network = {"vis_encode_type": encoder, "num_layers": 1, "hidden_units": 16}
            out[f"visual_advanced_ppo-{encoder}-vis{vis}"] = Case(
                "simple",
                "ppo",
                scene,
                {"learning_rate": 3.0e-4},
                max_steps=900,
                network=network,
                threshold=0.5,
            )
            out[f"visual_advanced_sac-{encoder}-vis{vis}"] = Case(
                "simple",
                "sac",
                scene,
                {"batch_size": 16, "learning_rate": 3e-4, "buffer_init_steps": 0},
                max_steps=100,
                network=network,
                threshold=0.5,
            )


def _processed(final_rewards: list[float]) -> float:
    last = final_rewards[-LAST_N:]
    return sum(last) / len(last) if last else float("nan")


# ------------------------------------------------------------------ ML-Agents' side (its Python)
def run_mlagents(src: Path, case: Case, seed: int) -> dict[str, Any]:
    """The case with ML-Agents' trainer: ``check_environment_trains`` without its assertion."""
    import contextlib
    import io

    import attr
    from mlagents.plugins.trainer_type import get_default_trainer_types
    from mlagents.torch_utils import torch
    from mlagents.trainers.settings import ConditioningType, NetworkSettings
    from mlagents.trainers.torch_entities import model_serialization

    torch.set_num_threads(1)
    _import_unity_tests(src)
    from mlagents.trainers.tests import dummy_config, simple_test_envs
    from mlagents.trainers.tests.check_env_trains import check_environment_trains

    get_default_trainer_types()
    model_serialization.ModelSerializer.export_policy_model = lambda self, path: None
    kwargs = dict(case.scene_kwargs)
    kwargs["action_sizes"] = tuple(kwargs["action_sizes"])
    if "vis_obs_size" in kwargs:
        kwargs["vis_obs_size"] = tuple(kwargs["vis_obs_size"])
    if case.scene == "memory":
        env = simple_test_envs.MemoryEnvironment([BEHAVIOR], **kwargs)
    elif case.scene == "team":
        env = simple_test_envs.MultiAgentEnvironment([BEHAVIOR], num_agents=2, **kwargs)
    else:
        env = simple_test_envs.SimpleEnvironment([BEHAVIOR], **kwargs)
    config = getattr(dummy_config, f"{case.trainer}_dummy_config")()
    network = config.network_settings
    if case.network:
        from mlagents.trainers.settings import EncoderType

        changes = dict(case.network)
        if "vis_encode_type" in changes:
            changes["vis_encode_type"] = EncoderType(changes["vis_encode_type"])
        network = attr.evolve(network, **changes)
    if case.memory is not None:
        network = attr.evolve(network, memory=NetworkSettings.MemorySettings(**case.memory))
    if case.hyper_goals:
        network = attr.evolve(network, goal_conditioning_type=ConditioningType.HYPER)
    config = attr.evolve(
        config,
        hyperparameters=attr.evolve(config.hyperparameters, **case.hyperparameters),
        network_settings=network,
        **({"max_steps": case.max_steps} if case.max_steps else {}),
    )
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        check_environment_trains(env, {BEHAVIOR: config}, success_threshold=None, training_seed=seed)
    rewards = list(env.final_rewards[BEHAVIOR])
    return {"last5": _processed(rewards), "episodes": len(rewards), "wall_s": time.perf_counter() - start}


def check_env(src: Path, steps: int = 3000) -> dict[str, Any]:
    """Step Unity's ``SimpleEnvironment`` / ``MemoryEnvironment`` and our ``GoalLine`` with the same
    random actions and the same goal draws; assert identical batches (observations, rewards, ids,
    masks, ends) and end rewards. Runs in ML-Agents' Python (``goal_line`` needs only
    ``mlagents_envs``). Unity's one mask array of ``2 d`` columns is compared with our per-branch
    arrays joined."""
    import numpy as np
    from mlagents_envs.base_env import ActionTuple

    _import_unity_tests(src)
    from mlagents.trainers.tests import simple_test_envs

    sys.path.insert(0, str(ROOT / "tests"))
    from goal_line import BEHAVIOR as LINE
    from goal_line import GoalLine

    def fields(batch: Any) -> list[Any]:
        dec, term = batch
        mask = [] if dec.action_mask is None else [np.concatenate(list(dec.action_mask), axis=1)]
        return [
            *dec.obs,
            dec.reward,
            dec.agent_id,
            *mask,
            *term.obs,
            term.reward,
            term.agent_id,
            term.interrupted,
        ]

    checked = {}
    variants = {
        "hybrid 2c2d step 0.8": ("simple", {"action_sizes": (2, 2), "step_size": 0.8}),
        "memory 1c1d step 0.5": ("memory", {"action_sizes": (1, 1), "step_size": 0.5}),
        "memory discrete": ("memory", {"action_sizes": (0, 1)}),
        "vis1 vec1 var2 goal 0, continuous": (
            "simple",
            {"action_sizes": (1, 0), "num_visual": 1, "num_vector": 1, "num_var_len": 2, "goal_indices": [0]},
        ),
    }
    for label, (kind, kwargs) in variants.items():
        cls = simple_test_envs.MemoryEnvironment if kind == "memory" else simple_test_envs.SimpleEnvironment
        theirs = cls([BEHAVIOR], **kwargs)
        ours_kwargs = {**kwargs, "goal_indices": tuple(kwargs.get("goal_indices", ()))}
        ours = GoalLine(show_steps=2 if kind == "memory" else None, **ours_kwargs)
        theirs.reset()
        ours.reset()
        # the same goal sequence from here on: our generator takes the state of Unity's
        ours.random.setstate(theirs.random.getstate())
        ours.goal, ours.agent_id = theirs.goal[BEHAVIOR], int(theirs.agent_id[BEHAVIOR])
        ours._steps = ours._batched(False, 0.0)
        rng = np.random.default_rng(0)
        c, d = kwargs["action_sizes"]
        for t in range(steps):
            a, b = fields(theirs.get_steps(BEHAVIOR)), fields(ours.get_steps(LINE))
            same = len(a) == len(b) and all(
                np.shape(x) == np.shape(y) and np.allclose(np.asarray(x, float), np.asarray(y, float))
                for x, y in zip(a, b)
            )
            if not same:
                raise AssertionError(f"{label}: batches differ at step {t}")
            action = ActionTuple(
                continuous=rng.normal(0.1, 0.5, (1, c)).astype(np.float32),
                discrete=rng.integers(0, 2, (1, d)).astype(np.int32),
            )
            theirs.set_actions(BEHAVIOR, action)
            ours.set_actions(LINE, action)
            theirs.step()
            ours.step()
        assert np.allclose(theirs.final_rewards[BEHAVIOR], ours.final_rewards), label
        checked[label] = {"steps": steps, "episodes": len(ours.final_rewards)}
    return checked


# ------------------------------------------------------------------ our side (this project's Python)
def run_ours(case: Case, seed: int) -> dict[str, Any]:
    """The case as ``tests/test_unity_learning_tests.py`` runs it."""
    import torch as th

    sys.path.insert(0, str(ROOT / "tests"))
    from goal_line import BEHAVIOR as LINE
    from goal_line import TEAM_BEHAVIOR, GoalLine, GoalLineTeam
    from unity_learning import evolve, train_on

    th.set_num_threads(1)
    kwargs = dict(case.scene_kwargs)
    kwargs["action_sizes"] = tuple(kwargs["action_sizes"])
    kwargs["goal_indices"] = tuple(kwargs.get("goal_indices", ()))
    if "vis_obs_size" in kwargs:
        kwargs["vis_obs_size"] = tuple(kwargs["vis_obs_size"])
    if case.scene == "team":
        sizes = kwargs.pop("action_sizes")
        scene, behavior = GoalLineTeam(2, discrete=sizes == (0, 1), seed=seed, **kwargs), TEAM_BEHAVIOR
    else:
        show = 2 if case.scene == "memory" else None
        scene, behavior = GoalLine(seed=seed, show_steps=show, **kwargs), LINE
    changes: dict[str, Any] = {"hyperparameters": case.hyperparameters}
    network: dict[str, Any] = dict(case.network)
    if case.memory is not None:
        network["memory"] = case.memory
    if case.hyper_goals:
        network["goal_conditioning_type"] = "hyper"
    if network:
        changes["network_settings"] = network
    if case.max_steps:
        changes["max_steps"] = case.max_steps
    start = time.perf_counter()
    train_on(scene, behavior, evolve(case.trainer, **changes), seed)
    rewards = list(scene.final_rewards)
    return {"last5": _processed(rewards), "episodes": len(rewards), "wall_s": time.perf_counter() - start}


# ------------------------------------------------------------------ driver
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mlagents-python", help="a Python with mlagents 1.1.0 (omit: this project only)")
    parser.add_argument("--mlagents-src", type=Path, help="holds ml-agents/mlagents/trainers/tests/")
    parser.add_argument("--cases", nargs="+", default=None, help="case names (default: all); see --list")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    parser.add_argument("--unity-seed", action="store_true", help="also run each case's own Unity seed")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("--skip-check-env", action="store_true", help="do not compare the scenes first")
    parser.add_argument(
        "--name",
        default="unity_learning_tests",
        help="results file stem: benchmarks/results/<name>.json (give each parallel invocation its own)",
    )
    parser.add_argument("--worker", choices=["mlagents", "ours", "check-env"], help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    table = cases()
    if args.list:
        print("\n".join(table))
        return
    if args.worker == "check-env":
        print(json.dumps(check_env(args.mlagents_src)))
        return
    if args.worker:
        case = table[args.case]
        result = (
            run_mlagents(args.mlagents_src, case, args.seed)
            if args.worker == "mlagents"
            else run_ours(case, args.seed)
        )
        print(json.dumps(result))
        return
    names = args.cases or list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        parser.error(f"unknown cases {unknown}; --list shows them")
    trainers = ["mlagents", "ours"] if args.mlagents_python else ["ours"]
    if args.mlagents_python and not args.mlagents_src:
        parser.error("--mlagents-src is required with --mlagents-python")
    print(f"unity_sb3 at {_git_head()}", flush=True)
    env_check = None
    if args.mlagents_python and not args.skip_check_env:
        env_check = _worker(
            args.mlagents_python,
            ["--worker", "check-env", "--mlagents-src", str(args.mlagents_src)],
            script=Path(__file__).resolve(),
        )
        print(f"scenes identical under the same random actions and goals: {env_check}", flush=True)
    runs: list[dict[str, Any]] = []
    for name in names:
        seeds = list(dict.fromkeys(([table[name].unity_seed] if args.unity_seed else []) + args.seeds))
        for round_, seed in enumerate(seeds):
            for trainer in trainers if round_ % 2 == 0 else trainers[::-1]:
                python = args.mlagents_python if trainer == "mlagents" else sys.executable
                extra = ["--mlagents-src", str(args.mlagents_src)] if trainer == "mlagents" else []
                worker = ["--worker", trainer, "--case", name, "--seed", str(seed), *extra]
                result = _worker(python, worker, script=Path(__file__).resolve())
                result.update(
                    case=name,
                    trainer=trainer,
                    seed=seed,
                    passed=bool(result["last5"] > table[name].threshold),
                )
                runs.append(result)
                print(
                    f"{name:45s} seed {seed:5d} {trainer:8s} last-5 mean {result['last5']:6.3f} "
                    f"({'pass' if result['passed'] else 'FAIL'}, {result['wall_s']:.0f} s)",
                    flush=True,
                )
    rows = []
    for name in names:
        row: dict[str, Any] = {"case": name}
        for trainer in trainers:
            mine = [r for r in runs if r["case"] == name and r["trainer"] == trainer]
            label = "ML-Agents" if trainer == "mlagents" else "unity_sb3"
            row[f"{label} passed"] = f"{sum(r['passed'] for r in mine)}/{len(mine)}"
            row[f"{label} last-5 (median)"] = statistics.median(r["last5"] for r in mine)
        rows.append(row)
    print_table(rows, list(rows[0]), title=f"Unity's learning tests, seeds {args.seeds}")
    path = write_results(
        args.name, rows, seeds=args.seeds, runs=runs, unity_sb3=_git_head(), env_check=env_check
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
