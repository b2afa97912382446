"""SB3 callbacks of a training run: checkpoints, progress, stats, curriculum, self-play."""

from __future__ import annotations

from unity_sb3.callbacks.checkpoint import (
    CHECKPOINT_PATTERN,
    REPLAY_BUFFER_STEP,
    AtomicCheckpointCallback,
    SummaryCallback,
    is_loadable_zip,
    latest_checkpoint,
    list_checkpoints,
    read_model_timesteps,
    save_atomic,
    save_replay_buffer_atomic,
    write_json_atomic,
)
from unity_sb3.callbacks.progress import LiveProgressCallback
from unity_sb3.callbacks.self_play import SelfPlayCallback, self_play_callbacks

__all__ = [
    "CHECKPOINT_PATTERN",
    "REPLAY_BUFFER_STEP",
    "AtomicCheckpointCallback",
    "LiveProgressCallback",
    "SelfPlayCallback",
    "SummaryCallback",
    "is_loadable_zip",
    "latest_checkpoint",
    "list_checkpoints",
    "read_model_timesteps",
    "save_atomic",
    "save_replay_buffer_atomic",
    "self_play_callbacks",
    "write_json_atomic",
]
