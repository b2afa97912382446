"""The slot contract between the VecEnvs that map agents to slots and the algorithms that read them.

A slot of :class:`~unity_sb3.wrappers.vec_env.UnityVecEnv` (or of
:class:`~unity_sb3.wrappers.pettingzoo_vec_env.PettingZooVecEnv`) reports, in ``infos[i]``:

- :data:`ACTIVE` (``"active"``): ``False`` when no agent asked for a decision this step; the
  observation is a placeholder, the reward 0 and the action given next is dropped. Missing
  means ``True`` (any other VecEnv).
- :data:`GROUP_ID` (``"group_id"``): the agent's Unity group, 0 for none.
- :data:`GROUP_REWARD` (``"group_reward"``): the group reward summed since the slot's last decision.
- :data:`TERMINAL_OBSERVATION` (``"terminal_observation"``): SB3's key for the last observation of
  an episode that ended this step.

Writers use the constants; algorithms read through :func:`active_mask`, :func:`group_ids` and
:func:`group_rewards`. A VecEnv whose slots can be inactive exposes the attribute
:data:`WARN_INACTIVE` (``"warn_inactive"``) to ``get_attr``: while it is ``True`` the env warns once
that plain SB3 algorithms train on placeholder steps. An algorithm that skips them says so in
sb3-contrib's duck-typed way (``env.has_attr`` / ``env.set_attr``, through any ``VecEnvWrapper``):
:func:`mark_inactive_aware`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

ACTIVE = "active"
GROUP_ID = "group_id"
GROUP_REWARD = "group_reward"
TERMINAL_OBSERVATION = "terminal_observation"
#: the attribute by which a VecEnv says its slots can be inactive (see the module docstring)
WARN_INACTIVE = "warn_inactive"

Infos = Sequence[Mapping[str, Any]]


def active_mask(infos: Infos) -> np.ndarray:
    """``(len(infos),)`` bool: whether each slot's step is a real agent's (:data:`ACTIVE`, default True)."""
    return np.fromiter((bool(info.get(ACTIVE, True)) for info in infos), dtype=bool, count=len(infos))


def group_ids(infos: Infos) -> np.ndarray:
    """``(len(infos),)`` int64: each slot's :data:`GROUP_ID` (0 = no group, also when missing or ``None``)."""
    return np.fromiter((int(info.get(GROUP_ID) or 0) for info in infos), dtype=np.int64, count=len(infos))


def group_rewards(infos: Infos) -> np.ndarray:
    """``(len(infos),)`` float32: each slot's :data:`GROUP_REWARD` (0 when missing)."""
    return np.fromiter(
        (float(info.get(GROUP_REWARD, 0.0)) for info in infos), dtype=np.float32, count=len(infos)
    )


def active_from_infos(infos: Infos | None, n_envs: int) -> np.ndarray:
    """:func:`active_mask` of ``n_envs`` slots; all True when ``infos`` is missing or of another length."""
    if not infos or len(infos) != n_envs:
        return np.ones(n_envs, dtype=bool)
    return active_mask(infos)


def is_unity_vec_env(env: Any) -> bool:
    """Whether ``env`` is a VecEnv whose slots can be inactive (a :class:`UnityVecEnv`, possibly
    under VecMonitor, VecNormalize, ...): it has the :data:`WARN_INACTIVE` attribute."""
    return isinstance(env, VecEnv) and env.has_attr(WARN_INACTIVE)


def mark_inactive_aware(env: Any) -> None:
    """Tell the VecEnv under ``env`` that its algorithm skips inactive steps.

    Sets :data:`WARN_INACTIVE` to ``False`` through ``env.set_attr``, which silences the one
    warning :class:`UnityVecEnv` gives plain SB3 algorithms about placeholder steps; does
    nothing for VecEnvs without the attribute.
    """
    if is_unity_vec_env(env):
        env.set_attr(WARN_INACTIVE, False)


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


def predict_masks(model: Any, env: VecEnv) -> dict[str, np.ndarray]:
    """Keyword arguments that give ``model.predict`` the env's action masks, sb3-contrib style.

    :param model: an algorithm; masks go to it when its ``predict`` takes ``action_masks`` and its
        actions are not a ``Box`` (discrete or hybrid branches).
    :param env: the VecEnv; masks come from ``env_method("action_masks")`` when it has them.
    :return: ``{"action_masks": (num_envs, sum(branches)) bool}`` (True = allowed), or ``{}``.
    """
    import inspect

    from gymnasium import spaces

    if isinstance(getattr(model, "action_space", None), spaces.Box) or not env.has_attr("action_masks"):
        return {}
    if "action_masks" not in inspect.signature(model.predict).parameters:
        return {}
    return {"action_masks": np.asarray(env.env_method("action_masks"), dtype=bool).reshape(env.num_envs, -1)}
