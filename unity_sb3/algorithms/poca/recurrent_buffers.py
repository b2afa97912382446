"""The rollout buffer of MA-POCA with memory: actor and critic memories per step, and sequences.

Each slot's *active* rows of a rollout, in time order, form its agent's trajectory here; training
cuts them into chunks of at most ``sequence_length`` (ML-Agents' ``sequence_length``) that never cross
an episode boundary, each unrolled from the memories stored at its first row. Three memories are
stored per row, ``(n_steps, n_envs, memory_size)`` each, always the memory *before* the row's step
(an episode start at the row zeroes it inside the step, flagged by
:meth:`RecurrentPOCARolloutBuffer.decision_episode_starts`):

- ``memories``: the actor's, written while acting (:class:`~unity_sb3.algorithms.poca.RecurrentPOCA`);
- ``value_memories`` / ``baseline_memories``: the centralised critic's two streams (ML-Agents'
  ``critic_memory`` / ``baseline_memory``), written by :meth:`RecurrentPOCARolloutBuffer.finalize`.
  The critic needs every groupmate of a decision, which the buffer knows only once the rollout is in
  (a groupmate between decisions takes part with its last one), so, as ML-Agents evaluates a finished
  trajectory sequence by sequence, ``finalize`` steps the critic's LSTM through each slot's active
  rows from the memories the slot carried out of the previous rollout. The memories after a slot's
  last decision are carried into the next rollout (zeroed if an episode starts before its next
  decision) and forgotten when the env is reset.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple

import numpy as np
import torch as th

from unity_sb3.algorithms.poca.buffers import POCARolloutBuffer
from unity_sb3.algorithms.poca.returns import transition_owners
from unity_sb3.networks.memory import check_memory_settings, episode_sequences, sequence_minibatches


class RecurrentPOCASamples(NamedTuple):
    """:class:`~unity_sb3.algorithms.poca.buffers.POCARolloutBufferSamples`' fields over the real
    steps of a minibatch of sequences (sequence after sequence, in time order), plus what the
    actor's and the critic's LSTMs need to unroll them."""

    observations: th.Tensor | dict[str, th.Tensor]
    actions: th.Tensor
    old_values: th.Tensor
    old_baselines: th.Tensor
    old_log_prob: th.Tensor
    advantages: th.Tensor
    returns: th.Tensor
    action_masks: th.Tensor | None
    mate_observations: th.Tensor | dict[str, th.Tensor]
    mate_actions: th.Tensor
    mate_mask: th.Tensor
    shared_values: None  # memory gives each row its own V: never shared
    mate_positions: None  # so the critic never takes groupmates from their rows (no shared V)
    memories: th.Tensor  # (n_sequences, memory_size): stored actor memory before each sequence
    episode_starts: th.Tensor  # (n_steps,) 1.0 where an episode started since the previous decision
    sequence_mask: th.Tensor  # (n_sequences, sequence_length) bool, True at real steps
    value_memories: th.Tensor  # (n_sequences, memory_size): the critic's V memory before each sequence
    baseline_memories: th.Tensor  # (n_sequences, memory_size): its baseline memory likewise


class RecurrentPOCARolloutBuffer(POCARolloutBuffer):
    """:class:`POCARolloutBuffer` that also stores each slot's actor and critic memories per step and
    yields minibatches of ``sequence_length``-step sequences of each slot's active rows.

    :param memory_size: floats of memory per agent and per stream (actor, V, baseline).
    :param sequence_length: steps per training sequence.
    :param kwargs: :class:`POCARolloutBuffer`'s arguments.
    """

    def __init__(self, *args: Any, memory_size: int, sequence_length: int, **kwargs: Any) -> None:
        check_memory_settings(memory_size, sequence_length)
        self.memory_size = memory_size
        self.sequence_length = sequence_length
        super().__init__(*args, **kwargs)

    def reset(self) -> None:
        super().reset()
        shape = (self.buffer_size, self.n_envs, self.memory_size)
        self.memories = np.zeros(shape, dtype=np.float32)
        self.value_memories = np.zeros(shape, dtype=np.float32)
        self.baseline_memories = np.zeros(shape, dtype=np.float32)

    def forget_waiting_mates(self) -> None:
        """Also forget the critic memories carried from the previous rollout (after an env reset):
        ``critic_carry`` (n_envs, 2, memory_size), each slot's V then baseline memory."""
        super().forget_waiting_mates()
        self.critic_carry = np.zeros((self.n_envs, 2, self.memory_size), dtype=np.float32)

    def decision_episode_starts(self) -> np.ndarray:
        """(n_steps, n_envs) bool: at active rows, an episode started at this step or at one of the
        slot's inactive steps since its previous decision in the rollout (the memory was zeroed)."""
        counts = np.cumsum(self.episode_starts > 0, axis=0)
        flags = np.zeros_like(self.active)
        for slot in range(self.n_envs):
            rows = np.flatnonzero(self.active[:, slot])
            before = np.concatenate([[0], counts[rows[:-1], slot]]) if rows.size else rows
            flags[rows, slot] = counts[rows, slot] > before
        return flags

    def started_after_last_decision(self) -> np.ndarray:
        """(n_envs,) bool: an episode started after the slot's last decision in the rollout, up to and
        including the observation after the rollout (a slot without a decision: anywhere in it)."""
        counts = np.cumsum(self.episode_starts > 0, axis=0)
        total = counts[-1] + self.dones[-1]
        last = np.where(
            self.active.any(axis=0), self.buffer_size - 1 - np.argmax(self.active[::-1], axis=0), -1
        )
        before = np.where(last >= 0, counts[np.maximum(last, 0), np.arange(self.n_envs)], 0)
        return total > before

    # ------------------------------------------------------------- the critic's memory

    @th.no_grad()
    def _compute_values_and_baselines(self, policy: Any, batch_size: int) -> None:
        """V and baselines at the active rows with the critic's memory: every row's entity sets are
        encoded in batches, then the LSTM steps through the rows in time order, each slot from the
        memories it carried in, zeroed where its episode starts; the memories before each row are
        stored, those after each slot's last decision carried to the next rollout."""
        n, m = self.buffer_size, self.n_envs
        rows, cols = np.nonzero(self.active)  # time-major: each step's rows are one block
        encodings, counts = [], []
        for start in range(0, rows.size, batch_size):
            sample = self._gather(rows[start : start + batch_size] * m + cols[start : start + batch_size])
            encoding, count = policy.critic_encodings(
                sample.observations, sample.mate_observations, sample.mate_actions, sample.mate_mask
            )
            encodings.append(encoding)
            counts.append(count)
        memory = th.as_tensor(self.critic_carry, device=self.device)
        owner = transition_owners(self.active, self.dones)
        final_rows = {(int(owner[t, j]), int(j)) for t, j in zip(*np.nonzero(self.dones & (owner >= 0)))}
        self._memories_after: dict[tuple[int, int], th.Tensor] = {}
        if rows.size:
            encoding, count = th.cat(encodings, dim=1), th.cat(counts, dim=1)  # (2, N, E), (2, N, 1)
            flags = th.as_tensor(
                self.decision_episode_starts()[rows, cols], dtype=th.float32, device=self.device
            )
            outputs = encoding.new_zeros((2, rows.size, policy.critic.memory.hidden_size))
            bounds = np.searchsorted(rows, np.arange(n + 1))
            for t in range(n):
                lo, hi = bounds[t], bounds[t + 1]
                if lo == hi:
                    continue
                slots = th.as_tensor(cols[lo:hi], device=self.device)
                before = memory[slots]  # (k, 2, M)
                self.value_memories[t, cols[lo:hi]] = before[:, 0].cpu().numpy()
                self.baseline_memories[t, cols[lo:hi]] = before[:, 1].cpu().numpy()
                k = hi - lo
                step_in = encoding[:, lo:hi].transpose(0, 1).reshape(2 * k, 1, -1)
                starts = flags[lo:hi].repeat_interleave(2).reshape(2 * k, 1)
                out, after = policy.critic.memory(step_in, before.reshape(2 * k, -1), starts)
                memory[slots] = after.reshape(k, 2, -1)
                outputs[:, lo:hi] = out.reshape(k, 2, -1).transpose(0, 1)
                for j in cols[lo:hi]:
                    if (t, int(j)) in final_rows:
                        self._memories_after[(t, int(j))] = memory[int(j), 0].clone()
            for start in range(0, rows.size, batch_size):
                part = slice(start, start + batch_size)
                values = policy.critic.read_out(outputs[:, part].flatten(0, 1), count[:, part].flatten(0, 1))
                values = values.reshape(2, -1).cpu().numpy()
                self.values[rows[part], cols[part]] = values[0]
                self.baselines[rows[part], cols[part]] = values[1]
        ended = th.as_tensor(self.started_after_last_decision(), device=self.device)
        self.critic_carry = (memory * (~ended).to(memory.dtype).reshape(m, 1, 1)).cpu().numpy()

    def _ended_group_values(
        self, policy: Any, group_obs: Any, mask: th.Tensor, rows: np.ndarray, members: np.ndarray
    ) -> Any:
        """Each member's V of its ended group's terminal observations, from its own V memory after
        its last decision (``rows``), as ML-Agents bootstraps each agent from its critic memory."""
        k = len(members)
        memories = th.stack([self._memories_after[(int(r), int(j))] for r, j in zip(rows, members)])
        if isinstance(group_obs, dict):
            repeated: Any = {key: value.expand(k, *value.shape[1:]) for key, value in group_obs.items()}
        else:
            repeated = group_obs.expand(k, *group_obs.shape[1:])
        values, _ = policy.step_group_values(repeated, mask.expand(k, -1), memories)
        return values.cpu().numpy()

    def _next_group_values(
        self, policy: Any, group_obs: Any, mask: th.Tensor, slots: np.ndarray
    ) -> np.ndarray:
        """V after the rollout from each deciding slot's carried V memory (zero if its episode starts)."""
        memories = th.as_tensor(self.critic_carry[slots, 0], device=self.device)
        values, _ = policy.step_group_values(group_obs, mask, memories)
        return values.cpu().numpy()

    # ------------------------------------------------------------------- sequences

    def sequences(self, flags: np.ndarray | None = None) -> list[np.ndarray]:
        """Each slot's active rows cut into chunks of at most ``sequence_length`` steps that never
        cross an episode boundary or a ``time_horizon`` cut (``chunk_ends``; ML-Agents' cut,
        :func:`~unity_sb3.networks.memory.episode_sequences`), as flat indices ``t * n_envs + i`` in time
        order. ``flags``: :meth:`decision_episode_starts` when the caller has them already."""
        flags = self.decision_episode_starts() if flags is None else flags
        chunks = []
        for slot in range(self.n_envs):
            rows = np.flatnonzero(self.active[:, slot])
            chunks += episode_sequences(
                rows * self.n_envs + slot,
                flags[rows, slot],
                self.sequence_length,
                self.chunk_ends[rows, slot],
            )
        return chunks

    def get(self, batch_size: int | None = None) -> Generator[RecurrentPOCASamples, None, None]:  # type: ignore[override]
        """Shuffled minibatches of whole sequences, about ``batch_size`` real steps each (at least one
        sequence; :func:`~unity_sb3.networks.memory.sequence_minibatches`)."""
        assert self.full, "the rollout buffer is not full yet"
        starts = self.decision_episode_starts()
        chunks = self.sequences(starts)
        flags = starts.reshape(-1)
        stored = {
            name: getattr(self, name).reshape(-1, self.memory_size)
            for name in ("memories", "value_memories", "baseline_memories")
        }
        for chosen in sequence_minibatches(np.array([chunk.size for chunk in chunks]), batch_size):
            batch = [chunks[k] for k in chosen]
            flat = np.concatenate(batch)
            firsts = [chunk[0] for chunk in batch]
            lengths = np.array([chunk.size for chunk in batch])
            mask = np.arange(self.sequence_length)[None, :] < lengths[:, None]
            yield RecurrentPOCASamples(
                *self._gather(flat),
                memories=self.to_torch(stored["memories"][firsts]),
                episode_starts=self.to_torch(flags[flat].astype(np.float32)),
                sequence_mask=th.as_tensor(mask, device=self.device),
                value_memories=self.to_torch(stored["value_memories"][firsts]),
                baseline_memories=self.to_torch(stored["baseline_memories"][firsts]),
            )
