"""Helpers shared by the grid scenes (GridWorld, Escape, PyramidsLite)."""

from __future__ import annotations

import numpy as np

from unity_sb3.scenes.base import EmbeddedScene

STAY, UP, DOWN, LEFT, RIGHT = range(5)
#: (dx, dy) of the 5 moves: stay, up (+y), down (-y), left (-x), right (+x), as GridWorld's GridAgent.
MOVES = np.array([[0, 0], [0, 1], [0, -1], [-1, 0], [1, 0]], dtype=np.int64)


def wall_mask(pos: np.ndarray, size: int | np.ndarray) -> np.ndarray:
    """Moves that would hit the border walls: ``(m, 5)`` bool, True = NOT allowed (ML-Agents convention).

    :param pos: ``(m, 2)`` integer cells (x, y) in ``[0, size)``.
    :param size: room side in cells (scalar or ``(m,)``).
    """
    mask = np.zeros((len(pos), 5), dtype=bool)
    top = np.asarray(size) - 1
    mask[:, UP] = pos[:, 1] >= top
    mask[:, DOWN] = pos[:, 1] <= 0
    mask[:, LEFT] = pos[:, 0] <= 0
    mask[:, RIGHT] = pos[:, 0] >= top
    return mask


def moved(pos: np.ndarray, action: np.ndarray, size: int) -> np.ndarray:
    """Cells after each move; a move into a border wall leaves the agent where it is."""
    return np.clip(pos + MOVES[action], 0, size - 1)


def distinct_cells(rng: np.random.Generator, m: int, k: int, size: int) -> np.ndarray:
    """``k`` distinct random cells in each of ``m`` rooms: ``(m, k, 2)`` integer (x, y)."""
    flat = rng.random((m, size * size)).argsort(axis=1)[:, :k]
    return np.stack([flat % size, flat // size], axis=-1)


def greedy_moves(delta: np.ndarray, prefer_x: np.ndarray | None = None) -> np.ndarray:
    """Move that reduces the Manhattan distance along the larger axis of ``delta`` (``(m, 2)``; 0 = stay)."""
    dx, dy = delta[:, 0], delta[:, 1]
    use_x = np.abs(dx) >= np.abs(dy) if prefer_x is None else np.where(dx != 0, prefer_x | (dy == 0), False)
    horizontal = np.where(dx > 0, RIGHT, LEFT)
    vertical = np.where(dy > 0, UP, DOWN)
    action = np.where(use_x & (dx != 0), horizontal, np.where(dy != 0, vertical, STAY))
    return action.astype(np.int32)


class GridScene(EmbeddedScene):
    """A scene whose agents move one cell right after each decision (no actions between decisions)."""

    def _advance(self, max_substeps: int) -> int:
        if self._academy_step % self.decision_period:  # between decisions: time passes, nobody moves
            self._tick(max_substeps)
            self._check_limits()
            return max_substeps
        self._tick(1)
        self._move()
        self._check_limits()
        return 1

    def _move(self) -> None:
        """Apply the stored actions of the active agents, set rewards, end episodes."""
        raise NotImplementedError

    def _tick(self, n: int) -> None:
        """``n`` academy steps start (before the agents act): count them."""
        self._step_count[self._active] += n

    def _check_limits(self) -> None:
        """After the agents acted: interrupt episodes that reached ``max_steps``."""
        self._truncate_at_max_steps()
