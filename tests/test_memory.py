"""ML-Agents' LSTM memory (``unity_sb3.networks.memory``): memory layout, episode resets, chunking."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from unity_sb3.networks.memory import (
    LSTMMemory,
    check_memory_settings,
    episode_sequences,
    sequence_minibatches,
)


def stepwise(memory: LSTMMemory, features: th.Tensor, memories: th.Tensor, starts: th.Tensor):
    """Reference: one step at a time, zeroing the memory before each episode start."""
    outputs = []
    for t in range(features.shape[1]):
        memories = memories * (1.0 - starts[:, t : t + 1])
        output, memories = memory(features[:, t : t + 1], memories)
        outputs.append(output)
    return th.cat(outputs, dim=1), memories


@pytest.mark.parametrize("memory_size", [2, 16])
@pytest.mark.parametrize("start_columns", [[], [0], [3], [1, 4, 6]], ids=str)
def test_unroll_equals_stepping_with_resets_at_episode_starts(
    memory_size: int, start_columns: list[int]
) -> None:
    th.manual_seed(0)
    memory = LSTMMemory(input_size=5, memory_size=memory_size)
    features, memories = th.randn(3, 7, 5), th.randn(3, memory_size)
    starts = th.zeros(3, 7)
    for column in start_columns:
        starts[column % 3, column] = 1.0  # a different slot each time: the others keep their memory
    outputs, final = memory(features, memories, starts)
    assert outputs.shape == (3, 7, memory_size // 2) and final.shape == (3, memory_size)
    expected_outputs, expected_final = stepwise(memory, features, memories, starts)
    th.testing.assert_close(outputs, expected_outputs)
    th.testing.assert_close(final, expected_final)


def test_memories_are_hidden_then_cell_state_and_the_output_is_the_hidden_state() -> None:
    th.manual_seed(1)
    memory = LSTMMemory(input_size=4, memory_size=6)
    features, memories = th.randn(2, 3, 4), th.randn(2, 6)
    outputs, final = memory(features, memories)
    hidden, cell = memories[:, :3].unsqueeze(0), memories[:, 3:].unsqueeze(0)
    expected, (h, c) = memory.lstm(features, (hidden.contiguous(), cell.contiguous()))
    th.testing.assert_close(outputs, expected)
    th.testing.assert_close(final, th.cat([h[0], c[0]], dim=1))
    th.testing.assert_close(outputs[:, -1], final[:, :3])


def test_episode_start_forgets_what_came_before() -> None:
    th.manual_seed(2)
    memory = LSTMMemory(input_size=3, memory_size=8)
    features = th.randn(1, 4, 3)
    starts = th.tensor([[0.0, 0.0, 1.0, 0.0]])
    with_past, _ = memory(features, th.randn(1, 8), starts)
    fresh, _ = memory(features[:, 2:], memory.initial_memories(1))
    th.testing.assert_close(with_past[:, 2:], fresh)
    assert not th.allclose(with_past[:, :2], memory(features[:, :2], memory.initial_memories(1))[0])


def test_forget_gate_bias_as_ml_agents() -> None:
    lstm = LSTMMemory(input_size=3, memory_size=8).lstm
    for bias in (lstm.bias_ih_l0, lstm.bias_hh_l0):
        blocks = bias.detach().split(4)
        assert th.all(blocks[1] == 1.0) and all(th.all(b == 0.0) for i, b in enumerate(blocks) if i != 1)


@pytest.mark.parametrize("post_memory_arch", [[5], [6, 4]], ids=str)
def test_post_memory_layers_read_the_lstm_outputs_and_leave_the_memory_alone(post_memory_arch) -> None:
    th.manual_seed(3)
    plain = LSTMMemory(input_size=3, memory_size=8)
    memory = LSTMMemory(
        input_size=3, memory_size=8, post_memory_arch=post_memory_arch, activation_fn=th.nn.SiLU
    )
    memory.lstm.load_state_dict(plain.lstm.state_dict())
    features, memories = th.randn(2, 5, 3), th.randn(2, 8)
    starts = th.tensor([[0.0, 0.0, 1.0, 0.0, 0.0], [0.0] * 5])
    outputs, final = memory(features, memories, starts)
    lstm_outputs, expected_final = plain(features, memories, starts)
    assert memory.output_size == post_memory_arch[-1] and outputs.shape == (2, 5, post_memory_arch[-1])
    th.testing.assert_close(final, expected_final)  # what Unity carries is the LSTM's state only
    th.testing.assert_close(outputs, memory.post_memory(lstm_outputs))
    th.testing.assert_close(outputs, stepwise(memory, features, memories, starts)[0])


def test_bad_post_memory_layers_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"post_memory_arch must list positive layer sizes, got \[4, 0\]"):
        LSTMMemory(input_size=3, memory_size=8, post_memory_arch=[4, 0])


@pytest.mark.parametrize(("memory_size", "sequence_length"), [(0, 4), (7, 4), (-2, 4), (8, 0)])
def test_bad_memory_settings_are_rejected_with_the_rule(memory_size: int, sequence_length: int) -> None:
    with pytest.raises(ValueError, match=r"memory_size must be a positive even|sequence_length must be"):
        check_memory_settings(memory_size, sequence_length)


def test_wrong_memory_shape_is_reported() -> None:
    memory = LSTMMemory(input_size=3, memory_size=8)
    with pytest.raises(ValueError, match=r"memories \[batch, 8\]"):
        memory(th.zeros(2, 5, 3), th.zeros(2, 6))


@pytest.mark.parametrize(
    ("starts", "sequence_length", "expected"),
    [
        ([], 4, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]),  # one episode: every 4 steps
        ([3], 4, [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]),  # an episode starting at 3 starts a sequence
        ([2, 5, 6], 8, [[0, 1], [2, 3, 4], [5], [6, 7, 8, 9]]),  # short episodes: one sequence each
        ([0, 9], 3, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]),
        ([4], 1, [[k] for k in range(10)]),
    ],
    ids=str,
)
def test_sequences_never_cross_an_episode_and_restart_at_each(starts, sequence_length, expected) -> None:
    steps = np.arange(10) * 3 + 1  # a slot's flat indices, any integers
    flags = np.zeros(10, dtype=bool)
    flags[starts] = True
    chunks = episode_sequences(steps, flags, sequence_length)
    assert [list(chunk) for chunk in chunks] == [[3 * k + 1 for k in chunk] for chunk in expected]
    assert episode_sequences(steps[:0], flags[:0], sequence_length) == []


@pytest.mark.parametrize(
    ("starts", "cuts", "sequence_length", "expected"),
    [
        ([], [2], 4, [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]),  # a cut at 2: the next step begins one
        ([], [3, 7], 4, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]),  # cuts every 4 = the plain cut
        ([5], [4], 8, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]),  # a cut just before an episode start: one boundary
        ([], [9], 4, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]),  # a cut at the last step: nothing after it
        ([6], [1], 3, [[0, 1], [2, 3, 4], [5], [6, 7, 8], [9]]),
    ],
    ids=str,
)
def test_sequences_restart_after_each_time_horizon_cut(starts, cuts, sequence_length, expected) -> None:
    """ML-Agents cuts each trajectory (ended by an episode end or every ``time_horizon`` decisions)
    into sequences from its first step: a sequence never crosses a cut either."""
    steps = np.arange(10) * 2
    flags, cut = np.zeros(10, dtype=bool), np.zeros(10, dtype=bool)
    flags[starts], cut[cuts] = True, True
    chunks = episode_sequences(steps, flags, sequence_length, cut)
    assert [list(chunk) for chunk in chunks] == [[2 * k for k in chunk] for chunk in expected]
    assert [list(c) for c in episode_sequences(steps, flags, sequence_length, np.zeros(10, bool))] == [
        list(c) for c in episode_sequences(steps, flags, sequence_length)
    ]


@pytest.mark.parametrize(
    "lengths",
    [[64] * 16, [3] * 50 + [64] * 4, list(range(1, 65)), [200]],
    ids=["full", "short", "mixed", "one"],
)
def test_minibatches_hold_about_batch_size_real_steps(lengths: list[int]) -> None:
    """Short sequences (episodes cut where they start) fill a minibatch by their real steps."""
    np.random.seed(0)
    lengths = np.array(lengths)
    batches = sequence_minibatches(lengths, 128)
    np.testing.assert_array_equal(np.sort(np.concatenate(batches)), np.arange(len(lengths)))
    sizes = [int(lengths[batch].sum()) for batch in batches]
    # each minibatch reaches 128 steps unless it is the last, and overshoots by less than one sequence
    assert all(size >= 128 or k == len(sizes) - 1 for k, size in enumerate(sizes))
    assert all(size - lengths[batch[-1]] < 128 for size, batch in zip(sizes, batches))
    assert len(batches) <= -(-lengths.sum() // 128)
    if (lengths == 64).all():
        assert [len(batch) for batch in batches] == [2] * 8  # full sequences: batch_size // 64 each
    (everything,) = sequence_minibatches(lengths, None)
    np.testing.assert_array_equal(np.sort(everything), np.arange(len(lengths)))
    assert sequence_minibatches(lengths[:0], 128) == sequence_minibatches(lengths[:0], None) == []
