"""Self-play as ML-Agents' ghost trainer: settings, ELO, the snapshot pool, frozen ghost policies
and the bookkeeping of who learns (the SB3 callback is :mod:`unity_sb3.callbacks.self_play`)."""

from __future__ import annotations

from unity_sb3.selfplay.controller import Advance, GhostController, SelfPlayBehavior
from unity_sb3.selfplay.elo import elo_change, expected_score, result_from_reward
from unity_sb3.selfplay.ghost import GhostPolicy
from unity_sb3.selfplay.settings import SELF_PLAY_KEYS, SelfPlayConfigError, SelfPlaySettings
from unity_sb3.selfplay.snapshots import LATEST, SnapshotPool

__all__ = [
    "LATEST",
    "SELF_PLAY_KEYS",
    "Advance",
    "GhostController",
    "GhostPolicy",
    "SelfPlayBehavior",
    "SelfPlayConfigError",
    "SelfPlaySettings",
    "SnapshotPool",
    "elo_change",
    "expected_score",
    "result_from_reward",
]
