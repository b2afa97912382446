"""POCA with memory vs without on a group cue task only memory solves.

Groups of two agents; each sees its own cue (+-1) at the first of three decisions and nothing of it
after; at the last decision both must answer their cue for the group reward (+1). Without memory a
group wins at most 1/4 of its episodes. ``memory`` is ``unity_sb3.RecurrentPOCA`` (an LSTM of 16
units after the actor's layer, and one in the centralised critic after its attention),
``no_memory`` is ``unity_sb3.POCA`` with the same layers and settings
(the task, its settings and the evaluation are the ones of ``tests/test_poca_memory.py``). Each run
reports the deterministic group win rate over 50 evaluation episodes after training.

    python benchmarks/poca_memory.py                     # 3 seeds x 2 policies
    python benchmarks/poca_memory.py --seeds 0 --steps 6000

Writes ``benchmarks/results/poca_memory.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import print_table, write_results
from test_poca_memory import CUE_SETTINGS, CUE_STEPS, cue_model, group_win_rate

POLICIES = ("memory", "no_memory")


def run(policy: str, seed: int, steps: int) -> dict[str, Any]:
    """Train one (policy, seed) and measure its group win rate."""
    th.set_num_threads(1)
    start = time.perf_counter()
    model = cue_model(memory=policy == "memory", seed=seed).learn(steps)
    elapsed = time.perf_counter() - start
    return {
        "policy": policy,
        "seed": seed,
        "steps": steps,
        "win_rate": group_win_rate(model),
        "seconds": elapsed,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=CUE_STEPS, help="training steps per run (all agents)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    args = parser.parse_args(argv)
    rows = [run(policy, seed, args.steps) for policy in args.policies for seed in args.seeds]
    summary = []
    for policy in args.policies:
        rates = [r["win_rate"] for r in rows if r["policy"] == policy]
        seconds = [r["seconds"] for r in rows if r["policy"] == policy]
        summary.append(
            {
                "policy": policy,
                "seeds": len(rates),
                "win rate (mean)": float(np.mean(rates)),
                "min": float(np.min(rates)),
                "max": float(np.max(rates)),
                "seconds per run": float(np.mean(seconds)),
            }
        )
    print_table(rows, ["policy", "seed", "steps", "win_rate", "seconds"], "per run")
    print_table(summary, list(summary[0]), f"group cue task, {args.steps} steps")
    path = write_results("poca_memory", rows, summary=summary, settings=CUE_SETTINGS, steps=args.steps)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
