"""``EmbeddedScene``: the Unity-side agent loop shared by all embedded scenes.

It reproduces what a Unity build does between two ``Exchange`` calls, vectorised over agents:

* Academy steps (physics steps) run until some agent sends information to Python: an agent
  that asks for a decision (every ``decision_period`` academy steps, in phase for all agents,
  like a ``DecisionRequester``) or an agent whose episode ended (it is reported in
  ``TerminalSteps`` at the next academy step, even between two decision steps, as Unity does).
* Between decisions agents repeat their last action; an agent that starts a new episode acts
  with zeros until its first decision. Actions are consumed only for the agents of the last
  ``DecisionSteps``; missing actions are zeros.
* An agent that reaches ``max_steps`` ends its episode with ``interrupted=True``; ended agents
  reset at once (with a new agent id unless ``stable_agent_ids``), so the same agent can be
  in ``TerminalSteps`` (old episode) and ``DecisionSteps`` (new episode) of one step. As in
  Unity, an id is never reused: the id counter runs for the life of the scene object, through
  ``reset()`` and ``reseed()``.
* Side channels: environment parameters are read at each agent's episode start
  (``GetWithDefault``); stats go back to Python through the StatsSideChannel.

A scene subclass declares its spec and parameters and implements ``_on_episode_begin``,
``_advance`` and ``_observe`` (plus ``_action_mask`` and ``expert_actions``).

Several behaviors (competitive scenes, e.g. Tennis' ``Tennis?team=0`` / ``Tennis?team=1``):

* ``BEHAVIORS`` names the behaviors in index order (with Unity's ``?team=N`` suffix;
  empty = the one ``behavior_name``) and ``_make_specs()`` returns one ``BehaviorSpec`` per
  behavior (default ``[_make_spec()]``). The specs may differ (StrikersVsGoalie's striker and
  goalie) or be equal (Tennis' two teams).
* ``AREA_BEHAVIORS`` gives the behavior index of each agent of one area, in agent order; the
  ``num_agents`` parameter counts areas, so the scene holds ``num_agents * len(AREA_BEHAVIORS)``
  agents (``total_agents``). Agent ``i`` lives in area ``i // len(AREA_BEHAVIORS)`` and has
  behavior ``agent_behavior[i]``. Single-behavior scenes keep the default ``(0,)``: one agent
  per area, exactly as before.
* Agent ids are unique across the whole scene (one counter for every behavior). Group ids and
  group rewards are per agent, whatever its behavior.
* ``get_steps(name)``, ``set_actions(name, ...)`` and ``set_action_for_agent(name, ...)`` work
  per behavior, with that behavior's action spec, masks and last ``DecisionSteps``; an agent
  is reported in the steps of its own behavior only.
* The state arrays the scene reads are shared by all agents: ``_cont_action`` is
  ``(total_agents, max continuous size)`` and ``_disc_action`` ``(total_agents, max discrete
  size)``; a behavior with fewer actions uses the first columns (the rest stay 0).
* ``_observe(idx)`` and ``_action_mask(idx)`` are always called with agents of ONE behavior
  (``agent_behavior[idx]`` is constant) and answer in that behavior's spec.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from mlagents_envs.base_env import (
    ActionTuple,
    BaseEnv,
    BehaviorMapping,
    BehaviorSpec,
    DecisionSteps,
    TerminalSteps,
)
from mlagents_envs.exception import UnityActionException, UnityEnvironmentException
from mlagents_envs.side_channel.side_channel import SideChannel
from mlagents_envs.side_channel.side_channel_manager import SideChannelManager
from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod

from unity_sb3.scenes.side_channels import UnitySideChannels
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.validation import did_you_mean, unknown_keys

#: Parameters every scene accepts (scene classes give their own defaults in ``PARAMS``).
COMMON_PARAMS: dict[str, str] = {
    "num_agents": "number of areas in the scene (one agent each, unless the scene says otherwise)",
    "max_steps": "academy (physics) steps before an episode is interrupted; 0 = never",
    "decision_period": "academy steps between two decisions of an agent",
    "stable_agent_ids": "keep one id per agent for its whole life instead of a new id per episode",
}


class EmbeddedScene(BaseEnv):
    """A pure-Python Unity scene with one or several behaviors, presenting the ``BaseEnv`` API.

    :param seed: seed of the scene's random generator (spawn positions, ...).
    :param side_channels: ``mlagents_envs`` side channels used in-process, as they would be
        passed to ``UnityEnvironment``; their messages are applied before each reset/step and
        the scene's stats are fed back to them.
    :param params: scene parameters (see ``PARAMS`` of each scene and :data:`COMMON_PARAMS`).
    """

    #: Scene name used by ``make_scene``.
    scene_name: ClassVar[str] = ""
    #: Behavior name with the team suffix, as Unity reports it (single-behavior scenes).
    behavior_name: ClassVar[str] = ""
    #: Behavior names in behavior-index order (several behaviors); empty = ``(behavior_name,)``.
    BEHAVIORS: ClassVar[tuple[str, ...]] = ()
    #: Behavior index of each agent of one area, in agent order (see the module docstring).
    AREA_BEHAVIORS: ClassVar[tuple[int, ...]] = (0,)
    #: Parameter defaults (must include the keys of ``COMMON_PARAMS``).
    PARAMS: ClassVar[dict[str, Any]] = {}
    #: Parameter descriptions for ``describe_scene``.
    PARAM_DOCS: ClassVar[dict[str, str]] = {}
    #: Parameters that environment parameters (side channel) can override at each episode start.
    DYNAMIC_PARAMS: ClassVar[tuple[str, ...]] = ()
    #: ``get_steps`` gives every batch in the array form the wrappers read (``wrappers._steps.ARRAY_STEPS``:
    #: integer ids and group ids, float32 rewards, bool flags and masks, float or uint8 observations of
    #: the specs' shapes), so they pass it on without checks. tests/test_scenes.py checks every scene.
    array_steps: ClassVar[bool] = True

    def __init__(
        self, seed: int = 0, side_channels: Sequence[SideChannel] | None = None, **params: Any
    ) -> None:
        self.params: dict[str, Any] = self._validate_params(params)
        self.num_agents: int = self.params["num_agents"]
        self.max_steps: int = self.params["max_steps"]
        self.decision_period: int = self.params["decision_period"]
        self.stable_agent_ids: bool = self.params["stable_agent_ids"]
        self.side_channels = UnitySideChannels()
        self._sc_manager = SideChannelManager(list(side_channels)) if side_channels else None
        self.behavior_names: tuple[str, ...] = self.behavior_names_of()
        self._specs: list[BehaviorSpec] = list(self._make_specs())
        if len(self._specs) != len(self.behavior_names):
            raise UnityConfigurationError(
                f"Scene {self.scene_name} names {len(self.behavior_names)} behavior(s) but "
                f"_make_specs() returned {len(self._specs)} spec(s); give one spec per behavior."
            )
        if not self.AREA_BEHAVIORS or not set(self.AREA_BEHAVIORS) <= set(range(len(self._specs))):
            raise UnityConfigurationError(
                f"Scene {self.scene_name}: AREA_BEHAVIORS {self.AREA_BEHAVIORS} must name behavior "
                f"indices in [0, {len(self._specs)}), one per agent of an area."
            )
        self._behavior_index = {name: b for b, name in enumerate(self.behavior_names)}
        #: behavior index of each agent, ``(total_agents,)`` int
        self.agent_behavior: np.ndarray = np.tile(
            np.asarray(self.AREA_BEHAVIORS, dtype=np.intp), self.num_agents
        )
        self.total_agents: int = int(self.agent_behavior.size)
        self._members = [np.flatnonzero(self.agent_behavior == b) for b in range(len(self._specs))]
        self._empty_terminal = [TerminalSteps.empty(spec) for spec in self._specs]
        self._empty_decision = [DecisionSteps.empty(spec) for spec in self._specs]
        self._branches = [
            np.asarray(spec.action_spec.discrete_branches, dtype=np.int32) for spec in self._specs
        ]
        n = self.total_agents
        n_cont = max(spec.action_spec.continuous_size for spec in self._specs)
        n_disc = max(spec.action_spec.discrete_size for spec in self._specs)
        self._agent_id = np.arange(n, dtype=np.int32)
        self._active = np.zeros(n, dtype=bool)
        self._step_count = np.zeros(n, dtype=np.int64)
        self._reward = np.zeros(n, dtype=np.float32)
        self._group_reward = np.zeros(n, dtype=np.float32)
        self._group_id = np.zeros(n, dtype=np.int32)
        self._cont_action = np.zeros((n, n_cont), dtype=np.float32)
        self._disc_action = np.zeros((n, n_disc), dtype=np.int32)
        # per behavior: terminal steps queued since the last output, as (obs, reward,
        # interrupted, agent id, group id, group reward) per _finish call
        self._terminals: list[list[tuple[list[np.ndarray], ...]]] = [[] for _ in self._specs]
        # per behavior: agent indices and ids of the last DecisionSteps
        self._last_decision_idx = [np.zeros(0, dtype=np.intp) for _ in self._specs]
        self._last_decision_ids = [np.zeros(0, dtype=np.int32) for _ in self._specs]
        # per behavior: (continuous, discrete) actions set for the agents of the last DecisionSteps
        self._pending: list[tuple[np.ndarray, np.ndarray] | None] = [None for _ in self._specs]
        self._steps: dict[str, tuple[DecisionSteps, TerminalSteps]] | None = None
        self._academy_step = 0
        self._closed = False
        # like Unity's episode-id counter: it only grows for the life of the scene, through
        # resets and reseeds, so an id never names two episodes (or two agents)
        self._next_id = 0
        self.reseed(seed)

    # ------------------------------------------------------------------ parameters and spec
    @classmethod
    def _validate_params(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        unknown = unknown_keys(params, cls.PARAMS)
        if unknown:
            raise UnityConfigurationError(
                f"Unknown parameter(s) {', '.join(map(repr, unknown))} for scene {cls.scene_name}; "
                f"valid parameters: {', '.join(sorted(cls.PARAMS))}.{did_you_mean(unknown[0], cls.PARAMS)}"
            )
        out = dict(cls.PARAMS)
        for key, value in params.items():
            default = cls.PARAMS[key]
            try:
                if isinstance(default, bool):
                    if not isinstance(value, (bool, np.bool_)):
                        raise TypeError
                    value = bool(value)
                elif isinstance(default, int):
                    if isinstance(value, (bool, np.bool_)) or int(value) != value:
                        raise TypeError
                    value = int(value)
                elif isinstance(default, float):
                    value = float(value)
                    if not math.isfinite(value):
                        raise TypeError
            except (TypeError, ValueError):
                kind = type(default).__name__
                raise UnityConfigurationError(
                    f"Parameter {key!r} of scene {cls.scene_name} must be a finite {kind} "
                    f"(default {default!r}), got {value!r}."
                ) from None
            out[key] = value
        for key in ("num_agents", "decision_period"):
            if out[key] < 1:
                raise UnityConfigurationError(
                    f"Parameter {key!r} of scene {cls.scene_name} must be >= 1, got {out[key]}."
                )
        if out["max_steps"] < 0:
            raise UnityConfigurationError(
                f"Parameter 'max_steps' of scene {cls.scene_name} must be >= 0 (0 = no limit), got {out['max_steps']}."
            )
        cls._check_params(out)
        return out

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        """Scene-specific range checks; raise ``UnityConfigurationError``."""

    @classmethod
    def behavior_names_of(cls) -> tuple[str, ...]:
        """The scene's behavior names in behavior-index order (no scene is built)."""
        return tuple(cls.BEHAVIORS) or (cls.behavior_name,)

    def _make_spec(self) -> BehaviorSpec:
        """The spec of a single-behavior scene."""
        raise NotImplementedError

    def _make_specs(self) -> list[BehaviorSpec]:
        """One spec per behavior, in ``BEHAVIORS`` order (default: ``[_make_spec()]``)."""
        return [self._make_spec()]

    def _param(self, key: str, n: int) -> np.ndarray:
        """Value of a dynamic parameter for ``n`` agents starting an episode (float64, ``(n,)``).

        An environment parameter of the same name (constant or sampler) overrides the
        ``make_scene`` value, as ``EnvironmentParameters.GetWithDefault`` does in Unity.
        """
        return self.side_channels.get_with_default(key, float(self.params[key]), n)

    # ------------------------------------------------------------------ scene hooks
    def _on_episode_begin(self, idx: np.ndarray) -> None:
        """Reset the state of agents ``idx`` (int array) for a new episode."""
        raise NotImplementedError

    def _on_episode_end(self, idx: np.ndarray, interrupted: np.ndarray) -> None:
        """Called after agents ``idx`` ended an episode (e.g. to report stats)."""

    def _advance(self, max_substeps: int) -> int:
        """Run at most ``max_substeps`` academy steps for the active agents.

        Applies the stored actions, sets rewards, ends episodes with :meth:`_finish` /
        :meth:`_start` and returns how many academy steps ran (>= 1). May stop early, e.g.
        right after an episode ended, so that it is reported at the next academy step.
        """
        raise NotImplementedError

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        """Observations of agents ``idx`` (all of one behavior): one float32 array per
        observation spec of that behavior, batch first."""
        raise NotImplementedError

    def _action_mask(self, idx: np.ndarray) -> list[np.ndarray] | None:
        """Per-branch masks (True = action NOT allowed) for agents ``idx`` (all of one
        behavior), or None for no masking."""
        return None

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """A scripted expert that acts from the observations in ``decision_steps`` only."""
        raise NotImplementedError

    # ------------------------------------------------------------------ agent life cycle
    def _finish(self, idx: np.ndarray, interrupted: bool | np.ndarray) -> None:
        """End the episodes of agents ``idx``: queue their terminal step and deactivate them."""
        if idx.size == 0:
            return
        flags = np.broadcast_to(np.asarray(interrupted, dtype=bool), idx.shape).copy()
        for b, part in self._by_behavior(idx):
            sub = idx if part is None else idx[part]
            self._terminals[b].append(
                (
                    self._observe(sub),
                    self._reward[sub],
                    flags if part is None else flags[part],
                    self._agent_id[sub],
                    self._group_id[sub],
                    self._group_reward[sub],
                )
            )
        self._reward[idx] = 0.0
        self._group_reward[idx] = 0.0
        self._active[idx] = False
        self._on_episode_end(idx, flags)

    def _start(self, idx: np.ndarray) -> None:
        """Start new episodes for agents ``idx`` (new ids unless ``stable_agent_ids``)."""
        if idx.size == 0:
            return
        if not self.stable_agent_ids:
            self._agent_id[idx] = self._next_id + np.arange(idx.size, dtype=np.int32)
            self._next_id += idx.size
        self._active[idx] = True
        self._step_count[idx] = 0
        self._reward[idx] = 0.0
        self._group_reward[idx] = 0.0
        self._cont_action[idx] = 0.0
        self._disc_action[idx] = 0
        self._on_episode_begin(idx)

    def _truncate_at_max_steps(self) -> None:
        """End (interrupted) and restart the active agents that reached ``max_steps``."""
        if self.max_steps <= 0:
            return
        idx = np.flatnonzero(self._active & (self._step_count >= self.max_steps))
        if idx.size:
            self._finish(idx, True)
            self._start(idx)

    def _by_behavior(self, idx: np.ndarray) -> list[tuple[int, np.ndarray | None]]:
        """Split agents ``idx`` by behavior: ``(behavior, boolean selector of idx or None = all)``."""
        if len(self._specs) == 1:
            return [(0, None)]
        behaviors = self.agent_behavior[idx]
        return [(int(b), behaviors == b) for b in np.unique(behaviors)]

    def stat(
        self, key: str, value: float, method: StatsAggregationMethod = StatsAggregationMethod.AVERAGE
    ) -> None:
        """Queue a stat for Python (Unity's ``StatsRecorder.Add``)."""
        self.side_channels.add_stat(key, value, method)

    # ------------------------------------------------------------------ side channels (Unity side)
    def receive_side_channel_data(self, data: bytes) -> None:
        """Apply a side-channel blob sent by Python (engine configuration, environment parameters)."""
        self.side_channels.receive(data)

    def drain_side_channel_data(self) -> bytes:
        """Encoded messages the scene sends to Python (stats) since the last call."""
        return self.side_channels.drain()

    def _pull_side_channels(self) -> None:
        if self._sc_manager is not None:
            data = self._sc_manager.generate_side_channel_messages()
            if data:
                self.receive_side_channel_data(bytes(data))

    def _push_side_channels(self) -> None:
        if self._sc_manager is not None:
            data = self.drain_side_channel_data()
            if data:
                self._sc_manager.process_side_channel_message(data)

    # ------------------------------------------------------------------ BaseEnv API
    def reseed(self, seed: int) -> None:
        """Re-seed the scene (as Unity does with the seed of the handshake). Takes effect from the next reset.

        Agent ids keep counting: a seeded reset repeats observations and rewards, not ids (Unity
        never reuses one).
        """
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)
        self._steps = None

    @property
    def behavior_specs(self) -> Mapping[str, BehaviorSpec]:
        # built once: wrappers ask every Unity step whether other behaviors wait for actions
        mapping = self.__dict__.get("_behavior_mapping")
        if mapping is None:
            mapping = self._behavior_mapping = BehaviorMapping(dict(zip(self.behavior_names, self._specs)))
        return mapping

    def reset(self) -> None:
        self._check_open()
        self._pull_side_channels()
        self._academy_step = 0
        self._terminals = [[] for _ in self._specs]
        self._pending = [None for _ in self._specs]
        self._active[:] = False
        self._start(np.arange(self.total_agents))
        self._emit()
        self._push_side_channels()

    def step(self) -> None:
        self._check_open()
        if self._steps is None:  # like UnityEnvironment: the first step is a reset
            self.reset()
            return
        self._pull_side_channels()
        self._consume_actions()
        period = self.decision_period
        while True:
            if not self._active.any():
                raise UnityEnvironmentException(
                    f"Scene {self.scene_name} has no active agent left; this is a bug."
                )
            remaining = period - self._academy_step % period
            self._academy_step += self._advance(remaining)
            if any(self._terminals) or self._academy_step % period == 0:
                break
        self._emit()
        self._push_side_channels()

    def close(self) -> None:
        self._closed = True
        self._steps = None

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        b = self._check_behavior(behavior_name)
        if self._steps is None:
            return
        n = len(self._last_decision_idx[b])
        action = self._specs[b].action_spec._validate_action(action, n, behavior_name)
        self._check_discrete(action.discrete, b)
        self._pending[b] = (action.continuous.copy(), action.discrete.copy())

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        b = self._check_behavior(behavior_name)
        if self._steps is None:
            return
        spec = self._specs[b].action_spec
        action = spec._validate_action(action, 1, behavior_name)
        self._check_discrete(action.discrete, b)
        where = np.flatnonzero(self._last_decision_ids[b] == agent_id)
        if where.size == 0:
            raise IndexError(
                f"agent_id {agent_id} did not request a decision at the previous step of {behavior_name}; "
                "only agents in the last DecisionSteps take actions."
            )
        pending = self._pending[b]
        if pending is None:
            empty = spec.empty_action(len(self._last_decision_idx[b]))
            pending = self._pending[b] = (empty.continuous, empty.discrete)
        pending[0][where[0]] = action.continuous[0]
        pending[1][where[0]] = action.discrete[0]

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        self._check_behavior(behavior_name)
        if self._steps is None:
            raise UnityEnvironmentException(
                f"Scene {self.scene_name} has not been reset: call reset() first."
            )
        return self._steps[behavior_name]

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._closed:
            raise UnityEnvironmentException(
                f"Scene {self.scene_name} is closed; make a new one with make_scene()."
            )

    def _check_behavior(self, behavior_name: str) -> int:
        """The index of behavior ``behavior_name``; a clear error if the scene has no such behavior."""
        b = self._behavior_index.get(behavior_name)
        if b is None:
            names = ", ".join(map(repr, self.behavior_names))
            raise UnityActionException(
                f"The group {behavior_name} does not correspond to an existing agent group in the "
                f"environment; scene {self.scene_name} has only {names}."
            )
        return b

    def _check_discrete(self, discrete: np.ndarray, b: int) -> None:
        branches = self._branches[b]
        if discrete.size and ((discrete < 0).any() or (discrete >= branches).any()):
            raise UnityActionException(
                f"Discrete actions of {self.behavior_names[b]} must lie in [0, branch size) for branches "
                f"{tuple(branches.tolist())}; got values from {discrete.min()} to {discrete.max()}."
            )

    def _consume_actions(self) -> None:
        """Store the actions set for each behavior's last deciders; missing actions are zeros."""
        for b, spec in enumerate(self._specs):
            idx = self._last_decision_idx[b]
            pending, self._pending[b] = self._pending[b], None
            if idx.size == 0:
                continue
            n_cont, n_disc = spec.action_spec.continuous_size, spec.action_spec.discrete_size
            if idx.size == self.total_agents:  # common case: everyone decided, in index order
                cont, disc = self._cont_action[:, :n_cont], self._disc_action[:, :n_disc]
            else:
                cont, disc = self._cont_action[idx, :n_cont], self._disc_action[idx, :n_disc]
            if pending is None:
                cont.fill(0.0)
                disc.fill(0)
            else:
                cont[:], disc[:] = pending
            if idx.size != self.total_agents:
                self._cont_action[idx, :n_cont] = cont
                self._disc_action[idx, :n_disc] = disc

    def _emit(self) -> None:
        deciding = self._academy_step % self.decision_period == 0
        steps = {}
        for b, spec in enumerate(self._specs):
            members = self._members[b]
            idx = members[self._active[members]] if deciding else members[:0]
            decision = self._decision_steps(b, idx) if idx.size else self._empty_decision[b]
            terminals = self._terminals[b]
            if terminals:
                parts = list(zip(*terminals))
                n_obs = len(spec.observation_specs)
                obs = [np.concatenate([p[i] for p in parts[0]]) for i in range(n_obs)]
                terminal = TerminalSteps(obs, *(np.concatenate(p) for p in parts[1:]))
                self._terminals[b] = []
            else:
                terminal = self._empty_terminal[b]
            self._last_decision_idx[b] = idx
            self._last_decision_ids[b] = self._agent_id[idx]
            steps[self.behavior_names[b]] = (decision, terminal)
        self._steps = steps

    def _decision_steps(self, b: int, idx: np.ndarray) -> DecisionSteps:
        """``DecisionSteps`` of agents ``idx`` of behavior ``b``; their rewards are handed over."""
        mask = None
        if self._specs[b].action_spec.discrete_size:
            mask = self._action_mask(idx)
            if mask is None:  # rpc_utils gives all-False masks when Unity sends none
                mask = [np.zeros((idx.size, n), dtype=bool) for n in self._branches[b]]
        decision = DecisionSteps(
            self._observe(idx),
            self._reward[idx],
            self._agent_id[idx],
            mask,
            self._group_id[idx],
            self._group_reward[idx],
        )
        self._reward[idx] = 0.0
        self._group_reward[idx] = 0.0
        return decision

    # ------------------------------------------------------------------ description
    @classmethod
    def describe(cls, **params: Any) -> str:
        """Human-readable description: behaviors, observation/action specs, parameters."""
        scene = cls(**params)
        lines = [f"Scene {cls.scene_name}: {(cls.__doc__ or '').strip().splitlines()[0]}"]
        for b, (name, spec) in enumerate(scene.behavior_specs.items()):
            lines.append(f"  behavior {name!r}: {scene._members[b].size} agent(s)")
            for i, obs in enumerate(spec.observation_specs):
                dims = ", ".join(p.name for p in obs.dimension_property)
                lines.append(
                    f"    observation {i} {obs.name!r}: shape {obs.shape}, {obs.observation_type.name}, dims ({dims})"
                )
            act = spec.action_spec
            lines.append(
                f"    actions: {act.continuous_size} continuous, discrete branches {tuple(act.discrete_branches)}"
            )
        lines.append("  parameters (make_scene keyword arguments; * = also an environment parameter):")
        docs = {**COMMON_PARAMS, **cls.PARAM_DOCS}
        for key, default in cls.PARAMS.items():
            star = "*" if key in cls.DYNAMIC_PARAMS else " "
            lines.append(f"   {star}{key} = {default!r}: {docs.get(key, '')}")
        scene.close()
        return "\n".join(lines)
