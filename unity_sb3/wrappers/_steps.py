"""The one place where a ``BaseEnv``'s ``DecisionSteps`` / ``TerminalSteps`` become the arrays the
wrappers read (DESIGN 4.2: convert once, at the boundary).

``mlagents_envs`` types these fields as numpy arrays, but does not enforce it: its own
``rpc_utils`` gives ``group_id`` as a Python list, ML-Agents' test environments
(``simple_test_envs.MultiAgentEnvironment``) build whole batches from Python lists (ids, rewards,
``interrupted``; no observation arrays at all when nobody asks), and other ``BaseEnv`` s use
int64 ids, float64 rewards, tuples, nested lists for observations, ``None`` or list masks.
:func:`normalize_steps` turns any of these into:

- ``obs``: one array per observation spec, ``(n, *spec.shape)`` (float32 when converted);
- ``reward``, ``group_reward``: ``(n,)`` float32;
- ``agent_id``, ``group_id``: ``(n,)`` integer arrays (kept as they are when already integer
  arrays, e.g. Unity's int32; int64 when converted);
- ``interrupted``: ``(n,)`` bool;
- ``action_mask``: ``None`` or one ``(n, branch_size)`` bool array per discrete branch.

Fields that already have that form are passed through untouched (no copy), and a batch whose
every field does is returned as the very same object, so a real Unity build or an embedded
scene costs a few type checks per step. Anything that cannot be read raises
:class:`~unity_sb3.unity.errors.UnityConfigurationError` naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)
from unity_sb3.unity.errors import UnityConfigurationError

from mlagents_envs.base_env import BaseEnv, BehaviorSpec, DecisionSteps, TerminalSteps  # isort: skip

_ndarray = np.ndarray
_FLOAT32 = np.dtype(np.float32)
_BOOL = np.dtype(bool)


def read_steps(env: BaseEnv, behavior_name: str, spec: BehaviorSpec) -> tuple[DecisionSteps, TerminalSteps]:
    """``env.get_steps(behavior_name)``, normalised by :func:`normalize_steps`.

    :param env: any ``BaseEnv``.
    :param behavior_name: the behavior to read.
    :param spec: that behavior's ``BehaviorSpec`` (observation shapes, discrete branches).
    """
    decisions, terminals = env.get_steps(behavior_name)
    return normalize_steps(decisions, terminals, spec, behavior_name)


def normalize_steps(
    decisions: DecisionSteps, terminals: TerminalSteps, spec: BehaviorSpec, behavior_name: str = ""
) -> tuple[DecisionSteps, TerminalSteps]:
    """Both batches of one ``get_steps`` call in the wrappers' array form (see the module docstring).

    :param decisions: the ``DecisionSteps`` as the ``BaseEnv`` built it.
    :param terminals: the ``TerminalSteps`` as the ``BaseEnv`` built it.
    :param spec: the behavior's ``BehaviorSpec``.
    :param behavior_name: used in error messages only.
    :return: ``(decisions, terminals)``; each is the input object itself when it needed no change.
    """
    return normalize_decisions(decisions, spec, behavior_name), normalize_terminals(
        terminals, spec, behavior_name
    )


def normalize_decisions(steps: DecisionSteps, spec: BehaviorSpec, behavior_name: str = "") -> DecisionSteps:
    """One ``DecisionSteps`` in array form; the same object when it already is."""
    agent_id = steps.agent_id
    reward = steps.reward
    group_id = steps.group_id
    group_reward = steps.group_reward
    mask = steps.action_mask
    if (
        type(agent_id) is _ndarray
        and agent_id.dtype.kind in "iu"
        and agent_id.ndim == 1
        and type(reward) is _ndarray
        and reward.dtype == _FLOAT32
        and type(group_id) is _ndarray
        and group_id.dtype.kind in "iu"
        and type(group_reward) is _ndarray
        and group_reward.dtype == _FLOAT32
        and _obs_ok(steps.obs, len(agent_id), spec)
        and _mask_ok(mask, len(agent_id), spec)
        and len(reward) == len(group_id) == len(group_reward) == len(agent_id)
    ):
        return steps
    where = f"DecisionSteps of {behavior_name!r}" if behavior_name else "DecisionSteps"
    ids = _ints(agent_id, None, "agent_id", where)
    n = len(ids)
    return DecisionSteps(
        _observations(steps.obs, n, spec, where),
        _floats(reward, n, "reward", where),
        ids,
        _masks(mask, n, spec, where),
        _ints(group_id, n, "group_id", where),
        _floats(group_reward, n, "group_reward", where),
    )


def normalize_terminals(steps: TerminalSteps, spec: BehaviorSpec, behavior_name: str = "") -> TerminalSteps:
    """One ``TerminalSteps`` in array form; the same object when it already is."""
    agent_id = steps.agent_id
    reward = steps.reward
    interrupted = steps.interrupted
    group_id = steps.group_id
    group_reward = steps.group_reward
    if (
        type(agent_id) is _ndarray
        and agent_id.dtype.kind in "iu"
        and agent_id.ndim == 1
        and type(reward) is _ndarray
        and reward.dtype == _FLOAT32
        and type(interrupted) is _ndarray
        and interrupted.dtype == _BOOL
        and type(group_id) is _ndarray
        and group_id.dtype.kind in "iu"
        and type(group_reward) is _ndarray
        and group_reward.dtype == _FLOAT32
        and _obs_ok(steps.obs, len(agent_id), spec)
        and len(reward) == len(interrupted) == len(group_id) == len(group_reward) == len(agent_id)
    ):
        return steps
    where = f"TerminalSteps of {behavior_name!r}" if behavior_name else "TerminalSteps"
    ids = _ints(agent_id, None, "agent_id", where)
    n = len(ids)
    return TerminalSteps(
        _observations(steps.obs, n, spec, where),
        _floats(reward, n, "reward", where),
        _bools(interrupted, n, "interrupted", where),
        ids,
        _ints(group_id, n, "group_id", where),
        _floats(group_reward, n, "group_reward", where),
    )


# ---------------------------------------------------------------------- checks (the fast path)
def _obs_ok(obs: Any, n: int, spec: BehaviorSpec) -> bool:
    specs = spec.observation_specs
    if type(obs) is not list or len(obs) != len(specs):
        return False
    for o, s in zip(obs, specs):
        if type(o) is not _ndarray or o.dtype.kind not in "fu" or o.shape != (n, *s.shape):
            return False
    return True


def _mask_ok(mask: Any, n: int, spec: BehaviorSpec) -> bool:
    if mask is None:
        return True
    branches = spec.action_spec.discrete_branches
    if type(mask) is not list or len(mask) != len(branches):
        return False
    for m, b in zip(mask, branches):
        if type(m) is not _ndarray or m.dtype != _BOOL or m.shape != (n, b):
            return False
    return True


# ---------------------------------------------------------------------- conversions
def _array(value: Any, dtype: Any, name: str, where: str) -> np.ndarray:
    if value is None:
        raise UnityConfigurationError(f"{where}: {name} is None; the BaseEnv must give one value per agent")
    try:
        return np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as error:
        raise UnityConfigurationError(
            f"{where}: cannot read {name} ({type(value).__name__}) as {np.dtype(dtype).name} values: {error}"
        ) from None


def _check_length(arr: np.ndarray, n: int | None, name: str, where: str) -> np.ndarray:
    if arr.ndim != 1:
        if arr.ndim == 0 or arr.size == arr.shape[0]:  # a scalar for one agent, or an (n, 1) column
            arr = arr.reshape(-1)
        else:
            raise UnityConfigurationError(
                f"{where}: {name} has shape {arr.shape}; expected one value per agent, shape (n_agents,)"
            )
    if n is not None and len(arr) != n:
        raise UnityConfigurationError(
            f"{where}: {name} has {len(arr)} values but agent_id has {n}; every field needs one value per agent"
        )
    return arr


def _ints(value: Any, n: int | None, name: str, where: str) -> np.ndarray:
    """Integer ids: integer arrays pass as they are; lists, tuples and whole floats become int64."""
    if value is None and name == "group_id" and n is not None:  # an env that knows no groups
        return np.zeros(n, dtype=np.int64)
    if type(value) is _ndarray and value.dtype.kind in "iu":
        return _check_length(value, n, name, where)
    arr = _array(value, None, name, where)
    if arr.size == 0:
        return _check_length(arr.astype(np.int64), n, name, where)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise UnityConfigurationError(f"{where}: {name} must hold whole numbers, got {arr.ravel()[:4]}")
    elif arr.dtype.kind not in "iub":
        raise UnityConfigurationError(f"{where}: {name} must hold integers, got dtype {arr.dtype}")
    return _check_length(arr.astype(np.int64), n, name, where)


def _floats(value: Any, n: int, name: str, where: str) -> np.ndarray:
    if value is None and name == "group_reward":  # an env that knows no group rewards
        return np.zeros(n, dtype=np.float32)
    if type(value) is _ndarray and value.dtype == _FLOAT32:
        return _check_length(value, n, name, where)
    return _check_length(_array(value, np.float32, name, where), n, name, where)


def _bools(value: Any, n: int, name: str, where: str) -> np.ndarray:
    if type(value) is _ndarray and value.dtype == _BOOL:
        return _check_length(value, n, name, where)
    return _check_length(_array(value, bool, name, where), n, name, where)


def _observations(obs: Any, n: int, spec: BehaviorSpec, where: str) -> list[np.ndarray]:
    specs = spec.observation_specs
    if obs is None or (n == 0 and len(obs) == 0):  # nobody asks: some envs send no arrays at all
        return [np.zeros((0, *s.shape), dtype=np.float32) for s in specs]
    if len(obs) != len(specs):
        raise UnityConfigurationError(
            f"{where}: {len(obs)} observation arrays for {len(specs)} observation specs "
            f"{[tuple(s.shape) for s in specs]}; the BaseEnv must give one batch per spec"
        )
    out = []
    for i, (o, s) in enumerate(zip(obs, specs)):
        if type(o) is _ndarray and o.dtype.kind in "fu":
            arr = o
        else:
            arr = _array(o, np.float32, f"observation {i}", where)
        shape = (n, *s.shape)
        if arr.shape != shape:
            if arr.size != int(np.prod(shape)):
                raise UnityConfigurationError(
                    f"{where}: observation {i} has shape {arr.shape}, expected {shape} "
                    f"({n} agents x spec shape {tuple(s.shape)})"
                )
            arr = arr.reshape(shape)
        out.append(arr)
    return out


def _masks(mask: Any, n: int, spec: BehaviorSpec, where: str) -> list[np.ndarray] | None:
    """Per-branch ``(n, branch)`` bool masks, True = NOT allowed; ``None`` stays ``None``.

    Accepts one array per branch, or the branches side by side in fewer arrays (ML-Agents'
    ``MultiAgentEnvironment`` sends one ``(n, sum(branches))`` array).
    """
    branches = tuple(int(b) for b in spec.action_spec.discrete_branches)
    if mask is None or not branches:
        return None
    parts: Sequence[Any] = [mask] if type(mask) is _ndarray else mask
    if len(parts) == 0:
        return None
    if n == 0:
        return [np.zeros((0, b), dtype=bool) for b in branches]
    flat = []
    for part in parts:
        arr = _array(part, bool, "action_mask", where)
        if arr.size % n:
            raise UnityConfigurationError(
                f"{where}: an action_mask array has shape {arr.shape}, which does not split into {n} agents"
            )
        flat.append(arr.reshape(n, -1))
    width = sum(a.shape[1] for a in flat)
    if width != sum(branches):
        raise UnityConfigurationError(
            f"{where}: action_mask covers {width} actions per agent, but the discrete branches "
            f"{branches} have {sum(branches)}; give one (n_agents, branch_size) bool array per branch"
        )
    if len(flat) == len(branches) and all(a.shape[1] == b for a, b in zip(flat, branches)):
        return flat
    joined = np.concatenate(flat, axis=1)
    return np.split(joined, np.cumsum(branches)[:-1], axis=1)
