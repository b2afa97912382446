"""Learning-curve plots from SB3 Monitor / VecMonitor CSV files (no pandas needed)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def read_monitor_csv(path: str | Path) -> dict[str, np.ndarray]:
    """Read a ``monitor.csv`` written by SB3's ``Monitor`` / ``VecMonitor``.

    :return: arrays ``r`` (episode reward), ``l`` (episode length, in steps of one slot) and
        ``t`` (seconds since the start), in file order; empty arrays for a file with no episodes.
    """
    path = Path(path)
    lines = path.read_text().splitlines()
    if not lines or not lines[0].startswith("#"):
        raise ValueError(f"{path} is not an SB3 monitor file (its first line should be a '#{{...}}' header)")
    json.loads(lines[0][1:])  # validates the header
    columns = lines[1].split(",") if len(lines) > 1 else ["r", "l", "t"]
    data: dict[str, list[float]] = {c: [] for c in columns}
    for line in lines[2:]:
        values = line.split(",")
        for column, value in zip(columns, values):
            try:
                data[column].append(float(value))
            except ValueError:
                data[column].append(np.nan)
    return {c: np.asarray(v, dtype=np.float64) for c, v in data.items()}


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` points (fewer at the start)."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return values
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    index = np.arange(1, len(values) + 1)
    start = np.maximum(index - window, 0)
    return (cumulative[index] - cumulative[start]) / (index - start)


def plot_learning_curve(
    monitor_files: Sequence[str | Path] | str | Path,
    output: str | Path,
    *,
    title: str = "Learning curve",
    window: int = 50,
    labels: Sequence[str] | None = None,
    concatenate: bool = False,
) -> Path:
    """Plot episode reward against environment steps and save it as a PNG.

    The x axis is the cumulative episode length over all slots, i.e. agent-steps, the same
    unit as SB3's ``num_timesteps``.

    :param monitor_files: one or several monitor CSV files (one curve each).
    :param output: the PNG path.
    :param title: plot title.
    :param window: episodes in the moving average.
    :param labels: legend labels, one per file.
    :param concatenate: the files are consecutive segments of one run (a resumed run): draw
        them as one curve.
    :return: the PNG path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = [monitor_files] if isinstance(monitor_files, (str, Path)) else list(monitor_files)
    curves = [read_monitor_csv(f) for f in files]
    names = list(labels) if labels else [Path(f).parent.name for f in files]
    if concatenate and curves:
        curves = [{k: np.concatenate([c[k] for c in curves]) for k in ("r", "l")}]
        names = names[:1]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for data, label in zip(curves, names):
        if len(data["r"]) == 0:
            continue
        steps = np.cumsum(data["l"])
        ax.plot(steps, data["r"], alpha=0.2, linewidth=0.8)
        ax.plot(steps, smooth(data["r"], window), label=label, color=ax.lines[-1].get_color())
    ax.set_xlabel("agent steps")
    ax.set_ylabel("episode reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(output)
    plt.close(fig)
    return output
