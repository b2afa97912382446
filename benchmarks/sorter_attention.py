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

Reference returns (scene's expert_actions and uniform random actions over 3000 decisions of 8
arenas): 1-2 tiles (the default, Unity's first curriculum lesson): expert 1.39, random -0.52;
1-4 tiles (Unity's second lesson): expert 2.23, random -0.81; 1-8 tiles (Unity's fourth lesson;
episodes ended within 3000 decisions of 8 arenas, seed 0): expert 3.69, random -0.98; 1 tile
(from RESULTS.md): expert 0.93, random -0.46. ``benchmarks/sorter_probe.py`` measures the encoders' read-out of the next tile
without RL.
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
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.vec_env import VecMonitor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results
from _curves import EpisodeRecorder, run_tasks, windowed_mean

from unity_sb3 import PPO, UnityVecEnv
from unity_sb3.networks.extractors import UnityMultiInputExtractor
from unity_sb3.scenes import make_scene

ENCODERS = ("attention", "flatten")
#: Reference returns by ``--num-tiles`` (the docstring's expert and random runs).
REFERENCES = {
    1: "expert 0.93, random -0.46",
    2: "expert 1.39, random -0.52",
    4: "expert 2.23, random -0.81",
    8: "expert 3.69, random -0.98",
}


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
    run (rl-zoo's notation; ML-Agents' ``learning_rate_schedule: linear``).
    """
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set takes key=value, got {pair!r}")
        if value.startswith("lin_"):
            settings[key] = linear_schedule(float(value[4:]))
            continue
        try:
            settings[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            settings[key] = value
    return settings


def linear_schedule(start: float):
    """SB3 schedule: ``start`` at the beginning of training, 0 at the end (progress_remaining 1 -> 0)."""
    return lambda progress_remaining: progress_remaining * start


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
) -> dict[str, Any]:
    """One training run; ``overrides`` are ``--set``'s ``key=value`` strings (parsed here, in the worker)."""
    th.set_num_threads(1)
    env = VecMonitor(UnityVecEnv(make_scene("Sorter", seed=seed, num_tiles=num_tiles)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the flatten run's "pads and flattens" warning
        model = make_model(encoder, env, seed, separate, parse_settings(overrides or []), activation)
    if extractor_lr_scale != 1.0:
        scale_extractor_lr(model, extractor_lr_scale)
    recorder = EpisodeRecorder()
    updates = _UpdateStats()
    model.set_logger(Logger(folder=None, output_formats=[updates]))
    start = time.perf_counter()
    model.learn(steps, callback=recorder)
    elapsed = time.perf_counter() - start
    env.close()
    tail = [r for t, r in recorder.episodes if t > 0.8 * steps]
    return {
        "encoder": encoder,
        "seed": seed,
        "steps": steps,
        "episodes": len(recorder.episodes),
        "final_return": float(np.mean(tail)) if tail else float("nan"),
        "curve": windowed_mean(recorder.episodes, steps, window),
        "seconds": round(elapsed, 1),
        "updates": updates.halves(),
    }


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
    parser.add_argument("--name", default=None, help="results file name (default from --num-tiles)")
    args = parser.parse_args(argv)
    parse_settings(args.overrides)  # fails early on a malformed pair; each run parses its own copy

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
    summary = []
    for encoder in args.encoders:
        finals = [r["final_return"] for r in rows if r["encoder"] == encoder]
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
    print_table(
        summary,
        ["encoder", "seeds", "final return (mean)", "min", "max", "seconds per run"],
        title=f"Sorter, 1-{args.num_tiles} tiles, {args.steps} steps per run; return = mean episode return "
        f"in the last 20% of training ({REFERENCES.get(args.num_tiles, 'no reference measured')})"
        + (f"; settings changed: {' '.join(changed)}" if changed else ""),
    )
    name = "sorter_attention" if args.num_tiles == 2 else f"sorter_attention_tiles{args.num_tiles}"
    if args.separate_extractors:
        name += "_separate"
    name = args.name or name
    path = write_results(name, rows, summary=summary, settings=vars(args))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
