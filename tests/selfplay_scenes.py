"""A symmetric two-team ``EmbeddedScene`` for the self-play tests.

``Showdown``: each area holds two agents of one behavior on opposite teams
(``Showdown?team=0`` and ``Showdown?team=1``, one spec: a 2-float observation, one continuous
action). For ``rounds`` decisions each agent adds its action to its score; then both episodes end
together, the higher score winning +1 and the other -1 (0 each on a tie). Pushing the action up
wins, so a learner beats its older snapshots and its ELO rises.
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

TEAM0, TEAM1 = "Showdown?team=0", "Showdown?team=1"


class Showdown(EmbeddedScene):
    """Two agents per area, one per team, race to the higher summed action; for tests."""

    scene_name = "Showdown"
    BEHAVIORS = (TEAM0, TEAM1)
    AREA_BEHAVIORS = (0, 1)
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 2,
        "max_steps": 0,
        "decision_period": 1,
        "stable_agent_ids": False,
        "rounds": 4,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {"rounds": "decisions of one game"}

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        self.score = np.zeros(self.total_agents)
        self.games = 0

    def _make_specs(self) -> list[BehaviorSpec]:
        obs = ObservationSpec((2,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "showdown")
        spec = BehaviorSpec([obs], ActionSpec.create_continuous(1))
        return [spec, spec]

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        self.score[idx] = 0.0

    def _advance(self, max_substeps: int) -> int:
        act = np.flatnonzero(self._active)
        self._step_count[act] += 1
        self.score[act] += np.clip(self._cont_action[act, 0], -1, 1)
        ended = act[self._step_count[act] >= self.params["rounds"]]
        first = ended[ended % 2 == 0]  # the team-0 agent of each finished area; its rival is +1
        diff = np.sign(self.score[first] - self.score[first + 1])
        self._reward[first] += diff
        self._reward[first + 1] -= diff
        self.games += first.size
        self._finish(ended, False)
        self._start(ended)
        return 1

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        progress = self._step_count[idx] / self.params["rounds"]
        return [np.column_stack([progress, np.ones(idx.size)]).astype(np.float32)]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """Always push as hard as allowed."""
        self._check_behavior(behavior_name)
        return ActionTuple(continuous=np.ones((len(decision_steps), 1), dtype=np.float32))
