"""Replay buffers that keep each transition's action masks, for SAC with discrete or hybrid actions.

A discrete SAC needs the policy's probabilities at ``obs`` (actor and entropy terms) and at
``next_obs`` (the soft target), both under the masks the agent had there. So each transition
stores two flat masks, ``(sum(branches),)`` bool with True = allowed: the mask of ``obs`` and the
mask of ``next_obs``. At an episode end ``next_obs`` is the terminal observation, whose mask Unity
never sends; it is stored all-allowed (as the PettingZoo wrappers do).

A hybrid action ``(continuous (c,), discrete (k,))`` is stored as one float row ``(c + k,)``:
the continuous values, then the branch indices.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer
from stable_baselines3.common.vec_env import VecNormalize

from unity_sb3.algorithms.distributions import action_layout, flat_action_space


class MaskedReplayBufferSamples(NamedTuple):
    """A replay batch with masks; ``observations`` is a tensor, or a dict of tensors for ``Dict`` spaces.

    ``actions``: ``(B, k)`` branch indices, or ``(B, c + k)`` floats for hybrid actions.
    ``action_masks`` / ``next_action_masks``: ``(B, sum(branches))`` bool, True = allowed.
    """

    observations: Any
    actions: th.Tensor
    next_observations: Any
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None = None
    action_masks: th.Tensor | None = None
    next_action_masks: th.Tensor | None = None


def stored_action_space(action_space: spaces.Space) -> spaces.Space:
    """The space a replay buffer stores: a hybrid ``Tuple(Box, MultiDiscrete)`` becomes ``Box((c + k,))``."""
    if isinstance(action_space, spaces.Tuple):
        action_layout(action_space)  # a clear error for any other Tuple
    return flat_action_space(action_space)


class _MasksMixin:
    """The masks' storage, shared by the vector and the ``Dict`` observation buffers: the buffer
    stores actions in :func:`stored_action_space` and each ``add`` writes the pending masks.

    Before each ``add`` the algorithm calls :meth:`set_masks` with the masks of the ``n_envs``
    observations and next observations; ``add`` stores them in the row it writes.
    """

    buffer_size: int
    n_envs: int
    pos: int

    def __init__(
        self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space, *args, **kwargs
    ):
        super().__init__(buffer_size, observation_space, stored_action_space(action_space), *args, **kwargs)  # type: ignore[call-arg]
        self._init_masks(action_space)

    def add(self, obs, next_obs, action, reward, done, infos) -> None:
        self._store_masks()
        super().add(obs, next_obs, action, reward, done, infos)  # type: ignore[misc]

    def _init_masks(self, action_space: spaces.Space) -> None:
        self.mask_size = int(sum(action_layout(action_space)[1]))
        self.action_masks = np.ones((self.buffer_size, self.n_envs, self.mask_size), dtype=bool)
        self.next_action_masks = np.ones((self.buffer_size, self.n_envs, self.mask_size), dtype=bool)
        self._pending: tuple[np.ndarray, np.ndarray] | None = None

    def set_masks(self, masks: np.ndarray | None, next_masks: np.ndarray | None) -> None:
        """Masks for the next ``add``: each ``(n_envs, sum(branches))`` bool (True = allowed) or None (all allowed)."""
        ones = np.ones((self.n_envs, self.mask_size), dtype=bool)
        self._pending = (
            ones if masks is None else np.asarray(masks, dtype=bool).reshape(self.n_envs, self.mask_size),
            ones
            if next_masks is None
            else np.asarray(next_masks, dtype=bool).reshape(self.n_envs, self.mask_size),
        )

    def _store_masks(self) -> None:
        masks, next_masks = self._pending if self._pending is not None else (True, True)
        self.action_masks[self.pos] = masks
        self.next_action_masks[self.pos] = next_masks
        self._pending = None

    def _masks_at(self, batch_inds: np.ndarray, env_indices: np.ndarray) -> tuple[th.Tensor, th.Tensor]:
        return (
            self.to_torch(self.action_masks[batch_inds, env_indices]),  # type: ignore[attr-defined]
            self.to_torch(self.next_action_masks[batch_inds, env_indices]),  # type: ignore[attr-defined]
        )


class MaskedReplayBuffer(_MasksMixin, ReplayBuffer):
    """SB3's ``ReplayBuffer`` plus the masks of ``obs`` and ``next_obs`` (see the module docstring).

    Takes ``ReplayBuffer``'s arguments; ``action_space`` is the algorithm's (``Discrete``,
    ``MultiDiscrete`` or hybrid ``Tuple``).
    """

    def _get_samples(
        self, batch_inds: np.ndarray, env: VecNormalize | None = None
    ) -> MaskedReplayBufferSamples:  # type: ignore[override]
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        if self.optimize_memory_usage:
            next_obs = self.observations[(batch_inds + 1) % self.buffer_size, env_indices, :]
        else:
            next_obs = self.next_observations[batch_inds, env_indices, :]
        masks, next_masks = self._masks_at(batch_inds, env_indices)
        return MaskedReplayBufferSamples(
            observations=self.to_torch(
                self._normalize_obs(self.observations[batch_inds, env_indices, :], env)
            ),
            actions=self.to_torch(self.actions[batch_inds, env_indices, :]),
            next_observations=self.to_torch(self._normalize_obs(next_obs, env)),
            dones=self.to_torch(
                (self.dones[batch_inds, env_indices] * (1 - self.timeouts[batch_inds, env_indices])).reshape(
                    -1, 1
                )
            ),
            rewards=self.to_torch(
                self._normalize_reward(self.rewards[batch_inds, env_indices].reshape(-1, 1), env)
            ),
            action_masks=masks,
            next_action_masks=next_masks,
        )


class MaskedDictReplayBuffer(_MasksMixin, DictReplayBuffer):
    """SB3's ``DictReplayBuffer`` plus the masks of ``obs`` and ``next_obs`` (see the module docstring)."""

    def _get_samples(
        self, batch_inds: np.ndarray, env: VecNormalize | None = None
    ) -> MaskedReplayBufferSamples:  # type: ignore[override]
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        obs = self._normalize_obs(
            {k: o[batch_inds, env_indices, :] for k, o in self.observations.items()}, env
        )
        next_obs = self._normalize_obs(
            {k: o[batch_inds, env_indices, :] for k, o in self.next_observations.items()}, env
        )
        assert isinstance(obs, dict) and isinstance(next_obs, dict)
        masks, next_masks = self._masks_at(batch_inds, env_indices)
        return MaskedReplayBufferSamples(
            observations={k: self.to_torch(o) for k, o in obs.items()},
            actions=self.to_torch(self.actions[batch_inds, env_indices]),
            next_observations={k: self.to_torch(o) for k, o in next_obs.items()},
            dones=self.to_torch(
                (self.dones[batch_inds, env_indices] * (1 - self.timeouts[batch_inds, env_indices])).reshape(
                    -1, 1
                )
            ),
            rewards=self.to_torch(
                self._normalize_reward(self.rewards[batch_inds, env_indices].reshape(-1, 1), env)
            ),
            action_masks=masks,
            next_action_masks=next_masks,
        )
