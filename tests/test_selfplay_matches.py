"""play_matches: games between players on competitive scenes, counted as ML-Agents' ELO reads them."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple, TerminalSteps
from selfplay_scenes import TEAM0, TEAM1, Showdown
from stable_baselines3.common.vec_env import VecNormalize

from unity_sb3 import PPO
from unity_sb3.scenes import make_scene
from unity_sb3.scenes.base import EmbeddedScene
from unity_sb3.selfplay.matches import MatchResult, _record, play_matches, policy_player, view_spec
from unity_sb3.wrappers.vec_env import UnityVecEnv


def push(value: float):
    """A Showdown player that always adds ``value`` to its score."""

    def answer(behavior_name, decision_steps):
        return ActionTuple(continuous=np.full((len(decision_steps), 1), value, dtype=np.float32))

    return answer


def test_the_stronger_player_wins_every_game_and_the_counts_add_up() -> None:
    result = play_matches(Showdown(num_agents=3), {0: push(1.0), 1: push(-1.0)}, episodes=7)
    assert (result.wins, result.draws, result.losses, result.games) == (7, 0, 0, 7)
    assert result.win_rate == 1.0 and result.score == 1.0
    losing = play_matches(Showdown(num_agents=3), {1: push(1.0), 0: push(-1.0)}, episodes=5, team=0)
    assert (losing.losses, losing.team, losing.win_rate) == (5, 0, 0.0)
    even = play_matches(Showdown(num_agents=2), {0: push(0.5), 1: push(0.5)}, episodes=4)
    assert even.draws == 4 and even.score == 0.5
    assert str(result) == "team 0: 7 wins, 0 draws, 0 losses in 7 games (win rate 1.00)"


@pytest.mark.parametrize("scene", ["Tennis", "StrikersVsGoalie"])
def test_the_scripted_team_beats_random_play(scene: str) -> None:
    episodes = 40 if scene == "Tennis" else 8
    as_team0 = play_matches(make_scene(scene, num_agents=4), {0: "expert", 1: "random"}, episodes, seed=0)
    as_team1 = play_matches(make_scene(scene, num_agents=4), {1: "expert", 0: "random"}, episodes, seed=0)
    assert as_team0.games == as_team1.games == episodes
    assert as_team0.win_rate > 0.65 and as_team1.win_rate > 0.65  # random against random: about 0.5


def test_a_group_game_counts_once_and_its_group_reward_decides() -> None:
    result = MatchResult(0)
    terminal = TerminalSteps(
        obs=[np.zeros((3, 1), np.float32)],
        reward=np.array([-0.01, -0.01, 0.5], np.float32),  # small individual penalties
        interrupted=np.array([False, False, False]),
        agent_id=np.array([4, 5, 6]),
        group_id=np.array([1, 1, 0]),  # agents 4 and 5 play one game for group 1
        group_reward=np.array([1.0, 1.0, -1.0], np.float32),
    )
    _record(terminal, "SoccerTwos?team=0", result)
    assert result.results == [1.0, 0.0]  # the group won (-0.01 + 1 > 0); the lone agent lost (0.5 - 1)


def test_a_model_plays_through_its_views_conversion_with_its_normalizer() -> None:
    venv = VecNormalize(UnityVecEnv(Showdown(num_agents=2), behavior_name=TEAM0))
    model = PPO("MlpPolicy", venv, n_steps=8, batch_size=8, device="cpu")
    spec = Showdown().behavior_specs[TEAM0]
    player = policy_player(model, spec, vec_normalize=venv, deterministic=True)
    assert player._normalizer is not None  # the statistics travel with the player
    result = play_matches(Showdown(num_agents=2), {0: player, 1: "random"}, episodes=6)
    assert result.games == 6
    direct = play_matches(Showdown(num_agents=2), {0: model, 1: model}, episodes=4)  # a model as a player
    assert direct.games == 4
    venv.close()


def test_a_model_reads_the_other_teams_sensors_by_position() -> None:
    soccer = make_scene("SoccerTwos")
    blue, purple = "SoccerTwos?team=0", "SoccerTwos?team=1"
    assert soccer.behavior_specs[blue] != soccer.behavior_specs[purple]  # sensor names differ
    assert view_spec(soccer, purple) is soccer.behavior_specs[blue]  # the view's spec: the first team's


def test_bad_matches_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"missing \[1\]"):
        play_matches(Showdown(), {0: "random"}, episodes=2)
    with pytest.raises(ValueError, match="episodes must be"):
        play_matches(Showdown(), {0: "random", 1: "random"}, episodes=0)

    class Unscripted(Showdown):
        expert_actions = EmbeddedScene.expert_actions

    with pytest.raises(ValueError, match="Unscripted has no scripted player"):
        play_matches(Unscripted(), {0: "expert", 1: "random"}, episodes=1)
    with pytest.raises(ValueError, match="unknown player"):
        play_matches(Showdown(), {0: "randomly", 1: "random"}, episodes=1)
    with pytest.raises(RuntimeError, match="only 0 of 5 games ended in 2 Unity steps"):
        play_matches(Showdown(), {0: "random", 1: "random"}, episodes=5, max_unity_steps=2)
    assert np.isnan(MatchResult(0).win_rate)
    assert TEAM1.endswith("team=1")
