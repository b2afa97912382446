"""Intrinsic reward signals for PPO and SAC: curiosity (ICM), RND and GAIL.

Each signal is a :class:`RewardSignal` (a torch Module with its own optimizer) with
``reward(obs, action, next_obs) -> np.ndarray`` (per transition, before ``strength``) and
``update(batch) -> dict[str, float]``. :func:`make_reward_signals` builds them from a parsed
``reward_signals`` config (see :mod:`unity_sb3.algorithms.mixin`).
"""

from __future__ import annotations

from typing import Any

import torch as th
from gymnasium import spaces
from torch import nn

from unity_sb3.algorithms.reward_signals.base import RewardSignal, SignalBatch
from unity_sb3.algorithms.reward_signals.curiosity import CuriositySignal
from unity_sb3.algorithms.reward_signals.gail import ExpertData, GAILSignal, load_expert_data
from unity_sb3.algorithms.reward_signals.rnd import RNDSignal

SIGNAL_CLASSES: dict[str, type[RewardSignal]] = {
    "curiosity": CuriositySignal,
    "rnd": RNDSignal,
    "gail": GAILSignal,
}


def make_reward_signals(
    parsed: dict[str, dict],
    observation_space: spaces.Space,
    action_space: spaces.Space,
    device: th.device | str = "auto",
    model: Any = None,
) -> nn.ModuleDict:
    """Build the intrinsic signals of a parsed config (``extrinsic`` is not a module and is skipped).

    :param parsed: output of :func:`unity_sb3.algorithms.reward_signals.settings.parse_reward_signals`.
    :param model: the algorithm the signals belong to; GAIL converts its demonstrations for the
        algorithm's env (as behavioral cloning does). ``None``: by the spaces alone.
    :return: ``{name: RewardSignal}`` in config order.
    """
    signals = nn.ModuleDict()
    for name, settings in parsed.items():
        if name == "gail":
            signals[name] = GAILSignal(observation_space, action_space, settings, device, model=model)
        elif name in SIGNAL_CLASSES:
            signals[name] = SIGNAL_CLASSES[name](observation_space, action_space, settings, device)
    return signals


__all__ = [
    "SIGNAL_CLASSES",
    "CuriositySignal",
    "ExpertData",
    "GAILSignal",
    "RNDSignal",
    "RewardSignal",
    "SignalBatch",
    "load_expert_data",
    "make_reward_signals",
]
