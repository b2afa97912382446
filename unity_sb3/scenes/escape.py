"""Escape: a cooperative group scene after ML-Agents' DungeonEscape.

Each room of ``room_size`` x ``room_size`` cells holds one group of ``group_size`` agents
(one ``SimpleMultiAgentGroup``, ``group_id`` = room number + 1), a guard (the dragon) and a
door on the top row. The door opens only with the key, and the key drops where the guard
was when an agent touches the guard: that agent is killed (it leaves the scene: one
``TerminalSteps`` entry, then nothing until its group resets) and the guard vanishes.

* Observations (vector, ``7 + 5 * group_size`` floats, positions divided by ``room_size - 1``):
  own x, y; has-key; own index in the group (one-hot); guard alive, dx, dy; key on the
  ground, dx, dy; door dx, dy; then per teammate (in group order, self excluded): alive, dx,
  dy, has-key. ``dx, dy`` are relative to the agent.
* Actions: one branch of 5: stay, up, down, left, right (a move into a wall does nothing).
* Rewards: none individually. An agent with the key on the door cell gives every living
  member ``group_reward`` +1 and ends the group episode (``EndGroupEpisode``). The group
  episode is interrupted after ``max_steps`` academy steps (``GroupEpisodeInterrupted``).
  A group with no living member restarts.
* The guard takes a random step with probability ``guard_move_prob`` per academy step
  (an environment parameter, sampled per room at each group episode start).
* Stats: ``Escape/SuccessRate`` per group episode.

As in DungeonEscape, the killed agent never receives the group reward: individual rewards
cannot teach the sacrifice, a centralised critic with posthumous credit (POCA) can.
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

from unity_sb3.scenes._grid import MOVES, STAY, GridScene, greedy_moves, moved
from unity_sb3.unity.errors import UnityConfigurationError


def _first_per_group(rows: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Of ``rows`` (sorted), the first one of each distinct value of ``groups``."""
    _, first = np.unique(groups, return_index=True)
    return rows[first]


class Escape(GridScene):
    """A group of agents escapes through a door whose key only a sacrificed agent can drop (DungeonEscape)."""

    scene_name = "Escape"
    behavior_name = "DungeonEscape?team=0"
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 3,
        "max_steps": 100,
        "decision_period": 1,
        "stable_agent_ids": False,
        "group_size": 3,
        "room_size": 7,
        "guard_move_prob": 0.25,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {
        "num_agents": "number of agents, a multiple of group_size (one room per group)",
        "max_steps": "academy steps before a group episode is interrupted; 0 = never",
        "group_size": "agents per group",
        "room_size": "room side in cells",
        "guard_move_prob": "probability that the guard takes a random step, per academy step",
    }
    DYNAMIC_PARAMS = ("guard_move_prob",)

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        gs, n = params["group_size"], params["num_agents"]
        if gs < 1 or n % gs:
            raise UnityConfigurationError(
                f"Escape 'num_agents' ({n}) must be a positive multiple of 'group_size' ({gs})."
            )
        if params["room_size"] * (params["room_size"] - 1) < gs + 1 or params["room_size"] < 2:
            raise UnityConfigurationError(
                f"Escape 'room_size' {params['room_size']} is too small for {gs} agents and a guard."
            )

    def _make_spec(self) -> BehaviorSpec:
        size = 7 + 5 * self.params["group_size"]
        obs = ObservationSpec(
            (size,), (DimensionProperty.NONE,), ObservationType.DEFAULT, f"VectorSensor_size{size}"
        )
        return BehaviorSpec([obs], ActionSpec.create_discrete((5,)))

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        n, gs = self.num_agents, self.params["group_size"]
        self._gs = gs
        self._size = self.params["room_size"]
        rooms = n // gs
        self._room_of = np.arange(n) // gs
        self._group_id[:] = self._room_of + 1
        self._pos = np.zeros((n, 2), dtype=np.int64)
        self._has_key = np.zeros(n, dtype=bool)
        self._guard = np.zeros((rooms, 2), dtype=np.int64)
        self._guard_alive = np.zeros(rooms, dtype=bool)
        self._key = np.zeros((rooms, 2), dtype=np.int64)
        self._key_down = np.zeros(rooms, dtype=bool)
        self._door = np.zeros((rooms, 2), dtype=np.int64)
        self._timer = np.zeros(rooms, dtype=np.int64)
        self._guard_prob = np.zeros(rooms)
        # teammates of each agent, in group order without the agent itself: (n, gs - 1)
        member = np.arange(gs)
        others = np.array([np.delete(member, k) for k in member]).reshape(gs, gs - 1)
        self._mates = (self._room_of * gs)[:, None] + others[np.arange(n) % gs]

    # ------------------------------------------------------------------ rooms
    def _on_episode_begin(self, idx: np.ndarray) -> None:
        rooms = np.unique(self._room_of[idx])
        m, size, gs = rooms.size, self._size, self._gs
        # guard and agents on distinct cells below the top row; the door on the top row
        flat = self._rng.random((m, size * (size - 1))).argsort(axis=1)[:, : gs + 1]
        cells = np.stack([flat % size, flat // size], axis=-1)
        self._guard[rooms] = cells[:, 0]
        members = (rooms[:, None] * gs + np.arange(gs)).ravel()
        self._pos[members] = cells[:, 1:].reshape(-1, 2)
        self._door[rooms, 0] = self._rng.integers(0, size, size=m)
        self._door[rooms, 1] = size - 1
        self._guard_alive[rooms] = True
        self._key_down[rooms] = False
        self._has_key[members] = False
        self._timer[rooms] = 0
        self._guard_prob[rooms] = self._param("guard_move_prob", m)

    def _restart_rooms(self, rooms: np.ndarray, success: bool, interrupted: bool) -> None:
        """End the group episodes of ``rooms`` (living members get a terminal step) and restart them."""
        if rooms.size == 0:
            return
        members = (rooms[:, None] * self._gs + np.arange(self._gs)).ravel()
        self._finish(members[self._active[members]], interrupted)
        for _ in range(rooms.size):
            self.stat("Escape/SuccessRate", float(success))
        self._start(members)

    def _move(self) -> None:
        size = self._size
        rooms = np.arange(len(self._guard))
        walk = self._guard_alive & (self._rng.random(rooms.size) < self._guard_prob)
        steps = self._rng.integers(1, 5, size=rooms.size)
        self._guard[walk] = moved(self._guard[walk], steps[walk], size)

        act = np.flatnonzero(self._active)
        self._pos[act] = moved(self._pos[act], self._disc_action[act, 0], size)
        room = self._room_of[act]
        on_guard = self._guard_alive[room] & (self._pos[act] == self._guard[room]).all(axis=1)
        victims = np.zeros(0, dtype=np.intp)
        if on_guard.any():  # the first agent to touch the guard dies; the key drops there
            victims = _first_per_group(act[on_guard], room[on_guard])
            vroom = self._room_of[victims]
            self._guard_alive[vroom] = False
            self._key_down[vroom] = True
            self._key[vroom] = self._guard[vroom]
            self._finish(victims, False)
        act = np.flatnonzero(self._active)
        room = self._room_of[act]
        on_key = self._key_down[room] & (self._pos[act] == self._key[room]).all(axis=1)
        if on_key.any():
            takers = _first_per_group(act[on_key], room[on_key])
            self._has_key[takers] = True
            self._key_down[self._room_of[takers]] = False
        winners = act[self._has_key[act] & (self._pos[act] == self._door[room]).all(axis=1)]
        won = np.unique(self._room_of[winners])
        if won.size:
            members = (won[:, None] * self._gs + np.arange(self._gs)).ravel()
            alive = members[self._active[members]]
            self._group_reward[alive] += 1.0  # AddGroupReward reaches registered (living) members
            self._restart_rooms(won, success=True, interrupted=False)
        if victims.size:
            alive_per_room = np.bincount(self._room_of[self._active], minlength=rooms.size)
            self._restart_rooms(np.flatnonzero(alive_per_room == 0), success=False, interrupted=False)

    def _tick(self, n: int) -> None:
        self._timer += n

    def _check_limits(self) -> None:
        if self.max_steps > 0:
            self._restart_rooms(
                np.flatnonzero(self._timer >= self.max_steps), success=False, interrupted=True
            )

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        m, gs, scale = idx.size, self._gs, 1.0 / max(self._size - 1, 1)
        room = self._room_of[idx]
        pos = self._pos[idx]
        obs = np.zeros((m, 7 + 5 * gs), dtype=np.float32)
        obs[:, 0:2] = pos * scale
        obs[:, 2] = self._has_key[idx]
        obs[np.arange(m), 3 + idx % gs] = 1.0
        c = 3 + gs
        obs[:, c] = self._guard_alive[room]
        obs[:, c + 1 : c + 3] = (self._guard[room] - pos) * scale * self._guard_alive[room, None]
        obs[:, c + 3] = self._key_down[room]
        obs[:, c + 4 : c + 6] = (self._key[room] - pos) * scale * self._key_down[room, None]
        obs[:, c + 6 : c + 8] = (self._door[room] - pos) * scale
        mates = self._mates[idx]  # (m, gs - 1)
        alive = self._active[mates]
        block = np.zeros((m, gs - 1, 4), dtype=np.float32)
        block[:, :, 0] = alive
        block[:, :, 1:3] = (self._pos[mates] - pos[:, None, :]) * scale * alive[:, :, None]
        block[:, :, 3] = self._has_key[mates] & alive
        obs[:, c + 8 :] = block.reshape(m, -1)
        return [obs]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """Coordinated plan read from the observations of each agent.

        The living agent closest to the guard (ties: lowest group index) walks into it; the
        others keep off the guard. The living agent closest to a dropped key fetches it; the
        key holder walks to the door.
        """
        self._check_behavior(behavior_name)
        obs = np.asarray(decision_steps.obs[0], dtype=np.float64)
        gs, cells = self._gs, self._size - 1
        m = len(obs)
        me = obs[:, 3 : 3 + gs].argmax(axis=1)
        c = 3 + gs
        mates = obs[:, c + 8 :].reshape(m, gs - 1, 4)
        rel_guard, rel_key, rel_door = (np.rint(obs[:, k : k + 2] * cells) for k in (c + 1, c + 4, c + 6))
        mate_pos = np.rint(mates[:, :, 1:3] * cells)
        mate_alive = mates[:, :, 0] > 0.5
        mate_index = np.arange(gs - 1)[None, :] + (np.arange(gs - 1)[None, :] >= me[:, None])

        def i_am_closest(rel_target: np.ndarray) -> np.ndarray:
            mine = np.abs(rel_target).sum(axis=1)
            theirs = np.abs(rel_target[:, None, :] - mate_pos).sum(axis=2)
            beaten = mate_alive & (
                (theirs < mine[:, None]) | ((theirs == mine[:, None]) & (mate_index < me[:, None]))
            )
            return ~beaten.any(axis=1)

        guard_alive, key_down, have_key = obs[:, c] > 0.5, obs[:, c + 3] > 0.5, obs[:, 2] > 0.5
        to_door = greedy_moves(rel_door)
        action = np.full(m, STAY, dtype=np.int32)
        action = np.where(key_down & i_am_closest(rel_key), greedy_moves(rel_key), action)
        sacrifice = guard_alive & i_am_closest(rel_guard)
        action = np.where(sacrifice, greedy_moves(rel_guard), action)
        # the others walk to the door, but never onto the guard
        bystander = guard_alive & ~sacrifice
        safe_door = np.where((MOVES[to_door] == rel_guard).all(axis=1), STAY, to_door)
        action = np.where(bystander, safe_door, action)
        action = np.where(have_key, to_door, action)
        return ActionTuple(discrete=action.astype(np.int32)[:, None])
