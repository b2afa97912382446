"""Cost of the entity-attention extractor on Sorter observations: ML-Agents' op layout vs the fast path.

``unity_sb3.networks.attention`` runs two routes to the same values: the ops as ML-Agents writes
them (what ONNX export traces: hand-written layer norm and Swish, the "self" encoding concatenated
to every entity row, all ``max_entities`` rows) and, outside tracing, a cheaper one (fused layer norm
and Swish, the "self" part of the embedding computed once per observation, rows that are padding in
the whole batch cut away, the attention's dense layers run on the real rows only). This script times
``UnityMultiInputExtractor(entities="attention")`` on random Sorter observations
(``benchmarks/sorter_probe.py``'s sampler) both ways, and the fast path with the dense layers on all
rows beside them (``attention.PACK_MIN_PADDING_ROWS`` out of reach: the fast path before
2026-11-27), one CPU thread, for rollout-sized (8 rows, forward only) and training-sized (512 rows, forward + backward) batches
at 1-4 and 1-20 tiles, checks that both give the same features and gradients, prints a table and
writes ``benchmarks/results/attention_speed.json``. Each extractor is timed with the policy's first
dense layer (128) after it; the flattened encoder (440 inputs) is timed for scale.

    python benchmarks/attention_speed.py
    python benchmarks/attention_speed.py --tiles 4 --repeats 50
    python benchmarks/attention_speed.py --ppo-steps 20000   # also PPO's wall time on Sorter, both ways
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch as th

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results
from sorter_probe import SPACE, sample

from unity_sb3.networks import attention
from unity_sb3.networks.extractors import UnityMultiInputExtractor

CASES = (("rollout", 8, False), ("training", 512, True))


def _time(extractor, obs, backward: bool, repeats: int) -> float:
    """Median milliseconds of one call (forward, or forward + backward)."""
    times = []
    for i in range(repeats + 2):
        start = time.perf_counter()
        if backward:
            extractor.zero_grad()
            extractor(obs).sum().backward()
        else:
            with th.no_grad():
                extractor(obs)
        if i >= 2:  # two warm-up calls
            times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def _grads(extractor, obs) -> tuple[th.Tensor, list[th.Tensor]]:
    extractor.zero_grad()
    out = extractor(obs)
    (out * th.linspace(-1, 1, out.shape[1])).sum().backward()
    return out.detach(), [p.grad.clone() for p in extractor.parameters()]


def _ppo_seconds(tiles: int, steps: int) -> float:
    """Wall seconds of ``model.learn(steps)`` with sorter_attention.py's model (attention, seed 0)."""
    from sorter_attention import make_model
    from stable_baselines3.common.vec_env import VecMonitor

    from unity_sb3 import UnityVecEnv
    from unity_sb3.scenes import make_scene

    env = VecMonitor(UnityVecEnv(make_scene("Sorter", seed=0, num_tiles=tiles)))
    model = make_model("attention", env, seed=0)
    start = time.perf_counter()
    model.learn(steps)
    elapsed = time.perf_counter() - start
    env.close()
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiles", type=int, nargs="+", default=[4, 20], help="most tiles per observation")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per case (median)")
    parser.add_argument(
        "--ppo-steps",
        type=int,
        default=0,
        help="also time this many steps of PPO on Sorter each way (sorter_attention.py's shipped settings)",
    )
    args = parser.parse_args(argv)
    th.set_num_threads(1)
    th.manual_seed(0)
    # each extractor with the policy's first dense layer after it (the flattened one has no weights)
    attend = UnityMultiInputExtractor(SPACE, entities="attention")
    extractor = th.nn.Sequential(attend, th.nn.Linear(attend.features_dim, 128))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "pads and flattens"
        flat = UnityMultiInputExtractor(SPACE, entities="flatten")
    flatten = th.nn.Sequential(flat, th.nn.Linear(flat.features_dim, 128))
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    for tiles in args.tiles:
        for name, batch, backward in CASES:
            obs, _ = sample(rng, batch, tiles, shuffle=False)
            with mock.patch.object(attention, "_exporting", return_value=True):
                before = _time(extractor, obs, backward, args.repeats)
                ref_out, ref_grads = _grads(extractor, obs)
            with mock.patch.object(attention, "PACK_MIN_PADDING_ROWS", 10**9):
                unpacked = _time(extractor, obs, backward, args.repeats)
            after = _time(extractor, obs, backward, args.repeats)
            out, grads = _grads(extractor, obs)
            # largest difference over the features and every gradient, each relative to its largest
            # value (at least 1e-6 of the largest gradient: the key bias's gradient is zero up to rounding)
            floor = 1e-6 * max(float(r.abs().max()) for r in ref_grads)
            diff = max(
                float((a - b).abs().max()) / max(float(b.abs().max()), floor)
                for a, b in zip([out, *grads], [ref_out, *ref_grads])
            )
            rows.append(
                {
                    "tiles": f"1-{tiles}",
                    "batch": f"{name} ({batch})",
                    "pass": "forward + backward" if backward else "forward",
                    "ML-Agents layout (ms)": round(before, 2),
                    "fast path, dense on all rows (ms)": round(unpacked, 2),
                    "fast path (ms)": round(after, 2),
                    "speed-up": round(before / after, 1),
                    "real rows only vs all rows": round(unpacked / after, 2),
                    "flatten (ms)": round(_time(flatten, obs, backward, args.repeats), 2),
                    "max relative difference": diff,
                }
            )
            print(rows[-1], flush=True)
    columns = list(rows[0])
    print_table(
        rows, columns, title="UnityMultiInputExtractor on Sorter observations, one CPU thread, median"
    )
    training = []
    if args.ppo_steps:
        for tiles in args.tiles:
            with mock.patch.object(attention, "_exporting", return_value=True):
                before = _ppo_seconds(tiles, args.ppo_steps)
            after = _ppo_seconds(tiles, args.ppo_steps)
            training.append(
                {
                    "tiles": f"1-{tiles}",
                    "steps": args.ppo_steps,
                    "ML-Agents layout (s)": round(before, 1),
                    "fast path (s)": round(after, 1),
                    "speed-up": round(before / after, 1),
                }
            )
            print(training[-1], flush=True)
        print_table(
            training,
            list(training[0]),
            title="PPO on Sorter (shipped settings, attention, seed 0), wall time of model.learn",
        )
    path = write_results("attention_speed", rows, training=training, settings=vars(args))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
