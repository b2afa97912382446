"""ELO as ML-Agents' ghost trainer computes it.

ML-Agents (``GhostController.compute_elo_rating_changes``) rates the learning policy against the
opponent it is facing, with the logistic expected score of chess ratings and a K factor of 1:

    expected = 10^(R / 400) / (10^(R / 400) + 10^(R_opp / 400))
    change   = K * (result - expected)

The change is added to the learner's rating and subtracted from the rating of the opponent
snapshot that played (when the opponent is the latest policy itself, both are the same entry, so
the rating does not move: only games against older snapshots move it). The result of an episode is
read from the sign of the learning agent's final reward (plus its group reward):
> 0 a win (1), < 0 a loss (0), 0 a draw (0.5) (``GhostTrainer._process_trajectory``).
"""

from __future__ import annotations

import math

__all__ = ["DRAW", "ELO_K", "LOSS", "WIN", "elo_change", "expected_score", "result_from_reward"]

#: ML-Agents' K factor: the change is ``result - expected`` unscaled
ELO_K = 1.0
WIN, DRAW, LOSS = 1.0, 0.5, 0.0


def expected_score(rating: float, opponent_rating: float) -> float:
    """The expected score in [0, 1] of a player rated ``rating`` against ``opponent_rating``."""
    # 1 / (1 + 10^((Ro - R) / 400)) equals ML-Agents' r1 / (r1 + r2) without overflowing for large ratings
    return 1.0 / (1.0 + math.pow(10.0, (opponent_rating - rating) / 400.0))


def elo_change(rating: float, opponent_rating: float, result: float, k: float = ELO_K) -> float:
    """The change of the learner's rating after one game (the opponent's changes by the opposite).

    :param rating: the learner's ELO.
    :param opponent_rating: the ELO of the opponent snapshot it played.
    :param result: 1 for a win, 0.5 for a draw, 0 for a loss (see :func:`result_from_reward`).
    :param k: the K factor (ML-Agents uses 1).
    """
    if not 0.0 <= result <= 1.0:
        raise ValueError(f"an ELO result must be in [0, 1] (1 win, 0.5 draw, 0 loss), got {result!r}")
    return k * (result - expected_score(rating, opponent_rating))


def result_from_reward(final_reward: float, group_reward: float = 0.0) -> float:
    """The game result from the learning agent's last reward of the episode (ML-Agents' rule).

    :param final_reward: the reward of the episode's last step.
    :param group_reward: the group reward of that step (POCA scenes reward the team this way).
    :return: :data:`WIN` (> 0), :data:`LOSS` (< 0) or :data:`DRAW` (0).
    """
    total = float(final_reward) + float(group_reward)
    if total > 0:
        return WIN
    if total < 0:
        return LOSS
    return DRAW
