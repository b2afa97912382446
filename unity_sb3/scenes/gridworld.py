"""GridWorld: after ML-Agents' GridWorld (``GridAgent`` / ``GridArea``).

Each agent has its own walled room of ``grid_size`` x ``grid_size`` cells with a green
"plus" goal and a red "ex" goal.

* Observations: a top-down RGB image of the room with its walls (floats in [0, 1],
  channel-first ``(3, image_size, image_size)`` like current Unity packages send it, or
  channel-last with ``channels_last=True``), then a goal signal: a one-hot of the goal to
  reach (index 0 = green plus, 1 = red ex), ``ObservationType.GOAL_SIGNAL`` as in the original.
* Actions: one branch of 5: stay, up, down, left, right. Action masks forbid moves into the
  walls (``GridAgent.WriteDiscreteActionMask``; ``mask_actions=False`` sends none, and a
  move into a wall then leaves the agent where it is).
* Reward: -0.01 per decision, +1 (``SetReward``) and episode end at the goal of the signal,
  -1 and episode end at the other goal. ``max_steps`` = 100 decisions.
* Stats: ``GridWorld/SuccessRate`` (1 at the right goal, else 0) per finished episode.

Image colours: floor black, walls grey (128/255), agent blue, plus goal green, ex goal red.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)

from unity_sb3.scenes._grid import DOWN, LEFT, MOVES, RIGHT, UP, GridScene, distinct_cells, moved, wall_mask
from unity_sb3.unity.errors import UnityConfigurationError

FLOOR, WALL, AGENT, PLUS, EX = range(5)
# colours as k / 255 so that they survive PNG compression bit for bit (stand-in player)
PALETTE = np.array(
    [[0, 0, 0], [128, 128, 128], [0, 0, 255], [0, 255, 0], [255, 0, 0]], dtype=np.float32
) / np.float32(255)


class GridWorld(GridScene):
    """Reach the goal named by a goal signal from a top-down image (ML-Agents GridWorld); action masks."""

    scene_name = "GridWorld"
    behavior_name = "GridWorld?team=0"
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 9,
        "max_steps": 100,
        "decision_period": 1,
        "stable_agent_ids": False,
        "grid_size": 5,
        "image_size": 32,
        "channels_last": False,
        "mask_actions": True,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {
        "grid_size": "room side in cells, walls excluded",
        "image_size": "side of the visual observation in pixels",
        "channels_last": "visual observation as (H, W, 3) instead of (3, H, W)",
        "mask_actions": "send action masks (GridAgent.maskActions); without them moves into walls do nothing",
    }

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if not 2 <= params["grid_size"] <= 64:
            raise UnityConfigurationError(
                f"GridWorld 'grid_size' must be in [2, 64], got {params['grid_size']}."
            )
        if params["image_size"] < params["grid_size"] + 2:
            raise UnityConfigurationError(
                f"GridWorld 'image_size' ({params['image_size']}) must be at least grid_size + 2 "
                f"({params['grid_size'] + 2}) so that every cell gets a pixel."
            )

    def _make_spec(self) -> BehaviorSpec:
        s = self.params["image_size"]
        te, none = DimensionProperty.TRANSLATIONAL_EQUIVARIANCE, DimensionProperty.NONE
        if self.params["channels_last"]:
            image = ObservationSpec((s, s, 3), (te, te, none), ObservationType.DEFAULT, "CameraSensor")
        else:
            image = ObservationSpec((3, s, s), (none, te, te), ObservationType.DEFAULT, "CameraSensor")
        goal = ObservationSpec((2,), (none,), ObservationType.GOAL_SIGNAL, "GoalSensor")
        return BehaviorSpec([image, goal], ActionSpec.create_discrete((5,)))

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        n, g, s = self.num_agents, self.params["grid_size"], self.params["image_size"]
        self._size = g
        self._pos = np.zeros((n, 2), dtype=np.int64)
        self._goals = np.zeros((n, 2, 2), dtype=np.int64)  # [agent, plus/ex, xy]
        self._target = np.zeros(n, dtype=np.int64)
        self._success = np.zeros(n, dtype=bool)
        room = np.full((g + 2, g + 2), WALL, dtype=np.int64)
        room[1:-1, 1:-1] = FLOOR
        self._room = room
        self._pixel_cell = np.arange(s) * (g + 2) // s  # cell of each pixel row / column
        self._pixels_per_cell = np.bincount(self._pixel_cell, minlength=g + 2)
        self._palette_chw = np.ascontiguousarray(PALETTE.T)
        self._channels_last = self.params["channels_last"]

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        cells = distinct_cells(self._rng, idx.size, 3, self._size)
        self._pos[idx] = cells[:, 0]
        self._goals[idx] = cells[:, 1:]
        self._target[idx] = self._rng.integers(0, 2, size=idx.size)
        self._success[idx] = False

    def _on_episode_end(self, idx: np.ndarray, interrupted: np.ndarray) -> None:
        for ok in self._success[idx]:
            self.stat("GridWorld/SuccessRate", float(ok))

    def _move(self) -> None:
        act = np.flatnonzero(self._active)
        self._reward[act] -= 0.01
        pos = moved(self._pos[act], self._disc_action[act, 0], self._size)
        self._pos[act] = pos
        at_goal = (pos[:, None, :] == self._goals[act]).all(axis=2)  # (m, 2)
        done = at_goal.any(axis=1)
        if done.any():
            ended = act[done]
            right = at_goal[done, self._target[ended]]
            self._reward[ended] = np.where(right, 1.0, -1.0)
            self._success[ended] = right
            self._finish(ended, False)
            self._start(ended)

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        m, g = idx.size, self._size
        rows = np.arange(m)
        cells = np.repeat(self._room[None], m, axis=0)
        for kind, xy in ((PLUS, self._goals[idx, 0]), (EX, self._goals[idx, 1]), (AGENT, self._pos[idx])):
            cells[rows, g - xy[:, 1], xy[:, 0] + 1] = kind  # row 1 is the top (y = g - 1)
        # colour the cells, then upscale (nearest neighbour) by repeating rows and columns
        reps = self._pixels_per_cell
        if self._channels_last:
            image = np.repeat(np.repeat(PALETTE[cells], reps, axis=1), reps, axis=2)
        else:
            coloured = np.take(self._palette_chw, cells, axis=1).transpose(1, 0, 2, 3)  # (m, 3, g+2, g+2)
            image = np.repeat(np.repeat(coloured, reps, axis=2), reps, axis=3)
        goal = np.zeros((m, 2), dtype=np.float32)
        goal[rows, self._target[idx]] = 1.0
        return [image, goal]

    def _action_mask(self, idx: np.ndarray) -> list[np.ndarray] | None:
        return [wall_mask(self._pos[idx], self._size)] if self.params["mask_actions"] else None

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """Walk to the signalled goal, read from the image, around the other goal; never a masked move."""
        self._check_behavior(behavior_name)
        image, goal = decision_steps.obs[0], decision_steps.obs[1]
        if not self._channels_last:
            image = image.transpose(0, 2, 3, 1)
        agent = self._find(image, PALETTE[AGENT])
        targets = np.stack([self._find(image, PALETTE[PLUS]), self._find(image, PALETTE[EX])], axis=1)
        want = goal.argmax(axis=1)
        rows = np.arange(len(goal))
        target, other = targets[rows, want], targets[rows, 1 - want]
        # walls seen in the image (the agent's cell), plus whatever the masks forbid
        blocked = wall_mask(agent, self._size)
        if decision_steps.action_mask is not None:
            blocked |= decision_steps.action_mask[0]
        actions = np.zeros((len(goal), 1), dtype=np.int32)
        for i in range(len(goal)):
            delta = target[i] - agent[i]
            good = [RIGHT if delta[0] > 0 else LEFT] if delta[0] else []
            good += [UP if delta[1] > 0 else DOWN] if delta[1] else []
            good.sort(key=lambda a: -abs(delta[0] if a in (LEFT, RIGHT) else delta[1]))
            allowed = [a for a in range(1, 5) if not blocked[i, a]]
            safe = [a for a in allowed if not (agent[i] + MOVES[a] == other[i]).all()]
            choice = next((a for a in good if a in safe), None)
            if choice is None:  # the other goal blocks the only shortest path: side-step
                choice = next(a for a in safe if a not in good)
            actions[i, 0] = choice
        return ActionTuple(discrete=actions)

    def _find(self, image: np.ndarray, colour: np.ndarray) -> np.ndarray:
        """Cell (x, y) of the first pixel of ``colour`` in each ``(H, W, 3)`` image."""
        hits = (np.abs(image - colour) < 0.1).all(axis=3).reshape(len(image), -1)
        first = hits.argmax(axis=1)
        size = image.shape[1]
        row, col = self._pixel_cell[first // size], self._pixel_cell[first % size]
        return np.stack([col - 1, self._size - row], axis=1)
