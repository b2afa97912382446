"""HybridLine: ML-Agents' hybrid-action learning test scene (``SimpleEnvironment`` with ``action_sizes``).

Unity ships no example scene with hybrid actions; its own learning tests train them on
``mlagents/trainers/tests/simple_test_envs.py``'s ``SimpleEnvironment`` (``test_hybrid_ppo``:
``action_sizes=(1, 1)``, ``step_size=0.8``, success when the mean reward reaches 0.9). This is
that scene, vectorised over ``num_agents`` independent agents:

* Observation (one vector of 1): the episode's goal, -1 or +1, drawn at random.
* Actions: ``continuous_size`` continuous values and ``discrete_size`` branches of 2. Each action
  moves its own position on [-1, 1]: a continuous value by itself, branch value 1 by +1 and 0 by
  -1, every move clamped to ``[-step_size, step_size]`` and every position to [-1, 1]. The agent
  must pick a discrete direction and a continuous amount that both lead to the goal's side.
* Reward: -0.01 per step until every position sits at -1 or +1; then the episode ends with
  ``1.06 * mean(position * goal)`` instead (Unity's ``SUCCESS_REWARD``). The best policy reaches
  the goal's side in ``ceil(1 / step_size)`` steps: 1.05 per episode with ``step_size`` 0.8.
* No action is masked (Unity's scene sends all-allowed masks).
* Departure: Unity's scene has no step limit; here ``max_steps`` (default 100) interrupts an
  episode whose continuous position never reaches an end.
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

#: Unity's constants: the time penalty and the success reward (1 + MIN_STEPS * TIME_PENALTY for its STEP_SIZE 0.2)
TIME_PENALTY = np.float32(0.01)
SUCCESS_REWARD = np.float32(1.0 + 6 * 0.01)


class HybridLine(GridScene):
    """Reach the goal's end of a line with a discrete direction and a continuous amount (hybrid actions)."""

    scene_name = "HybridLine"
    behavior_name = "HybridLine?team=0"
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 8,
        "max_steps": 100,
        "decision_period": 1,
        "stable_agent_ids": False,
        "continuous_size": 1,
        "discrete_size": 1,
        "step_size": 0.8,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {
        "continuous_size": "continuous actions, each moving its own position",
        "discrete_size": "discrete branches of 2 (0 = left, 1 = right), each moving its own position",
        "step_size": "largest move of one action per step",
    }

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        c, k = params["continuous_size"], params["discrete_size"]
        if int(c) != c or int(k) != k or c < 0 or k < 0 or c + k < 1:
            raise UnityConfigurationError(
                f"HybridLine needs whole continuous_size and discrete_size >= 0 with at least one action, got {c}, {k}."
            )
        if not 0 < float(params["step_size"]) <= 1:
            raise UnityConfigurationError(
                f"HybridLine's step_size must lie in (0, 1], got {params['step_size']}."
            )

    def _make_spec(self) -> BehaviorSpec:
        obs = ObservationSpec((1,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "Goal")
        c, k = int(self.params["continuous_size"]), int(self.params["discrete_size"])
        return BehaviorSpec([obs], ActionSpec(c, tuple(2 for _ in range(k))))

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        self._c, self._k = int(self.params["continuous_size"]), int(self.params["discrete_size"])
        self._goal = np.ones(self.num_agents, dtype=np.float32)
        self._pos = np.zeros((self.num_agents, self._c + self._k), dtype=np.float32)

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        self._goal[idx] = self._rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=idx.size)
        self._pos[idx] = 0.0

    def _move(self) -> None:
        act = np.flatnonzero(self._active)
        step = np.float32(self.params["step_size"])
        deltas = np.concatenate(
            [self._cont_action[act, : self._c], np.where(self._disc_action[act, : self._k] > 0, 1.0, -1.0)],
            axis=1,
        ).astype(np.float32)
        pos = np.clip(self._pos[act] + np.clip(deltas, -step, step), -1.0, 1.0)
        self._pos[act] = pos
        done = np.all(np.abs(pos) >= 1.0, axis=1)
        self._reward[act] += np.where(
            done, SUCCESS_REWARD * (pos * self._goal[act, None]).mean(axis=1), -TIME_PENALTY
        ).astype(np.float32)
        ended = act[done]
        if ended.size:
            self._finish(ended, False)
            self._start(ended)

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        return [self._goal[idx, None].copy()]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """The best policy: every action toward the observed goal (1.05 per episode with step_size 0.8)."""
        self._check_behavior(behavior_name)
        goal = np.asarray(decision_steps.obs[0], dtype=np.float32).reshape(-1, 1)
        n = len(goal)
        return ActionTuple(
            continuous=np.repeat(goal, self._c, axis=1).astype(np.float32),
            discrete=np.repeat(goal > 0, self._k, axis=1).astype(np.int32).reshape(n, self._k),
        )
