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

Reference returns (scene's expert_actions and uniform random actions over 3000 decisions of 8
arenas): 1-2 tiles (the default, Unity's first curriculum lesson): expert 1.39, random -0.52;
1-4 tiles (Unity's second lesson): expert 2.23, random -0.81; 1 tile (from RESULTS.md): expert
0.93, random -0.46. ``benchmarks/sorter_probe.py`` measures the encoders' read-out of the next tile
without RL.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
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
}


def make_model(encoder: str, env, seed: int, separate: bool = False) -> PPO:
    """PPO with the shipped Sorter settings (``config/hyperparams/ppo.yml``) and ``encoder`` for the tiles.

    :param separate: actor and critic each get their own encoder (ML-Agents' layout) instead of one
        shared features extractor (SB3's default for PPO).
    """
    return PPO(
        "MultiInputPolicy",
        env,
        n_steps=256,
        batch_size=512,
        n_epochs=3,
        learning_rate=3e-4,
        ent_coef=0.005,
        gamma=0.99,
        gae_lambda=0.95,
        seed=seed,
        policy_kwargs={
            "net_arch": [128, 128],
            "features_extractor_class": UnityMultiInputExtractor,
            "features_extractor_kwargs": {"entities": encoder},
            "share_features_extractor": not separate,
        },
    )


def run(
    encoder: str, seed: int, steps: int, num_tiles: int, window: int, separate: bool = False
) -> dict[str, Any]:
    th.set_num_threads(1)
    env = VecMonitor(UnityVecEnv(make_scene("Sorter", seed=seed, num_tiles=num_tiles)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the flatten run's "pads and flattens" warning
        model = make_model(encoder, env, seed, separate)
    recorder = EpisodeRecorder()
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
    }


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
    args = parser.parse_args(argv)

    tasks = [
        (encoder, seed, args.steps, args.num_tiles, args.window, args.separate_extractors)
        for encoder in args.encoders
        for seed in args.seeds
    ]
    rows = run_tasks(run, tasks, args.jobs)
    for row in rows:
        print(
            f"{row['encoder']:>9} seed {row['seed']}: final return {row['final_return']:.2f} "
            f"({row['episodes']} episodes, {row['seconds']} s)",
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
    print_table(
        summary,
        ["encoder", "seeds", "final return (mean)", "min", "max", "seconds per run"],
        title=f"Sorter, 1-{args.num_tiles} tiles, {args.steps} steps per run; return = mean episode return "
        f"in the last 20% of training ({REFERENCES.get(args.num_tiles, 'no reference measured')})",
    )
    name = "sorter_attention" if args.num_tiles == 2 else f"sorter_attention_tiles{args.num_tiles}"
    if args.separate_extractors:
        name += "_separate"
    path = write_results(name, rows, summary=summary, settings=vars(args))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
