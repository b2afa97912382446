"""Learning-curve plotting from SB3 monitor files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from unity_sb3.plotting import plot_learning_curve, read_monitor_csv, smooth


def write_monitor(path: Path, rewards: list[float], length: int = 10) -> Path:
    lines = ["#" + json.dumps({"t_start": 0.0, "env_id": "x"}), "r,l,t"]
    lines += [f"{r},{length},{i * 0.1}" for i, r in enumerate(rewards)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_read_monitor_csv(tmp_path: Path) -> None:
    data = read_monitor_csv(write_monitor(tmp_path / "monitor.csv", [1.0, 2.5]))
    np.testing.assert_allclose(data["r"], [1.0, 2.5])
    np.testing.assert_allclose(data["l"], [10, 10])


def test_read_monitor_rejects_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("r,l,t\n1,2,3\n")
    with pytest.raises(ValueError, match="not an SB3 monitor file"):
        read_monitor_csv(bad)


def test_smooth_is_a_trailing_mean() -> None:
    np.testing.assert_allclose(smooth(np.array([0.0, 1, 2, 3, 4, 5]), 3), [0, 0.5, 1, 2, 3, 4])
    assert len(smooth(np.array([]), 5)) == 0


def test_plot_writes_png(tmp_path: Path) -> None:
    a = write_monitor(tmp_path / "a.csv", list(np.linspace(0, 100, 60)))
    b = write_monitor(tmp_path / "b.csv", [])
    out = plot_learning_curve([a, b], tmp_path / "curve.png", concatenate=True)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
