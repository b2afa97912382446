"""Group-step units: which POCA rows share V, minibatches of whole units, and the critic's V
computed once per unit (``unity_sb3.algorithms.poca.group_steps``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from test_poca import SMALL, SacrificeVecEnv

from unity_sb3.algorithms.poca import POCA
from unity_sb3.algorithms.poca.group_steps import (
    group_mates,
    group_step_units,
    rows_in_batch,
    runs_cut_near,
    shared_values,
    unit_order,
)
from unity_sb3.algorithms.poca.returns import transition_owners


def _units(active, keys, waiting_keys=None, waiting_alive=None):
    active, keys = np.asarray(active, dtype=bool), np.asarray(keys, dtype=np.int64)
    dones = np.zeros_like(active)
    alive = None if waiting_alive is None else np.asarray(waiting_alive, dtype=bool)
    last_rows = transition_owners(active, dones, alive)
    mates, mate_rows = group_mates(
        active, keys, last_rows, None if waiting_keys is None else np.asarray(waiting_keys)
    )
    return group_step_units(mates, mate_rows, active)


def test_a_group_deciding_together_is_one_unit_per_step():
    # slots 0-2 one group, 3-4 another, 5 alone; two steps, everyone deciding
    keys = [[7, 7, 7, 8, 8, 9]] * 2
    units = _units(np.ones((2, 6)), keys)
    for t in range(2):
        assert len({units[t, 0], units[t, 1], units[t, 2]}) == 1
        assert units[t, 3] == units[t, 4] != units[t, 0]
        assert units[t, 5] not in (units[t, 0], units[t, 3])
    assert not set(units[0]) & set(units[1])  # another step, other units


def test_a_groupmate_not_deciding_now_keeps_each_row_to_itself():
    # step 1: slot 2 (alive, same group) does not decide, so slots 0 and 1 see its step-0 observation
    active = [[1, 1, 1], [1, 1, 0]]
    units = _units(active, [[5, 5, 5]] * 2)
    assert units[0, 0] == units[0, 1] == units[0, 2]
    assert units[1, 0] != units[1, 1]
    assert units[1, 2] == -1


def test_groupmates_from_before_the_rollout_keep_each_row_to_itself():
    # slot 1 decided only before the rollout; slots 0 and 2 decide at step 0 with it as a mate
    units = _units([[1, 0, 1]], [[3, 3, 3]], waiting_keys=[0, 3, 0], waiting_alive=[0, 1, 0])
    assert units[0, 0] != units[0, 2]


def test_runs_cut_near_cuts_at_the_first_run_start_at_or_after_each_multiple():
    keys = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3])  # runs start at 0, 3, 5, 6
    assert runs_cut_near(keys, 2).tolist() == [3, 5, 6]  # multiples 2, 4, 6, 8
    assert runs_cut_near(keys, 3).tolist() == [3, 6]  # 3 is a start; after 6 no start is left
    assert runs_cut_near(keys, 1).tolist() == [3, 5, 6]
    assert runs_cut_near(keys, 10).tolist() == []
    assert runs_cut_near(keys[:0], 4).tolist() == []


@pytest.mark.parametrize("batch_size", [1, 4, 7, 64])
def test_unit_minibatches_cover_every_row_once_and_never_split_a_unit(batch_size):
    rng = np.random.default_rng(batch_size)
    units = rng.permutation(np.repeat(np.arange(20), rng.integers(1, 4, size=20)))
    np.random.seed(0)
    batches = unit_order(units, batch_size)
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(units.size))
    seen = [set(units[b]) for b in batches]
    for k, here in enumerate(seen):
        assert not any(here & other for other in seen[k + 1 :])
    # the cuts are the first unit boundaries at or after each multiple of batch_size (units <= 3 rows)
    cuts = np.cumsum([b.size for b in batches])[:-1]
    multiples = np.arange(batch_size, units.size, batch_size)
    ends = np.r_[cuts, units.size]
    assert all(np.any((ends >= j) & (ends <= j + 2)) for j in multiples)
    assert all(np.any((multiples <= c) & (multiples >= c - 2)) for c in cuts)


def test_shared_values_points_every_row_at_a_row_of_its_unit():
    units = np.array([4, 2, 4, 9, 2, 2])
    value_rows, value_index = shared_values(units)
    assert np.all(np.diff(value_rows) > 0)
    assert np.array_equal(units[value_rows[value_index]], units)
    assert shared_values(np.array([3, 1, 2])) is None


def _unit_batch(critic, sizes, seed=0):
    """Rows of whole units: every member of a unit has a row holding the unit's members with
    itself first (as the buffer gathers them), padded to the widest unit."""
    gen = th.Generator().manual_seed(seed)
    n_features = critic.obs_encoder[0].in_features
    n_actions = critic.obs_action_encoder[0].in_features - n_features
    width = max(sizes)
    features, actions, masks, units = [], [], [], []
    for unit, size in enumerate(sizes):
        obs, act = th.randn(size, n_features, generator=gen), th.randn(size, n_actions, generator=gen)
        for own in range(size):
            order = [own] + [k for k in range(size) if k != own]
            pad = width - size
            features.append(th.cat([obs[order], th.zeros(pad, n_features)]))
            actions.append(th.cat([act[order[1:]], th.zeros(pad, n_actions)]))
            masks.append(th.arange(width) < size)
            units.append(unit)
    return th.stack(features), th.stack(actions), th.stack(masks), np.array(units)


@pytest.mark.parametrize("sizes", [[3, 3, 3], [3, 2, 1, 3, 2], [2, 2]])
@pytest.mark.parametrize("split_by_size", [True, False])
def test_value_once_per_unit_equals_value_per_row(sizes, split_by_size):
    critic = POCA("MlpPolicy", SacrificeVecEnv(), **SMALL).policy.critic
    critic.split_by_size = split_by_size
    features, actions, mask, units = _unit_batch(critic, sizes)
    permutation = np.random.default_rng(1).permutation(units.size)  # rows of a unit apart
    features, actions, mask, units = (
        features[permutation],
        actions[permutation],
        mask[permutation],
        units[permutation],
    )
    rows, index = shared_values(units)
    shared = (th.as_tensor(rows), th.as_tensor(index))

    values, baselines = critic.value_and_baseline(features, actions, mask)
    shared_v, shared_b = critic.value_and_baseline(features, actions, mask, shared)
    th.testing.assert_close(shared_v, values, rtol=1e-5, atol=1e-6)
    th.testing.assert_close(shared_b, baselines, rtol=1e-5, atol=1e-6)
    grads = th.autograd.grad((values + 2 * baselines).sum(), list(critic.parameters()))
    shared_grads = th.autograd.grad((shared_v + 2 * shared_b).sum(), list(critic.parameters()))
    for grad, want in zip(shared_grads, grads):
        th.testing.assert_close(grad, want, rtol=1e-4, atol=1e-5)


def _rows_of_units(critic, sizes, seed=0):
    """:func:`_unit_batch`'s rows, shuffled, with what the rows themselves hold: each row's own
    features and action, and the position of each of its groupmates' rows."""
    features, actions, mask, units = _unit_batch(critic, sizes, seed)
    n_actions = actions.shape[-1]
    gen = th.Generator().manual_seed(seed + 1)
    own_actions = th.empty(len(units), n_actions)
    positions = th.full((len(units), max(sizes) - 1), -1, dtype=th.int64)
    start = 0
    for size in sizes:  # the unit's members have rows start .. start + size - 1, member k at start + k
        for own in range(size):
            others = [start + k for k in range(size) if k != own]
            positions[start + own, : size - 1] = th.tensor(others, dtype=th.int64)
        own_actions[start : start + size] = th.randn(size, n_actions, generator=gen)
        for own in range(size):  # each row's mates' actions are those the mates' rows hold
            actions[start + own, : size - 1] = own_actions[positions[start + own, : size - 1]]
        start += size
    permutation = th.as_tensor(np.random.default_rng(seed).permutation(len(units)))
    new_position = th.empty_like(permutation)
    new_position[permutation] = th.arange(len(units))
    positions = positions[permutation]
    positions = th.where(positions >= 0, new_position[positions.clamp(min=0)], positions)
    return (
        features[permutation],
        actions[permutation],
        mask[permutation],
        units[permutation.numpy()],
        own_actions[permutation],
        positions,
    )


@pytest.mark.parametrize("sizes", [[3, 3, 3], [3, 2, 1, 3, 2], [2, 2], [1, 1]])
@pytest.mark.parametrize("split_by_size", [True, False])
def test_groupmates_taken_from_their_rows_give_the_same_values_baselines_and_gradients(sizes, split_by_size):
    critic = POCA("MlpPolicy", SacrificeVecEnv(), **SMALL).policy.critic
    critic.split_by_size = split_by_size
    features, actions, mask, units, own_actions, positions = _rows_of_units(critic, sizes)
    shared = tuple(th.as_tensor(part) for part in shared_values(units) or (np.arange(units.size),) * 2)

    values, baselines = critic.value_and_baseline(features, actions, mask)
    got_v, got_b = critic.value_and_baseline_of_rows(features[:, 0], own_actions, positions, shared)
    th.testing.assert_close(got_v, values, rtol=1e-5, atol=1e-6)
    th.testing.assert_close(got_b, baselines, rtol=1e-5, atol=1e-6)
    assert critic.max_entities.item() == max(sizes)
    parameters = list(critic.parameters())
    grads = th.autograd.grad((values + 2 * baselines).sum(), parameters, allow_unused=True)
    got_grads = th.autograd.grad((got_v + 2 * got_b).sum(), parameters, allow_unused=True)
    for got, want, parameter in zip(got_grads, grads, parameters):
        zero = th.zeros_like(parameter)  # groups of one leave the action encoder out of one graph
        th.testing.assert_close(
            zero if got is None else got, zero if want is None else want, rtol=1e-4, atol=1e-5
        )


def test_rows_in_batch_finds_each_present_row_or_gives_up():
    flat = np.array([40, 7, 12, 3])
    wanted = np.array([[7, 3], [40, 0], [12, 99]])
    present = np.array([[True, True], [True, False], [True, False]])
    assert np.array_equal(rows_in_batch(flat, wanted, present), [[1, 3], [0, -1], [2, -1]])
    present[2, 1] = True  # row 99 is not in the minibatch
    assert rows_in_batch(flat, wanted, present) is None
    assert rows_in_batch(np.array([], dtype=np.int64), wanted[:0], present[:0]) is None


@pytest.mark.parametrize("action", ["discrete", "multidiscrete", "box"])
def test_minibatches_of_whole_groups_take_groupmates_from_their_rows(action):
    """Every groupmate position a minibatch gives points at a row holding that groupmate's
    observation and action, and the critic's values and gradients from the rows equal those
    from the gathered groupmates."""
    model = POCA("MlpPolicy", SacrificeVecEnv(action, n_instances=3), **SMALL).learn(48)
    buffer, policy = model.rollout_buffer, model.policy
    from_rows = 0
    for batch in buffer.get(8):
        if batch.mate_positions is None:
            continue
        from_rows += 1
        present = batch.mate_positions >= 0
        assert th.equal(present, batch.mate_mask.bool())
        at = batch.mate_positions.clamp(min=0)
        th.testing.assert_close(
            batch.observations[at][present], batch.mate_observations[present], rtol=0, atol=0
        )
        th.testing.assert_close(batch.actions[at][present], batch.mate_actions[present], rtol=0, atol=0)
        fields = (batch.observations, batch.mate_observations, batch.mate_actions, batch.mate_mask)
        values, baselines = policy.predict_values_and_baselines(*fields, batch.shared_values)
        got_v, got_b = policy.predict_values_and_baselines(
            *fields, batch.shared_values, batch.actions, batch.mate_positions
        )
        th.testing.assert_close(got_v, values, rtol=1e-5, atol=1e-6)
        th.testing.assert_close(got_b, baselines, rtol=1e-5, atol=1e-6)
        parameters = list(policy.critic.parameters())
        grads = th.autograd.grad((values + baselines).sum(), parameters)
        for got, want in zip(th.autograd.grad((got_v + got_b).sum(), parameters), grads):
            th.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert from_rows > 0


def test_groups_of_one_sample_exactly_as_before():
    """With nobody to share V with, ``get`` shuffles the rows one by one as it always did."""
    model = POCA("MlpPolicy", SacrificeVecEnv(), **SMALL)
    buffer = model.rollout_buffer
    buffer.units = np.arange(buffer.buffer_size * buffer.n_envs).reshape(buffer.buffer_size, buffer.n_envs)
    buffer.active[:] = True
    buffer.full = True
    np.random.seed(3)
    got = [batch.observations for batch in buffer.get(5)]
    np.random.seed(3)
    want = np.random.permutation(np.arange(buffer.units.size))
    flat_obs = buffer.observations.reshape(buffer.units.size, -1)
    for k, batch in enumerate(got):
        np.testing.assert_array_equal(
            batch.numpy().reshape(batch.shape[0], -1), flat_obs[want[5 * k : 5 * k + 5]]
        )


@pytest.mark.parametrize("action", ["discrete", "box"])
def test_training_minibatches_hold_whole_groups_and_their_shared_values(action):
    """After a rollout of groups of three, each minibatch shares V within its groups, and the
    shared V is each row's own V; the stored values were computed the same way."""
    model = POCA("MlpPolicy", SacrificeVecEnv(action, n_instances=3), **SMALL).learn(48)
    buffer, policy = model.rollout_buffer, model.policy
    assert buffer.units is not None
    shared_somewhere = False
    with th.no_grad():
        for batch in buffer.get(8):
            fields = (batch.observations, batch.mate_observations, batch.mate_actions, batch.mate_mask)
            values, baselines = policy.predict_values_and_baselines(*fields)
            shared_v, shared_b = policy.predict_values_and_baselines(*fields, batch.shared_values)
            th.testing.assert_close(shared_v, values, rtol=1e-5, atol=1e-6)
            th.testing.assert_close(shared_b, baselines)
            shared_somewhere |= batch.shared_values is not None
    assert shared_somewhere


@pytest.mark.parametrize("batch_size", [4, 7])
def test_rollout_critic_passes_hold_whole_steps_and_take_groupmates_from_their_rows(batch_size):
    """``finalize``'s critic passes end with a whole step (groups of three, passes of ~``batch_size``
    rows), so each pass with no groupmate from before the rollout computes from the rows; the values
    and baselines equal one pass over every row."""
    model = POCA("MlpPolicy", SacrificeVecEnv("discrete", n_instances=3), **SMALL).learn(48)
    buffer, policy = model.rollout_buffer, model.policy
    rows = np.nonzero(buffer.active)[0]
    with th.no_grad():
        buffer._compute_values_and_baselines(policy, rows.size)
    want_v, want_b = buffer.values.copy(), buffer.baselines.copy()
    passes = []
    original = policy.predict_values_and_baselines

    def spy(observations, *args):
        passes.append((len(observations), args[-1] is not None))
        return original(observations, *args)

    policy.predict_values_and_baselines = spy
    with th.no_grad():
        buffer._compute_values_and_baselines(policy, batch_size)
    sizes = np.array([size for size, _ in passes])
    ends = np.cumsum(sizes)
    assert ends[-1] == rows.size and len(passes) > 1
    assert np.all(rows[ends[:-1]] != rows[ends[:-1] - 1])  # every cut between two steps
    assert np.all(sizes < batch_size + buffer.active.sum(axis=1).max())  # ends at the next step's end
    from_rows = [taken for _, taken in passes]
    assert all(from_rows[1:])  # only the first pass may hold groupmates from before the rollout
    np.testing.assert_allclose(buffer.values, want_v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(buffer.baselines, want_b, rtol=1e-5, atol=1e-6)
