"""Basic: ML-Agents' Basic example (``BasicController``, ``BasicSensorComponent``, ``BasicActuatorComponent``).

An agent stands on a line of cells at position 10, between a small goal at 7 and a large
goal at 17, and moves one cell per decision.

* Observation (``BasicSensor``, named "Basic"): 20 floats, a one-hot of the position
  (``output[position] = 1``, ``BasicController.k_Extents`` = 20).
* Actions (``BasicActuator``): one branch of 3: 0 = stay, 1 = left (-1), 2 = right (+1).
  The position is clamped to [0, 20] (``k_MinPosition``, ``k_MaxPosition``).
* Reward (``MoveDirection``): -0.01 per move; +0.1 and the episode ends on reaching the small
  goal, +1 and the episode ends on reaching the large goal. Walking straight to the large goal
  scores 7 x -0.01 + 1 = 0.93, Unity's benchmark for this scene.
* Episodes: the terminal observation shows the goal cell (Unity collects it in ``EndEpisode``);
  then Unity reloads the scene, so a new agent (a new agent id) starts at 10 and asks for its
  first decision; here it does so in the same step as the terminal one. The agent has no
  ``MaxStep`` (``max_steps`` = 0) and ``BasicController`` requests a decision every academy
  step (``decision_period`` = 1). The scene has one agent; ``num_agents`` > 1 gives independent
  copies of it, as several Unity instances would.
* Python's reset starts from the scene as loaded (position 10). Unity's own reset leaves the
  agent where it stands (``Agent.OnEpisodeBegin`` is not overridden); so does an episode
  interrupted at ``max_steps`` here, as in Unity.
* No stats: Basic records none.
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

#: ``BasicController`` constants: positions of the line, the start and the goals.
MIN_POSITION, MAX_POSITION = 0, 20
EXTENTS = MAX_POSITION - MIN_POSITION  # observation size
START, SMALL_GOAL, LARGE_GOAL = 10, 7, 17
#: Rewards as Unity adds them (``float`` in C#: float32 arithmetic).
STEP_REWARD, SMALL_REWARD, LARGE_REWARD = np.float32(-0.01), np.float32(0.1), np.float32(1.0)
#: Discrete action -> direction (``BasicActuator.OnActionReceived``).
STAY, LEFT, RIGHT = range(3)
DIRECTIONS = np.array([0, -1, 1], dtype=np.int64)


class Basic(GridScene):
    """Walk a line to the small (+0.1) or the large (+1) goal (ML-Agents Basic); one-hot of 20, 3 actions."""

    scene_name = "Basic"
    behavior_name = "Basic?team=0"
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 1,
        "max_steps": 0,
        "decision_period": 1,
        "stable_agent_ids": False,
    }

    def _make_spec(self) -> BehaviorSpec:
        obs = ObservationSpec((EXTENTS,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "Basic")
        return BehaviorSpec([obs], ActionSpec.create_discrete((3,)))

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        n = self.num_agents
        self._pos = np.full(n, START, dtype=np.int64)
        # agents whose next episode starts from a freshly loaded scene (reset, or a goal reached)
        self._reload = np.ones(n, dtype=bool)

    def reset(self) -> None:
        self._reload[:] = True
        super().reset()

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        fresh = idx[self._reload[idx]]
        self._pos[fresh] = START
        self._reload[idx] = False

    def _move(self) -> None:
        act = np.flatnonzero(self._active)
        pos = np.clip(self._pos[act] + DIRECTIONS[self._disc_action[act, 0]], MIN_POSITION, MAX_POSITION)
        self._pos[act] = pos
        self._reward[act] += STEP_REWARD
        small, large = act[pos == SMALL_GOAL], act[pos == LARGE_GOAL]
        self._reward[small] += SMALL_REWARD
        self._reward[large] += LARGE_REWARD
        ended = np.sort(np.concatenate([small, large]))
        if ended.size:
            self._finish(ended, False)  # observed at the goal, before the reload
            self._reload[ended] = True
            self._start(ended)

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        obs = np.zeros((idx.size, EXTENTS), dtype=np.float32)
        obs[np.arange(idx.size), self._pos[idx]] = 1.0
        return [obs]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """The optimal policy: always right, to the large goal (0.93 per episode from the start)."""
        self._check_behavior(behavior_name)
        return ActionTuple(discrete=np.full((len(decision_steps), 1), RIGHT, dtype=np.int32))
