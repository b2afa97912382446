"""ML-Agents' memory: an LSTM whose state is one flat ``[hidden, cell]`` vector per agent, and the
helpers that cut a slot's time series into fixed-length training sequences.

ML-Agents (``mlagents/trainers/torch_entities/layers.py`` ``LSTM``) stores ``memory_size`` floats per
agent: the LSTM's hidden state followed by its cell state, so the LSTM has ``memory_size // 2``
units. Memories are stored at every step while acting; training cuts each agent's trajectory into
chunks of ``sequence_length`` steps, each unrolled from the memory stored at its first step
(truncated back-propagation through time). The on-policy buffers cut as ML-Agents does
(:func:`episode_sequences`: a sequence never crosses an episode boundary or a ``time_horizon`` cut,
and a short episode is one whole sequence from its first step); :class:`LSTMMemory` also resets the
memory where an episode starts inside a sequence, so series cut anywhere (SAC's replayed windows)
unroll correctly too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import torch as th
from torch import nn

#: ML-Agents' ``NetworkSettings.MemorySettings`` defaults
DEFAULT_MEMORY_SIZE = 128
DEFAULT_SEQUENCE_LENGTH = 64


def check_memory_settings(memory_size: int, sequence_length: int) -> None:
    """Raise a clear error for memory settings ML-Agents would not accept.

    :param memory_size: floats of memory per agent (hidden + cell state): positive and even.
    :param sequence_length: steps per training sequence: positive.
    """
    if memory_size <= 0 or memory_size % 2:
        raise ValueError(
            f"memory_size must be a positive even number (hidden + cell state), got {memory_size}; "
            "ML-Agents' default is 128."
        )
    if sequence_length <= 0:
        raise ValueError(f"sequence_length must be a positive number of steps, got {sequence_length}.")


def lstm_layer(input_size: int, hidden_size: int, forget_bias: float = 1.0) -> nn.LSTM:
    """A batch-first one-layer LSTM initialised as ML-Agents' ``lstm_layer``: Xavier-uniform weights per
    gate block, zero biases, ``forget_bias`` added to the forget gate's biases.

    :param input_size: features per step.
    :param hidden_size: LSTM units (``memory_size // 2``).
    :param forget_bias: added to both forget-gate biases (PyTorch has an input and a hidden bias).
    """
    lstm = nn.LSTM(input_size, hidden_size, num_layers=1, batch_first=True)
    for name, param in lstm.named_parameters():
        # PyTorch stacks the gates as (input, forget, cell, output) blocks of hidden_size rows
        for gate, block in enumerate(param.data.split(hidden_size, dim=0)):
            if "weight" in name:
                nn.init.xavier_uniform_(block)
            else:
                nn.init.zeros_(block)
                if gate == 1:
                    block.add_(forget_bias)
    return lstm


class LSTMMemory(nn.Module):
    """ML-Agents' LSTM memory block: features ``[batch, seq, input_size]`` and flat memories
    ``[batch, memory_size]`` (hidden then cell state) in, outputs ``[batch, seq, output_size]`` and
    the memories after the last step out.

    The outputs are the LSTM's hidden states (``output_size = memory_size // 2``, ML-Agents' layout)
    unless ``post_memory_arch`` puts dense layers after the LSTM (sb3-contrib's layout has its
    ``net_arch`` there; ML-Agents has none): they let the heads combine what the memory holds with
    what the agent sees now non-linearly (``output_size`` = the last layer's units). The memory
    itself, what Unity carries in ``recurrent_in``/``recurrent_out``, does not change.

    :param input_size: features per step (the network body's output size).
    :param memory_size: floats of memory per agent, even; the LSTM has ``memory_size // 2`` units.
    :param post_memory_arch: units of each dense layer after the LSTM (empty: none).
    :param activation_fn: the activation after each of those layers.
    """

    def __init__(
        self,
        input_size: int,
        memory_size: int,
        post_memory_arch: Sequence[int] = (),
        activation_fn: type[nn.Module] = nn.Tanh,
    ) -> None:
        super().__init__()
        check_memory_settings(memory_size, 1)
        if any(int(units) <= 0 for units in post_memory_arch):
            raise ValueError(
                f"post_memory_arch must list positive layer sizes, got {list(post_memory_arch)}."
            )
        self.input_size = input_size
        self.memory_size = memory_size
        self.hidden_size = memory_size // 2
        self.lstm = lstm_layer(input_size, self.hidden_size)
        layers: list[nn.Module] = []
        self.output_size = self.hidden_size
        for units in post_memory_arch:
            layers += [nn.Linear(self.output_size, int(units)), activation_fn()]
            self.output_size = int(units)
        self.post_memory = nn.Sequential(*layers)

    def initial_memories(self, batch_size: int, device: th.device | str = "cpu") -> th.Tensor:
        """Zero memories ``[batch_size, memory_size]``, what an episode starts from."""
        return th.zeros(batch_size, self.memory_size, device=device)

    def forward(
        self, features: th.Tensor, memories: th.Tensor, episode_starts: th.Tensor | None = None
    ) -> tuple[th.Tensor, th.Tensor]:
        """Unroll the LSTM over sequences.

        :param features: ``[batch, seq, input_size]``.
        :param memories: ``[batch, memory_size]``, the memory before each sequence's first step.
        :param episode_starts: ``[batch, seq]``, nonzero where an episode starts: the memory is zeroed
            before that step (including the first). ``None``: no episode starts inside the sequences.
        :return: outputs ``[batch, seq, output_size]`` and memories ``[batch, memory_size]`` after the
            last step.
        """
        if features.ndim != 3 or memories.shape != (features.shape[0], self.memory_size):
            raise ValueError(
                f"expected features [batch, seq, {self.input_size}] and memories "
                f"[batch, {self.memory_size}], got {tuple(features.shape)} and {tuple(memories.shape)}."
            )
        hidden, cell = (m.unsqueeze(0).contiguous() for m in memories.split(self.hidden_size, dim=1))
        if episode_starts is None:
            outputs, (hidden, cell) = self.lstm(features, (hidden, cell))
            return self.post_memory(outputs), th.cat([hidden[0], cell[0]], dim=1)
        starts = episode_starts.reshape(features.shape[:2]).to(features.dtype)
        # one LSTM call per segment between columns where some sequence starts an episode
        columns = th.nonzero(starts[:, 1:].any(dim=0)).flatten().add(1).tolist()
        bounds = [0, *columns, features.shape[1]]
        outputs = []
        for begin, end in itertools.pairwise(bounds):
            keep = (1.0 - starts[:, begin]).reshape(1, -1, 1)
            output, (hidden, cell) = self.lstm(features[:, begin:end], (hidden * keep, cell * keep))
            outputs.append(output)
        return self.post_memory(th.cat(outputs, dim=1)), th.cat([hidden[0], cell[0]], dim=1)


def unroll_sequences(
    memory: LSTMMemory,
    latent: th.Tensor,
    memories: th.Tensor,
    episode_starts: th.Tensor,
    sequence_mask: th.Tensor,
) -> tuple[th.Tensor, th.Tensor]:
    """Unroll ``memory`` over sequences given as their real steps, in one LSTM call whatever their
    lengths: the padding follows the real steps, so it cannot change their outputs.

    :param memory: the LSTM block.
    :param latent: the real steps' inputs, sequence after sequence, shape (n_steps, input_size).
    :param memories: (n_sequences, memory_size), the memory before each sequence.
    :param episode_starts: (n_steps,) nonzero where the memory is zeroed before the step.
    :param sequence_mask: (n_sequences, sequence_length) bool, True at real steps (a prefix).
    :return: LSTM outputs (n_steps, memory_size // 2) and the memories (n_sequences, memory_size)
        after each sequence's last column: after its last real step only where it has no padding
        (acting's one-step sequences; training discards them).
    """
    padded = latent.new_zeros((*sequence_mask.shape, latent.shape[-1]))
    padded[sequence_mask] = latent
    starts = latent.new_zeros(sequence_mask.shape)
    starts[sequence_mask] = episode_starts.to(latent.dtype)
    outputs, memories = memory(padded, memories, starts)
    return outputs[sequence_mask], memories


def predict_memories(
    state: np.ndarray | None,
    episode_start: np.ndarray | None,
    n: int,
    memory_size: int,
    device: th.device | str = "cpu",
) -> tuple[th.Tensor, th.Tensor]:
    """``predict(obs, state, episode_start)``'s inputs (sb3-contrib's convention) as tensors, checked.

    :param state: memories ``(n, memory_size)`` returned by the previous ``predict``, or None (zeros).
    :param episode_start: ``(n,)``, 1 where an episode starts, or None (no start).
    :param n: agents (rows) in this call.
    :param memory_size: floats per memory.
    :return: memories ``(n, memory_size)`` float32 and episode starts ``(n,)`` float32 on ``device``.
    """
    memories = th.zeros(n, memory_size) if state is None else th.as_tensor(state, dtype=th.float32)
    if memories.shape != (n, memory_size):
        raise ValueError(
            f"state must be the memories of shape ({n}, {memory_size}) returned by the previous predict "
            f"(or None at the start), got {tuple(memories.shape)}."
        )
    starts = th.zeros(n) if episode_start is None else th.as_tensor(episode_start, dtype=th.float32)
    return memories.to(device), starts.reshape(n).to(device)


def episode_sequences(
    steps: np.ndarray, starts: np.ndarray, sequence_length: int, cuts: np.ndarray | None = None
) -> list[np.ndarray]:
    """Cut one slot's steps into training sequences the way ML-Agents does: never across a trajectory.

    ML-Agents cuts an agent's experience into trajectories at each episode end and every
    ``time_horizon`` decisions, and each trajectory into sequences from its first step (the last one
    padded at its end: ``AgentBuffer.resequence_and_append``), so every sequence lies within one
    episode and an episode shorter than ``sequence_length`` is one whole sequence, from its first
    step, whose gradient reaches back to that step. Here a sequence begins at the slot's first step,
    at each episode start, after each ``time_horizon`` cut (``cuts``), and every ``sequence_length``
    steps after one of those. A cut does not zero the memory: the sequence after it unrolls from the
    memory stored at its first step, as ML-Agents' does.

    :param steps: the slot's step indices (any integers), in time order, shape ``(n,)``.
    :param starts: ``(n,)`` bool, true where an episode starts at that step (the memory is zeroed).
    :param sequence_length: most steps per sequence.
    :param cuts: ``(n,)`` bool, true where the step's decision ends a ``time_horizon`` trajectory
        (:func:`~unity_sb3.algorithms.advantages.horizon_cuts`): the next step begins a sequence.
        ``None``: no such cuts.
    :return: consecutive pieces of ``steps``, each at most ``sequence_length`` long.
    """
    n = len(steps)
    if n == 0:
        return []
    check_memory_settings(2, sequence_length)
    begins = np.asarray(starts, dtype=bool).copy()
    if cuts is not None:
        begins[1:] |= np.asarray(cuts, dtype=bool)[:-1]
    begins[0] = True
    index = np.arange(n)
    episode_first = np.maximum.accumulate(np.where(begins, index, 0))
    cuts = np.flatnonzero(begins | ((index - episode_first) % sequence_length == 0))
    return np.split(steps, cuts[1:])


def sequence_minibatches(lengths: np.ndarray, batch_size: int | None) -> list[np.ndarray]:
    """Shuffled sequences grouped into minibatches of about ``batch_size`` real steps each.

    Sequences cut at episode starts are often shorter than ``sequence_length``; counting a
    minibatch in sequences (``batch_size // sequence_length`` of them, as ML-Agents counts its
    padded steps) would then give many small minibatches and many more gradient steps per rollout
    than ``batch_size`` promises. Here a minibatch takes shuffled sequences until their real steps
    reach ``batch_size`` (at least one sequence each), so a rollout of ``N`` real steps gives about
    ``N / batch_size`` minibatches per epoch, as with full-length sequences.

    :param lengths: real steps of each sequence, shape ``(n_seq,)``.
    :param batch_size: real steps per minibatch; ``None``: one minibatch of every sequence.
    :return: per minibatch, the indices of its sequences (a random permutation, split); no
        minibatch when there is no sequence.
    """
    order = np.random.permutation(len(lengths))
    if len(order) == 0:
        return []
    if batch_size is None:
        return [order]
    batches, first, steps = [], 0, 0
    for k, length in enumerate(np.asarray(lengths)[order].tolist()):
        steps += length
        if steps >= batch_size:
            batches.append(order[first : k + 1])
            first, steps = k + 1, 0
    if first < len(order):
        batches.append(order[first:])
    return batches
