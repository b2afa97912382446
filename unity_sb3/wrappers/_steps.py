"""The one place where a ``BaseEnv``'s ``DecisionSteps`` / ``TerminalSteps`` become the arrays the
wrappers read (DESIGN 4.2: convert once, at the boundary).

``mlagents_envs`` types these fields as numpy arrays, but does not enforce it: its own
``rpc_utils`` gives ``group_id`` as a Python list, ML-Agents' test environments
(``simple_test_envs.MultiAgentEnvironment``) build whole batches from Python lists (ids, rewards,
``interrupted``; no observation arrays at all when nobody asks; every branch's mask in one
array), and other ``BaseEnv`` s use int64 ids, float64 rewards, tuples, nested lists for
observations, ``None`` or list masks. :class:`StepReader` turns any of these into:

- ``obs``: one array per observation spec, ``(n, *spec.shape)`` (float32 when converted);
- ``reward``, ``group_reward``: ``(n,)`` float32 (zeros when ``group_reward`` is ``None``);
- ``agent_id``, ``group_id``: ``(n,)`` integer arrays (kept as they are when already integer
  arrays, e.g. Unity's int32; int64 when converted; ``group_id`` ``None`` = no groups, zeros);
- ``interrupted``: ``(n,)`` bool;
- ``action_mask``: ``None`` or one ``(n, branch_size)`` bool array per discrete branch.

A batch already in that form is returned as the very same object (a dozen attribute checks,
no copy), one whose only flaw is a list ``group_id`` (every batch of a real Unity build) gets
just that field converted, and empty batches become one shared empty batch. Anything that
cannot be read raises :class:`~unity_sb3.unity.errors.UnityConfigurationError` naming the field.
An env that declares :data:`ARRAY_STEPS` (the embedded scenes, which build every batch in this
form) has its batches passed on without any check.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)
from unity_sb3.unity.errors import UnityConfigurationError

from mlagents_envs.base_env import BaseEnv, BehaviorSpec, DecisionSteps, TerminalSteps  # isort: skip

#: The attribute by which a ``BaseEnv`` declares that every batch its ``get_steps`` gives is in the form
#: above already (``EmbeddedScene`` does; tests/test_scenes.py checks each scene's batches), so that
#: :meth:`StepReader.read` passes them on unchecked: Ball3D with random actions is read ~5 times per
#: wrapper step at 256 agents, ~1 us of checks each.
ARRAY_STEPS = "array_steps"

_ndarray = np.ndarray
_FLOAT32 = np.dtype(np.float32)
_BOOL = np.dtype(bool)


class StepReader:
    """Reads one behavior's ``(DecisionSteps, TerminalSteps)`` from any ``BaseEnv`` in array form.

    :param behavior_name: the behavior (also named in error messages).
    :param spec: its ``BehaviorSpec`` (observation shapes, discrete branches).
    """

    __slots__ = ("_branches", "_empty", "_tails", "behavior_name", "spec")

    def __init__(self, behavior_name: str, spec: BehaviorSpec) -> None:
        self.behavior_name = behavior_name
        self.spec = spec
        self._tails = tuple(tuple(int(d) for d in s.shape) for s in spec.observation_specs)
        self._branches = tuple(int(b) for b in spec.action_spec.discrete_branches)
        self._empty = (DecisionSteps.empty(spec), TerminalSteps.empty(spec))

    def read(self, env: BaseEnv) -> tuple[DecisionSteps, TerminalSteps]:
        """``env.get_steps(behavior_name)``, normalised (as they are from an env that declares
        :data:`ARRAY_STEPS`)."""
        decisions, terminals = env.get_steps(self.behavior_name)
        if getattr(env, ARRAY_STEPS, False):
            return decisions, terminals
        return self.decisions(decisions), self.terminals(terminals)

    def normalize(
        self, decisions: DecisionSteps, terminals: TerminalSteps
    ) -> tuple[DecisionSteps, TerminalSteps]:
        """Both batches of one ``get_steps`` call in array form (see the module docstring)."""
        return self.decisions(decisions), self.terminals(terminals)

    def decisions(self, steps: DecisionSteps) -> DecisionSteps:
        """One ``DecisionSteps`` in array form; the same object when it already is."""
        ids = steps.agent_id
        if _no_agents(ids):
            return self._empty[0]
        if self._clean(steps, None):
            group_id = steps.group_id
            if type(group_id) is _ndarray and group_id.dtype.kind in "iu" and group_id.shape == ids.shape:
                return steps
            where = self._where("DecisionSteps")
            return DecisionSteps(
                steps.obs,
                steps.reward,
                ids,
                steps.action_mask,
                _ints(group_id, len(ids), "group_id", where),
                steps.group_reward,
            )
        where = self._where("DecisionSteps")
        ids = _ints(ids, None, "agent_id", where)
        n = len(ids)
        return DecisionSteps(
            self._observations(steps.obs, n, where),
            _floats(steps.reward, n, "reward", where),
            ids,
            self._masks(steps.action_mask, n, where),
            _ints(steps.group_id, n, "group_id", where),
            _floats(steps.group_reward, n, "group_reward", where),
        )

    def terminals(self, steps: TerminalSteps) -> TerminalSteps:
        """One ``TerminalSteps`` in array form; the same object when it already is."""
        ids = steps.agent_id
        if _no_agents(ids):
            return self._empty[1]
        if self._clean(steps, steps.interrupted):
            group_id = steps.group_id
            if type(group_id) is _ndarray and group_id.dtype.kind in "iu" and group_id.shape == ids.shape:
                return steps
            where = self._where("TerminalSteps")
            return TerminalSteps(
                steps.obs,
                steps.reward,
                steps.interrupted,
                ids,
                _ints(group_id, len(ids), "group_id", where),
                steps.group_reward,
            )
        where = self._where("TerminalSteps")
        ids = _ints(ids, None, "agent_id", where)
        n = len(ids)
        return TerminalSteps(
            self._observations(steps.obs, n, where),
            _floats(steps.reward, n, "reward", where),
            _bools(steps.interrupted, n, "interrupted", where),
            ids,
            _ints(steps.group_id, n, "group_id", where),
            _floats(steps.group_reward, n, "group_reward", where),
        )

    # ------------------------------------------------------------------ the fast path
    def _clean(self, steps: DecisionSteps | TerminalSteps, interrupted: Any) -> bool:
        """Whether every field but ``group_id`` is in array form (``interrupted`` is ``None`` for decisions)."""
        try:  # a list or tuple has no dtype or shape: AttributeError
            ids = steps.agent_id
            n = ids.shape
            if (
                len(n) != 1
                or ids.dtype.kind not in "iu"
                or steps.reward.dtype is not _FLOAT32
                or steps.group_reward.dtype is not _FLOAT32
                or steps.reward.shape != n
                or steps.group_reward.shape != n
            ):
                return False
            if interrupted is None:
                mask = steps.action_mask
                if mask is not None:
                    if type(mask) is not list or len(mask) != len(self._branches):
                        return False
                    for m, b in zip(mask, self._branches):
                        if m.dtype is not _BOOL or m.shape != (n[0], b):
                            return False
            elif interrupted.dtype is not _BOOL or interrupted.shape != n:
                return False
            obs = steps.obs
            if type(obs) is not list or len(obs) != len(self._tails):
                return False
            for o, tail in zip(obs, self._tails):
                if type(o) is not _ndarray or o.shape != n + tail or o.dtype.kind not in "fu":
                    return False
        except AttributeError:
            return False
        return True

    # ------------------------------------------------------------------ conversions
    def _where(self, kind: str) -> str:
        return f"{kind} of {self.behavior_name!r}" if self.behavior_name else kind

    def _observations(self, obs: Any, n: int, where: str) -> list[np.ndarray]:
        tails = self._tails
        if obs is None or (n == 0 and len(obs) == 0):  # nobody asks: some envs send no arrays at all
            return [np.zeros((0, *t), dtype=np.float32) for t in tails]
        if len(obs) != len(tails):
            raise UnityConfigurationError(
                f"{where}: {len(obs)} observation arrays for {len(tails)} observation specs {list(tails)}; "
                "the BaseEnv must give one batch per spec"
            )
        out = []
        for i, (o, tail) in enumerate(zip(obs, tails)):
            if type(o) is _ndarray and o.dtype.kind in "fu":
                arr = o
            else:
                arr = _array(o, np.float32, f"observation {i}", where)
            shape = (n, *tail)
            if arr.shape != shape:
                if arr.size != int(np.prod(shape)):
                    raise UnityConfigurationError(
                        f"{where}: observation {i} has shape {arr.shape}, expected {shape} "
                        f"({n} agents x spec shape {tail})"
                    )
                arr = arr.reshape(shape)
            out.append(arr)
        return out

    def _masks(self, mask: Any, n: int, where: str) -> list[np.ndarray] | None:
        """Per-branch ``(n, branch)`` bool masks, True = NOT allowed; ``None`` stays ``None``.

        Accepts one array per branch, or the branches side by side in fewer arrays (ML-Agents'
        ``MultiAgentEnvironment`` sends one ``(n, sum(branches))`` array).
        """
        branches = self._branches
        if mask is None or not branches:
            return None
        parts = [mask] if type(mask) is _ndarray else list(mask)
        if not parts:
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
        return np.split(np.concatenate(flat, axis=1), np.cumsum(branches)[:-1], axis=1)


def normalize_steps(
    decisions: DecisionSteps, terminals: TerminalSteps, spec: BehaviorSpec, behavior_name: str = ""
) -> tuple[DecisionSteps, TerminalSteps]:
    """Both batches of one ``get_steps`` call in array form, by a one-off :class:`StepReader`.

    :param decisions: the ``DecisionSteps`` as the ``BaseEnv`` built it.
    :param terminals: the ``TerminalSteps`` as the ``BaseEnv`` built it.
    :param spec: the behavior's ``BehaviorSpec``.
    :param behavior_name: used in error messages only.
    :return: ``(decisions, terminals)``, each the input object itself when it needed no change.
    """
    return StepReader(behavior_name, spec).normalize(decisions, terminals)


# ---------------------------------------------------------------------- field conversions
def _no_agents(ids: Any) -> bool:
    try:
        return len(ids) == 0
    except TypeError:  # None, or a scalar: the conversion explains what is wrong
        return False


def _array(value: Any, dtype: Any, name: str, where: str) -> np.ndarray:
    if value is None:
        raise UnityConfigurationError(f"{where}: {name} is None; the BaseEnv must give one value per agent")
    try:
        return np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as error:
        kind = "numeric" if dtype is None else np.dtype(dtype).name
        raise UnityConfigurationError(
            f"{where}: cannot read {name} ({type(value).__name__}) as {kind} values: {error}"
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
    if arr.size and arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise UnityConfigurationError(f"{where}: {name} must hold whole numbers, got {arr.ravel()[:4]}")
    elif arr.size and arr.dtype.kind not in "iub":
        raise UnityConfigurationError(f"{where}: {name} must hold integers, got dtype {arr.dtype}")
    return _check_length(arr.astype(np.int64, copy=False), n, name, where)


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
