"""PyramidsLite: a sparse-reward exploration scene after ML-Agents' Pyramids.

Each agent has its own walled room of ``room_size`` x ``room_size`` cells with a switch.
Stepping on the switch turns it on and makes a target (the gold brick on top of the
pyramid) appear on a random free cell; reaching the target gives +2 (``SetReward(2f)``)
and ends the episode. Every decision costs -0.001 (``AddReward(-1f / MaxStep)`` in spirit).

As in Pyramids, the agent does not know where the switch or the target is: it *sees* them
only along its rays (Pyramids' ``RayPerceptionSensor``), so it has to search the room, press
the switch, then search again. What a ray hits changes when the agent moves, and seeing the
switch or the target flips whole features: novelty is visible in the observations, which is
what curiosity and RND feed on. A random walk seldom completes the sequence within
``max_steps``.

* Observations (43 floats): ``[switch on, x, y]`` (position divided by ``room_size - 1``),
  then 8 rays (N, NE, E, SE, S, SW, W, NW; ``+y`` is north) of 5 floats each: one-hot of what
  the ray hits first (switch off, switch on, target, wall) and the hit distance in cells
  divided by ``room_size``. Rays start at the neighbouring cell and see across the room.
* Actions: one branch of 5: stay, up, down, left, right (a move into a wall does nothing).
* Stats: ``Pyramids/SuccessRate`` and ``Pyramids/SwitchPressed`` per episode.
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

from unity_sb3.scenes._grid import DOWN, LEFT, RIGHT, STAY, UP, GridScene, distinct_cells, moved
from unity_sb3.unity.errors import UnityConfigurationError

#: (dx, dy) of the 8 rays: N, NE, E, SE, S, SW, W, NW.
RAYS = np.array([[0, 1], [1, 1], [1, 0], [1, -1], [0, -1], [-1, -1], [-1, 0], [-1, 1]], dtype=np.int64)
#: What a ray can hit, in the order of its one-hot features.
SWITCH_OFF, SWITCH_ON, TARGET, WALL = range(4)
RAY_FEATURES = 5  # 4 tags + hit distance
#: Index of the switch state and of the position in the observation; rays start at ``RAY_START``.
SWITCH_STATE, POS_X, POS_Y, RAY_START = 0, 1, 2, 3
OBS_SIZE = RAY_START + len(RAYS) * RAY_FEATURES
#: the move that follows each cardinal ray (N, E, S, W)
_CARDINAL_MOVES = {0: UP, 2: RIGHT, 4: DOWN, 6: LEFT}


def cast_rays(
    pos: np.ndarray, switch: np.ndarray, on: np.ndarray, target: np.ndarray, size: int
) -> np.ndarray:
    """Ray features of ``m`` agents: ``(m, 8, 5)`` float32 (tag one-hot, hit distance / ``size``).

    :param pos: ``(m, 2)`` agent cells; ``switch``, ``target``: ``(m, 2)`` object cells.
    :param on: ``(m,)`` switch state; the target is only there (and seen) when it is on.
    :param size: room side in cells.
    """
    m = len(pos)
    ray = RAYS[None, :, :]  # (1, 8, 2)
    # distance to the wall: steps until a coordinate leaves [0, size)
    with np.errstate(divide="ignore"):
        to_wall = np.where(ray > 0, size - pos[:, None, :], np.where(ray < 0, pos[:, None, :] + 1, np.inf))
    dist = to_wall.min(axis=2)  # (m, 8)
    tag = np.full((m, len(RAYS)), WALL, dtype=np.int64)
    for obj, kind, present in (
        (switch, np.where(on, SWITCH_ON, SWITCH_OFF), np.ones(m, dtype=bool)),
        (target, np.full(m, TARGET), on),
    ):
        delta = (obj - pos)[:, None, :]  # (m, 1, 2)
        k = np.abs(delta).max(axis=2)  # steps along a ray that would reach the object
        on_ray = (k > 0) & (delta == ray * k[..., None]).all(axis=2) & present[:, None]
        closer = on_ray & (k < dist)
        dist = np.where(closer, k, dist)
        tag = np.where(closer, kind[:, None], tag)
    out = np.zeros((m, len(RAYS), RAY_FEATURES), dtype=np.float32)
    np.put_along_axis(out, tag[..., None], 1.0, axis=2)
    out[..., 4] = dist / size
    return out


class PyramidsLite(GridScene):
    """Find and press a switch, then find the target that appears (ML-Agents Pyramids, sparse reward)."""

    scene_name = "PyramidsLite"
    behavior_name = "Pyramids?team=0"
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 8,
        "max_steps": 250,
        "decision_period": 1,
        "stable_agent_ids": False,
        "room_size": 25,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {"room_size": "room side in cells (>= 5; larger = sparser)"}

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if not 5 <= params["room_size"] <= 256:
            raise UnityConfigurationError(
                f"PyramidsLite 'room_size' must be in [5, 256], got {params['room_size']}."
            )

    def _make_spec(self) -> BehaviorSpec:
        obs = ObservationSpec(
            (OBS_SIZE,), (DimensionProperty.NONE,), ObservationType.DEFAULT, f"VectorSensor_size{OBS_SIZE}"
        )
        return BehaviorSpec([obs], ActionSpec.create_discrete((5,)))

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        n = self.num_agents
        self._size = self.params["room_size"]
        self._pos = np.zeros((n, 2), dtype=np.int64)
        self._switch = np.zeros((n, 2), dtype=np.int64)
        self._target = np.zeros((n, 2), dtype=np.int64)
        self._on = np.zeros(n, dtype=bool)
        self._success = np.zeros(n, dtype=bool)

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        cells = distinct_cells(self._rng, idx.size, 2, self._size)
        self._pos[idx] = cells[:, 0]
        self._switch[idx] = cells[:, 1]
        self._on[idx] = False
        self._success[idx] = False

    def _on_episode_end(self, idx: np.ndarray, interrupted: np.ndarray) -> None:
        for ok, pressed in zip(self._success[idx], self._on[idx]):
            self.stat("Pyramids/SuccessRate", float(ok))
            self.stat("Pyramids/SwitchPressed", float(pressed))

    def _place_targets(self, idx: np.ndarray) -> None:
        """Put the target of agents ``idx`` (standing on their switch) on a random other cell."""
        cells = self._size * self._size
        here = self._pos[idx, 0] + self._size * self._pos[idx, 1]
        flat = self._rng.integers(0, cells - 1, size=idx.size)
        flat = flat + (flat >= here)  # skip the switch cell
        self._target[idx] = np.stack([flat % self._size, flat // self._size], axis=1)

    def _move(self) -> None:
        act = np.flatnonzero(self._active)
        self._reward[act] -= 0.001
        pos = moved(self._pos[act], self._disc_action[act, 0], self._size)
        self._pos[act] = pos
        was_on = self._on[act]
        done = was_on & (pos == self._target[act]).all(axis=1)
        pressed = ~was_on & (pos == self._switch[act]).all(axis=1)
        if pressed.any():
            self._on[act[pressed]] = True
            self._place_targets(act[pressed])
        if done.any():
            ended = act[done]
            self._reward[ended] = 2.0
            self._success[ended] = True
            self._finish(ended, False)
            self._start(ended)

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        pos, on = self._pos[idx], self._on[idx]
        obs = np.empty((idx.size, OBS_SIZE), dtype=np.float32)
        obs[:, SWITCH_STATE] = on
        obs[:, POS_X : POS_Y + 1] = pos / (self._size - 1)
        rays = cast_rays(pos, self._switch[idx], on, self._target[idx], self._size)
        obs[:, RAY_START:] = rays.reshape(idx.size, -1)
        return [obs]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """A searcher that acts from the observations only, and always succeeds within 8 * room_size steps.

        It walks the ring of cells one step inside the walls (from there every cell of the room
        is in line of sight of a north/east/south/west ray) and, as soon as such a ray sees what
        it looks for (the switch while it is off, then the target), walks along that ray. An
        object one diagonal step away (a room corner) is approached by a sideways step first.
        """
        self._check_behavior(behavior_name)
        obs = np.asarray(decision_steps.obs[0], dtype=np.float64)
        top = self._size - 1
        x, y = np.rint(obs[:, POS_X] * top).astype(np.int64), np.rint(obs[:, POS_Y] * top).astype(np.int64)
        rays = obs[:, RAY_START:].reshape(len(obs), len(RAYS), RAY_FEATURES)
        wanted = np.where(obs[:, SWITCH_STATE] > 0.5, TARGET, SWITCH_OFF)
        sees = rays[np.arange(len(obs)), :, wanted] > 0.5  # (m, 8)
        near = np.rint(rays[..., 4] * self._size) == 1

        # default: go to the ring one cell inside the walls, then walk it anticlockwise
        lo, hi = 1, top - 1
        action = np.full(len(obs), STAY, dtype=np.int32)
        off_ring = (x < lo) | (x > hi) | (y < lo) | (y > hi)
        action = np.where(x < lo, RIGHT, np.where(x > hi, LEFT, np.where(y < lo, UP, DOWN)))
        on_ring = ~off_ring & ((x == lo) | (x == hi) | (y == lo) | (y == hi))
        inside = ~off_ring & ~on_ring  # strictly inside the ring: head for its nearest side
        gaps = np.stack([x - lo, hi - x, y - lo, hi - y], axis=1)
        action = np.where(inside, np.array([LEFT, RIGHT, DOWN, UP])[gaps.argmin(axis=1)], action)
        ring = np.select(
            [(y == lo) & (x < hi), (x == hi) & (y < hi), (y == hi) & (x > lo), (x == lo) & (y > lo)],
            [RIGHT, UP, LEFT, DOWN],
            STAY,
        )
        action = np.where(on_ring, ring, action)
        # a diagonal neighbour: step sideways, then it is straight ahead
        for r in (1, 3, 5, 7):
            step = RIGHT if RAYS[r, 0] > 0 else LEFT
            action = np.where(sees[:, r] & near[:, r], step, action)
        for r, move in _CARDINAL_MOVES.items():
            action = np.where(sees[:, r], move, action)
        return ActionTuple(discrete=action.astype(np.int32)[:, None])
