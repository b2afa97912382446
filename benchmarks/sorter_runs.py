"""Learning curves of ``unity-sb3 train`` runs of the Sorter curriculum, read from their run folders.

``benchmarks/sorter_attention.py`` records its own runs; a run of ``unity-sb3 train --env Sorter
--config examples/configs/sorter_20_tiles.yml`` (which may be stopped and continued with
``--resume``) leaves its episodes in the run folder instead. For each folder this script reads the
run's ``config.yaml`` (steps, the ``num_tiles`` curriculum) and its monitor files (``monitor.csv``,
then ``resume-<k>.monitor.csv`` for each resumed segment), and prints the mean episode return per
lesson (all its episodes, and the last 20% of its steps), per ``--window`` steps, and over the last
20% of the steps done ("final").

An episode's step is the sum of the lengths of the episodes that ended before it and its own (the
arenas run side by side, so this is within one episode per arena of the true step). A resumed
segment starts at the checkpoint it resumed from, the newest one not past the previous segment's
end: the previous segment's episodes after that step, trained again, are dropped. Lessons of a
``progress`` curriculum are entered at ``threshold * n_timesteps`` (Unity's completion criterion).

    python benchmarks/sorter_runs.py /tmp/sorter_ship/sorter20_s0 /tmp/sorter_ship/sorter20_s1 [--window 500000]

Writes ``benchmarks/results/sorter_runs.json`` (``--name`` for another stem).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results
from _curves import windowed_mean

from unity_sb3.plotting import read_monitor_csv

CHECKPOINT = re.compile(r"checkpoint_(\d+)_steps\.zip$")


def _segments(run_dir: Path) -> list[Path]:
    """The run's monitor files in training order."""
    resumed = sorted(
        run_dir.glob("resume-*.monitor.csv"), key=lambda p: int(p.name.split("-")[1].split(".")[0])
    )
    return [run_dir / "monitor.csv", *resumed]


def episodes_of(run_dir: Path) -> list[tuple[int, float]]:
    """``(step, return)`` of every episode of the run, resumed segments spliced at their checkpoints."""
    checkpoints = sorted(
        int(m.group(1)) for p in (run_dir / "checkpoints").glob("*.zip") if (m := CHECKPOINT.search(p.name))
    )
    episodes: list[tuple[int, float]] = []
    for k, path in enumerate(_segments(run_dir)):
        data = read_monitor_csv(path)
        start = 0
        if k:
            end = episodes[-1][0] if episodes else 0
            start = max([c for c in checkpoints if c <= end], default=0)
            episodes = [(t, r) for t, r in episodes if t <= start]
        steps = start + np.cumsum(data["l"]).astype(int)
        episodes += [(int(t), float(r)) for t, r in zip(steps, data["r"])]
    return episodes


def lessons_of(config: dict[str, Any]) -> list[tuple[int, int, float]]:
    """``(step entered, lesson, num_tiles)`` of the run's ``num_tiles`` curriculum (progress criteria)."""
    params = (config.get("open_kwargs") or {}).get("environment_parameters") or {}
    lessons = ((params.get("num_tiles") or {}).get("curriculum")) or []
    total = int(config["n_timesteps"])
    entered, start = [], 0
    for k, lesson in enumerate(lessons):
        entered.append((start, k, float(lesson["value"])))
        criteria = lesson.get("completion_criteria") or {}
        if criteria.get("measure", "progress") != "progress":
            raise SystemExit(
                f"lesson {k} completes on {criteria['measure']!r}: only progress lessons are read"
            )
        start = round(float(criteria.get("threshold", 1.0)) * total)
    return entered


def summarize(run_dir: Path, window: int) -> dict[str, Any]:
    """One row: the run's per-lesson returns, its windowed curve and its final return."""
    from sorter_attention import lesson_summary  # imports torch and SB3: only when a run is read

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    episodes = episodes_of(run_dir)
    done = episodes[-1][0] if episodes else 0
    entered = [e for e in lessons_of(config) if e[0] < done] or [(0, 0, float("nan"))]
    tail = [r for t, r in episodes if t > 0.8 * done]
    return {
        "run": str(run_dir),
        "seed": config.get("seed"),
        "steps_planned": int(config["n_timesteps"]),
        "steps_done": done,
        "episodes": len(episodes),
        "final_return": float(np.mean(tail)) if tail else None,
        "curve": windowed_mean(episodes, done, window),
        "per_lesson": lesson_summary(entered, episodes, done),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path, help="unity-sb3 train run folders")
    parser.add_argument("--window", type=int, default=500_000, help="steps per point of the curve")
    parser.add_argument("--name", default="sorter_runs", help="results file stem")
    args = parser.parse_args(argv)
    rows = [summarize(run, args.window) for run in args.runs]
    for row in rows:
        lessons = [
            {
                "num_tiles": f"1-{lesson['num_tiles']:g}",
                "steps": f"{lesson['start']:,}-{lesson['end']:,}",
                "episodes": lesson["episodes"],
                "mean": lesson["mean_return"],
                "last 20%": lesson["tail_return"],
            }
            for lesson in row["per_lesson"]
        ]
        title = f"{row['run']} (seed {row['seed']}): {row['steps_done']:,} of {row['steps_planned']:,} steps"
        print_table(lessons, ["num_tiles", "steps", "episodes", "mean", "last 20%"], title=title)
        curve = " ".join("-" if v is None else f"{v:.2f}" for v in row["curve"])
        print(
            f"per {args.window:,} steps: {curve}\nfinal (last 20% of the steps done): {row['final_return']}\n"
        )
    print(f"wrote {write_results(args.name, rows, window=args.window)}")


if __name__ == "__main__":
    main()
