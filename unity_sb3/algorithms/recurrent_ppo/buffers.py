"""The reward-signal rollout buffer with memories, handing out minibatches of sequences (ML-Agents' BPTT)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple

import numpy as np
import torch as th

from unity_sb3.algorithms.ppo.buffers import SignalRolloutBuffer, SignalRolloutBufferSamples
from unity_sb3.networks.memory import check_memory_settings, episode_sequences, sequence_minibatches


class SequenceSamples(NamedTuple):
    """A minibatch as ``n_seq`` padded sequences of ``L`` steps, flat sequence-major (``n_seq * L``).

    :param observations: ``(n_seq * L, ...)`` (padding repeats a real step; the mask drops it).
    :param actions: ``(n_seq * L, action_dim)``.
    :param episode_starts: ``(n_seq * L,)`` float, 1 where the memory is zeroed before the step.
    :param mask: ``(n_seq * L,)`` bool, true at real steps (in the order of the flat samples).
    :param actor_memories: ``(n_seq, memory_size)`` stored before each sequence's first step.
    :param critic_memories: ``(n_seq, memory_size)`` likewise for the critic.
    :param action_masks: ``(n_seq * L, sum(branches))`` True = allowed (hybrid actions), else None.
    """

    observations: th.Tensor | dict[str, th.Tensor]
    actions: th.Tensor
    episode_starts: th.Tensor
    mask: th.Tensor
    actor_memories: th.Tensor
    critic_memories: th.Tensor
    action_masks: th.Tensor | None = None


class RecurrentSignalRolloutBuffer(SignalRolloutBuffer):
    """:class:`~unity_sb3.algorithms.ppo.buffers.SignalRolloutBuffer` that also stores, per step and slot,
    the actor's and critic's memories before the step, and hands out sequences.

    Each slot's *active* steps, in time order, are cut into sequences of at most ``sequence_length``
    that never cross an episode boundary or a ``time_horizon`` cut (``chunk_ends``; ML-Agents' cut,
    padded to ``sequence_length``); a minibatch holds shuffled sequences of about ``batch_size`` real
    steps in all (:func:`~unity_sb3.networks.memory.sequence_minibatches`). An episode start on a
    placeholder step carries to the slot's next active step.

    :param memory_size: floats per memory.
    :param sequence_length: steps per training sequence.
    """

    def __init__(self, *args: Any, memory_size: int, sequence_length: int, **kwargs: Any) -> None:
        check_memory_settings(memory_size, sequence_length)
        self.memory_size, self.sequence_length = memory_size, sequence_length
        super().__init__(*args, **kwargs)

    def reset(self) -> None:
        shape = (self.buffer_size, self.n_envs, self.memory_size)
        self.actor_memories = np.zeros(shape, dtype=np.float32)
        self.critic_memories = np.zeros(shape, dtype=np.float32)
        super().reset()

    def store_memories(self, actor: th.Tensor, critic: th.Tensor) -> None:
        """The memories ``(n_envs, memory_size)`` before the step about to be added."""
        self.actor_memories[self.pos] = actor.detach().cpu().numpy()
        self.critic_memories[self.pos] = critic.detach().cpu().numpy()

    def active_episode_starts(self) -> np.ndarray:
        """``(buffer_size, n_envs)`` bool: episode starts moved from placeholder steps to the next active step."""
        starts = np.zeros_like(self.active)
        pending = np.zeros(self.n_envs, dtype=bool)
        for t in range(self.buffer_size):
            pending |= self.episode_starts[t].astype(bool)
            starts[t] = pending & self.active[t]
            pending &= ~self.active[t]
        return starts

    def sequences(self, starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Flat step indices ``(n_seq, L)`` of every slot's active steps cut into sequences as ML-Agents
        cuts them (:func:`~unity_sb3.networks.memory.episode_sequences`; padding repeats the sequence's
        first step) and the mask of real steps ``(n_seq, L)``.

        :param starts: :meth:`active_episode_starts` when the caller has them already.
        """
        flat_active = self.active.reshape(-1)
        starts = (self.active_episode_starts() if starts is None else starts).reshape(-1)
        cuts = self.chunk_ends.reshape(-1)
        chunks = []
        for env in range(self.n_envs):
            steps = np.arange(env, self.buffer_size * self.n_envs, self.n_envs)
            steps = steps[flat_active[steps]]
            chunks += episode_sequences(steps, starts[steps], self.sequence_length, cuts[steps])
        lengths = np.array([len(chunk) for chunk in chunks], dtype=np.int64)
        mask = np.arange(self.sequence_length)[None, :] < lengths[:, None]
        indices = np.empty(mask.shape, dtype=np.int64)
        indices[mask] = np.concatenate(chunks) if chunks else []
        indices[~mask] = np.repeat([chunk[0] for chunk in chunks], self.sequence_length - lengths)
        return indices, mask

    def get(self, batch_size: int | None = None) -> Generator[SignalRolloutBufferSamples, None, None]:
        """Minibatches of whole sequences in random order; their flat fields hold the real steps only."""
        assert self.full, "the rollout buffer is not full"
        active_starts = self.active_episode_starts()
        indices, mask = self.sequences(active_starts)
        starts = active_starts.reshape(-1).astype(np.float32)
        for chosen in sequence_minibatches(mask.sum(axis=1), batch_size):
            seq_indices, seq_mask = indices[chosen], mask[chosen]
            samples = self._get_samples(seq_indices[seq_mask])
            flat = seq_indices.reshape(-1)
            observations = self._get_samples(flat).observations
            first = seq_indices[:, 0]
            sequences = SequenceSamples(
                observations=observations,
                actions=self.to_torch(self.actions.reshape(-1, self.action_dim)[flat]),
                episode_starts=self.to_torch(np.where(seq_mask.reshape(-1), starts[flat], 0.0)),
                mask=th.as_tensor(seq_mask.reshape(-1), device=self.device),
                actor_memories=self.to_torch(self.actor_memories.reshape(-1, self.memory_size)[first]),
                critic_memories=self.to_torch(self.critic_memories.reshape(-1, self.memory_size)[first]),
                action_masks=(
                    th.as_tensor(self.action_masks.reshape(-1, self.mask_dim)[flat], device=self.device)
                    if self.mask_dim
                    else None
                ),
            )
            yield samples._replace(sequences=sequences)
