"""A small two-behavior ``EmbeddedScene`` for the tests of the several-behaviors contract.

``Duel``: each area holds one hunter (``Hunter?team=0``: 2 continuous actions, one 3-float
observation) and two prey (``Prey?team=1``: discrete branches (3, 3) with a mask, two
observations of 4 and 2 floats). The specs differ on purpose, as StrikersVsGoalie's do. A prey
caught by its area's hunter ends its episode (-1; the hunter +1 and its episode goes on);
hunters end their episodes every ``hunt_length`` academy steps; the two prey of an area
share a group (id = area + 1) that collects a group reward while both are free.

The player serves it with ``tests/multi_behavior_scenes.py:make_duel``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)

from unity_sb3.scenes.base import EmbeddedScene

HUNTER, PREY = "Hunter?team=0", "Prey?team=1"
CATCH_DISTANCE = 0.3
STEP = 0.1


def _obs_spec(size: int, name: str) -> ObservationSpec:
    return ObservationSpec((size,), (DimensionProperty.NONE,), ObservationType.DEFAULT, name)


class Duel(EmbeddedScene):
    """A hunter (continuous) chases two prey (discrete, masked) in each area; for tests."""

    scene_name = "Duel"
    BEHAVIORS = (HUNTER, PREY)
    AREA_BEHAVIORS = (0, 1, 1)
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 2,
        "max_steps": 30,
        "decision_period": 2,
        "stable_agent_ids": False,
        "hunt_length": 7,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {"hunt_length": "academy steps of a hunter's episode"}

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        self._pos = np.zeros((self.total_agents, 2))
        self.area = np.arange(self.total_agents) // len(self.AREA_BEHAVIORS)
        self.hunter_of = self.area * len(self.AREA_BEHAVIORS)  # agent index of the area's hunter
        self._group_id[:] = np.where(self.agent_behavior == 1, self.area + 1, 0)

    def _make_specs(self) -> list[BehaviorSpec]:
        hunter = BehaviorSpec([_obs_spec(3, "hunter")], ActionSpec.create_continuous(2))
        prey = BehaviorSpec([_obs_spec(4, "prey"), _obs_spec(2, "area")], ActionSpec.create_discrete((3, 3)))
        return [hunter, prey]

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        self._pos[idx] = self._rng.uniform(-1, 1, (idx.size, 2))

    def _advance(self, max_substeps: int) -> int:
        act = np.flatnonzero(self._active)
        self._step_count[act] += 1
        hunters = act[self.agent_behavior[act] == 0]
        prey = act[self.agent_behavior[act] == 1]
        self._pos[hunters] += STEP * np.clip(self._cont_action[hunters, :2], -1, 1)
        self._pos[prey] += STEP * (self._disc_action[prey, :2] - 1)
        self._reward[prey] += 0.01
        both_free = np.bincount(self.area[prey], minlength=self.num_agents) == 2
        self._group_reward[prey[both_free[self.area[prey]]]] += 0.1
        dist = np.linalg.norm(self._pos[prey] - self._pos[self.hunter_of[prey]], axis=1)
        caught = prey[dist < CATCH_DISTANCE]
        self._reward[caught] -= 1.0
        np.add.at(self._reward, self.hunter_of[caught], 1.0)
        done = np.sort(
            np.concatenate([caught, hunters[self._step_count[hunters] >= self.params["hunt_length"]]])
        )
        self._finish(done, False)
        self._start(done)
        self._truncate_at_max_steps()
        return 1

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        if self.agent_behavior[idx[0]] == 0:
            prey = np.stack([idx + 1, idx + 2], axis=1)
            nearest = np.linalg.norm(self._pos[prey] - self._pos[idx, None], axis=2).min(axis=1)
            return [np.column_stack([self._pos[idx], nearest]).astype(np.float32)]
        own = np.column_stack([self._pos[idx], self._pos[self.hunter_of[idx]]]).astype(np.float32)
        return [own, np.column_stack([self.area[idx], self._step_count[idx]]).astype(np.float32)]

    def _action_mask(self, idx: np.ndarray) -> list[np.ndarray]:
        """Prey at x > 0.5 may not move right (branch 0, value 2)."""
        right = np.zeros((idx.size, 3), dtype=bool)
        right[:, 2] = self._pos[idx, 0] > 0.5
        return [right, np.zeros((idx.size, 3), dtype=bool)]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """Hunters run at nothing in particular; prey stay."""
        b = self._check_behavior(behavior_name)
        n = len(decision_steps)
        if b == 0:
            return ActionTuple(continuous=np.ones((n, 2), dtype=np.float32))
        return ActionTuple(discrete=np.ones((n, 2), dtype=np.int32))


def make_duel(seed: int = 0, **params: Any) -> Duel:
    """Factory for the stand-in player (``tests/multi_behavior_scenes.py:make_duel``)."""
    return Duel(seed=seed, **params)
