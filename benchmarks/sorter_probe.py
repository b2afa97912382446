"""Supervised probe: can each Sorter encoder read "the next tile" out of the buffer sensor?

The Sorter-like scene's policy must find, in the ``BufferSensor`` observation (20, 22), the row of
the lowest untouched tile and read its angle on the wall. This probe trains that read-out alone,
without reinforcement learning: random Sorter observations are drawn as the scene draws them (1 to
``num_tiles`` tiles with distinct numbers on distinct wall slots, rows in increasing number order,
the first few touched, a random agent position and heading), and a network learns to classify the
next tile's wall slot (20 classes) with cross-entropy. The network is the one PPO trains:
``UnityMultiInputExtractor`` with ``entities="attention"`` (ML-Agents' entity embedding + residual
self-attention) or ``entities="flatten"`` (440 padded inputs), then SB3's default [128, 128] Tanh
layers and a linear read-out. Adam, ``--lr``, batches of 256, fresh samples every batch; the
accuracy is measured on 4096 held-out observations (chance: 1/20 to 1/2).

``--shuffle`` lists the rows in a random order instead of Unity's increasing number order (not what
Unity's SorterAgent does; it shows what the order gives the flattened input).

    python benchmarks/sorter_probe.py                                 # 1-2, 1-4, 1-8, 1-20 tiles, 2 seeds
    python benchmarks/sorter_probe.py --tiles 4 20 --shuffle --seeds 0
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

from unity_sb3.networks.extractors import UnityMultiInputExtractor
from unity_sb3.scenes.sorter import ARENA_RADIUS, ENTITY_SIZE, HIGHEST_TILE_VALUE, POSITION_SCALE

ENCODERS = ("attention", "flatten")
SPACE = spaces.Dict(
    {
        "VectorSensor_size4": spaces.Box(-1.0, 1.0, (4,), np.float32),
        "BufferSensor": spaces.Box(0.0, 1.0, (HIGHEST_TILE_VALUE, ENTITY_SIZE), np.float32),
    }
)


def sample(
    rng: np.random.Generator, n: int, num_tiles: int, shuffle: bool
) -> tuple[dict[str, th.Tensor], th.Tensor]:
    """``n`` Sorter observations as the scene makes them, and the next tile's wall slot for each."""
    k = HIGHEST_TILE_VALUE
    count = rng.integers(1, num_tiles + 1, size=n)
    visible = np.arange(k)[None, :] < count[:, None]
    perm = rng.random((n, k)).argsort(axis=1)
    numbers = np.sort(np.where(visible, perm, k), axis=1)  # the chosen numbers, increasing, k after
    slots = rng.random((n, k)).argsort(axis=1)
    touched = rng.integers(0, count)  # tiles already touched: the first `touched` rows
    rows = np.arange(n)
    target = slots[rows, touched]
    buffer = np.zeros((n, k, ENTITY_SIZE), dtype=np.float32)
    r, c = np.nonzero(visible)
    buffer[r, c, numbers[r, c]] = 1.0
    buffer[r, c, k] = slots[r, c] / k
    buffer[r, c, k + 1] = c < touched[r]
    if shuffle:  # the visible rows in a random order, padding kept last
        order = np.where(visible, rng.random((n, k)), 2.0).argsort(axis=1)
        buffer = buffer[rows[:, None], order]
    radius = (ARENA_RADIUS - 0.5) * np.sqrt(rng.random(n))
    angle, yaw = rng.uniform(0, 2 * np.pi, n), rng.uniform(0, 2 * np.pi, n)
    vector = np.stack(
        [
            radius * np.sin(angle) / POSITION_SCALE,
            radius * np.cos(angle) / POSITION_SCALE,
            np.sin(yaw),
            np.cos(yaw),
        ],
        axis=1,
    ).astype(np.float32)
    obs = {"VectorSensor_size4": th.as_tensor(vector), "BufferSensor": th.as_tensor(buffer)}
    return obs, th.as_tensor(target)


def run(encoder: str, seed: int, num_tiles: int, steps: int, lr: float, shuffle: bool) -> dict[str, Any]:
    th.set_num_threads(1)
    th.manual_seed(seed)
    rng = np.random.default_rng(seed)
    extractor = UnityMultiInputExtractor(SPACE, entities=encoder)
    model = nn.Sequential(
        nn.Linear(extractor.features_dim, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 20)
    )
    params = list(extractor.parameters()) + list(model.parameters())
    optimizer = th.optim.Adam(params, lr=lr)
    test_obs, test_target = sample(np.random.default_rng(10_000 + seed), 4096, num_tiles, shuffle)
    checkpoints = sorted({steps // 8, steps // 4, steps // 2, steps})
    accuracy: dict[int, float] = {}
    start = time.perf_counter()
    for step in range(1, steps + 1):
        obs, target = sample(rng, 256, num_tiles, shuffle)
        loss = nn.functional.cross_entropy(model(extractor(obs)), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step in checkpoints:
            with th.no_grad():
                predicted = model(extractor(test_obs)).argmax(dim=1)
            accuracy[step] = float((predicted == test_target).float().mean())
    return {
        "encoder": encoder,
        "seed": seed,
        "num_tiles": num_tiles,
        "shuffle": shuffle,
        "accuracy": accuracy,
        "seconds": round(time.perf_counter() - start, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiles", type=int, nargs="+", default=[2, 4, 8, 20], help="most tiles per sample")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=ENCODERS)
    parser.add_argument("--steps", type=int, default=2000, help="gradient steps (batches of 256)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--shuffle", action="store_true", help="rows in random order (not Unity's)")
    args = parser.parse_args(argv)

    rows = []
    for num_tiles in args.tiles:
        for encoder in args.encoders:
            for seed in args.seeds:
                row = run(encoder, seed, num_tiles, args.steps, args.lr, args.shuffle)
                acc = ", ".join(f"{s}: {a:.3f}" for s, a in row["accuracy"].items())
                print(
                    f"1-{num_tiles} tiles {encoder:>9} seed {seed}: accuracy {acc} ({row['seconds']} s)",
                    flush=True,
                )
                rows.append(row)
    summary = []
    for num_tiles in args.tiles:
        for encoder in args.encoders:
            finals = [
                r["accuracy"][args.steps]
                for r in rows
                if r["num_tiles"] == num_tiles and r["encoder"] == encoder
            ]
            summary.append(
                {
                    "tiles": f"1-{num_tiles}",
                    "encoder": encoder,
                    "final accuracy per seed": ", ".join(f"{a:.3f}" for a in finals),
                    "mean": float(np.mean(finals)),
                }
            )
    order = "random row order" if args.shuffle else "rows in increasing number order (Unity)"
    print_table(
        summary,
        ["tiles", "encoder", "final accuracy per seed", "mean"],
        title=f"Next tile's slot from the Sorter buffer, {args.steps} steps of 256, lr {args.lr}, {order}",
    )
    name = "sorter_probe_shuffled" if args.shuffle else "sorter_probe"
    path = write_results(name, rows, summary=summary, settings=vars(args))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
