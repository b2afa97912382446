"""A small scripted ``BaseEnv`` that reproduces the awkward cases of a real Unity scene.

Every agent follows a :class:`ScriptedAgent` script: a decision period and phase, episode
length, how many episodes it lives, a respawn delay (0 = terminal and decision in the same
step), interruption, a new id every episode, group id and per-step (group) rewards. The env
records every action it receives per agent, every request it made, and every request left
unanswered, so tests can assert that a wrapper never sends an unrequested action and never
leaves a request unanswered.

Observation layout (vector, ``vector_size >= 4``): ``[agent_index, episode, step_in_episode,
unity_step, 0...]`` so a test can tell which scripted agent (stable index ``k``, whatever its
current id) a wrapper slot is showing. The optional visual observation is an ``(H, W, C)``
image filled with ``(k + 1) / 100`` plus ``unity_step / 1000`` in channel 0.

Rewards follow Unity: an agent collects ``reward`` per Unity step of its episode and reports
the sum at its next decision or terminal step.

Usage::

    env = ScriptedEnv([ScriptedAgent(period=2), ScriptedAgent(period=2, start=1)])
    env = ScriptedEnv({"A?team=0": ScriptedBehavior([...]), "B?team=1": ScriptedBehavior([...])})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import unity_sb3.unity  # noqa: F401  (protobuf compat before mlagents_envs)

from mlagents_envs.base_env import (  # isort: skip
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
from mlagents_envs.exception import UnityActionException, UnityCommunicatorStoppedException  # isort: skip

DEFAULT_BEHAVIOR = "Scripted?team=0"


@dataclass
class ScriptedAgent:
    """The script of one agent.

    :param period: decision period in Unity steps (a DecisionRequester's ``DecisionPeriod``).
    :param start: Unity step (after reset) of the first decision; with ``period`` this sets the phase.
    :param episode_length: Unity steps per episode; ``None`` = the episode never ends.
    :param episodes: how many episodes the agent lives before leaving for good (``None`` = forever).
    :param respawn_delay: Unity steps between a terminal step and the next episode's first
        decision; 0 puts the agent in ``TerminalSteps`` and ``DecisionSteps`` of the same step.
    :param interrupted: episode ends are interruptions (max step reached), not terminal states.
    :param new_id_each_episode: the agent gets a fresh id every episode (old Unity versions).
    :param reward: reward per Unity step of an episode.
    :param group_id: the agent's group (0 = no group).
    :param group_reward: group reward per Unity step of an episode.
    """

    period: int = 1
    start: int = 0
    episode_length: int | None = None
    episodes: int | None = None
    respawn_delay: int = 0
    interrupted: bool = False
    new_id_each_episode: bool = False
    reward: float = 1.0
    group_id: int = 0
    group_reward: float = 0.0


MaskFn = Callable[[int, int], Sequence[np.ndarray]]


@dataclass
class ScriptedBehavior:
    """One behavior of a :class:`ScriptedEnv`.

    :param agents: the scripts of its agents (agent index ``k`` = position in this list).
    :param action_spec: its ``ActionSpec``.
    :param vector_size: length of the vector observation (>= 4).
    :param visual_shape: ``(H, W, C)`` of an extra visual observation, or ``None``.
    :param mask_fn: ``mask_fn(k, unity_step)`` -> one bool array per branch, True = NOT allowed
        (ML-Agents' convention); ``None`` = nothing masked.
    """

    agents: Sequence[ScriptedAgent]
    action_spec: ActionSpec = field(default_factory=lambda: ActionSpec(2, ()))
    vector_size: int = 4
    visual_shape: tuple[int, int, int] | None = None
    mask_fn: MaskFn | None = None

    def spec(self) -> BehaviorSpec:
        specs = [
            ObservationSpec((self.vector_size,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "vector")
        ]
        if self.visual_shape is not None:
            te = DimensionProperty.TRANSLATIONAL_EQUIVARIANCE
            specs.append(
                ObservationSpec(
                    tuple(self.visual_shape),
                    (te, te, DimensionProperty.NONE),
                    ObservationType.DEFAULT,
                    "camera",
                )
            )
        return BehaviorSpec(specs, self.action_spec)


@dataclass
class _AgentState:
    agent_id: int
    in_episode: bool = False
    episode: int = 0
    episode_start: int = 0
    episodes_done: int = 0
    next_start: int | None = None
    reward: float = 0.0
    group_reward: float = 0.0


@dataclass
class ReceivedAction:
    """One action an agent received: the Unity step it was requested at, its id, the values."""

    step: int
    agent_id: int
    continuous: np.ndarray
    discrete: np.ndarray


class _Channels:
    """Stands in for the side-channel bundle a wrapper exposes as ``unity_sb3_channels``."""

    def __init__(self) -> None:
        self.parameters: dict[str, float] = {}


class ScriptedEnv(BaseEnv):
    """A scripted ``BaseEnv``; see the module docstring.

    :param behaviors: a list of agents (one behavior named ``Scripted?team=0``), a
        :class:`ScriptedBehavior`, or a mapping behavior name -> :class:`ScriptedBehavior`.
    :param crash_at: Unity step at which the env crashes (``None``: never).
    :param crash_in: ``"step"`` or ``"get_steps"``: which call raises at ``crash_at``.
    :param crash_error: the exception class raised (a ``UnityException`` by default).
    :param strict: raise on a request left unanswered at ``step()`` (besides recording it).
    :param list_group_ids: give ``group_id`` as a Python list, exactly as ``mlagents_envs``'
        ``rpc_utils`` does for a real Unity build (so ``steps.group_id[index_array]`` fails there).
        This is the default, so every wrapper test meets the real type; ``False`` gives an int32
        array, like the embedded scenes.
    """

    def __init__(
        self,
        behaviors: Sequence[ScriptedAgent] | ScriptedBehavior | Mapping[str, ScriptedBehavior],
        *,
        crash_at: int | None = None,
        crash_in: str = "step",
        crash_error: type[Exception] = UnityCommunicatorStoppedException,
        strict: bool = False,
        list_group_ids: bool = True,
    ) -> None:
        if isinstance(behaviors, ScriptedBehavior):
            behaviors = {DEFAULT_BEHAVIOR: behaviors}
        elif not isinstance(behaviors, Mapping):
            behaviors = {DEFAULT_BEHAVIOR: ScriptedBehavior(list(behaviors))}
        self.behaviors: dict[str, ScriptedBehavior] = dict(behaviors)
        for name, behavior in self.behaviors.items():
            if behavior.vector_size < 4:
                raise ValueError(f"{name}: vector_size must be >= 4")
        self._specs = {name: b.spec() for name, b in self.behaviors.items()}
        self.crash_at = crash_at
        self.crash_in = crash_in
        self.crash_error = crash_error
        self.strict = strict
        self.list_group_ids = list_group_ids
        self.unity_sb3_channels = _Channels()
        self.seeds: list[int] = []
        self.closed = False
        self.crashed = False
        self.reset_count = 0
        self.t = 0
        self._next_id = 1000
        # records
        self.received: dict[str, dict[int, list[ReceivedAction]]] = {}
        self.requests: dict[str, list[tuple[int, np.ndarray]]] = {}
        self.unanswered: list[tuple[str, int, int]] = []  # (behavior, unity step, agent id)
        self._agents: dict[str, list[_AgentState]] = {}
        self._steps: dict[str, tuple[DecisionSteps, TerminalSteps]] = {}
        self._actions: dict[str, ActionTuple] = {}
        self._answered: dict[str, np.ndarray] = {}
        for name in self.behaviors:
            self.received[name] = {k: [] for k in range(len(self.behaviors[name].agents))}
            self.requests[name] = []

    # ------------------------------------------------------------------ helpers for tests
    def actions_of(self, k: int, behavior: str = DEFAULT_BEHAVIOR) -> list[ReceivedAction]:
        """Every action scripted agent ``k`` received, in order."""
        return self.received[behavior][k]

    def agent_ids(self, behavior: str = DEFAULT_BEHAVIOR) -> list[int]:
        """The current id of every scripted agent."""
        return [a.agent_id for a in self._agents[behavior]]

    def reseed(self, seed: int) -> None:
        """Record a seed (the wrapper calls this at the next reset after ``seed()``)."""
        self.seeds.append(int(seed))

    # ------------------------------------------------------------------ BaseEnv
    @property
    def behavior_specs(self) -> BehaviorMapping:
        return BehaviorMapping(self._specs)

    def reset(self) -> None:
        self._check_alive("reset")
        self.reset_count += 1
        self.t = 0
        for name, behavior in self.behaviors.items():
            states = []
            for k, script in enumerate(behavior.agents):
                agent_id = self._fresh_id() if script.new_id_each_episode else 100 * (k + 1) + len(name)
                state = _AgentState(agent_id=agent_id, next_start=script.start)
                states.append(state)
            self._agents[name] = states
        self._actions.clear()
        self._advance(first=True)

    def step(self) -> None:
        self._check_alive("step")
        if self.crash_at is not None and self.crash_in == "step" and self.t + 1 >= self.crash_at:
            self.crashed = True
            raise self.crash_error(f"scripted crash at Unity step {self.t + 1}")
        if not self._agents:
            self.reset()
            return
        for name, (dec, _) in self._steps.items():
            self._record_answers(name, dec)
        self._actions.clear()
        self.t += 1
        self._advance(first=False)

    def close(self) -> None:
        self.closed = True

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        self._check_behavior(behavior_name)
        dec = self._steps[behavior_name][0] if behavior_name in self._steps else None
        n = 0 if dec is None else len(dec)
        action = self._specs[behavior_name].action_spec._validate_action(action, n, behavior_name)
        self._actions[behavior_name] = action
        self._answered[behavior_name] = np.ones(n, dtype=bool)

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        self._check_behavior(behavior_name)
        spec = self._specs[behavior_name].action_spec
        action = spec._validate_action(action, 1, behavior_name)
        dec = self._steps[behavior_name][0]
        where = np.flatnonzero(dec.agent_id == agent_id)
        if len(where) == 0:
            raise UnityActionException(
                f"agent {agent_id} of {behavior_name} did not request a decision at Unity step {self.t}"
            )
        if behavior_name not in self._actions:
            self._actions[behavior_name] = spec.empty_action(len(dec))
            self._answered[behavior_name] = np.zeros(len(dec), dtype=bool)
        index = int(where[0])
        self._actions[behavior_name].continuous[index] = action.continuous[0]
        self._actions[behavior_name].discrete[index] = action.discrete[0]
        self._answered[behavior_name][index] = True

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        self._check_behavior(behavior_name)
        if self.crash_at is not None and self.crash_in == "get_steps" and self.t >= self.crash_at:
            self.crashed = True
            raise self.crash_error(f"scripted crash reading steps at Unity step {self.t}")
        self._check_alive("get_steps")
        if behavior_name not in self._steps:
            spec = self._specs[behavior_name]
            return DecisionSteps.empty(spec), TerminalSteps.empty(spec)
        return self._steps[behavior_name]

    # ------------------------------------------------------------------ internals
    def _fresh_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _check_alive(self, what: str) -> None:
        if self.closed:
            raise UnityCommunicatorStoppedException(f"{what}() on a closed ScriptedEnv")
        if self.crashed:
            raise self.crash_error(f"{what}() on a crashed ScriptedEnv")

    def _check_behavior(self, name: str) -> None:
        if name not in self._specs:
            raise UnityActionException(f"unknown behavior {name!r}; known: {sorted(self._specs)}")

    def _record_answers(self, name: str, dec: DecisionSteps) -> None:
        action = self._actions.get(name)
        answered = self._answered.get(name) if action is not None else None
        index_of = {s.agent_id: k for k, s in enumerate(self._agents[name])}
        self.requests[name].append((self.t, np.array(dec.agent_id)))
        for row, agent_id in enumerate(dec.agent_id.tolist()):
            if action is None or answered is None or not answered[row]:
                self.unanswered.append((name, self.t, agent_id))
                if self.strict:
                    raise AssertionError(f"{name}: agent {agent_id} asked at step {self.t} and got no action")
                continue
            k = index_of.get(agent_id)
            if k is None:  # cannot happen: requesting agents are live
                raise AssertionError(f"unknown requesting agent {agent_id}")
            self.received[name][k].append(
                ReceivedAction(self.t, agent_id, action.continuous[row].copy(), action.discrete[row].copy())
            )

    def _obs(self, behavior: ScriptedBehavior, k: int, state: _AgentState, step_in_episode: int) -> list:
        vec = np.zeros(behavior.vector_size, dtype=np.float32)
        vec[:4] = (k, state.episode, step_in_episode, self.t)
        obs = [vec]
        if behavior.visual_shape is not None:
            img = np.full(behavior.visual_shape, (k + 1) / 100.0, dtype=np.float32)
            img[..., 0] += self.t / 1000.0
            obs.append(img)
        return obs

    def _advance(self, first: bool) -> None:
        t = self.t
        for name, behavior in self.behaviors.items():
            dec_rows: list[tuple[int, list, float, int, float]] = []
            term_rows: list[tuple[int, list, float, bool, int, float]] = []
            dec_k: list[int] = []
            for k, (script, state) in enumerate(zip(behavior.agents, self._agents[name])):
                if state.in_episode and not first:
                    state.reward += script.reward
                    state.group_reward += script.group_reward
                if state.in_episode:
                    elapsed = t - state.episode_start
                    if script.episode_length is not None and elapsed >= script.episode_length:
                        obs = self._obs(behavior, k, state, elapsed)
                        term_rows.append(
                            (
                                state.agent_id,
                                obs,
                                state.reward,
                                script.interrupted,
                                script.group_id,
                                state.group_reward,
                            )
                        )
                        state.in_episode = False
                        state.episodes_done += 1
                        state.reward = state.group_reward = 0.0
                        if script.episodes is None or state.episodes_done < script.episodes:
                            state.next_start = t + script.respawn_delay
                            state.episode += 1
                            if script.new_id_each_episode:
                                state.agent_id = self._fresh_id()
                        else:
                            state.next_start = None
                    elif elapsed % script.period == 0:
                        dec_rows.append(
                            (
                                state.agent_id,
                                self._obs(behavior, k, state, elapsed),
                                state.reward,
                                script.group_id,
                                state.group_reward,
                            )
                        )
                        dec_k.append(k)
                        state.reward = state.group_reward = 0.0
                if not state.in_episode and state.next_start is not None and t == state.next_start:
                    state.in_episode = True
                    state.episode_start = t
                    state.next_start = None
                    dec_rows.append(
                        (state.agent_id, self._obs(behavior, k, state, 0), 0.0, script.group_id, 0.0)
                    )
                    dec_k.append(k)
            self._steps[name] = (
                self._decision_steps(name, dec_rows, dec_k),
                self._terminal_steps(name, term_rows),
            )

    def _stack_obs(self, name: str, rows: list) -> list[np.ndarray]:
        spec = self._specs[name]
        if not rows:
            return [np.zeros((0, *s.shape), dtype=np.float32) for s in spec.observation_specs]
        return [np.stack([r[1][i] for r in rows]) for i in range(len(spec.observation_specs))]

    def _decision_steps(self, name: str, rows: list, ks: list[int]) -> DecisionSteps:
        behavior = self.behaviors[name]
        branches = behavior.action_spec.discrete_branches
        mask: Any = None
        if branches:
            if behavior.mask_fn is None:
                mask = [np.zeros((len(rows), b), dtype=bool) for b in branches]
            else:
                per_agent = [list(behavior.mask_fn(k, self.t)) for k in ks]
                mask = [
                    np.array([m[i] for m in per_agent], dtype=bool).reshape(len(rows), b)
                    for i, b in enumerate(branches)
                ]
        return DecisionSteps(
            self._stack_obs(name, rows),
            np.array([r[2] for r in rows], dtype=np.float32),
            np.array([r[0] for r in rows], dtype=np.int32),
            mask,
            self._group_ids([r[3] for r in rows]),
            np.array([r[4] for r in rows], dtype=np.float32),
        )

    def _group_ids(self, values: list) -> Any:
        ids = [int(v) for v in values]
        return ids if self.list_group_ids else np.array(ids, dtype=np.int32)

    def _terminal_steps(self, name: str, rows: list) -> TerminalSteps:
        return TerminalSteps(
            self._stack_obs(name, rows),
            np.array([r[2] for r in rows], dtype=np.float32),
            np.array([r[3] for r in rows], dtype=bool),
            np.array([r[0] for r in rows], dtype=np.int32),
            self._group_ids([r[4] for r in rows]),
            np.array([r[5] for r in rows], dtype=np.float32),
        )
