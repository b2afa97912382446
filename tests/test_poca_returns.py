"""Hand-worked cases for POCA's targets (``unity_sb3.algorithms.poca.returns``)."""

from __future__ import annotations

import numpy as np
import pytest

from unity_sb3.algorithms.poca.group_steps import group_mates
from unity_sb3.algorithms.poca.returns import compute_poca_returns, transition_owners


def _returns(
    rewards,
    active,
    dones,
    keys,
    values,
    *,
    group_rewards=None,
    truncated=None,
    terminal_values=None,
    last_values=None,
    last_active=None,
    last_keys=None,
    gamma=0.9,
    lam=1.0,
    share=True,
    chunk_ends=None,
):
    rewards = np.asarray(rewards, dtype=np.float32)
    shape = rewards.shape
    zeros = np.zeros(shape, dtype=np.float32)
    m = shape[1]
    return compute_poca_returns(
        rewards,
        zeros if group_rewards is None else np.asarray(group_rewards, dtype=np.float32),
        np.asarray(dones, dtype=bool),
        np.zeros(shape, dtype=bool) if truncated is None else np.asarray(truncated, dtype=bool),
        np.asarray(active, dtype=bool),
        np.asarray(keys, dtype=np.int64),
        np.asarray(values, dtype=np.float32),
        zeros if terminal_values is None else np.asarray(terminal_values, dtype=np.float32),
        np.zeros(m, dtype=np.float32) if last_values is None else np.asarray(last_values, dtype=np.float32),
        np.zeros(m, dtype=bool) if last_active is None else np.asarray(last_active, dtype=bool),
        np.zeros(m, dtype=np.int64) if last_keys is None else np.asarray(last_keys, dtype=np.int64),
        gamma,
        lam,
        share,
        None if chunk_ends is None else np.asarray(chunk_ends, dtype=bool),
    )


@pytest.mark.parametrize(
    ("lam", "expected"),
    [(1.0, [2.62, 1.8, 2.0]), (0.5, [2.9125, 2.25, 2.0])],
)
def test_single_agent_episode_td_lambda(lam, expected):
    # G2 = 2 (terminal); G1 = 0 + .9((1-l) V2 + l G2); G0 = 1 + .9((1-l) V1 + l G1)
    returns, _ = _returns(
        [[1.0], [0.0], [2.0]], [[1], [1], [1]], [[0], [0], [1]], [[-1]] * 3, [[1.0], [2.0], [3.0]], lam=lam
    )
    np.testing.assert_allclose(returns[:, 0], expected, rtol=1e-6)


def _lambda_return(rewards, values, value_next, gamma, lam):
    """ML-Agents' ``lambda_return`` over one trajectory (trainers/trainer/trainer_utils.py)."""
    returns = np.zeros(len(rewards))
    returns[-1] = rewards[-1] + gamma * value_next
    for t in reversed(range(len(rewards) - 1)):
        returns[t] = gamma * lam * returns[t + 1] + rewards[t] + (1 - lam) * gamma * values[t + 1]
    return returns


@pytest.mark.parametrize("lam", [1.0, 0.5])
def test_time_horizon_cut_ends_the_returns_as_ml_agents_trajectories(lam):
    """A decision that ends a ``time_horizon`` trajectory bootstraps from V at the next decision;
    each piece's returns are ML-Agents' ``lambda_return`` of that trajectory alone."""
    rewards = np.array([1.0, 0.5, -1.0, 2.0, 0.0, 1.0])
    values = np.array([0.3, 0.1, 0.7, 0.4, 0.9, 0.2])
    cut = np.zeros(6, bool)
    cut[2] = True
    returns, _ = _returns(
        rewards[:, None], np.ones((6, 1)), np.zeros((6, 1)), np.full((6, 1), -1), values[:, None],
        last_values=[0.6], last_active=[True], last_keys=[-1], lam=lam, chunk_ends=cut[:, None],
    )  # fmt: skip
    expected = np.r_[
        _lambda_return(rewards[:3], values[:3], values[3], 0.9, lam),
        _lambda_return(rewards[3:], values[3:], 0.6, 0.9, lam),
    ]
    np.testing.assert_allclose(returns[:, 0], expected, rtol=1e-6)
    uncut, _ = _returns(
        rewards[:, None], np.ones((6, 1)), np.zeros((6, 1)), np.full((6, 1), -1), values[:, None],
        last_values=[0.6], last_active=[True], last_keys=[-1], lam=lam,
    )  # fmt: skip
    np.testing.assert_allclose(uncut[:, 0], _lambda_return(rewards, values, 0.6, 0.9, lam), rtol=1e-6)


def test_time_horizon_cut_leaves_dead_agents_and_inactive_rows_alone():
    """A cut marked on a decision whose agent then died (posthumous credit), or on a placeholder
    row, changes nothing: only a living agent's trajectory is cut."""
    kwargs = dict(
        rewards=[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
        group_rewards=[[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]],
        active=[[1, 1], [0, 1], [0, 1]],
        dones=[[1, 0], [0, 0], [0, 1]],
        keys=[[7, 7], [7, 7], [7, 7]],
        values=[[0.5, 0.5], [0.0, 0.2], [0.0, 0.4]],
        lam=0.5,
    )
    want, _ = _returns(**kwargs)
    got, _ = _returns(**kwargs, chunk_ends=[[1, 0], [1, 0], [0, 0]])
    np.testing.assert_allclose(got, want)
    cut, _ = _returns(**kwargs, chunk_ends=[[0, 0], [0, 1], [0, 0]])  # the living agent's cut at t=1
    assert cut[1, 1] == pytest.approx(0.9 * 0.4) and cut[2, 1] == pytest.approx(1.0)
    assert cut[1, 1] != pytest.approx(want[1, 1])


def test_rollout_end_bootstraps_from_last_group_value():
    returns, _ = _returns(
        [[1.0], [1.0]], [[1], [1]], [[0], [0]], [[-1], [-1]], [[0.0], [0.0]],
        last_values=[10.0], last_active=[True], last_keys=[-1],
    )  # fmt: skip
    np.testing.assert_allclose(returns[:, 0], [1 + 0.9 * 10.0, 1 + 0.9 * 10.0])


@pytest.mark.parametrize(("lam", "expected"), [(1.0, 0.9), (0.5, 0.54)])
def test_agent_dying_mid_episode_gets_posthumous_credit(lam, expected):
    """A dead agent's trajectory ends at its death and bootstraps from V of its group at the group's
    next step, as ML-Agents' trainer (``value_next`` of a trajectory that is done while its group
    is not): the +1 the group gets later reaches it through V, for any lambda."""
    # Two agents, one group (key 7). Slot 0 dies at t=0 (not truncated); slot 1 lives on, and at
    # t=1 the group gets +1 and ends. V(group at t=1) = 0.2.
    returns, _ = _returns(
        rewards=[[0.0, 0.0], [0.0, 0.0]],
        group_rewards=[[0.0, 0.0], [0.0, 1.0]],
        active=[[1, 1], [0, 1]],
        dones=[[1, 0], [0, 1]],
        keys=[[7, 7], [7, 7]],
        values=[[0.5, 0.5], [0.0, 0.2]],
        lam=lam,
    )
    # slot 1: G1 = 1; G0 = .9((1-l) .2 + l 1). The dead slot 0: .9 * V(group at t=1).
    assert returns[1, 1] == pytest.approx(1.0)
    assert returns[0, 1] == pytest.approx(expected)
    assert returns[0, 0] == pytest.approx(0.9 * 0.2)


def test_dead_agent_bootstraps_from_group_value_at_rollout_end():
    returns, _ = _returns(
        rewards=[[0.0, 0.0]], active=[[1, 1]], dones=[[1, 0]], keys=[[3, 3]], values=[[1.0, 1.0]],
        last_values=[0.0, 4.0], last_active=[False, True], last_keys=[0, 3],
    )  # fmt: skip
    assert returns[0, 0] == pytest.approx(0.9 * 4.0)
    assert returns[0, 1] == pytest.approx(0.9 * 4.0)


def test_whole_group_end_zeroes_bootstrap_even_if_group_id_is_reused():
    # Both members end at t=0; at t=1 a new group episode reuses key 7 with large values.
    returns, _ = _returns(
        rewards=[[1.0, 0.0], [0.0, 0.0]],
        active=[[1, 1], [1, 1]],
        dones=[[1, 1], [0, 0]],
        keys=[[7, 7], [7, 7]],
        values=[[0.0, 0.0], [100.0, 100.0]],
        last_values=[100.0, 100.0], last_active=[True, True], last_keys=[7, 7],
    )  # fmt: skip
    np.testing.assert_allclose(returns[0], [1.0, 1.0])  # shared individual reward, no bootstrap


@pytest.mark.parametrize("lam", [1.0, 0.5])
def test_truncated_group_bootstraps_from_terminal_group_value(lam):
    returns, _ = _returns(
        rewards=[[0.0, 0.0], [0.0, 0.0]],
        active=[[1, 1], [1, 1]],
        dones=[[0, 0], [1, 1]],
        truncated=[[0, 0], [1, 1]],
        terminal_values=[[0.0, 0.0], [5.0, 5.0]],
        keys=[[2, 2], [2, 2]],
        values=[[1.0, 1.0], [3.0, 3.0]],
        lam=lam,
    )
    np.testing.assert_allclose(returns[1], [4.5, 4.5])
    g0 = 0.9 * ((1 - lam) * 3.0 + lam * 4.5)
    np.testing.assert_allclose(returns[0], [g0, g0], rtol=1e-6)


def test_terminated_group_does_not_use_terminal_value():
    returns, _ = _returns(
        rewards=[[0.0, 0.0]], active=[[1, 1]], dones=[[1, 1]], keys=[[2, 2]], values=[[1.0, 1.0]],
        terminal_values=[[5.0, 5.0]],
    )  # fmt: skip
    np.testing.assert_allclose(returns[0], [0.0, 0.0])


@pytest.mark.parametrize(("share", "expected"), [(True, [-1.0, -1.0, 0.0]), (False, [-1.0, 0.0, 0.0])])
def test_reward_sharing_within_group_only(share, expected):
    # slots 0 and 1 are one group; slot 2 is alone (its own key)
    _, team = _returns(
        rewards=[[-1.0, 0.0, 0.0]], active=[[1, 1, 1]], dones=[[1, 1, 1]], keys=[[4, 4, -3]],
        values=[[0.0, 0.0, 0.0]], share=share,
    )  # fmt: skip
    np.testing.assert_allclose(team[0], expected)


def test_group_reward_added_to_each_member():
    returns, team = _returns(
        rewards=[[0.5, 0.0]], group_rewards=[[1.0, 1.0]], active=[[1, 1]], dones=[[1, 1]], keys=[[1, 1]],
        values=[[0.0, 0.0]],
    )  # fmt: skip
    np.testing.assert_allclose(team[0], [1.5, 1.5])
    np.testing.assert_allclose(returns[0], [1.5, 1.5])


def test_rewards_between_decisions_belong_to_previous_decision():
    # active at t=0, waiting (inactive) at t=1 where its reward arrives, decides again at t=2.
    returns, team = _returns(
        rewards=[[0.0], [0.5], [1.0]], active=[[1], [0], [1]], dones=[[0], [0], [1]], keys=[[-1]] * 3,
        values=[[0.0], [0.0], [0.0]],
    )  # fmt: skip
    np.testing.assert_allclose(team[:, 0], [0.5, 0.0, 1.0])
    np.testing.assert_allclose(returns[[0, 2], 0], [0.5 + 0.9 * 1.0, 1.0])


def test_inactive_rows_have_no_owner_after_death():
    owner = transition_owners(
        np.array([[1], [0], [0], [1]], dtype=bool), np.array([[0], [1], [0], [0]], dtype=bool)
    )
    np.testing.assert_array_equal(owner[:, 0], [0, 0, -1, 3])


def test_group_mates_pads_to_largest_group():
    active = np.array([[1, 1, 1, 0], [1, 0, 1, 1]], dtype=bool)
    keys = np.array([[5, 5, 5, 5], [5, 5, -3, 5]])
    mates, rows = group_mates(active, keys)
    assert mates.shape == rows.shape == (2, 4, 2)
    assert rows[0, 0].tolist() == [0, 0] and rows[1, 2].tolist() == [-1, -1]
    assert sorted(mates[0, 0].tolist()) == [1, 2]
    assert mates[1, 2].tolist() == [-1, -1]  # alone
    assert mates[1, 0].tolist() == [3, -1]


def test_group_mates_keep_waiting_members_with_their_last_decision():
    # slots 0, 1, 2 in group 5. Slot 1 decides at t=0 only and waits after; slot 2 decided
    # before the rollout (alive) and dies at t=1 without deciding; slot 0 decides every step.
    active = np.array([[1, 1, 0], [1, 0, 0], [1, 0, 0]], dtype=bool)
    dones = np.array([[0, 0, 0], [0, 0, 1], [0, 0, 0]], dtype=bool)
    keys = np.array([[5, 5, 0], [5, 0, 0], [5, 0, 0]])  # inactive rows' keys are placeholders
    last_rows = transition_owners(active, dones, alive_before=np.array([False, False, True]))
    np.testing.assert_array_equal(last_rows[:, 2], [-2, -2, -1])
    mates, rows = group_mates(active, keys, last_rows, keys_before=np.array([0, 0, 5]))
    assert dict(zip(mates[0, 0].tolist(), rows[0, 0].tolist())) == {1: 0, 2: -2}
    assert dict(zip(mates[1, 0].tolist(), rows[1, 0].tolist())) == {1: 0, 2: -2}  # 2 dies at t=1
    assert dict(zip(mates[2, 0].tolist(), rows[2, 0].tolist())) == {1: 0, -1: -1}  # 2 is gone
    assert sorted(mates[0, 1].tolist()) == [0, 2]


def _group_mates_loop(active, group_keys, last_rows, keys_before):
    """The per-step loop group_mates replaced: the reference it must equal exactly."""
    n_steps, n_envs = active.shape
    slots = np.arange(n_envs)
    present = last_rows != -1
    member_keys = group_keys[np.maximum(last_rows, 0), slots]
    member_keys = np.where(last_rows == -2, np.asarray(keys_before)[None, :], member_keys)
    lists, max_mates = {}, 0
    for t in range(n_steps):
        members = np.flatnonzero(present[t])
        for i in np.flatnonzero(active[t]).tolist():
            others = [j for j in members.tolist() if member_keys[t, j] == group_keys[t, i] and j != i]
            max_mates = max(max_mates, len(others))
            lists[(t, i)] = others
    mates = np.full((n_steps, n_envs, max_mates), -1, dtype=np.int64)
    mate_rows = np.full((n_steps, n_envs, max_mates), -1, dtype=np.int64)
    for (t, i), others in lists.items():
        mates[t, i, : len(others)] = others
        mate_rows[t, i, : len(others)] = last_rows[t, others]
    return mates, mate_rows


@pytest.mark.parametrize("seed", range(40))
def test_group_mates_equal_the_per_step_loop(seed):
    """Random rollouts (agents deciding out of phase, dying, waiting from before the rollout, groups
    of one to many, 1-40 slots): the vectorised group_mates gives the loop's arrays exactly."""
    rng = np.random.default_rng(seed)
    n_steps, n_envs = int(rng.integers(1, 30)), int(rng.integers(1, 41))
    active = rng.random((n_steps, n_envs)) < rng.uniform(0.2, 1.0)
    dones = active & (rng.random((n_steps, n_envs)) < 0.15)
    keys = rng.integers(-2, int(rng.integers(1, 5)), size=(n_steps, n_envs))
    alive_before = rng.random(n_envs) < 0.5
    keys_before = rng.integers(-2, 4, size=n_envs)
    last_rows = transition_owners(active, dones, alive_before=alive_before)
    want = _group_mates_loop(active, keys, last_rows, keys_before)
    got = group_mates(active, keys, last_rows, keys_before)
    assert got[0].shape == want[0].shape
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
