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
from unity_sb3.algorithms.sac.recurrent import SequenceBatch


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


class _SequencesMixin:
    """Memories stored per step and batches sampled as training sequences, for SAC with memory.

    Before each ``add`` the algorithm calls :meth:`set_memories` with the actor's memory before and
    after the step and whether the step starts an episode. Each env's steps are cut into training
    sequences as ML-Agents cuts them (``AgentBuffer.resequence_and_append``): a sequence begins at
    an episode start and every ``sequence_length`` steps within an episode (and at an env's oldest
    step still held, when the beginning of its sequence was overwritten), so it never crosses an
    episode or the write position. :meth:`sample` draws sequences uniformly (each step equally
    likely to be in a draw, as ML-Agents' ``sample_mini_batch`` of its padded sequences) until they
    hold ``batch_size`` real steps, and returns the observations and next observations of those
    steps as :class:`~unity_sb3.algorithms.sac.recurrent.SequenceBatch` with their sequence mask.

    :param memory_size: floats of memory per agent.
    :param sequence_length: most steps per sampled sequence.
    """

    buffer_size: int
    n_envs: int
    pos: int
    full: bool
    observations: Any
    next_observations: Any
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    timeouts: np.ndarray

    def __init__(
        self, *args, memory_size: int, sequence_length: int, optimize_memory_usage: bool = False, **kwargs
    ) -> None:
        if optimize_memory_usage:
            raise ValueError("SAC with memory stores next observations: use optimize_memory_usage=False.")
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self.memory_size, self.sequence_length = int(memory_size), int(sequence_length)
        self.memories = np.zeros((self.buffer_size, self.n_envs, self.memory_size), dtype=np.float32)
        self.next_memories = np.zeros_like(self.memories)
        self.episode_starts = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        #: each step's place in its training sequence (0: a sequence begins at this step)
        self.sequence_offsets = np.zeros((self.buffer_size, self.n_envs), dtype=np.int64)
        self._last_offsets = np.full(self.n_envs, -1, dtype=np.int64)  # -1: no step stored yet
        self._pending_memories: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def set_memories(
        self, memories: np.ndarray, next_memories: np.ndarray, episode_starts: np.ndarray
    ) -> None:
        """The next ``add``'s memories ``(n_envs, memory_size)`` before and after the step, and ``(n_envs,)`` starts."""
        self._pending_memories = (memories, next_memories, episode_starts)

    def add(self, *args, **kwargs) -> None:
        if self._pending_memories is None:
            raise RuntimeError("SAC with memory: set_memories must be called before each add.")
        memories, next_memories, starts = self._pending_memories
        self.memories[self.pos] = memories
        self.next_memories[self.pos] = next_memories
        self.episode_starts[self.pos] = starts
        offsets = self._last_offsets + 1
        offsets[(np.asarray(starts) > 0) | (self._last_offsets < 0) | (offsets >= self.sequence_length)] = 0
        self.sequence_offsets[self.pos] = self._last_offsets = offsets
        self._pending_memories = None
        super().add(*args, **kwargs)  # type: ignore[misc]

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        self._last_offsets[:] = -1

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> MaskedReplayBufferSamples:  # type: ignore[override]
        rows, envs, mask = self.sample_sequences(batch_size)
        return self._sequence_samples(rows, envs, mask, env)

    def sample_sequences(self, batch_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw training sequences uniformly until they hold ``batch_size`` real steps (at least one).

        :return: the buffer rows and envs of the real steps, sequence after sequence in time order
            (``(n_real,)`` each), and the sequence mask ``(n_sequences, sequence_length)``.
        """
        filled = self.buffer_size if self.full else self.pos
        if filled == 0:
            raise ValueError(
                "the replay buffer is empty: collect steps (learning_starts > 0) before sampling."
            )
        oldest = self.pos if self.full else 0
        begins = self.sequence_offsets[:filled] == 0
        begins[oldest] = True  # the oldest steps held: their sequences' beginnings may be overwritten
        first_rows, first_envs = np.nonzero(begins)
        draw = np.random.randint(0, first_rows.size, size=max(1, batch_size))
        first_rows, first_envs = first_rows[draw], first_envs[draw]
        ahead = np.arange(self.sequence_length)
        steps = (first_rows - oldest) % self.buffer_size  # time order: 0 = the oldest step held
        window = (first_rows[:, None] + ahead) % self.buffer_size
        offsets = self.sequence_offsets[window, first_envs[:, None]]
        # a sequence goes on while the offsets count up from its first step's, up to the write position
        going_on = (offsets == offsets[:, :1] + ahead) & (steps[:, None] + ahead < filled)
        mask = np.cumprod(going_on, axis=1).astype(bool)
        n_sequences = int(np.searchsorted(np.cumsum(mask.sum(axis=1)), batch_size)) + 1
        mask = mask[:n_sequences]
        rows = window[:n_sequences][mask]
        envs = np.broadcast_to(first_envs[:n_sequences, None], mask.shape)[mask]
        return rows, envs, mask

    def _take(self, stored: Any, rows: np.ndarray, envs: np.ndarray) -> Any:
        if isinstance(stored, dict):
            return {key: value[rows, envs] for key, value in stored.items()}
        return stored[rows, envs]

    def _as_torch(self, obs: Any) -> Any:
        if isinstance(obs, dict):
            return {key: self.to_torch(value) for key, value in obs.items()}  # type: ignore[attr-defined]
        return self.to_torch(obs)  # type: ignore[attr-defined]

    def _sequence_samples(
        self, rows: np.ndarray, envs: np.ndarray, mask: np.ndarray, env: VecNormalize | None
    ) -> MaskedReplayBufferSamples:
        to_torch = self.to_torch  # type: ignore[attr-defined]
        normalize = self._normalize_obs  # type: ignore[attr-defined]
        sequence_mask = th.as_tensor(mask, device=self.device)  # type: ignore[attr-defined]
        first = np.r_[0, np.cumsum(mask.sum(axis=1))[:-1]]  # each sequence's first real step
        starts = self.episode_starts[rows, envs]
        next_starts = starts.copy()
        next_starts[first] = 0.0  # the step after a sequence's first continues its episode
        masks, next_masks = (
            self._masks_at(rows, envs) if isinstance(self, _MasksMixin) else (None, None)  # type: ignore[attr-defined]
        )
        return MaskedReplayBufferSamples(
            observations=SequenceBatch(
                self._as_torch(normalize(self._take(self.observations, rows, envs), env)),
                to_torch(starts),
                to_torch(self.memories[rows[first], envs[first]]),
                sequence_mask,
            ),
            actions=to_torch(self.actions[rows, envs]),
            next_observations=SequenceBatch(
                self._as_torch(normalize(self._take(self.next_observations, rows, envs), env)),
                to_torch(next_starts),
                to_torch(self.next_memories[rows[first], envs[first]]),
                sequence_mask,
            ),
            dones=to_torch((self.dones[rows, envs] * (1 - self.timeouts[rows, envs])).reshape(-1, 1)),
            rewards=to_torch(self._normalize_reward(self.rewards[rows, envs].reshape(-1, 1), env)),  # type: ignore[attr-defined]
            action_masks=masks,
            next_action_masks=next_masks,
        )


class SequenceReplayBuffer(_SequencesMixin, ReplayBuffer):
    """SB3's ``ReplayBuffer`` sampling sequences with the actor's memories (continuous actions)."""


class SequenceDictReplayBuffer(_SequencesMixin, DictReplayBuffer):
    """SB3's ``DictReplayBuffer`` sampling sequences with the actor's memories (continuous actions)."""


class MaskedSequenceReplayBuffer(_SequencesMixin, MaskedReplayBuffer):
    """:class:`MaskedReplayBuffer` sampling sequences with the actor's memories (discrete/hybrid actions)."""


class MaskedSequenceDictReplayBuffer(_SequencesMixin, MaskedDictReplayBuffer):
    """:class:`MaskedDictReplayBuffer` sampling sequences with the actor's memories (discrete/hybrid actions)."""
