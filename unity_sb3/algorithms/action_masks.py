"""Reading a VecEnv's action masks once per step, by the shortest route that gives the same array.

sb3-contrib's ``get_action_masks`` asks every slot through ``env_method("action_masks")`` and
stacks the answers. ``UnityVecEnv`` (and the PettingZoo VecEnv) hold all slots' masks as one array
behind an ``action_masks()`` method of their own; under SB3's wrappers (``VecMonitor``,
``VecNormalize``, ...), which forward ``env_method`` unchanged, that method is reached by
unwrapping. A wrapper that overrides ``env_method`` or defines ``action_masks`` itself may change
the masks, so the walk stops there and its own answer is used.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

__all__ = ["MaskReader", "mask_reader", "read_action_masks"]

MaskReader = Callable[[], np.ndarray]


def _whole_array_source(env: VecEnv) -> VecEnv | None:
    """The env (``env`` or one it wraps) whose own ``action_masks()`` answers for all slots, or None."""
    while True:
        if callable(getattr(type(env), "action_masks", None)):
            return env
        if not isinstance(env, VecEnvWrapper) or type(env).env_method is not VecEnvWrapper.env_method:
            return None
        env = env.venv


def mask_reader(env: VecEnv) -> MaskReader | None:
    """A function returning ``env``'s current masks, looked up once (None: ``env`` has no masks).

    :return: a callable giving ``(num_envs, sum of branches)`` bool, True = allowed (a fresh array at
        every call), the same values as sb3-contrib's ``get_action_masks``.
    """
    if not is_masking_supported(env):
        return None
    n = env.num_envs
    source = _whole_array_source(env)
    if source is not None:
        return lambda: np.array(source.action_masks(), dtype=bool).reshape(n, -1)  # type: ignore[attr-defined]
    return lambda: np.asarray(get_action_masks(env), dtype=bool).reshape(n, -1)


def read_action_masks(env: VecEnv) -> np.ndarray | None:
    """``env``'s current masks, ``(num_envs, sum of branches)`` bool, or None when it has none."""
    reader = mask_reader(env)
    return None if reader is None else reader()
