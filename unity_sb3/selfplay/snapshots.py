"""The snapshot pool of ML-Agents' ghost trainer: past weights of the learning policy and their ELO.

``GhostTrainer`` keeps a ring of ``window`` snapshots (``policy_snapshots``, overwritten from the
oldest by ``snapshot_counter``), the latest weights of the learning policy
(``current_policy_snapshot``) and ``window + 1`` ratings (``policy_elos``: one per ring slot, the
last for the learning policy). A snapshot takes the learner's rating at the moment it is saved.
At each opponent draw the latest policy is chosen with probability
``play_against_latest_model_ratio``, else a ring slot uniformly; the opponent's index is
``current_opponent`` (-1 for the latest, i.e. the learner's own rating entry).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

from unity_sb3.selfplay.settings import SelfPlaySettings

__all__ = ["LATEST", "SnapshotPool", "Weights", "copy_weights", "save_state_atomic"]

#: a policy's ``state_dict``: parameter name -> tensor
Weights = dict[str, th.Tensor]
#: ``current_opponent`` when the opponent is the latest policy
LATEST = -1


def copy_weights(weights: Mapping[str, th.Tensor]) -> Weights:
    """A detached CPU copy of a ``state_dict`` (later training never changes it)."""
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights.items()}


def save_state_atomic(state: Mapping[str, Any], path: str | Path) -> Path:
    """``torch.save(state, path)`` through a temporary file and ``os.replace``: a crash mid-write
    never leaves a half-written file under ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        th.save(dict(state), tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


class SnapshotPool:
    """Snapshots of one behavior's learning policy, the opponent draws and the ELO ratings.

    :param window: how many snapshots the ring holds (>= 1).
    :param play_against_latest_model_ratio: probability in [0, 1] that a draw picks the latest policy.
    :param initial_elo: the starting rating of the learner and of every ring slot.
    :param seed: seed of the draws (``None``: fresh entropy).
    """

    def __init__(
        self,
        window: int = 10,
        play_against_latest_model_ratio: float = 0.5,
        initial_elo: float = 1200.0,
        seed: int | None = None,
    ) -> None:
        checked = SelfPlaySettings(
            window=window,
            play_against_latest_model_ratio=play_against_latest_model_ratio,
            initial_elo=initial_elo,
        )
        self.window = checked.window
        self.play_against_latest_model_ratio = checked.play_against_latest_model_ratio
        self.initial_elo = checked.initial_elo
        self.rng = np.random.default_rng(seed)
        self.snapshots: list[Weights] = []
        self.current: Weights | None = None
        self.elos: list[float] = [self.initial_elo] * (self.window + 1)
        self.snapshot_counter = 0
        self.current_opponent = 0  # ML-Agents' start value, before the first draw

    @classmethod
    def from_settings(cls, settings: SelfPlaySettings, seed: int | None = None) -> SnapshotPool:
        """A pool with the ``window``, ratio and initial ELO of ``settings``."""
        return cls(settings.window, settings.play_against_latest_model_ratio, settings.initial_elo, seed)

    # ------------------------------------------------------------------ weights
    def set_current(self, weights: Mapping[str, th.Tensor]) -> None:
        """Record the learning policy's latest weights (copied)."""
        self.current = copy_weights(weights)

    def save_snapshot(self) -> int:
        """Copy the latest weights into the ring slot ``snapshot_counter`` with the learner's ELO.

        :return: the slot written.
        """
        if self.current is None:
            raise RuntimeError("no weights to snapshot yet: call set_current(policy.state_dict()) first")
        slot = self.snapshot_counter
        if slot < len(self.snapshots):
            self.snapshots[slot] = self.current
        else:
            self.snapshots.append(self.current)
        self.elos[slot] = self.current_elo
        self.snapshot_counter = (slot + 1) % self.window
        return slot

    def draw_opponent(self) -> Weights:
        """Choose the next opponent: the latest weights with probability
        ``play_against_latest_model_ratio``, else a ring slot uniformly; sets ``current_opponent``."""
        if self.current is None or not self.snapshots:
            raise RuntimeError("the pool is empty: call set_current(...) and save_snapshot() first")
        if self.rng.uniform() < 1.0 - self.play_against_latest_model_ratio:
            self.current_opponent = int(self.rng.integers(len(self.snapshots)))
            return self.snapshots[self.current_opponent]
        self.current_opponent = LATEST
        return self.current

    # ------------------------------------------------------------------ ELO
    @property
    def current_elo(self) -> float:
        """The learning policy's rating (the last entry of ``elos``)."""
        return self.elos[-1]

    @property
    def opponent_elo(self) -> float:
        """The rating of the opponent last drawn (the learner's own when it is the latest)."""
        return self.elos[self.current_opponent]

    def change_current_elo(self, change: float) -> None:
        """Add ``change`` to the learner's rating."""
        self.elos[-1] += change

    def change_opponent_elo(self, change: float) -> None:
        """Subtract ``change`` from the rating of the opponent last drawn."""
        self.elos[self.current_opponent] -= change

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        """Everything the pool holds, as plain data and tensors (``torch.load(weights_only=True)`` reads it)."""
        return {
            "window": self.window,
            "play_against_latest_model_ratio": self.play_against_latest_model_ratio,
            "initial_elo": self.initial_elo,
            "snapshots": self.snapshots,
            "current": self.current,
            "elos": list(self.elos),
            "snapshot_counter": self.snapshot_counter,
            "current_opponent": self.current_opponent,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; the window must be this pool's."""
        if int(state["window"]) != self.window:
            raise ValueError(
                f"the saved self-play pool has window {state['window']} but this one has {self.window}; "
                "resume with the window the run was started with"
            )
        self.play_against_latest_model_ratio = float(state["play_against_latest_model_ratio"])
        self.initial_elo = float(state["initial_elo"])
        self.snapshots = [copy_weights(s) for s in state["snapshots"]]
        self.current = copy_weights(state["current"]) if state["current"] is not None else None
        self.elos = [float(e) for e in state["elos"]]
        self.snapshot_counter = int(state["snapshot_counter"])
        self.current_opponent = int(state["current_opponent"])
        self.rng.bit_generator.state = state["rng"]

    def save(self, path: str | Path) -> Path:
        """Write the pool (snapshots, latest weights, ELO, draw state) to one file, atomically."""
        return save_state_atomic(self.state_dict(), path)

    @classmethod
    def load(cls, path: str | Path) -> SnapshotPool:
        """A pool read from a file written by :meth:`save`."""
        state = th.load(path, map_location="cpu", weights_only=True)
        pool = cls(
            int(state["window"]), float(state["play_against_latest_model_ratio"]), float(state["initial_elo"])
        )
        pool.load_state_dict(state)
        return pool
