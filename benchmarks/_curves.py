"""Shared pieces of the learning benchmarks: episode recording, windowed curves, plots, parallel runs."""

from __future__ import annotations

import multiprocessing
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

Curve = list[float | None]


class EpisodeRecorder(BaseCallback):
    """Collects ``(num_timesteps, return)`` of every episode that ends during training (needs ``VecMonitor``)."""

    def __init__(self) -> None:
        super().__init__()
        self.episodes: list[tuple[int, float]] = []

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:
                self.episodes.append((self.num_timesteps, float(info["episode"]["r"])))
        return True


def windowed_mean(points: Sequence[tuple[int, float]], steps: int, window: int) -> Curve:
    """Mean value of the points whose step falls in each ``window`` of ``steps`` (None: no point there).

    :param points: ``(step, value)`` pairs, e.g. ``EpisodeRecorder.episodes``.
    :param steps: total training steps; the curve has ``ceil(steps / window)`` entries.
    :param window: steps per entry.
    """
    curve: Curve = []
    for start in range(0, steps, window):
        inside = [value for t, value in points if start < t <= start + window]
        curve.append(float(np.mean(inside)) if inside else None)
    return curve


def run_tasks(
    function: Callable[..., dict[str, Any]], tasks: Sequence[tuple], jobs: int
) -> list[dict[str, Any]]:
    """``[function(*task) for task in tasks]``, in ``jobs`` spawned processes when ``jobs > 1`` (same order)."""
    if jobs > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            return pool.starmap(function, tasks)
    return [function(*task) for task in tasks]


def plot_curves(
    curves: dict[str, list[Curve]],
    window: int,
    path: Path,
    ylabel: str,
    title: str,
    hline: float | None = None,
    ylim: tuple[float, float] | None = None,
) -> None:
    """One line per label (mean over its seeds) with the min-max band, written to ``path``.

    :param curves: label -> one windowed curve per seed.
    :param window: steps per curve entry (the x axis is ``(k + 1) * window``).
    :param hline: a reference level (a threshold) drawn dotted.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, seeds in curves.items():
        if not seeds:
            continue
        values = np.array([[np.nan if v is None else v for v in curve] for curve in seeds], dtype=float)
        x = (np.arange(values.shape[1]) + 1) * window
        with warnings.catch_warnings():
            # A window where no seed has a value (no episode ended, no ELO yet) stays a gap.
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, low, high = (f(values, axis=0) for f in (np.nanmean, np.nanmin, np.nanmax))
        ax.plot(x, mean, label=f"{label} (n={len(seeds)})")
        ax.fill_between(x, low, high, alpha=0.2)
    if hline is not None:
        ax.axhline(hline, color="gray", linestyle=":", linewidth=1)
    ax.set_xlabel("training steps (all agents)")
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
