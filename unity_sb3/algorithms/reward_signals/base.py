"""The interface every reward signal implements, and the batch it learns from."""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.utils import get_device
from torch import nn

from unity_sb3.algorithms.reward_signals.networks import ActionFlattener, TensorObs


class SignalBatch(NamedTuple):
    """Transitions a signal learns from (tensors on the signal's device).

    :param observations: ``(batch, *obs_shape)`` or a dict of those.
    :param actions: ``(batch, action_dim)`` as SB3 stores them (indices for discrete spaces).
    :param next_observations: like ``observations``: the true next observation (the terminal one at
        an episode end).
    :param dones: ``(batch,)`` 1.0 where the episode ended with this transition, or ``None``.
    :param weights: ``(batch,)`` 1.0 for transitions that count, 0.0 for placeholder steps of
        inactive slots (``infos[i]["active"] == False``), or ``None`` (all count).
    """

    observations: TensorObs
    actions: th.Tensor
    next_observations: TensorObs
    dones: th.Tensor | None = None
    weights: th.Tensor | None = None


def masked_mean(values: th.Tensor, weights: th.Tensor | None) -> th.Tensor:
    """Mean of ``values`` (batch,) over entries with non-zero ``weights`` (all when ``None``)."""
    if weights is None:
        return values.mean()
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


def as_tensor(x: Any, device: th.device, dtype: th.dtype | None = None) -> Any:
    """``x`` (an array, a tensor or a dict of them) as tensors on ``device``.

    :param x: an array, a tensor, or a dict of either
    :param device: the device to put the tensors on
    :param dtype: the dtype to cast to, or ``None`` to keep the values' own
    """
    if isinstance(x, dict):
        return {k: as_tensor(v, device, dtype) for k, v in x.items()}
    if isinstance(x, th.Tensor):
        return x.to(device=device, dtype=dtype) if dtype is not None else x.to(device)
    return th.as_tensor(np.asarray(x), device=device, dtype=dtype)


class RewardSignal(nn.Module):
    """Base class of intrinsic reward signals (curiosity, RND, GAIL).

    A signal is a torch Module: its networks and its ``optimizer`` are saved and loaded with the
    model that owns it. ``reward`` gives the reward per transition *before* ``strength``; the
    algorithm multiplies by ``strength`` and discounts with ``gamma``.

    :param observation_space: the algorithm's observation space.
    :param action_space: the algorithm's action space.
    :param settings: the signal's parsed settings (see :func:`unity_sb3.algorithms.reward_signals.settings.parse_reward_signals`).
    :param device: torch device.
    """

    name: ClassVar[str] = ""
    #: bootstrap through episode ends (treat the signal as non-episodic), as ML-Agents does for curiosity and RND
    ignore_done: ClassVar[bool] = False

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        settings: dict,
        device: th.device | str = "auto",
    ) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        self.settings = settings
        self.strength = float(settings["strength"])
        self.gamma = float(settings["gamma"])
        self.device = get_device(device)
        self.action_flattener = ActionFlattener(action_space)
        self.optimizer: th.optim.Optimizer | None = None

    def batch(
        self,
        observations: Any,
        actions: Any,
        next_observations: Any,
        dones: Any = None,
        weights: Any = None,
    ) -> SignalBatch:
        """Build a :class:`SignalBatch` on this signal's device from numpy arrays or tensors."""
        obs = as_tensor(observations, self.device)
        next_obs = as_tensor(next_observations, self.device)
        acts = as_tensor(actions, self.device)
        n = acts.shape[0]
        acts = acts.reshape(n, -1)
        dones_t = None if dones is None else as_tensor(dones, self.device, th.float32).reshape(n)
        weights_t = None if weights is None else as_tensor(weights, self.device, th.float32).reshape(n)
        return SignalBatch(obs, acts, next_obs, dones_t, weights_t)

    def reward(self, obs: Any, action: Any, next_obs: Any, dones: Any = None) -> np.ndarray:
        """Intrinsic reward of each transition, before ``strength``.

        :param obs: ``(batch, *obs_shape)`` observations (numpy or torch; dict for Dict spaces).
        :param action: ``(batch, ...)`` actions taken.
        :param next_obs: the true next observations (terminal observation at episode ends).
        :param dones: ``(batch,)`` episode ends (used by GAIL with ``use_actions``), optional.
        :return: ``(batch,)`` float32 rewards.
        """
        batch = obs if isinstance(obs, SignalBatch) else self.batch(obs, action, next_obs, dones)
        was_training = self.training
        self.eval()
        with th.no_grad():
            rewards = self._reward(batch)
        self.train(was_training)
        return rewards.detach().cpu().numpy().astype(np.float32).reshape(-1)

    def update(self, batch: SignalBatch) -> dict[str, float]:
        """One gradient step on ``batch``.

        :return: losses and statistics to log (``reward_signals/<name>/<key>``).
        """
        self.train(True)
        return self._update(batch)

    def _reward(self, batch: SignalBatch) -> th.Tensor:
        raise NotImplementedError

    def _update(self, batch: SignalBatch) -> dict[str, float]:
        raise NotImplementedError
