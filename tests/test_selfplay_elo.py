"""ELO as ML-Agents' ghost controller computes it, on hand-made results."""

from __future__ import annotations

import math

import pytest

from unity_sb3.selfplay import GhostController, SelfPlayBehavior, SelfPlaySettings
from unity_sb3.selfplay.elo import DRAW, LOSS, WIN, elo_change, expected_score, result_from_reward


def mlagents_change(rating: float, opponent: float, result: float) -> float:
    """ML-Agents' formula written out as it is in GhostController.compute_elo_rating_changes."""
    r1, r2 = pow(10, rating / 400), pow(10, opponent / 400)
    return result - r1 / (r1 + r2)


@pytest.mark.parametrize(
    ("rating", "opponent", "result", "expected"),
    [
        (1200.0, 1200.0, WIN, 0.5),
        (1200.0, 1200.0, LOSS, -0.5),
        (1200.0, 1200.0, DRAW, 0.0),
        (1400.0, 1200.0, WIN, 1 - 1 / (1 + 10 ** (-0.5))),
        (1000.0, 1400.0, LOSS, -1 / (1 + 10 ** (1.0))),
    ],
)
def test_change_is_result_minus_expected_score_with_k_one(rating, opponent, result, expected):
    assert elo_change(rating, opponent, result) == pytest.approx(expected)
    assert elo_change(rating, opponent, result) == pytest.approx(mlagents_change(rating, opponent, result))


def test_expected_scores_of_both_players_sum_to_one_and_favour_the_stronger():
    assert expected_score(1500.0, 1300.0) + expected_score(1300.0, 1500.0) == pytest.approx(1.0)
    assert expected_score(1500.0, 1300.0) > 0.5
    assert math.isfinite(expected_score(1e6, 0.0))  # no overflow where 10**(R/400) would


def test_result_is_read_from_the_sign_of_final_plus_group_reward():
    assert result_from_reward(1.0) == WIN
    assert result_from_reward(-0.3) == LOSS
    assert result_from_reward(0.0) == DRAW
    assert result_from_reward(0.0, group_reward=1.0) == WIN
    assert result_from_reward(0.5, group_reward=-1.0) == LOSS


def test_a_result_outside_zero_one_is_refused():
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        elo_change(1200.0, 1200.0, 2.0)


def _symmetric(window: int = 3) -> SelfPlayBehavior:
    behavior = SelfPlayBehavior("Tennis", [0, 1], SelfPlaySettings(window=window), GhostController())
    behavior.bind(lambda: 0, lambda: {})
    behavior.start()
    return behavior


def test_a_win_against_an_old_snapshot_moves_both_ratings_opposite():
    behavior = _symmetric()
    behavior.pool.elos[0] = 1100.0
    behavior.pool.current_opponent = 0
    change = mlagents_change(1200.0, 1100.0, WIN)
    assert behavior.record_episode(1.0) == pytest.approx(1200.0 + change)
    assert behavior.pool.elos[0] == pytest.approx(1100.0 - change)


def test_games_against_the_latest_policy_leave_its_rating_unchanged():
    behavior = _symmetric()
    behavior.pool.current_opponent = -1  # the learner's own entry, as ML-Agents' "current"
    for reward in (1.0, -1.0, 1.0, 0.0):
        behavior.record_episode(reward)
    assert behavior.elo == pytest.approx(1200.0)


def test_asymmetric_result_changes_the_other_behaviors_opponent_snapshot():
    controller = GhostController()
    striker = SelfPlayBehavior("Striker", [0], SelfPlaySettings(), controller)
    goalie = SelfPlayBehavior("Goalie", [1], SelfPlaySettings(), controller)
    for behavior in (striker, goalie):
        behavior.bind(lambda: 0, lambda: {})
        behavior.start()
    goalie.pool.elos[0] = 1300.0
    goalie.pool.current_opponent = 0
    change = mlagents_change(1200.0, 1300.0, LOSS)
    assert striker.record_episode(-1.0) == pytest.approx(1200.0 + change)
    assert goalie.pool.elos[0] == pytest.approx(1300.0 - change)
    assert goalie.elo == pytest.approx(1200.0)  # the goalie's learner rating is not the opponent's
