"""ML-Agents' trajectory cuts and advantage normalisation (``unity_sb3.algorithms.advantages``)."""

from __future__ import annotations

import numpy as np
import pytest

from unity_sb3.algorithms.advantages import check_time_horizon, horizon_cuts, normalize_active_advantages


def test_horizon_cuts_count_decisions_and_restart_at_cuts_and_episode_ends():
    counts = np.zeros(3, dtype=np.int64)
    # slot 0 decides every step; slot 1 waits every other step; slot 2's episode ends at step 2
    active = [[1, 1, 1], [1, 0, 1], [1, 1, 1], [1, 0, 1], [1, 1, 1], [1, 0, 1]]
    dones = [[0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    got = [
        horizon_cuts(counts, np.array(a, bool), np.array(d, bool), 2).tolist() for a, d in zip(active, dones)
    ]
    assert got == [
        [False, False, False],
        [True, False, True],
        [False, True, False],  # slot 2 ends its episode: no cut, the count restarts
        [True, False, False],
        [False, False, True],  # slot 1's third decision: one since its cut
        [True, False, False],
    ]
    assert counts.tolist() == [0, 1, 1]


def test_horizon_cuts_without_a_horizon_cut_nothing():
    counts = np.zeros(2, dtype=np.int64)
    assert horizon_cuts(counts, np.ones(2, bool), np.zeros(2, bool), None) is None
    assert counts.tolist() == [0, 0]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "64"])
def test_check_time_horizon_refuses_what_is_not_a_whole_number_of_steps(bad):
    with pytest.raises(ValueError, match="time_horizon must be a whole number of agent steps >= 1"):
        check_time_horizon(bad)
    assert check_time_horizon(64) == 64 and check_time_horizon(None) is None


def test_normalize_active_advantages_uses_the_active_entries_only():
    advantages = np.array([[1.0, 100.0], [3.0, -50.0]])
    active = np.array([[True, False], [True, False]])
    normalize_active_advantages(advantages, active)
    np.testing.assert_allclose(advantages[:, 0], [-1.0, 1.0], atol=1e-6)
    np.testing.assert_array_equal(advantages[:, 1], [100.0, -50.0])
