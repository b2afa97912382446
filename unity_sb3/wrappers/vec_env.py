"""``UnityVecEnv``: the agents of one Unity behavior as the slots of an SB3 ``VecEnv``.

A Unity scene holds many agents of a behavior (3DBall has 12); one or more Unity instances
feed ``num_envs`` slots, one live agent per slot (DESIGN 4.2):

- A slot follows its agent (ids are opaque and may change between episodes). When the
  agent's episode ends, the slot is ``done`` (``infos[i]["terminal_observation"]``,
  ``infos[i]["TimeLimit.truncated"] = interrupted``) and the next unassigned agent that asks
  for a decision takes it (the same agent first, if it asks again); the returned observation
  is that agent's first one, as SB3's auto-reset expects.
- Rewards are summed over every Unity step since the slot's last decision. Group rewards are
  in ``infos[i]["group_reward"]`` (added to the reward with ``add_group_reward=True``), the
  group in ``infos[i]["group_id"]``.
- Only agents that asked for a decision receive an action, and every agent that asked gets
  one: agents without a slot get a zero action. When no slot's agent asks in a Unity step,
  the wrapper steps Unity again (at most ``max_idle_steps`` times).
- A slot whose agent did not ask this step (decision periods out of phase, or its agent died
  with no replacement yet) is *inactive*: ``infos[i]["active"] = False``, reward 0,
  ``done=False``, the observation is a placeholder (the slot's last observation, zeros
  before it ever had an agent), and the action given for it next is dropped. A slot whose
  agent ended its episode with no replacement asking is ``done`` and inactive at once.
  :attr:`UnityVecEnv.active_mask` gives the same flags as one array.
- Several Unity instances step in parallel threads (gRPC releases the GIL). A crashed
  instance raises an error naming its worker id, or is re-opened with
  ``restart_on_crash=True`` (its slots end their episodes as truncated, with
  ``infos[i]["restarted"] = True``).

SB3 algorithms take neither ``Dict`` nor ``Tuple`` actions, so a hybrid behavior is exposed as
one ``Box`` by default (``hybrid="box"``, see :mod:`unity_sb3.spaces`).
"""

from __future__ import annotations

import contextlib
import difflib
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
    tile_images,
)

from unity_sb3.spaces import BehaviorSpaces, HybridMode, VisualMode, is_visual
from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)
from unity_sb3.unity.errors import UnityConfigurationError, UnityProcessError
from unity_sb3.wrappers._slots import assign_free_slots, match_ids, unassigned_rows
from unity_sb3.wrappers._steps import StepReader, normalize_steps

from mlagents_envs.base_env import ActionTuple, BaseEnv, DecisionSteps, TerminalSteps  # isort: skip
from mlagents_envs.exception import UnityActionException, UnityException, UnityTimeOutException  # isort: skip

EnvSource = BaseEnv | str | Callable[[], BaseEnv]
OtherBehaviors = Callable[[str, DecisionSteps], ActionTuple | None]


def unwrap_unity_vec_env(env: Any) -> UnityVecEnv | None:
    """The :class:`UnityVecEnv` under ``env``'s ``VecEnvWrapper`` layers, or ``None``."""
    from stable_baselines3.common.vec_env import VecEnvWrapper

    while isinstance(env, VecEnvWrapper):
        env = env.venv
    return env if isinstance(env, UnityVecEnv) else None


def is_unity_vec_env(env: Any) -> bool:
    """Whether ``env`` is a :class:`UnityVecEnv`, possibly under VecMonitor, VecNormalize, ..."""
    return unwrap_unity_vec_env(env) is not None


def mark_inactive_aware(env: Any) -> None:
    """Tell the :class:`UnityVecEnv` under ``env`` that its algorithm skips inactive steps.

    Silences the one warning UnityVecEnv gives plain SB3 algorithms about placeholder steps;
    does nothing for other VecEnvs.
    """
    venv = unwrap_unity_vec_env(env)
    if venv is not None:
        venv.warn_inactive = False


class UnityNoDecisionError(RuntimeError):
    """Unity stepped ``max_idle_steps`` times without any slot's agent asking for a decision."""


@dataclass
class _Instance:
    """One Unity instance and the bookkeeping of its slots (local indices ``0..n-1``)."""

    worker_id: int
    source: str | Callable[[], BaseEnv] | None
    env: BaseEnv
    start: int = 0
    n: int = 0
    agent: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bound: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    previous: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    had_agent: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # row in `dec`, -1 = inactive
    group_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    dec: DecisionSteps | None = None
    restarts: int = 0
    restart_times: list[float] = field(default_factory=list)  # time.monotonic() of recent restarts
    arange: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    all_bound: bool = False  # every slot has an agent
    identity: bool = False  # slot i's agent is row i of ``dec`` for every slot
    slot_of: dict[int, int] = field(default_factory=dict)  # agent id -> local slot, bound agents only
    steady_ids: np.ndarray | None = None  # ``dec.agent_id`` when every slot's agent asked (rows valid)
    slots: slice = field(default_factory=lambda: slice(0, 0))

    def allocate(self, n: int) -> None:
        self.n = n
        self.slots = slice(self.start, self.start + n)
        self.arange = np.arange(n, dtype=np.int64)
        self.agent = np.zeros(n, np.int64)
        self.bound = np.zeros(n, bool)
        self.previous = np.zeros(n, np.int64)
        self.had_agent = np.zeros(n, bool)
        self.rows = np.full(n, -1, np.int64)
        self.group_id = np.zeros(n, np.int64)

    def unbind_all(self) -> None:
        self.bound[:] = False
        self.had_agent[:] = False
        self.rows = np.full(self.n, -1, np.int64)
        self.slot_of.clear()
        self.all_bound = self.identity = False
        self.steady_ids = None


@dataclass
class _StepResult:
    """What one instance's step produced (observations are written into the shared buffer)."""

    reward: np.ndarray
    group_reward: np.ndarray
    done: np.ndarray
    truncated: np.ndarray
    terminal_obs: dict[int, Any]
    restarted: bool = False


class _SlotView:
    """What ``get_attr`` / ``env_method`` see for one slot before falling back to its Unity env."""

    def __init__(self, venv: UnityVecEnv, index: int) -> None:
        self._venv = venv
        self._index = index
        self.render_mode = venv._render_mode

    def action_masks(self) -> np.ndarray:
        return self._venv.action_masks()[self._index]

    @property
    def agent_id(self) -> int | None:
        return self._venv.slot_agent_ids()[self._index]

    @property
    def worker_id(self) -> int:
        return self._venv._instance_of(self._index).worker_id

    @property
    def behavior_name(self) -> str:
        return self._venv.behavior_name

    @property
    def active(self) -> bool:
        return bool(self._venv.active_mask[self._index])


class UnityVecEnv(VecEnv):
    """An SB3 ``VecEnv`` whose slots are the agents of one behavior across Unity instances.

    :param env: a ``BaseEnv``, a target string for :func:`unity_sb3.unity.connect.open_unity`
        (a build path, ``"editor"`` or an embedded scene name), a factory returning a
        ``BaseEnv``, or a list of those (one Unity instance each; instance ``i`` of a list of
        strings is opened with ``worker_id=i``).
    :param behavior_name: the behavior whose agents become slots; ``None`` takes the only one.
    :param num_slots: total number of slots (split evenly across instances), or one count per
        instance; default: the number of agents asking for a decision at reset, per instance.
    :param visual: visual observation format, see :class:`unity_sb3.spaces.BehaviorSpaces`.
    :param flatten_obs: concatenate several 1-D observations into one vector.
    :param hybrid: how hybrid actions are exposed (``"box"``: the one SB3 can train).
    :param add_group_reward: add the group reward to each slot's reward.
    :param restart_on_crash: re-open a crashed instance instead of raising (needs strings or
        factories, not ``BaseEnv`` objects).
    :param max_restarts: restarts allowed per instance over its lifetime before its crash is
        raised (ML-Agents' ``max_lifetime_restarts``); -1 for no limit.
    :param other_behaviors: ``f(behavior_name, decision_steps) -> ActionTuple | None`` that
        answers agents of the scene's other behaviors; ``None`` answers them with zeros.
    :param open_kwargs: keyword arguments for ``open_unity`` (strings only).
    :param max_idle_steps: Unity steps to advance, when no slot's agent asks, before giving up.
    :param restart_backoff: seconds; the k-th restart of an instance waits
        ``restart_backoff * (2**k - 1)`` seconds first (at most 60 s).
    :param restarts_rate_limit_n: restarts allowed per instance within any
        ``restarts_rate_limit_period_s`` seconds; one more crash in that window is raised
        (ML-Agents' ``restarts_rate_limit_n``, whose default is 1). -1 (the default here): no
        rate limit, only ``max_restarts`` and the backoff.
    :param restarts_rate_limit_period_s: the window of ``restarts_rate_limit_n``, in seconds.
    """

    def __init__(
        self,
        env: EnvSource | Sequence[EnvSource],
        behavior_name: str | None = None,
        *,
        num_slots: int | Sequence[int] | None = None,
        visual: VisualMode = "uint8",
        flatten_obs: bool = False,
        hybrid: HybridMode = "box",
        add_group_reward: bool = False,
        restart_on_crash: bool = False,
        max_restarts: int = 5,
        other_behaviors: OtherBehaviors | None = None,
        open_kwargs: dict[str, Any] | None = None,
        max_idle_steps: int = 1000,
        restart_backoff: float = 1.0,
        restarts_rate_limit_n: int = -1,
        restarts_rate_limit_period_s: float = 60.0,
    ) -> None:
        sources = [env] if isinstance(env, (str, BaseEnv)) or callable(env) else list(env)
        if not sources:
            raise UnityConfigurationError(
                "UnityVecEnv needs at least one Unity environment, got an empty list"
            )
        if max_idle_steps < 1:
            raise ValueError(f"max_idle_steps must be >= 1, got {max_idle_steps}")
        self.open_kwargs = dict(open_kwargs or {})
        self.restart_on_crash = restart_on_crash
        for name, value in (("max_restarts", max_restarts), ("restarts_rate_limit_n", restarts_rate_limit_n)):
            if int(value) < -1:
                raise UnityConfigurationError(f"{name} must be >= 0, or -1 for no limit; got {value}")
        if restarts_rate_limit_period_s <= 0:
            raise UnityConfigurationError(
                f"restarts_rate_limit_period_s must be a positive number of seconds, got {restarts_rate_limit_period_s}"
            )
        self.max_restarts = int(max_restarts)
        self.restart_backoff = float(restart_backoff)
        self.restarts_rate_limit_n = int(restarts_rate_limit_n)
        self.restarts_rate_limit_period_s = float(restarts_rate_limit_period_s)
        self.other_behaviors = other_behaviors
        self.add_group_reward = add_group_reward
        self.max_idle_steps = int(max_idle_steps)
        #: set to False by algorithms that skip inactive steps themselves
        self.warn_inactive = True
        self.closed = True  # until construction succeeds (``__del__`` must not close the caller's envs)
        self._warned_inactive = False
        self._pool: ThreadPoolExecutor | None = None
        self._instances: list[_Instance] = []
        try:
            self._open_all(sources)
            self.behavior_name = self._choose_behavior(behavior_name)
            spec = self._instances[0].env.behavior_specs[self.behavior_name]
            for inst in self._instances[1:]:
                other = inst.env.behavior_specs.get(self.behavior_name)
                if other != spec:
                    raise UnityConfigurationError(
                        f"Unity worker {inst.worker_id} has behavior {self.behavior_name!r} with spec "
                        f"{other}, but worker {self._instances[0].worker_id} has {spec}; all instances "
                        "must run the same scene"
                    )
            self.behavior_spec = spec
            self._reader = StepReader(self.behavior_name, spec)
            self.spaces = BehaviorSpaces(spec, visual=visual, flatten=flatten_obs, hybrid=hybrid)
            self._visual_index = next((i for i, s in enumerate(self.spaces.obs_specs) if is_visual(s)), None)
            self._render_mode = "rgb_array" if self._visual_index is not None else None
            counts, already_reset = self._reset_and_count(num_slots)
            total = int(sum(counts))
            if total == 0:
                raise UnityConfigurationError(
                    f"behavior {self.behavior_name!r} has no agent asking for a decision after reset; "
                    "pass num_slots to reserve slots for agents that appear later"
                )
            start = 0
            for inst, count in zip(self._instances, counts):
                inst.start = start
                start += count
            self._obs_buf = self.spaces.empty_observations(total)
            self._active = np.zeros(total, dtype=bool)
            self._masks: np.ndarray | None = None
            self._actions: Any = None
            self._seed: int | None = None
            self._fresh = True
            self._info_cache: list[dict[str, Any]] | None = None
            self._info_groups = np.zeros(0, np.int64)
            self._views = [_SlotView(self, i) for i in range(total)]
            self._slot_instance = np.repeat(np.arange(len(self._instances)), counts)
            super().__init__(total, self.spaces.observation_space, self.spaces.action_space)
            for inst, count in zip(self._instances, counts):
                inst.allocate(count)
            if already_reset:  # counting reset the instances already: bind the agents now asking
                for inst in self._instances:
                    self._bind_current(inst)
                self._after_update()
                self.reset_infos = [self._slot_info(i) for i in range(self.num_envs)]
            else:
                self.reset_infos = self._reset_instances(self._instances)
        except BaseException:
            # close what we opened; BaseEnv objects stay the caller's when construction fails
            self._close_instances(opened_only=True)
            raise
        self.closed = False

    # ------------------------------------------------------------------ opening
    def _open(self, source: EnvSource, worker_id: int, restart: bool = False) -> BaseEnv:
        if isinstance(source, BaseEnv):
            return source
        if isinstance(source, str):
            from unity_sb3.unity.connect import open_unity

            base = self.open_kwargs.get("worker_id", 0)  # open_kwargs["worker_id"] shifts every instance's
            kwargs = {**self.open_kwargs, "worker_id": base + worker_id}
            if restart:  # another program may have taken the crashed instance's port meanwhile
                kwargs["find_free_port"] = True
            return open_unity(source, **kwargs)
        if callable(source):
            env = source()
            if not isinstance(env, BaseEnv):
                raise UnityConfigurationError(
                    f"the factory for Unity worker {worker_id} returned {type(env).__name__}, not a BaseEnv"
                )
            return env
        raise UnityConfigurationError(
            f"cannot open {source!r}: pass a BaseEnv, a target string for open_unity, or a factory"
        )

    def _open_all(self, sources: list[EnvSource]) -> None:
        for i, source in enumerate(sources):
            if self.restart_on_crash and isinstance(source, BaseEnv):
                raise UnityConfigurationError(
                    "restart_on_crash=True needs a target string or a factory for every instance, so a "
                    f"crashed one can be re-opened; instance {i} is a {type(source).__name__} object"
                )
        if len(sources) > 1:
            self._pool = ThreadPoolExecutor(max_workers=len(sources), thread_name_prefix="unity-vec-env")
        envs = self._map(lambda i: self._open(sources[i], i), range(len(sources)), collect_errors=True)
        for i, (source, env) in enumerate(zip(sources, envs)):
            self._instances.append(
                _Instance(worker_id=i, source=None if isinstance(source, BaseEnv) else source, env=env)
            )
        errors = [e for e in envs if isinstance(e, BaseException)]
        if errors:
            self._instances = [inst for inst in self._instances if not isinstance(inst.env, BaseException)]
            raise errors[0]

    def _map(self, fn: Callable[[Any], Any], items: Sequence[Any], collect_errors: bool = False) -> list[Any]:
        """``fn`` over ``items``, in the thread pool when there are several instances."""
        if self._pool is None or len(items) <= 1:
            calls = [lambda item=item: fn(item) for item in items]
            return [_call(c, collect_errors) for c in calls]
        futures = [self._pool.submit(fn, item) for item in items]
        return [_call(f.result, collect_errors) for f in futures]

    def _choose_behavior(self, behavior_name: str | None) -> str:
        names = list(self._instances[0].env.behavior_specs)
        if behavior_name is None:
            if len(names) == 1:
                return names[0]
            if not names:
                raise UnityConfigurationError(
                    "the Unity environment has no behaviors; is an agent with a BehaviorParameters "
                    "component in the scene?"
                )
            raise UnityConfigurationError(
                f"the scene has several behaviors {names}; pass behavior_name= to pick the one whose agents "
                "become the slots (the others are answered by other_behaviors, zeros by default)"
            )
        if behavior_name not in names:
            same = [n for n in names if n.split("?", 1)[0] == behavior_name]  # "3DBall" for "3DBall?team=0"
            if len(same) == 1:
                return same[0]
            lowered = {n.lower(): n for n in names}  # case-insensitive: "3dball" -> "3DBall?team=0"
            close = [
                lowered[c] for c in difflib.get_close_matches(behavior_name.lower(), lowered, n=1, cutoff=0.5)
            ]
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnityConfigurationError(
                f"behavior {behavior_name!r} not found; the scene has {names}{hint}"
            )
        return behavior_name

    def _reset_and_count(self, num_slots: int | Sequence[int] | None) -> tuple[list[int], bool]:
        """Slots per instance; resets the instances when it has to count their agents."""
        n_inst = len(self._instances)
        if num_slots is None:

            def count(inst: _Instance) -> int:
                self._call_reset(inst)
                dec = self._wait_for_request(inst, lambda d: len(d) > 0)
                return len(dec)

            counts = self._map(count, self._instances)
            return counts, True
        if isinstance(num_slots, (int, np.integer)):
            if num_slots < 1 or num_slots % n_inst:
                raise UnityConfigurationError(
                    f"num_slots={num_slots} must be a positive multiple of the number of instances "
                    f"({n_inst}); or pass one count per instance"
                )
            return [int(num_slots) // n_inst] * n_inst, False
        counts = [int(c) for c in num_slots]
        if len(counts) != n_inst or any(c < 1 for c in counts):
            raise UnityConfigurationError(
                f"num_slots={list(num_slots)} needs one positive count per instance ({n_inst} instances)"
            )
        return counts, False

    # ------------------------------------------------------------------ Unity calls
    def _call_reset(self, inst: _Instance) -> None:
        inst.env.reset()

    def _answer_others(self, inst: _Instance) -> None:
        names = list(inst.env.behavior_specs)
        if len(names) == 1:
            return
        for name in names:
            if name == self.behavior_name:
                continue
            try:
                dec, term = inst.env.get_steps(name)
            except KeyError:  # a behavior registered but without agents yet
                continue
            if len(dec) == 0:
                continue
            dec, _ = normalize_steps(dec, term, inst.env.behavior_specs[name], name)
            action = self.other_behaviors(name, dec) if self.other_behaviors is not None else None
            if action is None:
                action = inst.env.behavior_specs[name].action_spec.empty_action(len(dec))
            inst.env.set_actions(name, action)

    def _answer_idle(self, inst: _Instance, dec: DecisionSteps) -> None:
        """Answer every requesting agent with a zero action (no slot takes part)."""
        if len(dec):
            inst.env.set_actions(self.behavior_name, self.behavior_spec.action_spec.empty_action(len(dec)))
        self._answer_others(inst)

    def _get_steps(self, inst: _Instance) -> tuple[DecisionSteps, TerminalSteps]:
        """This behavior's steps of ``inst``, normalised to arrays (any ``BaseEnv``, DESIGN 4.2)."""
        return self._reader.read(inst.env)

    def _wait_for_request(self, inst: _Instance, ready: Callable[[DecisionSteps], bool]) -> DecisionSteps:
        dec, _ = self._get_steps(inst)
        for _ in range(self.max_idle_steps):
            if ready(dec):
                return dec
            self._answer_idle(inst, dec)
            inst.env.step()
            dec, _ = self._get_steps(inst)
        if ready(dec):
            return dec
        raise UnityNoDecisionError(
            f"Unity worker {inst.worker_id}: no agent of behavior {self.behavior_name!r} that a slot could "
            f"take asked for a decision in {self.max_idle_steps} Unity steps. Do the agents have a "
            "DecisionRequester (or call RequestDecision)? Raise max_idle_steps if they decide that rarely."
        )

    # ------------------------------------------------------------------ reset
    def _reset_instance(self, inst: _Instance) -> None:
        if self._seed is not None and hasattr(inst.env, "reseed"):
            inst.env.reseed(self._seed + inst.worker_id)
        self._call_reset(inst)
        self._wait_for_request(inst, lambda d: len(d) > 0)
        self._bind_current(inst)

    def _bind_current(self, inst: _Instance) -> None:
        """Bind slots afresh to the agents asking right now (after a reset)."""
        inst.unbind_all()
        dec, _ = self._get_steps(inst)
        inst.dec = dec
        self._bind(inst, dec, np.full(inst.n, -1, np.int64))
        self._write_obs(inst, dec, np.flatnonzero(inst.rows >= 0))

    def _reset_instances(self, instances: list[_Instance]) -> list[dict[str, Any]]:
        results = self._map(lambda inst: self._guard(inst, lambda: self._reset_instance(inst)), instances)
        for inst, result in zip(instances, results):
            if isinstance(result, BaseException):
                self._restart_or_raise(inst, result)
        self._after_update()
        return [self._slot_info(i) for i in range(self.num_envs)]

    def reset(self) -> VecEnvObs:
        """Reset every Unity instance and bind agents to slots again.

        :return: the first observations, ``(num_envs, *obs_shape)`` (or a dict of those).
        """
        self._check_open()
        if self._fresh and self._seed is None:
            self._fresh = False
            return self._copy_obs()
        self.reset_infos = self._reset_instances(self._instances)
        self._seed = None
        self._fresh = False
        return self._copy_obs()

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Store a seed; instances that have ``reseed(seed)`` get ``seed + worker_id`` at the next reset."""
        seeds = super().seed(seed)
        self._seed = int(seeds[0]) if seeds else None
        self.action_space.seed(self._seed)
        return seeds

    # ------------------------------------------------------------------ step
    def step_async(self, actions: np.ndarray) -> None:
        self._check_open()
        if actions is None:
            raise ValueError(f"actions is None; pass one action per slot ({self.num_envs} slots)")
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        self._check_open()
        if self._actions is None:
            raise RuntimeError("step_wait() called without step_async(actions)")
        actions, self._actions = self._actions, None
        self._fresh = False
        instances = self._instances
        if len(instances) == 1:
            inst = instances[0]
            result = self._guard(inst, lambda: self._step_instance(inst, actions))
            if isinstance(result, BaseException):
                result = self._restart_or_raise(inst, result)
            results = [result]
            reward, group_reward, done = result.reward, result.group_reward, result.done
            active = inst.rows >= 0
            group_id = inst.group_id
        else:
            jobs = [(inst, _slice_actions(actions, inst.slots)) for inst in instances]
            results = self._map(lambda job: self._guard(job[0], lambda: self._step_instance(*job)), jobs)
            for k, (inst, result) in enumerate(zip(instances, results)):
                if isinstance(result, BaseException):
                    results[k] = self._restart_or_raise(inst, result)
            reward = np.concatenate([r.reward for r in results])
            group_reward = np.concatenate([r.group_reward for r in results])
            done = np.concatenate([r.done for r in results])
            active = np.concatenate([inst.rows >= 0 for inst in instances])
            group_id = np.concatenate([inst.group_id for inst in instances])
        self._active = active
        self._masks = None
        if self.add_group_reward:
            reward = reward + group_reward
        infos = self._base_infos(active, group_id, group_reward)
        if any(r.terminal_obs for r in results):
            for inst, r in zip(instances, results):
                for local, obs in r.terminal_obs.items():
                    info = infos[inst.start + local]
                    info["terminal_observation"] = obs
                    info["TimeLimit.truncated"] = bool(r.truncated[local])
                    if r.restarted:
                        info["restarted"] = True
        if self.warn_inactive and not self._warned_inactive and not active.all():
            self._warned_inactive = True
            warnings.warn(
                f"UnityVecEnv: {int((~active).sum())} of {self.num_envs} slots have no agent asking for a "
                "decision this step (decision periods out of phase, or agents that died with no replacement). "
                "Their steps are placeholders (infos[i]['active'] is False, reward 0) that plain SB3 "
                "algorithms train on; unity_sb3's algorithms skip them. Shown once.",
                stacklevel=3,
            )
        return self._copy_obs(), reward, done, infos

    def _base_infos(self, active: np.ndarray, group_id: np.ndarray, group_reward: np.ndarray) -> list[dict]:
        """Fresh info dicts; in the steady state (all active, no group reward, same groups) they are
        copies of cached ones, which is several times cheaper than building them with many slots."""
        cache = self._info_cache
        steady = self.num_envs > 32 and not group_reward.any() and active.all()
        if steady and cache is not None and np.array_equal(group_id, self._info_groups):
            return list(map(dict.copy, cache))
        infos: list[dict[str, Any]] = [
            {"active": a, "group_id": g, "group_reward": gr}
            for a, g, gr in zip(active.tolist(), group_id.tolist(), group_reward.tolist())
        ]
        if steady:
            self._info_cache = list(map(dict.copy, infos))
            self._info_groups = group_id.copy()
        return infos

    def _send(self, inst: _Instance, actions: Any) -> None:
        """Answer every agent that asked: slot actions for bound agents, zeros for the others."""
        dec = inst.dec
        assert dec is not None
        n_dec = len(dec)
        if n_dec:
            unity_actions = self.spaces.to_unity_actions(actions, inst.n)
            if inst.identity and n_dec == inst.n:
                full = unity_actions
            else:
                full = self.behavior_spec.action_spec.empty_action(n_dec)
                active = inst.rows >= 0
                targets = inst.rows[active]
                if self.spaces.continuous_size:
                    full.continuous[targets] = unity_actions.continuous[active]
                if self.spaces.branches:
                    full.discrete[targets] = unity_actions.discrete[active]
            inst.env.set_actions(self.behavior_name, full)
        self._answer_others(inst)

    def _step_instance(self, inst: _Instance, actions: Any) -> _StepResult:
        self._send(inst, actions)
        n = inst.n
        reward = np.zeros(n, np.float32)
        group_reward = np.zeros(n, np.float32)
        done = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        terminal_obs: dict[int, Any] = {}
        env, read = inst.env, self._reader.read
        for _ in range(self.max_idle_steps):
            env.step()
            dec, term = read(env)
            if len(term):
                self._absorb_terminal(inst, term, reward, group_reward, done, truncated, terminal_obs)
            inst.dec = dec
            ids = dec.agent_id
            steady = inst.steady_ids
            if steady is not None and len(ids) == len(steady) and (ids == steady).all():
                # steady state: the same agents ask as last time, in the same order, all with slots
                rows = inst.rows
                reward += dec.reward[rows]
                group_reward += dec.group_reward[rows]
                inst.group_id[:] = dec.group_id[rows]
                converted = self.spaces.observations(dec.obs)
                if inst.identity:
                    _put_slice(self._obs_buf, inst.slots, converted, n)
                else:
                    _put(self._obs_buf, inst.slots, _take(converted, rows))
                return _StepResult(reward, group_reward, done, truncated, terminal_obs)
            if len(ids) == 0:  # nobody of this behavior asks (between decisions): step on
                inst.rows = np.full(n, -1, np.int64)
                inst.identity = False
                inst.steady_ids = None
                self._answer_others(inst)
                continue
            rows = match_ids(inst.agent, inst.bound, ids)
            found = rows >= 0
            if found.any():
                reward[found] += dec.reward[rows[found]]
                group_reward[found] += dec.group_reward[rows[found]]
                inst.group_id[found] = dec.group_id[rows[found]]
            self._bind(inst, dec, rows)
            if inst.all_bound and (inst.rows >= 0).all():
                inst.steady_ids = np.array(ids, copy=True)
                inst.identity = len(ids) >= n and bool((inst.rows == inst.arange).all())
            # a slot whose agent ended its episode waits with the others for the next request, so
            # a death between two decisions does not make a step where every slot is inactive
            if (inst.rows >= 0).any():
                break
            self._answer_idle(inst, dec)
        else:
            if not done.any():
                raise UnityNoDecisionError(
                    f"Unity worker {inst.worker_id}: none of its {n} slots' agents of behavior "
                    f"{self.behavior_name!r} asked for a decision or ended an episode in {self.max_idle_steps} "
                    "Unity steps. Raise max_idle_steps if the agents decide that rarely."
                )
            # nobody asks any more, but episodes ended: report them
        self._write_obs(inst, inst.dec, np.flatnonzero(inst.rows >= 0))
        return _StepResult(reward, group_reward, done, truncated, terminal_obs)

    def _absorb_terminal(
        self,
        inst: _Instance,
        term: TerminalSteps,
        reward: np.ndarray,
        group_reward: np.ndarray,
        done: np.ndarray,
        truncated: np.ndarray,
        terminal_obs: dict[int, Any],
    ) -> None:
        # few agents end per step: a dict lookup beats sorting every slot's id
        slot_of = inst.slot_of
        pairs = [(slot_of[a], j) for j, a in enumerate(term.agent_id.tolist()) if a in slot_of]
        if not pairs:
            return
        ended = np.array([p[0] for p in pairs], dtype=np.int64)
        term_rows = np.array([p[1] for p in pairs], dtype=np.int64)
        for slot, _ in pairs:
            del slot_of[int(inst.agent[slot])]
        reward[ended] += term.reward[term_rows]
        group_reward[ended] += term.group_reward[term_rows]
        inst.group_id[ended] = term.group_id[term_rows]
        done[ended] = True
        truncated[ended] = term.interrupted[term_rows]
        converted = self.spaces.observations(term.obs)
        picked = _take(converted, term_rows)
        for j, local in enumerate(ended.tolist()):
            terminal_obs[local] = _row(picked, j)
        # placeholder until a new agent takes the slot: the terminal observation
        _put(self._obs_buf, inst.start + ended, picked)
        inst.bound[ended] = False
        rows = inst.rows.copy()  # may be the shared ``arange``
        rows[ended] = -1
        inst.rows = rows
        inst.all_bound = False
        inst.identity = False
        inst.steady_ids = None

    def _bind(self, inst: _Instance, dec: DecisionSteps, rows: np.ndarray) -> None:
        """Give free slots to unassigned requesting agents; ``rows`` maps bound slots into ``dec``."""
        inst.rows = rows
        inst.identity = False
        inst.steady_ids = None
        free = np.flatnonzero(~inst.bound)
        if len(free) == 0 or len(dec) == 0:
            inst.all_bound = len(free) == 0
            return
        candidates = unassigned_rows(rows, len(dec))
        pairs = assign_free_slots(
            free, inst.previous, inst.had_agent, dec.agent_id[candidates].astype(np.int64)
        )
        for slot, j in pairs:
            row = int(candidates[j])
            agent_id = int(dec.agent_id[row])
            inst.agent[slot] = agent_id
            inst.slot_of[agent_id] = slot
            inst.previous[slot] = agent_id
            inst.bound[slot] = True
            inst.had_agent[slot] = True
            inst.rows[slot] = row
            inst.group_id[slot] = int(dec.group_id[row])
        inst.all_bound = bool(inst.bound.all())

    def _write_obs(self, inst: _Instance, dec: DecisionSteps, local: np.ndarray) -> None:
        if len(local) == 0:
            return
        converted = self.spaces.observations(dec.obs)
        rows = inst.rows[local]
        if len(local) == inst.n and len(dec) >= inst.n and np.array_equal(rows, np.arange(inst.n)):
            _put_slice(self._obs_buf, inst.slots, converted, inst.n)
        else:
            _put(self._obs_buf, inst.start + local, _take(converted, rows))

    def _after_update(self) -> None:
        self._active = np.concatenate([inst.rows >= 0 for inst in self._instances])
        self._masks = None

    # ------------------------------------------------------------------ crashes
    def _guard(self, inst: _Instance, fn: Callable[[], Any]) -> Any:
        """Run ``fn``; return (not raise) a Unity crash so the caller can restart or report it."""
        try:
            return fn()
        except UnityActionException:
            raise
        except (UnityException, TimeoutError, ConnectionError, EOFError) as exc:
            return exc

    def _crash_error(self, inst: _Instance, exc: BaseException, detail: str) -> UnityProcessError:
        exit_code = getattr(exc, "exit_code", None)
        process = getattr(inst.env, "process", None)
        if exit_code is None and process is not None:
            exit_code = process.poll()
        error = UnityProcessError(
            inst.worker_id,
            detail=f"{detail}: {type(exc).__name__}: {exc}",
            exit_code=exit_code,
            log_path=getattr(exc, "log_path", None) or _str_or_none(getattr(inst.env, "log_path", None)),
        )
        error.__cause__ = exc
        return error

    def _restart_or_raise(self, inst: _Instance, exc: BaseException) -> _StepResult:
        if not self.restart_on_crash:
            raise self._crash_error(
                inst,
                exc,
                "crashed or stopped answering (pass restart_on_crash=True to re-open it automatically)",
            )
        last = exc
        _kill_if_hung(inst.env, exc)
        while self.max_restarts < 0 or inst.restarts < self.max_restarts:
            refused = self._rate_limited(inst)
            if refused:
                raise self._crash_error(inst, last, refused)
            wait = min(self.restart_backoff * (2**inst.restarts - 1), 60.0)
            inst.restarts += 1
            inst.restart_times.append(time.monotonic())
            if wait > 0:
                time.sleep(wait)
            with contextlib.suppress(Exception):  # the crashed instance may not close cleanly
                inst.env.close()
            try:
                assert inst.source is not None
                inst.env = self._open(inst.source, inst.worker_id, restart=True)
                spec = inst.env.behavior_specs.get(self.behavior_name)
                if spec != self.behavior_spec:
                    raise UnityConfigurationError(
                        f"Unity worker {inst.worker_id} came back with behavior spec {spec}, expected {self.behavior_spec}"
                    )
                terminal = {local: _row(self._obs_buf, inst.start + local) for local in range(inst.n)}
                terminal = {k: _copy(v) for k, v in terminal.items()}
                self._reset_instance(inst)
            except (UnityException, TimeoutError, ConnectionError, EOFError) as again:
                if isinstance(again, UnityConfigurationError):
                    raise
                last = again
                _kill_if_hung(inst.env, again)
                continue
            n = inst.n
            limit = "no limit" if self.max_restarts < 0 else f"at most {self.max_restarts}"
            warnings.warn(
                f"UnityVecEnv: Unity worker {inst.worker_id} crashed ({type(exc).__name__}: {exc}); "
                f"restarted it ({inst.restarts} of {limit})",
                stacklevel=3,
            )
            return _StepResult(
                np.zeros(n, np.float32),
                np.zeros(n, np.float32),
                np.ones(n, bool),
                np.ones(n, bool),
                terminal,
                restarted=True,
            )
        raise self._crash_error(inst, last, f"crashed again after {self.max_restarts} restarts")

    def _rate_limited(self, inst: _Instance) -> str | None:
        """Why the next restart of ``inst`` is refused by the rate limit, or ``None``."""
        if self.restarts_rate_limit_n < 0:
            return None
        cutoff = time.monotonic() - self.restarts_rate_limit_period_s
        inst.restart_times = [t for t in inst.restart_times if t > cutoff]
        if len(inst.restart_times) < self.restarts_rate_limit_n:
            return None
        return (
            f"crashed again after {len(inst.restart_times)} restart(s) within "
            f"{self.restarts_rate_limit_period_s:g} s (restarts_rate_limit_n={self.restarts_rate_limit_n}, "
            f"restarts_rate_limit_period_s={self.restarts_rate_limit_period_s:g}); a scene that crashes this "
            "often needs fixing (see its log), or raise the limits"
        )

    @property
    def restart_counts(self) -> list[int]:
        """How many times each Unity instance was restarted (one entry per instance)."""
        return [inst.restarts for inst in self._instances]

    # ------------------------------------------------------------------ masks, info
    def action_masks(self) -> np.ndarray:
        """Per-slot flat action masks in sb3-contrib's format.

        :return: ``(num_envs, sum(discrete_branches))`` bool, True = allowed. Inactive slots
            allow everything (their action is dropped anyway).
        """
        if self._masks is None:
            masks = np.ones((self.num_envs, self.spaces.mask_size), dtype=bool)
            if self.spaces.mask_size:
                for inst in self._instances:
                    local = np.flatnonzero(inst.rows >= 0)
                    if len(local) and inst.dec is not None:
                        dec_masks = self.spaces.action_masks(inst.dec.action_mask, len(inst.dec))
                        masks[inst.start + local] = dec_masks[inst.rows[local]]
            self._masks = masks
        return self._masks

    @property
    def active_mask(self) -> np.ndarray:
        """``(num_envs,)`` bool: whether each slot's observation is real and its next action is sent."""
        return self._active

    def slot_agent_ids(self) -> list[int | None]:
        """The Unity agent id bound to each slot (``None`` for a slot without an agent)."""
        out: list[int | None] = []
        for inst in self._instances:
            out.extend(int(a) if b else None for a, b in zip(inst.agent.tolist(), inst.bound.tolist()))
        return out

    @property
    def worker_ids(self) -> list[int]:
        """The worker id of each slot's Unity instance."""
        return [self._instance_of(i).worker_id for i in range(self.num_envs)]

    @property
    def unity_envs(self) -> list[BaseEnv]:
        """The ``BaseEnv`` of each Unity instance (not per slot)."""
        return [inst.env for inst in self._instances]

    def _instance_of(self, index: int) -> _Instance:
        return self._instances[int(self._slot_instance[index])]

    def _slot_info(self, index: int) -> dict[str, Any]:
        inst = self._instance_of(index)
        return {
            "active": bool(self._active[index]),
            "group_id": int(inst.group_id[index - inst.start]),
            "group_reward": 0.0,
        }

    # ------------------------------------------------------------------ VecEnv plumbing
    def _lookup(self, name: str, index: int) -> tuple[Any, bool]:
        view = self._views[index]
        if hasattr(view, name):
            return view, True
        env = self._instance_of(index).env
        if hasattr(env, name):
            return env, True
        return None, False

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Per slot: the slot's own attribute (``action_masks``, ``agent_id``, ``worker_id``,
        ``active``, ``render_mode``), else the attribute of the slot's Unity env (e.g.
        ``unity_sb3_channels``)."""
        values = []
        for i in self._get_indices(indices):
            owner, ok = self._lookup(attr_name, i)
            if not ok:
                raise AttributeError(
                    f"neither UnityVecEnv slot {i} nor its Unity env ({type(self._instance_of(i).env).__name__}) "
                    f"has an attribute {attr_name!r}"
                )
            values.append(getattr(owner, attr_name))
        return values

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set on the slot's Unity env when it has the attribute (shared by its slots), else on the slot."""
        for i in self._get_indices(indices):
            env = self._instance_of(i).env
            setattr(env if hasattr(env, attr_name) else self._views[i], attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        index_list = list(self._get_indices(indices))
        if method_name == "action_masks" and not method_args and not method_kwargs:
            masks = self.action_masks()
            return [masks[i] for i in index_list]
        results = []
        for i in index_list:
            owner, ok = self._lookup(method_name, i)
            if not ok:
                raise AttributeError(
                    f"neither UnityVecEnv slot {i} nor its Unity env has a method {method_name!r}"
                )
            results.append(getattr(owner, method_name)(*method_args, **method_kwargs))
        return results

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """Slots are not gymnasium envs, so no slot is wrapped."""
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Each slot's first visual observation as an ``(H, W, 3)`` uint8 image."""
        if self._visual_index is None:
            raise ValueError(
                f"behavior {self.behavior_name!r} has no visual observation to render; "
                "add a camera or render-texture sensor to the agent"
            )
        images = self._obs_buf
        if isinstance(images, dict):
            images = images[self.spaces.keys[self._visual_index]]
        images = np.asarray(images)
        if not self.spaces.channels_last:
            images = np.moveaxis(images, 1, -1)
        if not self.spaces.uint8_images:
            images = np.clip(np.rint(images * 255.0), 0, 255).astype(np.uint8)
        if images.shape[-1] == 1:
            images = np.repeat(images, 3, axis=-1)
        elif images.shape[-1] > 3:
            images = images[..., :3]
        return list(images)

    def render(self, mode: str | None = None) -> np.ndarray | None:
        """``"rgb_array"``: the slots' first visual observations tiled into one image."""
        if (mode or self.render_mode) == "rgb_array" and self._visual_index is not None:
            return tile_images(self.get_images())
        return super().render(mode)

    def close(self) -> None:
        """Close every Unity instance; calling it again does nothing."""
        if self.closed:
            return
        self.closed = True
        self._close_instances()

    def _close_instances(self, opened_only: bool = False) -> None:
        for inst in self._instances:
            if opened_only and inst.source is None:
                continue
            try:
                inst.env.close()
            except Exception as exc:  # keep closing the others
                warnings.warn(f"closing Unity worker {inst.worker_id} failed: {exc}", stacklevel=3)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this UnityVecEnv is closed; create a new one")

    def _copy_obs(self) -> VecEnvObs:
        if isinstance(self._obs_buf, dict):
            return {k: v.copy() for k, v in self._obs_buf.items()}
        return self._obs_buf.copy()

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            with contextlib.suppress(Exception):
                self.close()


# ---------------------------------------------------------------------- helpers
def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _kill_if_hung(env: BaseEnv, exc: BaseException) -> None:
    """Kill the process of an instance that stopped answering: it cannot read a polite goodbye,
    and ``close()`` would otherwise wait for it before terminating it."""
    if not isinstance(exc, TimeoutError | UnityTimeOutException):
        return
    process = getattr(env, "process", None)
    if process is not None and process.poll() is None:
        with contextlib.suppress(OSError):
            process.kill()


def _call(fn: Callable[[], Any], collect_errors: bool) -> Any:
    if not collect_errors:
        return fn()
    try:
        return fn()
    except Exception as exc:
        return exc


def _slice_actions(actions: Any, sl: slice) -> Any:
    if isinstance(actions, dict):
        return {k: np.asarray(v)[sl] for k, v in actions.items()}
    if isinstance(actions, tuple):
        return tuple(np.asarray(v)[sl] for v in actions)
    return np.asarray(actions)[sl]


def _take(obs: Any, rows: np.ndarray) -> Any:
    if isinstance(obs, dict):
        return {k: v[rows] for k, v in obs.items()}
    return obs[rows]


def _row(obs: Any, index: int) -> Any:
    if isinstance(obs, dict):
        return {k: v[index] for k, v in obs.items()}
    return obs[index]


def _copy(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: np.array(v) for k, v in obs.items()}
    return np.array(obs)


def _put(buf: Any, index: np.ndarray, values: Any) -> None:
    if isinstance(buf, dict):
        for k, v in buf.items():
            v[index] = values[k]
    else:
        buf[index] = values


def _put_slice(buf: Any, sl: slice, values: Any, n: int) -> None:
    if isinstance(buf, dict):
        for k, v in buf.items():
            v[sl] = values[k][:n]
    else:
        buf[sl] = values[:n]
