"""``UnityParallelEnv`` and ``UnityAECEnv``: every agent of one or more Unity behaviors (teams)
as a PettingZoo environment (PettingZoo >= 1.24 API).

Agent names. Each agent that takes part in an episode gets a readable name
``"<behavior>_<k>"`` (``"3DBall_0"``, ``"3DBall_1"``, ...; the behavior name without its
``?team=`` suffix, or ``"<behavior>_team<t>"`` when two selected behaviors share a name).
``k`` counts from 0 at every ``reset()`` in the order Unity lists the agents, so the same
scene gives the same names every episode. Names are never reused within an episode.

Episodes. ``reset()`` always resets the Unity scene (``BaseEnv.reset()``), so every agent
starts its episode together. When an agent ends its episode (``TerminalSteps``), it is done
for this PettingZoo episode. Unity restarts it at once (auto-reset), often under a new id; that
*successor* is not part of this episode: it waits for the next ``reset()``, and the wrapper
answers its decision requests with zero actions. The PettingZoo episode is over when every
named agent is done (``env.agents`` is empty). Unity does not say whether a new agent id is a
successor or an agent the scene spawned: the wrapper counts the agents that ended and treats
that many new ids of the same behavior as successors; any further new id is a *spawned* agent
and gets a new name (``"3DBall_12"``, ...).

Capacity. ``possible_agents`` lists every name that can appear. Names restart at every
reset, so it never grows past the largest number of agents one episode has had. With
``max_agents`` (per behavior) it is fixed from the start; spawned agents beyond that capacity
are not named (they wait for the next reset, answered with zeros; a warning says so once).
Without ``max_agents`` it starts as the agents present after the first reset and grows when a
scene spawns more agents in one episode than ever before.

Steps. One parallel ``step(actions)`` advances Unity until every live agent asks for a
decision at the same Unity step (or ends its episode). With every agent deciding every step,
that is one Unity step. Agents whose decision periods are out of phase are synchronised: an
agent asking before the others gets its last action again. Rewards are summed over the Unity
steps taken.

Observations and masks. A behavior with discrete actions has observations
``{"observation": obs, "action_mask": mask}`` (``action_masks=False`` turns this off). The
mask has the structure ``action_space.sample(mask=...)`` accepts, 1 = allowed: an ``int8``
vector for ``Discrete``, a tuple of one ``int8`` vector per branch for ``MultiDiscrete``. No
mask fits ``sample`` of a hybrid action space (``Box`` takes none), so a hybrid behavior
(``hybrid="dict"`` or ``"tuple"``) has ``{"observation", "discrete_action_mask"}`` instead,
the tuple for its discrete part (``action_space["discrete"].sample(mask=...)``); with
``hybrid="box"`` there is no mask. An agent's terminal observation carries an all-ones mask.

Infos carry ``agent_id`` (Unity's id), ``behavior_name``, ``group_id`` and ``group_reward``
(summed like the reward) and, at an episode end, ``interrupted``.

``state()`` is the concatenation of every possible agent's flattened observation (float32,
zeros for agents not live), defined while ``possible_agents`` keeps its size.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces
from mlagents_envs.base_env import ActionTuple, BaseEnv, DecisionSteps, TerminalSteps
from pettingzoo import ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec_wrapper

import unity_sb3.unity  # noqa: F401  (protobuf compat before mlagents_envs)
from unity_sb3.spaces import BehaviorSpaces, HybridMode, VisualMode
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers._pettingzoo_spaces import (
    DISCRETE_MASK_KEY,
    MASK_KEY,
    OBSERVATION_KEY,
    MaskedObservations,
    capacities,
    display_names,
)
from unity_sb3.wrappers._steps import StepReader
from unity_sb3.wrappers.behavior import choose_behavior
from unity_sb3.wrappers.gym_env import (
    DEFAULT_MAX_WAIT_STEPS,
    batch_of_one,
    first_visual_key,
    image_to_rgb,
    open_base_env,
    row_of,
)

__all__ = ["DISCRETE_MASK_KEY", "MASK_KEY", "OBSERVATION_KEY", "UnityAECEnv", "UnityParallelEnv"]


@dataclass
class _Agent:
    """What the wrapper knows about one named agent during an episode."""

    behavior: str
    unity_id: int
    obs: Any = None
    mask: Any = None
    group_id: int = 0
    reward: float = 0.0
    group_reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    action: ActionTuple | None = None
    info: dict[str, Any] = field(default_factory=dict)


class UnityParallelEnv(ParallelEnv):
    """The agents of one or more Unity behaviors as a PettingZoo ``ParallelEnv`` (see the module docstring).

    :param env: a ``BaseEnv`` or a target string for :func:`unity_sb3.open.open_unity`.
    :param behavior_names: the behaviors (teams) to expose; ``None`` = all of them. Full names
        or names without ``?team=``. Agents of other behaviors are answered with zero actions.
    :param visual: ``"uint8"`` (channel-first images in [0, 255]) or ``"float"`` ([0, 1]).
    :param flatten_obs: concatenate several 1-D observations into one vector instead of a ``Dict``.
    :param hybrid: action space of hybrid behaviors: ``"dict"``, ``"tuple"`` or ``"box"``.
    :param action_masks: wrap observations of discrete behaviors as ``{"observation", "action_mask"}``.
    :param max_agents: the most agents per behavior one episode can name: an int for every
        behavior, a mapping behavior -> int, or ``None`` (grow as needed).
    :param render_mode: ``None`` or ``"rgb_array"`` (first visual observation of the first live agent).
    :param open_kwargs: keyword arguments for ``open_unity`` when ``env`` is a string.
    :param max_wait_steps: Unity steps a ``step()`` may take waiting for the live agents to
        ask for decisions together before it raises.
    :param close_env: close the Unity environment in :meth:`close` (it always does when it opened it).
    """

    metadata: dict[str, Any] = {
        "render_modes": ["rgb_array"],
        "name": "unity_sb3_parallel_v0",
        "is_parallelizable": True,
        "render_fps": 50,
    }

    def __init__(
        self,
        env: BaseEnv | str,
        behavior_names: str | Sequence[str] | None = None,
        *,
        visual: VisualMode = "uint8",
        flatten_obs: bool = False,
        hybrid: HybridMode = "dict",
        action_masks: bool = True,
        max_agents: int | Mapping[str, int] | None = None,
        render_mode: str | None = None,
        open_kwargs: Mapping[str, Any] | None = None,
        max_wait_steps: int = DEFAULT_MAX_WAIT_STEPS,
        close_env: bool = True,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if max_wait_steps < 1:
            raise ValueError(f"max_wait_steps must be >= 1, got {max_wait_steps}")
        self._env, opened = open_base_env(env, open_kwargs)
        self._close_env = close_env or opened
        self._closed = False
        try:
            self._setup(behavior_names, visual, flatten_obs, hybrid, action_masks, max_agents, render_mode)
            self.max_wait_steps = int(max_wait_steps)
            self._hard_reset()
            self._initial_possible = len(self.possible_agents)
            self.state_space = self._make_state_space()
        except BaseException:
            if opened:
                self._env.close()
            raise

    # ------------------------------------------------------------------ construction
    def _setup(
        self,
        behavior_names: str | Sequence[str] | None,
        visual: VisualMode,
        flatten_obs: bool,
        hybrid: HybridMode,
        action_masks: bool,
        max_agents: int | Mapping[str, int] | None,
        render_mode: str | None,
    ) -> None:
        all_names = list(self._env.behavior_specs.keys())
        if behavior_names is None:
            chosen = all_names
        else:
            requested = [behavior_names] if isinstance(behavior_names, str) else list(behavior_names)
            chosen = [choose_behavior(all_names, n, "to expose") for n in requested]
            if len(set(chosen)) != len(chosen):
                raise UnityConfigurationError(f"behavior_names lists a behavior twice: {requested}")
        if not chosen:
            raise UnityConfigurationError("the Unity scene declares no behaviors to expose")
        self.behavior_names: list[str] = chosen
        self._all_behaviors = all_names
        self._readers = {b: StepReader(b, spec) for b, spec in self._env.behavior_specs.items()}
        self.render_mode = render_mode
        self._spaces: dict[str, BehaviorSpaces] = {}
        self._obs_spaces: dict[str, spaces.Space] = {}
        self._act_spaces: dict[str, spaces.Space] = {}
        self._masked: dict[str, MaskedObservations] = {}
        for b in chosen:
            bs = BehaviorSpaces(
                self._env.behavior_specs[b], visual=visual, flatten=flatten_obs, hybrid=hybrid
            )
            self._spaces[b] = bs
            self._act_spaces[b] = bs.action_space
            self._masked[b] = MaskedObservations(bs, action_masks)
            self._obs_spaces[b] = self._masked[b].observation_space
        if render_mode == "rgb_array" and all(first_visual_key(bs) is None for bs in self._spaces.values()):
            raise UnityConfigurationError(
                "render_mode='rgb_array' needs a visual observation, but the selected behaviors have only "
                "vector observations; use render_mode=None"
            )
        self._display = display_names(chosen)
        self._capacity = capacities(max_agents, chosen)
        self.possible_agents: list[str] = []
        self._name_behavior: dict[str, str] = {}
        for b, cap in self._capacity.items():
            for k in range(cap or 0):
                self._declare(b, k)
        self.agents: list[str] = []
        self._agents: dict[str, _Agent] = {}
        self._by_uid: dict[tuple[str, int], str] = {}
        self._retired: set[tuple[str, int]] = set()
        self._waiting: set[tuple[str, int]] = set()
        self._awaiting: dict[str, int] = dict.fromkeys(chosen, 0)
        self._next_index: dict[str, int] = dict.fromkeys(chosen, 0)
        self._steps: dict[str, tuple[DecisionSteps, TerminalSteps]] = {}
        self._pristine = False
        self._seed_warned = False
        self._capacity_warned = False

    def _declare(self, behavior: str, k: int) -> str:
        name = f"{self._display[behavior]}_{k}"
        if name not in self._name_behavior:
            self._name_behavior[name] = behavior
            self.possible_agents.append(name)  # in place: UnityAECEnv shares this list
        return name

    def _make_state_space(self) -> spaces.Box | None:
        try:
            size = sum(
                spaces.flatdim(self._spaces[self._name_behavior[a]].observation_space)
                for a in self.possible_agents
            )
        except (ValueError, NotImplementedError):
            return None
        return spaces.Box(-np.inf, np.inf, shape=(size,), dtype=np.float32)

    # ------------------------------------------------------------------ spaces
    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_spaces[self._behavior_of(agent)]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_spaces[self._behavior_of(agent)]

    def _behavior_of(self, agent: str) -> str:
        try:
            return self._name_behavior[agent]
        except KeyError:
            raise KeyError(f"unknown agent {agent!r}; possible agents: {self.possible_agents}") from None

    @property
    def unity_env(self) -> BaseEnv:
        """The wrapped ``BaseEnv``."""
        return self._env

    # ------------------------------------------------------------------ Unity plumbing
    def _read_steps(self) -> None:
        """Every behavior's steps, normalised to arrays (any ``BaseEnv``, DESIGN 4.2)."""
        self._steps = {b: self._readers[b].read(self._env) for b in self._all_behaviors}

    def _hard_reset(self) -> None:
        self._env.reset()
        self._pristine = True
        self._read_steps()
        self.agents.clear()
        self._agents.clear()
        self._by_uid.clear()
        self._retired.clear()
        self._waiting.clear()
        for b in self.behavior_names:
            self._awaiting[b] = 0
            self._next_index[b] = 0
        for b in self.behavior_names:
            dec = self._steps[b][0]
            if len(dec):
                self._take_decisions(b, dec, at_reset=True)
        if not self.agents:
            raise UnityConfigurationError(
                f"no agent of {self.behavior_names} asked for a decision after a reset; check the scene's "
                "DecisionRequester components"
            )

    def _new_name(self, behavior: str) -> str | None:
        k = self._next_index[behavior]
        cap = self._capacity[behavior]
        if cap is not None and k >= cap:
            if not self._capacity_warned:
                self._capacity_warned = True
                warnings.warn(
                    f"behavior {behavior!r} has more agents than max_agents={cap} in this episode; the extra "
                    "agents get zero actions until the next reset (raise max_agents to include them)",
                    stacklevel=3,
                )
            return None
        self._next_index[behavior] = k + 1
        return self._declare(behavior, k)

    def _take_decisions(self, b: str, dec: DecisionSteps, at_reset: bool = False) -> None:
        """Book a ``DecisionSteps`` of selected behavior ``b``: named agents, successors, spawns."""
        obs_batch = None
        masks = None
        for row, uid in enumerate(dec.agent_id.tolist()):
            key = (b, uid)
            name = self._by_uid.get(key)
            if name is None:
                if key in self._waiting:
                    continue
                if key in self._retired or (self._awaiting[b] > 0 and not at_reset):
                    self._retired.discard(key)
                    self._awaiting[b] = max(0, self._awaiting[b] - 1)
                    self._waiting.add(key)
                    continue
                name = self._new_name(b)
                if name is None:
                    self._waiting.add(key)
                    continue
                self._by_uid[key] = name
                self._agents[name] = _Agent(behavior=b, unity_id=uid)
                self.agents.append(name)
            agent = self._agents[name]
            if obs_batch is None:
                obs_batch = self._spaces[b].observations(dec.obs)
                masks = self._masked[b].masks(dec)
            agent.obs = row_of(obs_batch, row)
            agent.mask = self._masked[b].mask_value(None if masks is None else masks[row])
            agent.reward += float(dec.reward[row])
            agent.group_reward += float(dec.group_reward[row])
            agent.group_id = int(dec.group_id[row])

    def _take_terminals(self, b: str, term: TerminalSteps) -> list[str]:
        """Book a ``TerminalSteps`` of selected behavior ``b``; return the names that finished."""
        finished = []
        obs_batch = None
        for row, uid in enumerate(term.agent_id.tolist()):
            key = (b, uid)
            name = self._by_uid.pop(key, None)
            if name is None:
                if key in self._waiting:  # a successor ended before it played: its own successor waits too
                    self._waiting.discard(key)
                    self._awaiting[b] += 1
                continue
            self._retired.add(key)
            self._awaiting[b] += 1
            if obs_batch is None:
                obs_batch = self._spaces[b].observations(term.obs)
            agent = self._agents[name]
            agent.obs = row_of(obs_batch, row)
            agent.mask = self._masked[b].mask_value(None)
            agent.reward += float(term.reward[row])
            agent.group_reward += float(term.group_reward[row])
            agent.group_id = int(term.group_id[row])
            interrupted = bool(term.interrupted[row])
            agent.truncated, agent.terminated = interrupted, not interrupted
            finished.append(name)
        return finished

    def _send_actions(self) -> None:
        """Answer every agent that asks: named live agents with their action, all others with zeros."""
        for b in self._all_behaviors:
            dec = self._steps[b][0]
            n = len(dec)
            if n == 0:
                continue
            spec = self._env.behavior_specs[b].action_spec
            action = spec.empty_action(n)
            if b in self._spaces:
                for row, uid in enumerate(dec.agent_id.tolist()):
                    name = self._by_uid.get((b, uid))
                    chosen = None if name is None else self._agents[name].action
                    if chosen is None:
                        continue
                    if spec.continuous_size:
                        action.continuous[row] = chosen.continuous[0]
                    if spec.discrete_size:
                        action.discrete[row] = chosen.discrete[0]
            self._env.set_actions(b, action)

    def _all_asking(self) -> bool:
        for name in self.agents:
            agent = self._agents[name]
            if agent.terminated or agent.truncated:
                continue
            if agent.unity_id not in self._steps[agent.behavior][0].agent_id_to_index:
                return False
        return True

    # ------------------------------------------------------------------ PettingZoo API
    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, Any], dict[str, dict]]:
        """Reset the Unity scene and name its agents ``<behavior>_0``, ``<behavior>_1``, ...

        :param seed: calls ``reseed(seed)`` on scenes that have it; a real Unity build takes its
            seed at launch (warns once).
        :param options: unused.
        :return: ``(observations, infos)`` keyed by agent name.
        """
        self._check_open()
        if seed is not None:
            reseed = getattr(self._env, "reseed", None)
            if callable(reseed):
                reseed(int(seed))
            elif not self._seed_warned:
                self._seed_warned = True
                warnings.warn(
                    "this Unity environment takes its seed once, at launch (open_unity(..., seed=...)); "
                    "reset(seed=...) cannot reseed it",
                    stacklevel=2,
                )
        if not self._pristine or seed is not None:
            self._hard_reset()
        observations = {}
        infos = {}
        for name in self.agents:
            agent = self._agents[name]
            agent.reward = agent.group_reward = 0.0
            observations[name] = self._masked[agent.behavior].observation(agent.obs, agent.mask)
            infos[name] = self._info(agent)
        return observations, infos

    def step(
        self, actions: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]]:
        """Send one action per live agent and advance Unity until the live agents ask again.

        :param actions: ``{agent_name: action}`` for every agent in ``self.agents``; actions of
            agents that already finished are ignored.
        :return: ``(observations, rewards, terminations, truncations, infos)`` for the agents
            live before the step and any agent spawned during it.
        """
        self._check_open()
        if not self.agents:
            raise RuntimeError("every agent has finished its episode: call reset() before step()")
        unknown = [a for a in actions if a not in self._name_behavior]
        if unknown:
            raise KeyError(f"actions for unknown agents {unknown}; live agents: {self.agents}")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise KeyError(
                f"no action for live agents {missing}: step() needs one action per agent in env.agents"
            )
        for name in self.agents:
            agent = self._agents[name]
            space = self._act_spaces[agent.behavior]
            agent.action = self._spaces[agent.behavior].to_unity_actions(
                batch_of_one(actions[name], space), 1
            )
            agent.reward = agent.group_reward = 0.0
        reported = list(self.agents)
        self._send_actions()
        finished: list[str] = []
        unity_steps = 0
        while unity_steps < self.max_wait_steps:
            unity_steps += 1
            self._env.step()
            self._pristine = False
            self._read_steps()
            for b in self.behavior_names:
                dec, term = self._steps[b]
                if len(term):
                    finished += self._take_terminals(b, term)
                if len(dec):
                    self._take_decisions(b, dec)
            if self._all_asking():
                break
            self._send_actions()
        else:
            waiting = [a for a in self.agents if a not in finished]
            raise RuntimeError(
                f"agents {waiting} did not all ask for a decision at the same Unity step within "
                f"{self.max_wait_steps} steps; were some destroyed without EndEpisode()? (raise max_wait_steps "
                "for decision periods that rarely line up)"
            )
        reported += [a for a in self.agents if a not in reported]
        observations, rewards, terminations, truncations, infos = {}, {}, {}, {}, {}
        for name in reported:
            agent = self._agents[name]
            observations[name] = self._masked[agent.behavior].observation(agent.obs, agent.mask)
            rewards[name] = agent.reward
            terminations[name] = agent.terminated
            truncations[name] = agent.truncated
            infos[name] = self._info(agent, unity_steps)
            if agent.terminated or agent.truncated:
                infos[name]["interrupted"] = agent.truncated
        done = set(finished)
        self.agents[:] = [a for a in self.agents if a not in done]
        for name in done:
            self._agents[name].action = None
        return observations, rewards, terminations, truncations, infos

    def _info(self, agent: _Agent, unity_steps: int = 0) -> dict[str, Any]:
        return {
            "agent_id": agent.unity_id,
            "behavior_name": agent.behavior,
            "group_id": agent.group_id,
            "group_reward": agent.group_reward,
            "unity_steps": unity_steps,
        }

    def state(self) -> np.ndarray:
        """Every possible agent's flattened observation, concatenated in ``possible_agents`` order
        (float32; zeros for agents that are not live)."""
        if self.state_space is None:
            raise NotImplementedError("state() needs observation spaces gymnasium can flatten")
        if len(self.possible_agents) != self._initial_possible:
            raise NotImplementedError(
                f"the scene spawned agents beyond the {self._initial_possible} declared at the start, so the state "
                "has no fixed size; pass max_agents= to fix possible_agents and the state's size"
            )
        live = set(self.agents)
        parts = []
        for name in self.possible_agents:
            space = self._spaces[self._name_behavior[name]].observation_space
            if name in live:
                parts.append(spaces.flatten(space, self._agents[name].obs).astype(np.float32, copy=False))
            else:
                parts.append(np.zeros(spaces.flatdim(space), dtype=np.float32))
        return np.concatenate(parts)

    def render(self) -> np.ndarray | None:
        """The first visual observation of the first live agent that has one, ``(H, W, 3)`` uint8."""
        if self.render_mode is None:
            warnings.warn("render() called with render_mode=None; pass render_mode='rgb_array'", stacklevel=2)
            return None
        for name in self.agents:
            agent = self._agents[name]
            bs = self._spaces[agent.behavior]
            key = first_visual_key(bs)
            if key is not None and agent.obs is not None:
                return image_to_rgb(agent.obs if key == 0 else agent.obs[key], bs.visual)
        return None

    def close(self) -> None:
        """Close the Unity environment (when ``close_env`` or when this wrapper opened it). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.agents.clear()
        if self._close_env:
            self._env.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this UnityParallelEnv is closed")

    def __str__(self) -> str:
        return f"UnityParallelEnv({', '.join(self.behavior_names)})"


class UnityAECEnv(parallel_to_aec_wrapper):
    """The same as :class:`UnityParallelEnv`, through PettingZoo's AEC API (agents act in turn;
    Unity advances once the last live agent has acted). Takes the same arguments.

    ``unwrapped`` is the inner :class:`UnityParallelEnv`.
    """

    def __init__(
        self, env: BaseEnv | str, behavior_names: str | Sequence[str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(UnityParallelEnv(env, behavior_names, **kwargs))

    @property
    def parallel_env(self) -> UnityParallelEnv:
        return self.env

    def __str__(self) -> str:
        return f"UnityAECEnv({', '.join(self.env.behavior_names)})"
