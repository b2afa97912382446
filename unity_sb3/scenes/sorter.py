"""Sorter: ML-Agents' Sorter example (``SorterAgent``), a variable number of numbered tiles.

An agent stands in a round arena whose wall holds 20 slots. At each episode start, between 1 and
``num_tiles`` tiles with distinct numbers (0-19) appear on random distinct slots; the agent must
touch them in increasing order.

* Observations, as ``SorterAgent.CollectObservations``:

  - ``"VectorSensor_size4"``: the agent's position relative to the arena centre, x / 20 and z / 20,
    then its forward direction's x and z;
  - ``"BufferSensor"``: a rank-2 observation ``(20, 22)``, one row per visible tile in increasing
    number order, zero rows after the last one (Unity's ``BufferSensorComponent`` pads). A row holds
    a one-hot of the tile's number (20 values), the tile's angle on the wall / 360 (its slot / 20)
    and 1 if the tile was already touched, else 0.

* Actions (``SorterAgent.MoveAgent``): three branches of 3. Branch 0: 1 = forward, 2 = backward;
  branch 1: 1 = right, 2 = left (it replaces the forward move, as in the C#); branch 2: 1 = turn
  left, 2 = turn right; 0 does nothing in every branch.
* Rewards: +1 for touching the next tile (it is marked touched); -1 and the episode ends for
  touching any other tile not yet touched; touching a touched tile does nothing; the episode ends
  when every tile is touched; -1 / ``max_steps`` per decision.
* ``num_tiles`` is the environment parameter ``num_tiles`` of Unity's ``Sorter_curriculum.yaml``
  (lessons 2, 4, ... 20), read at every episode start.

Simplified from Unity: the agent moves kinematically (``MOVE_STEP`` and ``turn_degrees``, default
``TURN_DEGREES``, per decision instead of a rigid body pushed by velocity changes, in an arena of
``ARENA_RADIUS``) and touches the tile of the wall slot it stands against: the wall is cut into 20
sectors of 18 degrees around the slots, and an agent pushed against the wall touches its sector's
tile. The agent keeps its heading from one episode to the next and restarts at the centre, as in
Unity.
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

from unity_sb3.scenes._grid import GridScene
from unity_sb3.unity.errors import UnityConfigurationError

#: ``SorterAgent.k_HighestTileValue``: tiles, wall slots and rows of the buffer sensor.
HIGHEST_TILE_VALUE = 20
ENTITY_SIZE = HIGHEST_TILE_VALUE + 2
#: Arena radius (the wall with its slots) and the agent's reach, in Unity units.
ARENA_RADIUS = 5.0
AGENT_RADIUS = 0.5
MOVE_STEP = 1.0
#: Angle between two wall slots; a touch counts for the slot whose sector (+-half of it) the agent is in.
SLOT_DEGREES = 360.0 / HIGHEST_TILE_VALUE
#: Default turn per decision: one wall slot, so that from the centre every slot is straight ahead.
TURN_DEGREES = SLOT_DEGREES
POSITION_SCALE = 20.0  # SorterAgent divides positions by 20
WRONG_REWARD, RIGHT_REWARD = np.float32(-1.0), np.float32(1.0)


class Sorter(GridScene):
    """Touch 1 to ``num_tiles`` numbered tiles in increasing order (ML-Agents Sorter); buffer sensor (20, 22)."""

    scene_name = "Sorter"
    behavior_name = "Sorter?team=0"
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 8,
        "max_steps": 150,
        "decision_period": 1,
        "stable_agent_ids": False,
        "num_tiles": 4,
        "turn_degrees": TURN_DEGREES,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {
        "num_agents": "number of arenas, one agent each",
        "max_steps": "decisions before an episode is interrupted; also sets the -1/max_steps step penalty",
        "num_tiles": "most tiles of an episode (1..20); each episode draws 1..num_tiles",
        "turn_degrees": "degrees turned by one turn action (default one wall slot, 18; Unity's agent turns 4 per physics step)",
    }
    DYNAMIC_PARAMS = ("num_tiles",)

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if not 1 <= params["num_tiles"] <= HIGHEST_TILE_VALUE:
            raise UnityConfigurationError(
                f"Sorter 'num_tiles' must be in [1, {HIGHEST_TILE_VALUE}], got {params['num_tiles']}."
            )
        if not 0.0 < float(params["turn_degrees"]) <= 180.0:
            raise UnityConfigurationError(
                f"Sorter 'turn_degrees' must be in (0, 180], got {params['turn_degrees']}."
            )

    def _make_spec(self) -> BehaviorSpec:
        vector = ObservationSpec(
            (4,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "VectorSensor_size4"
        )
        buffer = ObservationSpec(
            (HIGHEST_TILE_VALUE, ENTITY_SIZE),
            (DimensionProperty.VARIABLE_SIZE, DimensionProperty.NONE),
            ObservationType.DEFAULT,
            "BufferSensor",
        )
        return BehaviorSpec([vector, buffer], ActionSpec.create_discrete((3, 3, 3)))

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        n, k = self.num_agents, HIGHEST_TILE_VALUE
        self._pos = np.zeros((n, 2))  # (x, z) from the arena centre
        self._yaw = np.zeros(n)  # degrees, clockwise seen from above (Unity's y rotation)
        self._count = np.zeros(n, dtype=np.int64)  # tiles of this episode
        self._value = np.full((n, k), -1, dtype=np.int64)  # visible tiles' numbers, increasing, -1 after
        self._slot = np.zeros((n, k), dtype=np.int64)  # their wall slots
        self._visited = np.zeros((n, k), dtype=bool)
        self._next = np.zeros(n, dtype=np.int64)  # index of the tile to touch next

    def reset(self) -> None:
        self._yaw[:] = 0.0
        super().reset()

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        m, k = idx.size, HIGHEST_TILE_VALUE
        most = np.clip(np.rint(self._param("num_tiles", m)).astype(np.int64), 1, k)
        count = self._rng.integers(1, most + 1)
        numbers = self._rng.random((m, k)).argsort(axis=1)  # a random permutation per agent
        slots = self._rng.random((m, k)).argsort(axis=1)
        visible = np.arange(k)[None, :] < count[:, None]
        values = np.where(visible, np.sort(np.where(visible, numbers, k), axis=1), -1)
        self._count[idx] = count
        self._value[idx] = values
        self._slot[idx] = slots
        self._visited[idx] = False
        self._next[idx] = 0
        self._pos[idx] = 0.0

    # ------------------------------------------------------------------ physics
    def _forward(self, idx: np.ndarray) -> np.ndarray:
        yaw = np.radians(self._yaw[idx])
        return np.stack([np.sin(yaw), np.cos(yaw)], axis=1)

    def _move(self) -> None:
        act = np.flatnonzero(self._active)
        if act.size == 0:
            return
        forward_axis, right_axis, rotate_axis = (self._disc_action[act, b] for b in range(3))
        forward = self._forward(act)
        right = np.stack([forward[:, 1], -forward[:, 0]], axis=1)
        direction = np.zeros_like(forward)
        direction[forward_axis == 1] = forward[forward_axis == 1]
        direction[forward_axis == 2] = -forward[forward_axis == 2]
        direction[right_axis == 1] = right[right_axis == 1]
        direction[right_axis == 2] = -right[right_axis == 2]
        step = float(self.params["turn_degrees"])
        turn = np.select([rotate_axis == 1, rotate_axis == 2], [-step, step], 0.0)
        self._yaw[act] = (self._yaw[act] + turn) % 360.0
        pos = self._pos[act] + MOVE_STEP * direction
        limit = ARENA_RADIUS - AGENT_RADIUS
        dist = np.linalg.norm(pos, axis=1, keepdims=True)
        at_wall = dist[:, 0] >= limit
        self._pos[act] = np.where(at_wall[:, None], pos * limit / np.maximum(dist, 1e-9), pos)
        if self.max_steps > 0:
            self._reward[act] += np.float32(-1.0 / self.max_steps)
        self._touch(act[at_wall])

    def _touch(self, act: np.ndarray) -> None:
        """Agents ``act`` stand against the wall: their sector's untouched tile is right (+1) or wrong (-1, end)."""
        if act.size == 0:
            return
        x, z = self._pos[act, 0], self._pos[act, 1]
        sector = np.rint(np.degrees(np.arctan2(x, z)) / SLOT_DEGREES).astype(np.int64) % HIGHEST_TILE_VALUE
        live = (self._value[act] >= 0) & ~self._visited[act] & (self._slot[act] == sector[:, None])
        touched = live.any(axis=1)
        right = touched & (live.argmax(axis=1) == self._next[act])
        wrong = touched & ~right
        good = act[right]
        self._visited[good, self._next[good]] = True
        self._next[good] += 1
        self._reward[good] += RIGHT_REWARD
        self._reward[act[wrong]] += WRONG_REWARD
        done = np.sort(np.concatenate([act[wrong], good[self._next[good] >= self._count[good]]]))
        if done.size:
            self._finish(done, False)
            self._start(done)

    # ------------------------------------------------------------------ observations
    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        m = idx.size
        vector = np.concatenate([self._pos[idx] / POSITION_SCALE, self._forward(idx)], axis=1)
        buffer = np.zeros((m, HIGHEST_TILE_VALUE, ENTITY_SIZE), dtype=np.float32)
        values, visible = self._value[idx], self._value[idx] >= 0
        rows, cols = np.nonzero(visible)
        buffer[rows, cols, values[rows, cols]] = 1.0
        buffer[rows, cols, HIGHEST_TILE_VALUE] = self._slot[idx][rows, cols] / HIGHEST_TILE_VALUE
        buffer[rows, cols, HIGHEST_TILE_VALUE + 1] = self._visited[idx][rows, cols]
        return [vector.astype(np.float32), buffer]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """Turn towards the lowest untouched tile, then walk to it (from the observations only)."""
        self._check_behavior(behavior_name)
        vector, buffer = (np.asarray(o, dtype=np.float64) for o in decision_steps.obs)
        pos, forward = vector[:, :2] * POSITION_SCALE, vector[:, 2:4]
        present = np.sum(buffer**2, axis=2) >= 0.01
        waiting = present & (buffer[:, :, HIGHEST_TILE_VALUE + 1] < 0.5)
        row = np.where(waiting.any(axis=1), waiting.argmax(axis=1), 0)
        angle = np.radians(buffer[np.arange(len(buffer)), row, HIGHEST_TILE_VALUE] * 360.0)
        target = ARENA_RADIUS * np.stack([np.sin(angle), np.cos(angle)], axis=1) - pos
        heading = np.degrees(np.arctan2(forward[:, 0], forward[:, 1]))
        wanted = np.degrees(np.arctan2(target[:, 0], target[:, 1]))
        diff = (wanted - heading + 180.0) % 360.0 - 180.0
        actions = np.zeros((len(buffer), 3), dtype=np.int32)
        turn = np.abs(diff) > float(self.params["turn_degrees"]) / 2
        actions[turn, 2] = np.where(diff[turn] < 0, 1, 2)
        actions[~turn, 0] = 1
        return ActionTuple(discrete=actions)
