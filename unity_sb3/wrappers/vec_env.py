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
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
    tile_images,
)

from unity_sb3.slots import ACTIVE, GROUP_ID, GROUP_REWARD, TERMINAL_OBSERVATION
from unity_sb3.spaces import BehaviorSpaces, HybridMode, VisualMode, is_visual
from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers._steps import StepReader
from unity_sb3.wrappers.behavior import choose_behavior

from mlagents_envs.base_env import ActionTuple, BaseEnv, DecisionSteps  # isort: skip
from unity_sb3.wrappers.instances import (
    EnvSource,
    Instance,
    InstancesMixin,
    StepResult,
    same_values,
    slice_actions,
)
from unity_sb3.wrappers.restarts import RestartMixin, RestartPolicy

OtherBehaviors = Callable[[str, DecisionSteps], ActionTuple | None]


def _add_terminal_infos(infos: list[dict[str, Any]], start: int, result: StepResult) -> None:
    """The terminal observation, truncation and restart flag of each slot that ended in ``result`` (of
    the instance whose slots begin at ``start``), in its info."""
    truncated = result.truncated.tolist()
    for local, obs in result.terminal_obs.items():
        info = infos[start + local]
        info[TERMINAL_OBSERVATION] = obs
        info["TimeLimit.truncated"] = truncated[local]
        if result.restarted:
            info["restarted"] = True


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

    @property
    def warn_inactive(self) -> bool:
        """The env's, so that ``has_attr`` / ``set_attr`` reach it (see :mod:`unity_sb3.slots`)."""
        return self._venv.warn_inactive

    @warn_inactive.setter
    def warn_inactive(self, value: bool) -> None:
        self._venv.warn_inactive = bool(value)


class UnityVecEnv(RestartMixin, InstancesMixin, VecEnv):
    """An SB3 ``VecEnv`` whose slots are the agents of one behavior across Unity instances.

    :param env: a ``BaseEnv``, a target string for :func:`unity_sb3.open.open_unity`
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
        self.restart_policy = RestartPolicy(
            max_restarts, restarts_rate_limit_n, restarts_rate_limit_period_s
        ).check(convert=True)
        self.restart_backoff = float(restart_backoff)
        self.other_behaviors = other_behaviors
        self.add_group_reward = add_group_reward
        self.max_idle_steps = int(max_idle_steps)
        #: set to False by algorithms that skip inactive steps themselves (unity_sb3.slots.mark_inactive_aware)
        self.warn_inactive = True
        self.closed = True  # until construction succeeds (``__del__`` must not close the caller's envs)
        self._warned_inactive = False
        self._pool: ThreadPoolExecutor | None = None
        self._instances: list[Instance] = []
        try:
            self._open_all(sources)
            self.behavior_name = choose_behavior(
                self._instances[0].env.behavior_specs,
                behavior_name,
                "whose agents become the slots (the others are answered by other_behaviors, zeros by default)",
            )
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
            # the bytes of an all-active mask and of all-zero group rewards (float32 +0.0)
            self._every_slot, self._no_group_reward = b"\x01" * total, bytes(4 * total)
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

    def _reset_instances(self, instances: list[Instance]) -> list[dict[str, Any]]:
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
            reward, group_reward, done, active = (
                result.reward,
                result.group_reward,
                result.done,
                result.active,
            )
            group_id = inst.group_id
        else:
            jobs = [(inst, slice_actions(actions, inst.slots)) for inst in instances]
            results = self._map(lambda job: self._guard(job[0], lambda: self._step_instance(*job)), jobs)
            for k, (inst, result) in enumerate(zip(instances, results)):
                if isinstance(result, BaseException):
                    results[k] = self._restart_or_raise(inst, result)
            reward = np.concatenate([r.reward for r in results])
            group_reward = np.concatenate([r.group_reward for r in results])
            done = np.concatenate([r.done for r in results])
            active = np.concatenate([r.active for r in results])
            group_id = np.concatenate([inst.group_id for inst in instances])
        self._active = active
        self._masks = None
        if self.add_group_reward:
            reward = reward + group_reward
        infos = self._base_infos(active, group_id, group_reward)
        for inst, r in zip(instances, results):
            if r.terminal_obs:
                _add_terminal_infos(infos, inst.start, r)
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
        copies of cached ones, which is several times cheaper than building them. The state is told by
        comparing bytes (~0.1 us each, a reduction takes ~1 us); a group reward of -0.0, which no step
        gives, would only build the dicts afresh."""
        cache = self._info_cache
        steady = active.tobytes() == self._every_slot and group_reward.tobytes() == self._no_group_reward
        groups = self._info_groups
        if steady and cache is not None and len(groups) == len(group_id) and same_values(group_id, groups):
            return list(map(dict.copy, cache))
        infos: list[dict[str, Any]] = [
            {ACTIVE: a, GROUP_ID: g, GROUP_REWARD: gr}
            for a, g, gr in zip(active.tolist(), group_id.tolist(), group_reward.tolist())
        ]
        if steady:
            self._info_cache = list(map(dict.copy, infos))
            self._info_groups = group_id.copy()
        return infos

    def _after_update(self) -> None:
        self._active = np.concatenate([inst.rows >= 0 for inst in self._instances])
        self._masks = None

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

    def _instance_of(self, index: int) -> Instance:
        return self._instances[int(self._slot_instance[index])]

    def _slot_info(self, index: int) -> dict[str, Any]:
        inst = self._instance_of(index)
        return {
            ACTIVE: bool(self._active[index]),
            GROUP_ID: int(inst.group_id[index - inst.start]),
            GROUP_REWARD: 0.0,
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
        ``active``, ``render_mode``, ``warn_inactive``), else the attribute of the slot's Unity env (e.g.
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

    def _close_instances(self, opened_only: bool = False, join: bool = True) -> None:
        """Close the instances (only those this env opened, with ``opened_only``), then the thread pool;
        ``join=False`` leaves its idle threads to exit by themselves."""
        for inst in self._instances:
            if opened_only and inst.source is None:
                continue
            try:
                inst.env.close()
            except Exception as exc:  # keep closing the others
                warnings.warn(f"closing Unity worker {inst.worker_id} failed: {exc}", stacklevel=3)
        if self._pool is not None:
            self._pool.shutdown(wait=join, cancel_futures=True)
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
            self.closed = True
            # no join from a finalizer: a garbage collection can run it while this thread holds
            # threading's internal lock, which joining takes again (a hang of the test suite)
            with contextlib.suppress(Exception):
                self._close_instances(join=False)
