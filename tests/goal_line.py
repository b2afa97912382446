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
VIS_OBS_SIZE = (3, 20, 20)  # Unity's simple_test_envs constants
VAR_LEN_SIZE = (10, 5)
#: Unity's ``SUCCESS_REWARD``: from its module constant ``STEP_SIZE`` (0.2), whatever an env's step size
SUCCESS_REWARD = 1.0 + (int(1.0 / 0.2) + 1) * TIME_PENALTY


def observation_specs(
    num_vector: int,
    num_visual: int,
    num_var_len: int,
    goal_indices: tuple[int, ...],
    plain: DimensionProperty = DimensionProperty.UNSPECIFIED,
    vis_obs_size: tuple[int, int, int] = VIS_OBS_SIZE,
) -> list[ObservationSpec]:
    """Unity's ``create_observation_specs_with_shapes``: vectors, then images, then entity lists.

    The default (one vector of size 1, no goal) is the single ``"goal"`` observation with dimension
    property ``plain``, as the scenes had it before they took the grid.
    """
    if (num_vector, num_visual, num_var_len) == (1, 0, 0) and not goal_indices:
        return [ObservationSpec((1,), (plain,), ObservationType.DEFAULT, "goal")]
    shapes = [(1,)] * num_vector + [tuple(vis_obs_size)] * num_visual + [VAR_LEN_SIZE] * num_var_len
    specs = []
    for i, shape in enumerate(shapes):
        dims = (
            (DimensionProperty.VARIABLE_SIZE, DimensionProperty.NONE)
            if len(shape) == 2
            else (DimensionProperty.UNSPECIFIED,) * len(shape)
        )
        kind = ObservationType.GOAL_SIGNAL if i in goal_indices else ObservationType.DEFAULT
        specs.append(ObservationSpec(shape, dims, kind, f"observation {i} with shape {shape}"))
    return specs


def filled(specs: list[ObservationSpec], values: list[float]) -> list[np.ndarray]:
    """Every observation of each agent filled with its value: one array ``(agents, *shape)`` per spec."""
    column = np.asarray(values, dtype=np.float32)
    return [
        np.ones((len(values), *spec.shape), np.float32) * column.reshape(-1, *[1] * len(spec.shape))
        for spec in specs
    ]


class GoalLine(BaseEnv):
    """Unity's ``SimpleEnvironment`` with one agent, and its ``MemoryEnvironment`` (``show_steps=2``).

    Every observation shows the goal: by default one vector of size 1 (``DimensionProperty.NONE``);
    with ``num_vector``, ``num_visual``, ``num_var_len`` or ``goal_indices`` the observations of
    Unity's ``create_observation_specs_with_shapes`` instead, filled with the goal.

    With ``action_sizes=(c, d)`` (Unity's hybrid tests) each of the ``c`` continuous actions and ``d``
    branches of 2 moves its own position; the episode ends when every position is at an end, with the
    mean of ``SUCCESS_REWARD * position * goal``. (Unity sends one all-allowed mask array of
    ``2 d`` columns; here one per branch, as ``mlagents_envs`` documents masks.)

    :param discrete: one discrete branch of 2 instead of one continuous action.
    :param step_size: the largest move per step (Unity's GAIL test uses 0.2).
    :param seed: seeds the goal draws.
    :param show_steps: ``MemoryEnvironment``: the goal is shown while the episode's move count is at
        most this (Unity: 2; each action of a step counts as a move, as Unity's ``step_count``), then 0.
    :param num_vector: vector observations of size 1.
    :param num_visual: images of shape ``vis_obs_size`` (channels first; Unity's default ``VIS_OBS_SIZE``).
    :param num_var_len: entity lists of shape ``VAR_LEN_SIZE`` (``VARIABLE_SIZE``, every entity present).
    :param goal_indices: observations that are goal signals (``ObservationType.GOAL_SIGNAL``).
    :param action_sizes: ``(continuous, branches)`` instead of ``discrete``; each moves its own position.
    :param vis_obs_size: the images' shape (Unity's ``test_visual_advanced_*``: (3, 36, 36), (5, 5, 5)).
    :param first_agent_id: the first episode's agent id (each episode takes the next).
    """

    def __init__(
        self,
        discrete: bool = False,
        step_size: float = 0.2,
        seed: int = 0,
        show_steps: int | None = None,
        num_vector: int = 1,
        num_visual: int = 0,
        num_var_len: int = 0,
        goal_indices: tuple[int, ...] = (),
        action_sizes: tuple[int, int] | None = None,
        vis_obs_size: tuple[int, int, int] = VIS_OBS_SIZE,
        first_agent_id: int = 1,
    ) -> None:
        self.continuous_size, self.discrete_size = action_sizes or ((0, 1) if discrete else (1, 0))
        self.discrete = self.discrete_size > 0
        self.step_size = step_size
        self.show_steps = show_steps
        self.success_reward = SUCCESS_REWARD
        action_spec = ActionSpec(self.continuous_size, (2,) * self.discrete_size)
        specs = observation_specs(
            num_vector, num_visual, num_var_len, goal_indices, DimensionProperty.NONE, vis_obs_size
        )
        self.spec = BehaviorSpec(specs, action_spec)
        self.random = random.Random(seed)
        self.agent_id = first_agent_id - 1
        self.final_rewards: list[float] = []
        self._action: ActionTuple | None = None
        self._reset_agent()
        self._steps = self._batched(False, 0.0)

    @property
    def behavior_specs(self) -> BehaviorMapping:
        return BehaviorMapping({BEHAVIOR: self.spec})

    def _reset_agent(self) -> None:
        self.goal = self.random.choice([-1, 1])
        self.positions = [0.0] * (self.continuous_size + self.discrete_size)
        self.moves = 0
        self.episode_reward = 0.0
        self.agent_id += 1

    def _obs(self) -> list[np.ndarray]:
        shown = self.goal if self.show_steps is None or self.moves <= self.show_steps else 0
        return filled(list(self.spec.observation_specs), [shown])

    def _mask(self) -> list[np.ndarray] | None:
        return [np.zeros((1, 2), dtype=bool)] * self.discrete_size if self.discrete else None

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
        deltas = [float(v) for v in self._action.continuous[0, : self.continuous_size]]
        deltas += [1.0 if int(v) else -1.0 for v in self._action.discrete[0, : self.discrete_size]]
        for i, delta in enumerate(deltas):
            delta = min(max(delta, -self.step_size), self.step_size)
            self.positions[i] = min(max(self.positions[i] + delta, -1.0), 1.0)
            self.moves += 1
        done = all(p >= 1.0 or p <= -1.0 for p in self.positions)
        reward = -TIME_PENALTY
        if done:
            reward = 0.0
            for p in self.positions:  # Unity's sum, in its order
                reward += self.success_reward * p * self.goal / len(self.positions)
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
        n = len(steps)
        return ActionTuple(
            continuous=np.full((n, self.continuous_size), goal, dtype=np.float32),
            discrete=np.full((n, self.discrete_size), 1 if goal > 0 else 0, dtype=np.int32),
        )


TEAM_BEHAVIOR = "1D"
#: the goal of every agent comes from its own ``random.Random`` seeded with this string (Unity's
#: ``SimpleEnvironment`` seeds with the ``str`` of its constructor arguments; with the defaults of
#: ``test_simple_poca`` every agent draws the same sequence)
_UNITY_SEED = "(['{name}'], {step_size}, {num_visual}, {num_vector}, {num_var_len}, {vis_obs_size}, 1, (10, 5), {action_sizes})"


class GoalLineTeam(BaseEnv):
    """Unity's ``MultiAgentEnvironment`` (``simple_test_envs.py``, used by ``test_simple_poca``): a team of
    ``num_agents`` :class:`GoalLine` agents in one group, with the group reward.

    Each agent walks its own line towards its own goal (the observation, +-1). An agent that reaches
    an end stops (its episode ends with reward ``min(-TIME_PENALTY, its end reward)`` and no group
    reward) while the others go on; when the last one arrives, the team episode ends: that agent's
    terminal step has reward 0 and the group reward ``success_reward * position * goal`` of *its*
    end, and all agents start again. Quirks kept as Unity has them, so that both trainers see the
    same stream: agent ids are the agent's index in every episode (reused), the group id is 1,
    every agent's goal comes from its own generator seeded alike (see ``seed``), one agent's
    episode restarts with a new goal when it ends (not when the team does), and when the team
    episode ends on an agent with a lower index, the agents after it in the same step take one more
    step with their last action (from 0: the team reset only marks them alive again).

    ``final_rewards`` lists every end reward (one per agent per team episode, the last agent's
    being the group reward) as Unity's ``final_rewards[name]``; ``agent_steps`` counts the moves made.

    :param num_agents: agents in the team (Unity's test: 2).
    :param discrete: one discrete branch of 2 (Unity's ``action_sizes=(0, 1)``) instead of one
        continuous action (``(1, 0)``).
    :param step_size: the largest move per step.
    :param seed: seeds every agent's goal draws; ``None``: Unity's seed string for these settings.
    :param num_vector: ``num_visual``, ``num_var_len``, ``goal_indices``, ``vis_obs_size``: the
        observations, as :class:`GoalLine`'s (Unity's ``test_var_len_obs_and_goal_poca``).
    """

    def __init__(
        self,
        num_agents: int = 2,
        discrete: bool = False,
        step_size: float = 0.2,
        seed: int | None = None,
        num_vector: int = 1,
        num_visual: int = 0,
        num_var_len: int = 0,
        goal_indices: tuple[int, ...] = (),
        vis_obs_size: tuple[int, int, int] = VIS_OBS_SIZE,
    ) -> None:
        self.num_agents = num_agents
        self.discrete = discrete
        self.step_size = step_size
        self.success_reward = SUCCESS_REWARD
        action_spec = ActionSpec.create_discrete((2,)) if discrete else ActionSpec.create_continuous(1)
        self.spec = BehaviorSpec(
            observation_specs(num_vector, num_visual, num_var_len, goal_indices, vis_obs_size=vis_obs_size),
            action_spec,
        )
        sizes = (0, 1) if discrete else (1, 0)
        key = (
            _UNITY_SEED.format(
                name=TEAM_BEHAVIOR,
                step_size=step_size,
                num_visual=num_visual,
                num_vector=num_vector,
                num_var_len=num_var_len,
                vis_obs_size=tuple(vis_obs_size),
                action_sizes=sizes,
            )
            if seed is None
            else seed
        )
        self.randoms = [random.Random(key) for _ in range(num_agents)]
        for rng in self.randoms:  # Unity draws twice in the constructor, once in its reset
            rng.choice([-1, 1])
            rng.choice([-1, 1])
        self.goals = [rng.choice([-1, 1]) for rng in self.randoms]
        self.positions = [0.0] * num_agents
        self.dones = [False] * num_agents
        self.just_died: set[int] = set()
        self.actions: list[float | None] = [None] * num_agents
        # per agent: (reward of its pending decision, its terminal (obs, reward, group_reward) or None)
        self.pending: list[tuple[float, tuple[float, float, float] | None]] = [(0.0, None)] * num_agents
        self.final_rewards: list[float] = []
        self.agent_steps = 0

    @property
    def behavior_specs(self) -> BehaviorMapping:
        return BehaviorMapping({TEAM_BEHAVIOR: self.spec})

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        row = 0
        for i in range(self.num_agents):
            if not self.dones[i]:
                if self.discrete:
                    self.actions[i] = 1.0 if int(action.discrete[row, 0]) else -1.0
                else:
                    self.actions[i] = float(action.continuous[row, 0])
                row += 1

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        pass  # as Unity's

    def _move(self, i: int) -> bool:
        action = self.actions[i]
        assert action is not None
        delta = min(max(action, -self.step_size), self.step_size)
        self.positions[i] = min(max(self.positions[i] + delta, -1.0), 1.0)
        self.agent_steps += 1
        return self.positions[i] >= 1.0 or self.positions[i] <= -1.0

    def _end_agent(self, i: int, reward: float, group_reward: float) -> None:
        """Agent ``i``'s episode ends: its terminal step is kept, a new goal drawn, position 0."""
        self.pending[i] = (0.0, (float(self.goals[i]), reward, group_reward))
        self.goals[i] = self.randoms[i].choice([-1, 1])
        self.positions[i] = 0.0

    def step(self) -> None:
        for i in range(self.num_agents):
            if self.dones[i]:
                continue
            done = self._move(i)
            reward = self.success_reward * self.positions[i] * self.goals[i] if done else -TIME_PENALTY
            self.dones[i] = done
            if done:
                self.just_died.add(i)
            if all(self.dones):
                self._end_agent(i, 0.0, reward)
                self.final_rewards.append(reward)
                self.dones = [False] * self.num_agents
            elif done:
                self._end_agent(i, min(-TIME_PENALTY, reward), 0.0)
                self.final_rewards.append(reward)
            else:
                self.pending[i] = (reward, None)

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        alive = [i for i in range(self.num_agents) if not self.dones[i]]
        ended = [i for i in range(self.num_agents) if self.pending[i][1] is not None and i in self.just_died]
        self.just_died.difference_update(ended)
        terminals = [self.pending[i][1] for i in ended]
        specs = list(self.spec.observation_specs)
        decision = DecisionSteps(
            filled(specs, [self.goals[i] for i in alive]),
            np.array([self.pending[i][0] for i in alive], dtype=np.float32),
            np.array(alive, dtype=np.int32),
            [np.zeros((len(alive), 2), dtype=bool)] if self.discrete else None,
            np.ones(len(alive), dtype=np.int32),
            np.zeros(len(alive), dtype=np.float32),
        )
        terminal = TerminalSteps(
            # Unity's sends no observation array at all when no agent ended
            filled(specs, [t[0] for t in terminals]) if ended else [],
            np.array([t[1] for t in terminals], dtype=np.float32),
            np.zeros(len(ended), dtype=bool),
            np.array(ended, dtype=np.int32),
            np.ones(len(ended), dtype=np.int32),
            np.array([t[2] for t in terminals], dtype=np.float32),
        )
        return decision, terminal

    def reset(self) -> None:
        self.dones = [False] * self.num_agents  # as Unity's: positions and goals stay

    def close(self) -> None:
        pass


class GoalLines(BaseEnv):
    """Unity's ``SimpleEnvironment`` with several behavior names (its self-play tests
    ``test_simple_ghost`` / ``test_simple_asymm_ghost``): one :class:`GoalLine` agent per behavior,
    each on its own line with its own goals, all stepped together; nothing passes between them.

    :param names: the behavior names, e.g. ``["1D?team=0", "1D?team=1"]``.
    :param seed: the first line's goal seed (the next lines take the next seeds).
    :param line_kwargs: every line's :class:`GoalLine` arguments (``action_sizes``, ``step_size``, ...).
    """

    def __init__(self, names: list[str], seed: int = 0, **line_kwargs) -> None:
        self.lines = {
            name: GoalLine(seed=seed + i, first_agent_id=1 + 1_000_000 * i, **line_kwargs)
            for i, name in enumerate(names)
        }

    @property
    def final_rewards(self) -> dict[str, list[float]]:
        """Each behavior's episode rewards, in order (Unity's ``final_rewards``)."""
        return {name: line.final_rewards for name, line in self.lines.items()}

    @property
    def behavior_specs(self) -> BehaviorMapping:
        return BehaviorMapping({name: line.spec for name, line in self.lines.items()})

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        self.lines[behavior_name].set_actions(BEHAVIOR, action)

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        self.lines[behavior_name].set_actions(BEHAVIOR, action)

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        return self.lines[behavior_name].get_steps(BEHAVIOR)

    def step(self) -> None:
        for line in self.lines.values():
            if line._action is None:  # nobody answered this behavior: Unity applies zeros
                line.set_actions(BEHAVIOR, line.spec.action_spec.empty_action(1))
            line.step()

    def reset(self) -> None:
        for line in self.lines.values():
            line.reset()

    def close(self) -> None:
        pass
