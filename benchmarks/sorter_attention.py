"""Entity attention vs padding-and-flattening on the Sorter-like scene.

Each (encoder, seed) trains ``unity_sb3.PPO`` with ``UnityMultiInputExtractor`` through
``UnityVecEnv`` on an embedded Sorter scene (8 arenas, 1 to ``--num-tiles`` tiles per episode)
and records the mean episode return in the last 20% of training. ``attention`` encodes the
``BufferSensor`` observation (20, 22) with ML-Agents' entity embedding and residual
self-attention (``entities="attention"``, the default); ``flatten`` pads and flattens it into
440 inputs (``entities="flatten"``). Everything else is the same (the shipped ``Sorter`` entry of
``config/hyperparams/ppo.yml``). Prints a table, writes ``benchmarks/results/sorter_attention.json``
(``sorter_attention_tiles<N>.json`` for ``--num-tiles N`` other than 2).

    python benchmarks/sorter_attention.py                       # 3 seeds x 2 encoders, 120k steps, 1-2 tiles
    python benchmarks/sorter_attention.py --steps 80000 --seeds 0 --encoders attention
    python benchmarks/sorter_attention.py --num-tiles 4 --set batch_size=128 n_epochs=10 --activation silu
    python benchmarks/sorter_attention.py --curriculum --steps 1000000 --seeds 0 --encoders flatten

``--curriculum`` runs Unity's ``Sorter_curriculum.yaml`` lessons (``num_tiles`` 2, 4, ... 20; the
copy in ``tests/data/unity_configs/ppo/``, or another YAML's ``environment_parameters``) through
the project's own curriculum code, as ``unity-sb3 train --config`` does: ``open_unity(...,
environment_parameters=...)`` and the ``CurriculumCallback`` of ``mlagents_callbacks``. Unity's
completion criteria measure ``progress`` (training steps / total steps: lesson 1 at 50%, then
60%, 65%, ... 95%), not reward, so every run enters each lesson at the same step whatever it
learned; the comparison is the return at the same lesson and step. Each row then also holds the
step at which each lesson was entered, the lesson at the end of each window, and the return per
lesson (all its episodes, and the last 20% of its steps).

Reference returns (scene's expert_actions and uniform random actions over 3000 decisions of 8
arenas): 1-2 tiles (the default, Unity's first curriculum lesson): expert 1.39, random -0.52;
1-4 tiles (Unity's second lesson): expert 2.23, random -0.81; 1-8 tiles (Unity's fourth lesson;
episodes ended within 3000 decisions of 8 arenas, seed 0): expert 3.69, random -0.98; 1 tile
(from RESULTS.md): expert 0.93, random -0.46. ``--references`` measures them again for Unity's
lessons (``reference_returns``: 3000 decisions of 8 arenas, seed 0, returns of the episodes that
ended): 1-6 tiles expert 3.02, random -0.87; 1-10: 4.21, -1.00; 1-12: 4.41, -1.02; 1-14: 4.57,
-1.05; 1-16: 4.64, -1.10; 1-18: 4.68, -1.09; 1-20: 4.63, -1.07 (the expert levels off: 150
decisions do not reach many more tiles; this count gives 1.37 / -0.51 at 1-2 and 2.24 / -0.85 at
1-4). ``benchmarks/sorter_probe.py`` measures the encoders' read-out of the next tile without RL.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
import yaml
from mlagents_envs.base_env import ActionTuple
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.vec_env import VecMonitor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results
from _curves import EpisodeRecorder, run_tasks, windowed_mean

from unity_sb3 import PPO, UnityVecEnv, open_unity
from unity_sb3.callbacks.curriculum import mlagents_callbacks
from unity_sb3.config.model_args import resolve_schedule
from unity_sb3.networks.extractors import UnityMultiInputExtractor
from unity_sb3.scenes import make_scene
from unity_sb3.unity.parameters import EnvironmentParameters

ENCODERS = ("attention", "flatten")
#: Reference returns by ``--num-tiles`` (the docstring's expert and random runs).
REFERENCES = {
    1: "expert 0.93, random -0.46",
    2: "expert 1.39, random -0.52",
    4: "expert 2.23, random -0.81",
    8: "expert 3.69, random -0.98",
    20: "expert 4.63, random -1.07",
}
#: ``--curriculum`` without a path: Unity's ``config/ppo/Sorter_curriculum.yaml`` (the project's copy).
UNITY_CURRICULUM = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "data"
    / "unity_configs"
    / "ppo"
    / "Sorter_curriculum.yaml"
)
CURRICULUM_PARAMETER = "num_tiles"


#: The shipped Sorter settings (``config/hyperparams/ppo.yml``); ``--set key=value`` overrides them.
SETTINGS: dict[str, Any] = {
    "n_steps": 256,
    "batch_size": 512,
    "n_epochs": 3,
    "learning_rate": 3e-4,
    "ent_coef": 0.005,
    "gamma": 0.99,
    "gae_lambda": 0.95,
}
#: ``--activation``: the policy body's activation (SB3: Tanh; ML-Agents: Swish, i.e. SiLU).
ACTIVATIONS = {"tanh": th.nn.Tanh, "silu": th.nn.SiLU}


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """``["batch_size=128", "learning_rate=lin_3e-4"]`` -> PPO keyword arguments.

    Values are Python literals; ``lin_<x>`` is a schedule falling linearly from ``x`` to 0 over the
    run and ``lin_<x>_<y>`` from ``x`` to ``y`` (rl-zoo's notation, what the ML-Agents YAML mapping
    writes for ``learning_rate_schedule: linear``).
    """
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set takes key=value, got {pair!r}")
        if value.startswith("lin_"):
            settings[key] = resolve_schedule(value)
            continue
        try:
            settings[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            settings[key] = value
    return settings


class _GroupScaledAdam(th.optim.Adam):
    """Adam whose parameter groups may carry ``lr_scale``: each group steps at the scheduled rate times its scale.

    SB3 sets every group's ``lr`` to the schedule's value before each update; the scale is applied
    on top of it for the step only.
    """

    def step(self, closure=None):  # type: ignore[override]
        scheduled = [group["lr"] for group in self.param_groups]
        for group in self.param_groups:
            group["lr"] = group["lr"] * group.get("lr_scale", 1.0)
        try:
            return super().step(closure)
        finally:
            for group, lr in zip(self.param_groups, scheduled):
                group["lr"] = lr


def scale_extractor_lr(model: PPO, scale: float) -> None:
    """Give the features extractor(s) ``scale`` times the policy's learning rate (a fresh optimizer)."""
    policy = model.policy
    extractor = {id(p) for p in policy.features_extractor.parameters()}
    if not policy.share_features_extractor:
        extractor |= {id(p) for p in policy.vf_features_extractor.parameters()}
    params = list(policy.parameters())
    groups = [
        {"params": [p for p in params if id(p) in extractor], "lr_scale": scale},
        {"params": [p for p in params if id(p) not in extractor]},
    ]
    groups = [g for g in groups if g["params"]]
    policy.optimizer = _GroupScaledAdam(groups, lr=model.lr_schedule(1), **policy.optimizer_kwargs)


def make_model(
    encoder: str,
    env,
    seed: int,
    separate: bool = False,
    overrides: dict[str, Any] | None = None,
    activation: str = "tanh",
) -> PPO:
    """PPO with the shipped Sorter settings (``config/hyperparams/ppo.yml``) and ``encoder`` for the tiles.

    :param separate: actor and critic each get their own encoder (ML-Agents' layout) instead of one
        shared features extractor (SB3's default for PPO).
    :param overrides: PPO keyword arguments that replace :data:`SETTINGS` (the same for both encoders).
    :param activation: the policy body's activation, a key of :data:`ACTIVATIONS`.
    """
    return PPO(
        "MultiInputPolicy",
        env,
        seed=seed,
        policy_kwargs={
            "net_arch": [128, 128],
            "activation_fn": ACTIVATIONS[activation],
            "features_extractor_class": UnityMultiInputExtractor,
            "features_extractor_kwargs": {"entities": encoder},
            "share_features_extractor": not separate,
        },
        **{**SETTINGS, **(overrides or {})},
    )


def load_curriculum(path: str | Path) -> dict[str, Any]:
    """The ``environment_parameters`` of an ML-Agents trainer YAML, checked to hold a ``num_tiles`` curriculum."""
    params = (yaml.safe_load(Path(path).read_text()) or {}).get("environment_parameters") or {}
    parsed = EnvironmentParameters(params)  # the project's parser: a malformed lesson fails here
    parameter = parsed.parameters.get(CURRICULUM_PARAMETER)
    if parameter is None or not parameter.is_curriculum:
        raise SystemExit(f"{path}: environment_parameters has no {CURRICULUM_PARAMETER} curriculum")
    return params


class _LessonRecorder(BaseCallback):
    """Step at which each lesson of ``parameter`` was entered (``[(step, lesson, value), ...]``)."""

    def __init__(self, parameters: EnvironmentParameters, parameter: str = CURRICULUM_PARAMETER) -> None:
        super().__init__()
        self.parameters, self.parameter = parameters, parameter
        self.entered: list[tuple[int, int, float]] = []

    def _value(self, lesson: int) -> float:
        return float(
            getattr(self.parameters.parameters[self.parameter].lessons[lesson].value, "value", np.nan)
        )

    def _on_training_start(self) -> None:
        lesson = self.parameters.lesson_numbers[self.parameter]
        self.entered.append((0, lesson, self._value(lesson)))

    def _on_step(self) -> bool:
        lesson = self.parameters.lesson_numbers[self.parameter]
        if lesson != self.entered[-1][1]:
            self.entered.append((self.num_timesteps, lesson, self._value(lesson)))
        return True


def lesson_summary(
    entered: list[tuple[int, int, float]], episodes: list[tuple[int, float]], steps: int
) -> list[dict[str, Any]]:
    """Per lesson: its steps, episodes, mean return of all its episodes and of its last 20% of steps.

    An episode counts for the lesson in effect at the step it ended.
    """
    out = []
    for k, (start, lesson, value) in enumerate(entered):
        end = entered[k + 1][0] if k + 1 < len(entered) else steps
        inside = [r for t, r in episodes if start < t <= end]
        tail = [r for t, r in episodes if end - 0.2 * (end - start) < t <= end]
        out.append(
            {
                "lesson": lesson,
                "num_tiles": value,
                "start": start,
                "end": end,
                "episodes": len(inside),
                "mean_return": float(np.mean(inside)) if inside else None,
                "tail_return": float(np.mean(tail)) if tail else None,
            }
        )
    return out


def run(
    encoder: str,
    seed: int,
    steps: int,
    num_tiles: int,
    window: int,
    separate: bool = False,
    overrides: list[str] | None = None,
    activation: str = "tanh",
    extractor_lr_scale: float = 1.0,
    curriculum: str | None = None,
    save_as: str | None = None,
    scene_params: dict[str, Any] | None = None,
    init_model: str | None = None,
) -> dict[str, Any]:
    """One training run; ``overrides`` are ``--set``'s ``key=value`` strings (parsed here, in the worker).

    :param curriculum: an ML-Agents trainer YAML whose ``environment_parameters`` (a ``num_tiles``
        curriculum) replace ``num_tiles``; run as ``unity-sb3 train --config`` runs them.
    :param save_as: where to save the trained model (``model.save``), or None.
    :param scene_params: more parameters of the Sorter scene (e.g. ``max_steps``).
    :param init_model: a saved model (``--save-dir``) whose parameters the run starts from (the
        same encoder, layout and activation); its optimizer state too, the schedules start anew.
    """
    scene_params = scene_params or {}
    th.set_num_threads(1)
    callbacks: list[BaseCallback] = []
    lessons: _LessonRecorder | None = None
    if curriculum is None:
        env = VecMonitor(UnityVecEnv(make_scene("Sorter", seed=seed, num_tiles=num_tiles, **scene_params)))
    else:
        # as unity_sb3.run: the instance is opened with the parameters, and mlagents_callbacks
        # gives the CurriculumCallback that advances these same parameters
        params = EnvironmentParameters(load_curriculum(curriculum), seed=seed)
        env = VecMonitor(
            UnityVecEnv(open_unity("Sorter", seed=seed, environment_parameters=params, **scene_params))
        )
        callbacks = mlagents_callbacks({"environment_parameters": params}, "Sorter")
        lessons = _LessonRecorder(params)
        callbacks.append(lessons)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the flatten run's "pads and flattens" warning
        model = make_model(encoder, env, seed, separate, parse_settings(overrides or []), activation)
    if init_model is not None:
        model.set_parameters(init_model)
    if extractor_lr_scale != 1.0:
        scale_extractor_lr(model, extractor_lr_scale)
    recorder = EpisodeRecorder()
    updates = _UpdateStats()
    model.set_logger(Logger(folder=None, output_formats=[updates]))
    start = time.perf_counter()
    model.learn(steps, callback=[*callbacks, recorder])
    elapsed = time.perf_counter() - start
    env.close()
    if save_as is not None:
        model.save(save_as)
    tail = [r for t, r in recorder.episodes if t > 0.8 * steps]
    row = {
        "encoder": encoder,
        "seed": seed,
        "steps": steps,
        "episodes": len(recorder.episodes),
        "final_return": float(np.mean(tail)) if tail else float("nan"),
        "curve": windowed_mean(recorder.episodes, steps, window),
        "seconds": round(elapsed, 1),
        "updates": updates.halves(),
    }
    if lessons is not None:
        entered = lessons.entered
        row["lessons_entered"] = [{"step": t, "lesson": k, "num_tiles": v} for t, k, v in entered]
        row["curve_lesson"] = [
            max(k for t, k, _ in entered if t <= end) for end in range(window, steps + window, window)
        ][: len(row["curve"])]
        row["per_lesson"] = lesson_summary(entered, recorder.episodes, steps)
        row["final_num_tiles"] = entered[-1][2]
    return row


def reference_returns(
    num_tiles: int,
    policy: str,
    decisions: int = 3000,
    seed: int = 0,
    scene_params: dict[str, Any] | None = None,
) -> tuple[float, int]:
    """Mean return of the episodes that end within ``decisions`` of the 8-arena scene, and their count.

    :param policy: ``"expert"`` (the scene's ``expert_actions``) or ``"random"`` (uniform actions).
    :param scene_params: more parameters of the Sorter scene.
    """
    env = make_scene("Sorter", seed=seed, num_tiles=num_tiles, **(scene_params or {}))
    env.reset()
    name = next(iter(env.behavior_specs))
    rng = np.random.default_rng(seed)
    running: dict[int, float] = {}
    returns = []
    for _ in range(decisions):
        decision, terminal = env.get_steps(name)
        for agent, reward in zip(terminal.agent_id, terminal.reward):
            returns.append(running.pop(agent, 0.0) + float(reward))
        for agent, reward in zip(decision.agent_id, decision.reward):
            running[agent] = running.get(agent, 0.0) + float(reward)
        if len(decision):
            if policy == "expert":
                actions = env.expert_actions(name, decision)
            else:
                actions = ActionTuple(discrete=rng.integers(0, 3, size=(len(decision), 3)).astype(np.int32))
            env.set_actions(name, actions)
        env.step()
    env.close()
    return float(np.mean(returns)), len(returns)


class _UpdateStats(KVWriter):
    """Keeps PPO's per-update ``train/`` statistics (approx_kl, clip_fraction, entropy_loss, ...)."""

    KEYS = ("approx_kl", "clip_fraction", "entropy_loss")

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        row = {k[len("train/") :]: float(v) for k, v in key_values.items() if k.startswith("train/")}
        if row:
            self.rows.append(row)

    def close(self) -> None:
        pass

    def halves(self) -> dict[str, list[float]]:
        """Mean of each statistic over the first and the second half of the updates."""
        out = {}
        for key in self.KEYS:
            values = [r[key] for r in self.rows if key in r]
            if values:
                half = max(1, len(values) // 2)
                out[key] = [float(np.mean(values[:half])), float(np.mean(values[half:] or values))]
        return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=120_000, help="training steps per run (all agents)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=ENCODERS)
    parser.add_argument("--num-tiles", type=int, default=2, help="most tiles per episode (1-20)")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one CPU thread each)")
    parser.add_argument("--window", type=int, default=5_000, help="steps per point of the curve")
    parser.add_argument(
        "--separate-extractors",
        action="store_true",
        help="actor and critic each with their own encoder, as ML-Agents (default: one shared)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="PPO settings replacing the shipped ones for both encoders, e.g. batch_size=128 n_epochs=10",
    )
    parser.add_argument(
        "--activation",
        default="tanh",
        choices=sorted(ACTIVATIONS),
        help="policy body activation (ML-Agents: silu)",
    )
    parser.add_argument(
        "--extractor-lr-scale",
        type=float,
        default=1.0,
        help="the features extractor learns at this times the learning rate (the flattened one has no weights)",
    )
    parser.add_argument(
        "--curriculum",
        nargs="?",
        const=str(UNITY_CURRICULUM),
        default=None,
        metavar="YAML",
        help="train through the num_tiles curriculum of this ML-Agents YAML (default: Unity's "
        "Sorter_curriculum.yaml); --num-tiles is then unused",
    )
    parser.add_argument(
        "--references",
        type=int,
        nargs="+",
        metavar="N",
        help="only print the expert and random returns at 1-N tiles for each N, and exit",
    )
    parser.add_argument("--name", default=None, help="results file name (default from --num-tiles)")
    parser.add_argument(
        "--scene-params",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="parameters of the Sorter scene for training and --references, e.g. max_steps=300",
    )
    parser.add_argument(
        "--save-dir", default=None, help="save each trained model there as sorter_<encoder>_s<seed>.zip"
    )
    parser.add_argument(
        "--init-model",
        default=None,
        metavar="ZIP",
        help="start every run from this saved model's parameters (fine-tuning, e.g. with other scene parameters)",
    )
    args = parser.parse_args(argv)
    if args.references:
        for n in args.references:
            (expert, n_expert), (rand, n_rand) = (
                reference_returns(n, "expert", scene_params=parse_settings(args.scene_params)),
                reference_returns(n, "random", scene_params=parse_settings(args.scene_params)),
            )
            print(
                f"1-{n} tiles: expert {expert:.2f} ({n_expert} episodes), random {rand:.2f} ({n_rand} episodes)"
            )
        return
    parse_settings(args.overrides)  # fails early on a malformed pair; each run parses its own copy
    if args.curriculum:
        load_curriculum(args.curriculum)  # fails early too

    tasks = [
        (
            encoder,
            seed,
            args.steps,
            args.num_tiles,
            args.window,
            args.separate_extractors,
            args.overrides,
            args.activation,
            args.extractor_lr_scale,
            args.curriculum,
            None if args.save_dir is None else str(Path(args.save_dir) / f"sorter_{encoder}_s{seed}.zip"),
            parse_settings(args.scene_params),
            args.init_model,
        )
        for encoder in args.encoders
        for seed in args.seeds
    ]
    rows = run_tasks(run, tasks, args.jobs)
    for row in rows:
        stats = "; ".join(f"{k} {a:.4f} -> {b:.4f}" for k, (a, b) in row["updates"].items())
        print(
            f"{row['encoder']:>9} seed {row['seed']}: final return {row['final_return']:.2f} "
            f"({row['episodes']} episodes, {row['seconds']} s); per update, first half -> second half: {stats}",
            flush=True,
        )
        for lesson in row.get("per_lesson", []):
            print(
                f"    lesson {lesson['lesson']} (1-{lesson['num_tiles']:g} tiles) from step {lesson['start']}: "
                f"{lesson['episodes']} episodes, return {_fmt(lesson['mean_return'])}, "
                f"last 20% of its steps {_fmt(lesson['tail_return'])}",
                flush=True,
            )
    summary = []
    for encoder in args.encoders:
        # with a curriculum the last 20% of training spans several lessons: take the final lesson's own
        finals = [
            r["per_lesson"][-1]["tail_return"] if r.get("per_lesson") else r["final_return"]
            for r in rows
            if r["encoder"] == encoder
        ]
        seconds = [r["seconds"] for r in rows if r["encoder"] == encoder]
        summary.append(
            {
                "encoder": encoder,
                "seeds": len(finals),
                "final return (mean)": float(np.mean(finals)),
                "min": float(np.min(finals)),
                "max": float(np.max(finals)),
                "seconds per run": float(np.mean(seconds)),
            }
        )
    changed = [*args.overrides, *([f"activation={args.activation}"] if args.activation != "tanh" else [])]
    if args.extractor_lr_scale != 1.0:
        changed.append(f"extractor_lr_scale={args.extractor_lr_scale}")
    changed += [
        f"scene {pair}" for pair in args.scene_params
    ]  # the references above are for the default scene
    if args.init_model:
        changed.append(f"from {Path(args.init_model).name}")
    tiles = (
        f"Unity's curriculum ({Path(args.curriculum).name}), final lesson 1-{rows[0].get('final_num_tiles', 0):g}"
        if args.curriculum
        else f"1-{args.num_tiles}"
    )
    final_tiles = int(rows[0].get("final_num_tiles", args.num_tiles)) if args.curriculum else args.num_tiles
    print_table(
        summary,
        ["encoder", "seeds", "final return (mean)", "min", "max", "seconds per run"],
        title=f"Sorter, {tiles} tiles, {args.steps} steps per run; return = mean episode return "
        + (
            "in the last 20% of the final lesson's steps"
            if args.curriculum
            else "in the last 20% of training"
        )
        + f" ({REFERENCES.get(final_tiles, 'no reference measured')})"
        + (f"; settings changed: {' '.join(changed)}" if changed else ""),
    )
    name = "sorter_attention" if args.num_tiles == 2 else f"sorter_attention_tiles{args.num_tiles}"
    if args.curriculum:
        name = "sorter_attention_curriculum"
    if args.separate_extractors:
        name += "_separate"
    name = args.name or name
    path = write_results(name, rows, summary=summary, settings=vars(args))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
