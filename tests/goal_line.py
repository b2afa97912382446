"""ML-Agents' ``SimpleEnvironment`` (``mlagents/trainers/tests/simple_test_envs.py``) as a ``BaseEnv``,
for Unity's learning tests (``test_simple_rl.py``) at Unity's budgets and thresholds.

One agent on a line: its position starts at 0 and moves by the action, clamped to
``[-step_size, step_size]``; the observation is the goal (+1 or -1, drawn per episode). The episode
ends when the position reaches +-1, with reward ``SUCCESS_REWARD * position * goal``; every other
step costs ``TIME_PENALTY``. Continuous: one action; discrete: one branch of 2 (1 = +step, 0 = -step).
"""

from __future__ import annotations

import random

import numpy as np
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BaseEnv,
    BehaviorMapping,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
    TerminalSteps,
)

BEHAVIOR = "RealFakeBrain"
TIME_PENALTY = 0.01


class GoalLine(BaseEnv):
    """Unity's ``SimpleEnvironment`` with one vector observation and one agent.

    :param discrete: one discrete branch of 2 instead of one continuous action.
    :param step_size: the largest move per step (Unity's GAIL test uses 0.2).
    :param seed: seeds the goal draws.
    """

    def __init__(self, discrete: bool = False, step_size: float = 0.2, seed: int = 0) -> None:
        self.discrete = discrete
        self.step_size = step_size
        self.success_reward = 1.0 + (int(1.0 / step_size) + 1) * TIME_PENALTY
        action_spec = ActionSpec.create_discrete((2,)) if discrete else ActionSpec.create_continuous(1)
        obs = ObservationSpec((1,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "goal")
        self.spec = BehaviorSpec([obs], action_spec)
        self.random = random.Random(seed)
        self.agent_id = 0
        self.final_rewards: list[float] = []
        self._action: ActionTuple | None = None
        self._reset_agent()
        self._steps = self._batched(False, 0.0)

    @property
    def behavior_specs(self) -> BehaviorMapping:
        return BehaviorMapping({BEHAVIOR: self.spec})

    def _reset_agent(self) -> None:
        self.goal = self.random.choice([-1, 1])
        self.position = 0.0
        self.episode_reward = 0.0
        self.agent_id += 1

    def _obs(self) -> list[np.ndarray]:
        return [np.full((1, 1), self.goal, dtype=np.float32)]

    def _mask(self) -> list[np.ndarray] | None:
        return [np.zeros((1, 2), dtype=bool)] if self.discrete else None

    def _batched(self, done: bool, reward: float) -> tuple[DecisionSteps, TerminalSteps]:
        obs, ids = self._obs(), np.array([self.agent_id], dtype=np.int32)
        rewards, no_group = (
            np.array([reward], dtype=np.float32),
            (np.zeros(1, np.int32), np.zeros(1, np.float32)),
        )
        if not done:
            return DecisionSteps(obs, rewards, ids, self._mask(), *no_group), TerminalSteps.empty(self.spec)
        self.final_rewards.append(self.episode_reward)
        terminal = TerminalSteps(obs, rewards, np.array([False]), ids, *no_group)
        self._reset_agent()
        fresh_ids = np.array([self.agent_id], np.int32)
        fresh = DecisionSteps(self._obs(), np.zeros(1, np.float32), fresh_ids, self._mask(), *no_group)
        return fresh, terminal

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        self._action = action

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        self._action = action

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        return self._steps

    def step(self) -> None:
        assert self._action is not None
        if self.discrete:
            delta = 1.0 if int(self._action.discrete[0, 0]) else -1.0
        else:
            delta = float(self._action.continuous[0, 0])
        delta = min(max(delta, -self.step_size), self.step_size)
        self.position = min(max(self.position + delta, -1.0), 1.0)
        done = self.position >= 1.0 or self.position <= -1.0
        reward = self.success_reward * self.position * self.goal if done else -TIME_PENALTY
        self.episode_reward += reward
        self._steps = self._batched(done, reward)

    def reset(self) -> None:
        self._reset_agent()
        self._steps = self._batched(False, 0.0)

    def close(self) -> None:
        pass

    def expert(self, steps: DecisionSteps) -> ActionTuple:
        """Unity's ``RecordEnvironment.solve``: move towards the goal."""
        goal = float(np.asarray(steps.obs[0]).reshape(-1)[0]) if len(steps) else 1.0
        if self.discrete:
            return ActionTuple(discrete=np.array([[1 if goal > 0 else 0]] * len(steps), dtype=np.int32))
        return ActionTuple(continuous=np.full((len(steps), 1), goal, dtype=np.float32))
