"""Expert data for behavioral cloning, in a model's own observation and action spaces.

:func:`bc_data` turns what a user has (``.demo`` paths, a :class:`Demonstration`, or arrays)
into a :class:`BCData`: flat transitions in the model's spaces, grouped into trajectories
(needed for recurrent policies and for the critic warm-up's Monte Carlo returns).

A ``.demo`` file is converted with :class:`unity_sb3.spaces.BehaviorSpaces`, the same
conversion ``UnityVecEnv`` applies to live observations. When the model's environment is a
``UnityVecEnv`` its own ``BehaviorSpaces`` is used (after :func:`check_demo_spec` against its
``BehaviorSpec``); otherwise the ``BehaviorSpaces`` options (visual format, flattening, hybrid
layout) whose spaces equal the model's are found, and a demo that fits none of them is refused
with both sets of spaces in the message. Observations stay raw here: when the model trains
behind ``VecNormalize``, each minibatch is normalised with its statistics at that moment.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from unity_sb3.algorithms.distributions import action_layout, is_hybrid_space
from unity_sb3.demos.reader import Demonstration, DemoSpecError, check_demo_spec, load_demo

__all__ = ["BCData", "DemoSource", "bc_data", "find_behavior_spaces"]

_OBS_KEYS = ("observations", "obs")
_ACT_KEYS = ("actions", "acts")
_NEXT_KEYS = ("next_observations", "next_obs")


@dataclass
class BCData:
    """Expert transitions in a model's spaces, in trajectory order.

    :param observations: ``(M, *obs_shape)`` array, or a dict of those for a ``Dict`` space.
    :param actions: ``(M, *action_shape)`` in the model's action space: float32 for ``Box``,
        int64 ``(M,)`` for ``Discrete``, int64 ``(M, branches)`` for ``MultiDiscrete``, float32
        ``(M, c + k)`` (continuous values, then branch indices) for a hybrid ``Tuple(Box, MultiDiscrete)``.
    :param action_masks: ``(M, sum(branches))`` bool, True = allowed, or None.
    :param rewards: ``(M,)`` float32 reward after each action, or None when unknown.
    :param trajectory: ``(M,)`` int64 index of the trajectory each transition belongs to;
        trajectories are contiguous runs of transitions.
    :param end_terminal: ``(n_trajectories,)`` bool, the trajectory ended in a true terminal
        state (value 0 after it); otherwise (time limit, recording stopped) it is bootstrapped.
    :param end_observations: ``(n_trajectories, *obs_shape)`` the observation after each
        trajectory's last action (the bootstrap state), or None when unknown (then the last
        transition's own observation stands in).
    :param dones: ``(M,)`` bool, the episode ended with this transition (terminal or interrupted;
        GAIL's discriminator sees it with ``use_actions``), or None when unknown.
    """

    observations: Any
    actions: np.ndarray
    action_masks: np.ndarray | None
    rewards: np.ndarray | None
    trajectory: np.ndarray
    end_terminal: np.ndarray
    end_observations: Any = None
    dones: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def n_trajectories(self) -> int:
        return len(self.end_terminal)

    @property
    def episode_starts(self) -> np.ndarray:
        """``(M,)`` bool, True at the first transition of each trajectory."""
        starts = np.ones(len(self), dtype=bool)
        starts[1:] = self.trajectory[1:] != self.trajectory[:-1]
        return starts

    def select(self, indices: np.ndarray) -> BCData:
        """The transitions at ``indices`` (whole trajectories keep their order and end data)."""
        indices = np.asarray(indices, dtype=np.int64)
        kept, new_traj = np.unique(self.trajectory[indices], return_inverse=True)
        return BCData(
            observations=take(self.observations, indices),
            actions=self.actions[indices],
            action_masks=None if self.action_masks is None else self.action_masks[indices],
            rewards=None if self.rewards is None else self.rewards[indices],
            trajectory=new_traj.astype(np.int64),
            end_terminal=self.end_terminal[kept],
            end_observations=None if self.end_observations is None else take(self.end_observations, kept),
            dones=None if self.dones is None else self.dones[indices],
        )

    def discounted_returns(self, gamma: float) -> tuple[np.ndarray, np.ndarray]:
        """Monte Carlo returns with a zero tail, and the discount of each trajectory's tail.

        :param gamma: discount factor.
        :return: ``(returns, tail_discount)``, both ``(M,)`` float32; the full return of
            transition ``t`` is ``returns[t] + tail_discount[t] * V(end state)`` where the end
            state's value is 0 for terminal trajectories (``tail_discount`` is 0 there).
        """
        if self.rewards is None:
            raise ValueError(
                "the critic warm-up needs rewards: pass a .demo file or a Demonstration, or arrays with 'rewards'"
            )
        returns = np.zeros(len(self), dtype=np.float64)
        tail = np.zeros(len(self), dtype=np.float64)
        g, d = 0.0, 1.0
        for t in range(len(self) - 1, -1, -1):
            if t == len(self) - 1 or self.trajectory[t + 1] != self.trajectory[t]:
                g = 0.0
                d = 0.0 if self.end_terminal[self.trajectory[t]] else 1.0
            g = float(self.rewards[t]) + gamma * g
            d = gamma * d
            returns[t], tail[t] = g, d
        return returns.astype(np.float32), tail.astype(np.float32)


#: what :func:`bc_data` accepts
DemoSource = (
    str
    | os.PathLike
    | Sequence[str | os.PathLike]
    | Demonstration
    | Mapping[str, Any]
    | tuple[Any, Any]
    | BCData
)


def take(obs: Any, indices: Any) -> Any:
    """Rows ``indices`` of an observation batch (array or dict of arrays)."""
    if isinstance(obs, dict):
        return {k: v[indices] for k, v in obs.items()}
    return obs[indices]


def _obs_len(obs: Any) -> int:
    if isinstance(obs, dict):
        return len(next(iter(obs.values())))
    return len(obs)


# ---------------------------------------------------------------------------------- spaces
def _same_space(a: spaces.Space, b: spaces.Space) -> bool:
    """Spaces equal in type, shape and dtype (bounds of ``Box`` are not compared)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, spaces.Dict):
        return list(a.spaces) == list(b.spaces) and all(_same_space(a[k], b[k]) for k in a.spaces)
    if isinstance(a, spaces.Tuple):
        return len(a.spaces) == len(b.spaces) and all(_same_space(x, y) for x, y in zip(a.spaces, b.spaces))
    if isinstance(a, spaces.Discrete):
        return int(a.n) == int(b.n)
    if isinstance(a, spaces.MultiDiscrete):
        return np.array_equal(a.nvec, b.nvec)
    return a.shape == b.shape and a.dtype == b.dtype


def _unity_vec_env(model: Any) -> Any:
    env = model.get_env() if hasattr(model, "get_env") else None
    while env is not None:
        if hasattr(env, "spaces") and hasattr(env, "behavior_spec"):
            return env
        env = getattr(env, "venv", None)
    return None


def find_behavior_spaces(
    demo: Demonstration, observation_space: spaces.Space, action_space: spaces.Space
) -> Any:
    """The :class:`BehaviorSpaces` of ``demo``'s spec whose spaces equal the given ones.

    :raises DemoSpecError: no visual / flatten / hybrid option gives the model's spaces.
    """
    from unity_sb3.spaces import VISUAL_MODES, BehaviorSpaces

    spec = demo.behavior_spec
    flat_ok = all(len(s.shape) == 1 for s in spec.observation_specs)
    for visual, flatten, hybrid in itertools.product(VISUAL_MODES, (False, True), ("box", "dict", "tuple")):
        if flatten and not flat_ok:
            continue
        candidate = BehaviorSpaces(spec, visual=visual, flatten=flatten, hybrid=hybrid)
        if _same_space(candidate.observation_space, observation_space) and _same_space(
            candidate.action_space, action_space
        ):
            return candidate
    default = BehaviorSpaces(spec, hybrid="box")
    raise DemoSpecError(
        f"demonstration {demo.behavior_name!r} does not fit the model: its observations and actions "
        f"convert to {default.observation_space} and {default.action_space} (as UnityVecEnv gives them), "
        f"but the model has observation space {observation_space} and action space {action_space}. "
        "Record the demo in the scene the model trains on, or train the model on the demo's behavior."
    )


# ---------------------------------------------------------------------------------- conversion
def bc_data(model: Any, demos: DemoSource) -> BCData:
    """Convert expert data to the model's spaces (see the module docstring).

    :param model: an SB3 model (its ``observation_space`` / ``action_space`` are the target).
    :param demos: a ``.demo`` path, a directory, a list of those, a :class:`Demonstration`, a
        mapping with ``observations`` and ``actions`` (optional ``rewards``, ``dones``,
        ``truncated``, ``next_observations``, ``action_masks``) already in the model's spaces,
        an ``(observations, actions)`` tuple, or a :class:`BCData`.
    :raises DemoSpecError: the demonstration does not fit the model's spaces.
    :raises ValueError: arrays with wrong shapes or out-of-range actions.
    """
    if isinstance(demos, BCData):
        data = demos
    elif isinstance(demos, Demonstration):
        data = _from_demonstration(model, demos)
    elif isinstance(demos, Mapping):
        data = _from_arrays(model, demos)
    elif (
        isinstance(demos, tuple)
        and len(demos) == 2
        and not all(isinstance(d, (str, os.PathLike)) for d in demos)
    ):
        data = _from_arrays(model, {"observations": demos[0], "actions": demos[1]})
    elif isinstance(demos, (str, os.PathLike)) or (
        isinstance(demos, Sequence) and all(isinstance(d, (str, os.PathLike)) for d in demos)
    ):
        env = _unity_vec_env(model)
        demo = load_demo(demos, expected_spec=None if env is None else env.behavior_spec)
        data = _from_demonstration(model, demo)
    else:
        raise TypeError(
            "demos must be a .demo path (or a list of paths / a directory), a Demonstration, a dict with "
            f"'observations' and 'actions', or an (observations, actions) tuple; got {type(demos).__name__}"
        )
    if len(data) == 0:
        raise ValueError("the demonstration holds no transitions (an agent step followed by another)")
    return data


def _from_demonstration(model: Any, demo: Demonstration) -> BCData:
    env = _unity_vec_env(model)
    if env is not None:
        check_demo_spec(demo, env.behavior_spec)
        behavior_spaces = env.spaces
        if not (
            _same_space(behavior_spaces.observation_space, model.observation_space)
            and _same_space(behavior_spaces.action_space, model.action_space)
        ):  # the env is wrapped (frame stacking, ...): search as for any other env
            behavior_spaces = find_behavior_spaces(demo, model.observation_space, model.action_space)
    else:
        behavior_spaces = find_behavior_spaces(demo, model.observation_space, model.action_space)
    t = demo.transitions(spaces=behavior_spaces)
    m = len(t)
    starts = np.ones(m, dtype=bool)
    starts[1:] = t.records[1:] != t.next_records[:-1]
    trajectory = np.cumsum(starts) - 1
    ends = np.flatnonzero(np.append(starts[1:], True))  # last transition of each trajectory
    allowed = demo.allowed_actions
    return BCData(
        observations=t.obs,
        actions=_check_actions(t.acts, model.action_space),
        action_masks=None if allowed is None else allowed[t.records],
        rewards=t.rewards.astype(np.float32),
        trajectory=trajectory.astype(np.int64),
        end_terminal=(t.dones & ~t.interrupted)[ends],
        end_observations=take(t.next_obs, ends),
        dones=np.asarray(t.dones, dtype=bool),
    )


def _get(arrays: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in arrays:
            return arrays[key]
    return None


def _from_arrays(model: Any, arrays: Mapping[str, Any]) -> BCData:
    obs = _get(arrays, _OBS_KEYS)
    acts = _get(arrays, _ACT_KEYS)
    if obs is None or acts is None:
        raise ValueError(
            f"demonstration arrays need 'observations' (or 'obs') and 'actions' (or 'acts'); got keys {sorted(arrays)}"
        )
    obs = _check_obs(_per_spec_to_space(model, obs), model.observation_space, "observations")
    m = _obs_len(obs)
    acts = _check_actions(acts, model.action_space, m)
    dones = arrays.get("dones")
    dones = np.zeros(m, bool) if dones is None else np.asarray(dones, dtype=bool).reshape(-1)
    truncated = _get(arrays, ("truncated", "interrupted"))
    truncated = np.zeros(m, bool) if truncated is None else np.asarray(truncated, dtype=bool).reshape(-1)
    for name, value in (("dones", dones), ("truncated", truncated)):
        if len(value) != m:
            raise ValueError(f"{name} has {len(value)} entries, observations has {m}")
    rewards = arrays.get("rewards", arrays.get("rews"))
    if rewards is not None:
        rewards = np.asarray(rewards, dtype=np.float32).reshape(-1)
        if len(rewards) != m:
            raise ValueError(f"rewards has {len(rewards)} entries, observations has {m}")
    masks = arrays.get("action_masks")
    if masks is not None:
        masks = np.asarray(masks, dtype=bool).reshape(m, -1)
    # a transition with done ends its trajectory; the data's end ends the last one
    starts = np.ones(m, dtype=bool)
    starts[1:] = dones[:-1]
    trajectory = np.cumsum(starts) - 1
    ends = np.flatnonzero(np.append(starts[1:], True))
    next_obs = _get(arrays, _NEXT_KEYS)
    end_obs = None
    if next_obs is not None:
        next_obs = _per_spec_to_space(model, next_obs)
        end_obs = take(_check_obs(next_obs, model.observation_space, "next_observations"), ends)
    return BCData(
        observations=obs,
        actions=acts,
        action_masks=masks,
        rewards=rewards,
        trajectory=trajectory.astype(np.int64),
        end_terminal=(dones & ~truncated)[ends],
        end_observations=end_obs,
        dones=dones,
    )


_PER_SPEC_HINT = (
    " A list with one array per observation spec (Unity's layout) is converted only when the model's "
    "env is a UnityVecEnv of that behavior (it knows the spec order and visual format); otherwise pass "
    "a Demonstration or arrays in the observation space's layout."
)


def _per_spec_to_space(model: Any, obs: Any) -> Any:
    """Observations in Unity's layout (a list with one ``(M, *spec.shape)`` array per observation
    spec, in spec order) -> the model's space, with its ``UnityVecEnv``'s ``BehaviorSpaces``.

    Anything else is returned as it is. Without a ``UnityVecEnv`` the spec order is unknown (a
    ``Dict`` space's keys are sorted), so such a list is left for :func:`_check_obs` to refuse.
    """
    if not isinstance(obs, (list, tuple)):
        return obs
    env = _unity_vec_env(model)
    if env is None or not _same_space(env.spaces.observation_space, model.observation_space):
        return obs
    specs = env.spaces.obs_specs
    if len(obs) != len(specs) or any(
        np.ndim(o) != len(s.shape) + 1 or np.shape(o)[1:] != tuple(s.shape) for o, s in zip(obs, specs)
    ):
        return obs
    return env.spaces.observations([np.asarray(o, dtype=np.float32) for o in obs])


def _check_obs(obs: Any, space: spaces.Space, name: str) -> Any:
    if isinstance(space, spaces.Dict):
        if not isinstance(obs, Mapping) or set(obs) != set(space.spaces):
            keys = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
            raise ValueError(
                f"{name} must be a dict with keys {sorted(space.spaces)} (the model's Dict space); "
                f"got {keys}.{_PER_SPEC_HINT if isinstance(obs, (list, tuple)) else ''}"
            )
        out = {k: _check_obs(obs[k], space[k], f"{name}[{k!r}]") for k in space.spaces}
        if len({len(v) for v in out.values()}) > 1:
            raise ValueError(f"{name}: the entries have different lengths {[len(v) for v in out.values()]}")
        return out
    array = np.asarray(obs)
    shape = tuple(space.shape)
    if array.shape[1:] != shape:
        raise ValueError(
            f"{name} have shape {array.shape}; the model's observation space needs (N, *{shape})."
            f"{_PER_SPEC_HINT if isinstance(obs, (list, tuple)) else ''}"
        )
    return array.astype(space.dtype, copy=False)


def _check_hybrid_actions(acts: Any, space: spaces.Tuple, m: int | None) -> np.ndarray:
    """Hybrid actions, ``(continuous (M, c), discrete (M, k))`` or flat ``(M, c + k)`` -> flat float32 ``(M, c + k)``."""
    c, branches = action_layout(space)
    if isinstance(acts, Mapping):
        acts = (acts.get("continuous"), acts.get("discrete"))
    if isinstance(acts, (tuple, list)) and len(acts) == 2:
        n = len(np.asarray(acts[0])) if m is None else m
        try:
            continuous = np.asarray(acts[0], dtype=np.float32).reshape(n, c)
            discrete = np.asarray(acts[1]).reshape(n, len(branches))
        except ValueError:
            raise ValueError(
                f"hybrid actions need continuous (M, {c}) and discrete (M, {len(branches)}) parts; got shapes "
                f"{np.shape(acts[0])} and {np.shape(acts[1])}"
            ) from None
    else:
        flat = np.asarray(acts, dtype=np.float32)
        n = len(flat) if m is None else m
        if flat.size != n * (c + len(branches)):
            raise ValueError(
                f"hybrid actions have shape {flat.shape}; the model's action space {space} needs "
                f"({n}, {c + len(branches)}) (continuous then branch indices) or a (continuous, discrete) pair"
            )
        flat = flat.reshape(n, c + len(branches))
        continuous, discrete = flat[:, :c], flat[:, c:]
    discrete = _check_actions(discrete, spaces.MultiDiscrete(branches), n)
    return np.concatenate([continuous, discrete.astype(np.float32)], axis=1)


def _check_actions(acts: Any, space: spaces.Space, m: int | None = None) -> np.ndarray:
    if is_hybrid_space(space):
        return _check_hybrid_actions(acts, space, m)  # type: ignore[arg-type]
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        raise DemoSpecError(
            f"imitation (BC, GAIL) needs a Box, Discrete, MultiDiscrete, MultiBinary or hybrid "
            f"Tuple(Box, MultiDiscrete) action space; the model has {space}. For hybrid Unity actions use "
            "UnityVecEnv's hybrid='tuple' (the project's PPO, SAC) or 'box'."
        )
    array = np.asarray(acts)
    m = len(array) if m is None else m
    if isinstance(space, spaces.Discrete):
        array = array.reshape(-1)
        expected: tuple[int, ...] = (m,)
    else:
        expected = (m, *space.shape)
        if array.shape != expected and array.size == int(np.prod(expected)):
            array = array.reshape(expected)
    if array.shape != expected:
        raise ValueError(
            f"actions have shape {np.asarray(acts).shape}; the model's action space {space} needs {expected}"
        )
    if isinstance(space, spaces.Box):
        return array.astype(np.float32)
    if array.dtype.kind == "f" and np.any(array != np.round(array)):
        raise ValueError(f"discrete actions must be whole numbers, got values like {array.reshape(-1)[:4]}")
    array = array.astype(np.int64)
    if isinstance(space, spaces.Discrete):
        low, high = int(space.start), int(space.start) + int(space.n)
        bad = (array < low) | (array >= high)
    elif isinstance(space, spaces.MultiDiscrete):
        bad = (array < 0) | (array >= space.nvec)
    else:  # MultiBinary
        bad = (array < 0) | (array > 1)
    if np.any(bad):
        raise ValueError(
            f"actions out of range for the action space {space}: e.g. {array[np.argwhere(bad)[0][0]]}"
        )
    return array
