"""Shared fixtures. Tests run torch on one thread: the machines have 2 cores."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT.parent / "shared" / "data" / "demos"


@pytest.fixture(autouse=True, scope="session")
def _sb3_log_dir(tmp_path_factory: pytest.TempPathFactory):
    """SB3's ``learn`` without a ``tensorboard_log`` makes an empty ``/tmp/SB3-<time>`` folder per
    call (thousands per suite); ``SB3_LOGDIR`` points it at one folder of the session's instead."""
    patch = pytest.MonkeyPatch()
    patch.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3_logs")))
    yield
    patch.undo()


@pytest.fixture
def demo_dir() -> Path:
    """The real Unity ``.demo`` recordings in ``../shared/data/demos`` (skips when absent)."""
    if not DEMO_DIR.is_dir():
        pytest.skip(f"real .demo recordings not found at {DEMO_DIR} (shared/ must sit beside the checkout)")
    return DEMO_DIR
