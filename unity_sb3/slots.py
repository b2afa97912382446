"""The slot contract every consumer reads: info keys (active, group_id, group_reward), helpers to read them, and how an algorithm says it understands inactive slots."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnv,
)

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)


def unwrap_unity_vec_env(env: Any) -> Any:
    """The :class:`UnityVecEnv` under ``env``'s ``VecEnvWrapper`` layers, or ``None``."""
    from stable_baselines3.common.vec_env import VecEnvWrapper

    while isinstance(env, VecEnvWrapper):
        env = env.venv
    return env if hasattr(env, "warn_inactive") else None


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


def reset_infos_of(env: VecEnv) -> list[dict[str, Any]] | None:
    """The ``reset_infos`` of the last ``reset()``, read through ``VecEnvWrapper`` layers.

    SB3's wrappers (``VecMonitor``, ``VecNormalize``, ...) keep a ``reset_infos`` of empty dicts
    of their own and do not pass the wrapped env's on, so ``env.reset_infos`` on a wrapped
    ``UnityVecEnv`` says nothing about which slots are active or grouped after a reset. This
    takes the outermost layer whose ``reset_infos`` hold something, else the innermost env's.

    :param env: a VecEnv, possibly wrapped.
    :return: one dict per slot (copies), or ``None`` when no layer has ``num_envs`` of them.
    """
    found: list[dict[str, Any]] | None = None
    while True:
        infos = vars(env).get("reset_infos")
        if isinstance(infos, list) and len(infos) == env.num_envs:
            found = [dict(info) if isinstance(info, dict) else {} for info in infos]
            if any(found):
                return found
        if not isinstance(env, VecEnvWrapper):
            return found
        env = env.venv


def active_from_infos(infos: Sequence[dict] | None, n_envs: int) -> np.ndarray:
    """``(n_envs,)`` bool: ``infos[i].get("active", True)`` (all True when ``infos`` is missing)."""
    if not infos or len(infos) != n_envs:
        return np.ones(n_envs, dtype=bool)
    return np.array([bool(info.get("active", True)) for info in infos], dtype=bool)
