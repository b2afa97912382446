"""Shared fixtures. Tests run torch on one thread: the machines have 2 cores."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT.parent / "shared" / "data" / "demos"


@pytest.fixture
def demo_dir() -> Path:
    """The real Unity ``.demo`` recordings in ``../shared/data/demos`` (skips when absent)."""
    if not DEMO_DIR.is_dir():
        pytest.skip(f"real .demo recordings not found at {DEMO_DIR} (shared/ must sit beside the checkout)")
    return DEMO_DIR
