"""Tennis: spec, HitWall's rules, episode ends, mirrored teams, stacking, the player, the scripted player."""

from __future__ import annotations

import numpy as np
import pytest

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.base_env import ActionTuple
from mlagents_envs.side_channel.environment_parameters_channel import EnvironmentParametersChannel
from test_scenes_player import close_and_check, compare_runs, open_player

from unity_sb3.scenes import make_scene
from unity_sb3.scenes.tennis import (
    FLOOR_A_HIT,
    FLOOR_B,
    FLOOR_B_HIT,
    FLOOR_TOP,
    NET,
    RACKET_A,
    RACKET_B,
    WALL_A,
    WALL_B,
    Tennis,
    scripted_player,
)
from unity_sb3.unity.errors import UnityConfigurationError

A, B = "Tennis?team=0", "Tennis?team=1"


def act(env: Tennis, actions: dict[str, np.ndarray]) -> None:
    """Set each team's action for its deciding agents (one row per court) and step."""
    for name, action in actions.items():
        n = len(env.get_steps(name)[0])
        if n:
            env.set_actions(name, ActionTuple(continuous=np.asarray(action, np.float32)[:n]))
    env.step()


def place(env: Tennis, racket_a, racket_b, ball, ball_vel=(0.0, 0.0)) -> None:
    """Put court 0's rackets and ball where a test wants them (velocities 0 unless given)."""
    env._pos[0], env._pos[1] = racket_a, racket_b
    env._vel[:2] = 0.0
    env._ball[0], env._ball_vel[0] = ball, ball_vel


def test_two_teams_with_the_same_spec():
    env = Tennis(seed=0, num_agents=3)
    assert list(env.behavior_specs) == [A, B]
    spec = env.behavior_specs[A]
    assert spec == env.behavior_specs[B]
    assert spec.observation_specs[0].shape == (27,)
    assert spec.observation_specs[0].name == "StackingSensor_size3_VectorSensor_size9"
    assert spec.action_spec.continuous_size == 3 and spec.action_spec.discrete_size == 0
    assert env.total_agents == 6
    env.reset()
    d_a, d_b = env.get_steps(A)[0], env.get_steps(B)[0]
    assert len(d_a) == len(d_b) == 3
    assert not set(d_a.agent_id.tolist()) & set(d_b.agent_id.tolist())
    # first decision: nothing stacked yet, rackets at rest at y = -1.5, 6 to 8 from the net
    obs = np.concatenate([d_a.obs[0], d_b.obs[0]])
    assert (obs[:, :18] == 0).all()
    assert ((obs[:, 18] >= -8) & (obs[:, 18] <= -6)).all() and (obs[:, 19] == -1.5).all()
    assert (obs[:, 20:22] == 0).all() and (obs[:, 26] == 0).all()
    assert (np.abs(obs[:, 22]) >= 6).all() and (obs[:, 23] == 6).all()


def test_bad_scale_is_refused():
    with pytest.raises(UnityConfigurationError, match="'scale' must be in"):
        make_scene("Tennis", scale=0.0)


@pytest.mark.parametrize(
    ("contacts", "winner"),
    [
        ([FLOOR_A_HIT], 1),  # A's serve drops untouched on A's side
        ([FLOOR_B_HIT], 0),
        ([RACKET_A, RACKET_A], 1),  # double hit
        ([RACKET_A, NET], 1),  # into the net before a valid bounce
        ([RACKET_A, FLOOR_A_HIT], 1),  # into its own floor
        ([RACKET_A, WALL_A], 1),  # into its own wall
        ([RACKET_A, WALL_B], 1),  # long: B's wall without a bounce
        ([RACKET_A, FLOOR_B_HIT, FLOOR_B_HIT], 0),  # double bounce on B's side
        ([RACKET_A, FLOOR_B_HIT, WALL_B], 0),  # a winner past B
        (
            [RACKET_A, FLOOR_B_HIT, NET, RACKET_B, FLOOR_A_HIT, RACKET_A],
            None,
        ),  # the net after a bounce is play
        ([RACKET_A, RACKET_B, NET], None),  # a volley counts as over the net
        ([RACKET_B, NET], 0),
        (
            [RACKET_A, FLOOR_B_HIT, RACKET_B, FLOOR_A_HIT, RACKET_A, FLOOR_B_HIT, RACKET_B, NET],
            None,
        ),  # as HitWall
        ([RACKET_B, FLOOR_A_HIT, RACKET_A, FLOOR_B_HIT, FLOOR_B_HIT], 0),
        ([WALL_A], 0),  # as HitWall: no hitter and no bounce on A's side counts as B's fault
    ],
)
def test_hitwall_rules(contacts, winner):
    env = Tennis(seed=0)
    env.reset()
    outcomes = [env._rule(0, event) for event in contacts]
    assert outcomes[:-1] == [None] * (len(contacts) - 1)
    assert outcomes[-1] == winner


def test_missed_serve_ends_both_episodes_with_plus_and_minus_one():
    env = Tennis(seed=1)
    env.reset()
    ids = {name: env.get_steps(name)[0].agent_id.tolist() for name in (A, B)}
    place(env, (-11.0, -6.0), (11.0, -6.0), (-4.0, 0.0))  # nobody under A's serve
    for _ in range(20):
        act(env, {A: [[0, 0, 0]], B: [[0, 0, 0]]})
        t_a, t_b = env.get_steps(A)[1], env.get_steps(B)[1]
        if len(t_a):
            break
    assert t_a.agent_id.tolist() == ids[A] and t_b.agent_id.tolist() == ids[B]
    assert t_a.reward.tolist() == [-1.0] and t_b.reward.tolist() == [1.0]
    assert not t_a.interrupted.any() and not t_b.interrupted.any()
    assert t_a.obs[0][0, 23] == pytest.approx(FLOOR_TOP + 0.25, abs=1e-5)  # the ball at the bounce
    # the next episodes start at once, with new ids and an empty stack, the ball served again
    d_a = env.get_steps(A)[0]
    assert len(d_a) == 0 or (set(d_a.agent_id.tolist()) & set(ids[A])) == set()
    assert env._ball[0, 1] == 6.0 and env._last_agent_hit[0] == -1


def test_a_ball_dropped_on_a_racket_bounces_up_and_counts_as_a_hit():
    env = Tennis(seed=2)
    env.reset()
    place(env, (-5.0, FLOOR_TOP + 0.5), (6.0, FLOOR_TOP + 0.5), (-5.0, -4.0), ball_vel=(0.0, -9.0))
    for _ in range(3):
        act(env, {A: [[0, 0, 0]], B: [[0, 0, 0]]})  # upright racket: the ball meets its top end
    assert env._hits[0] == 1 and env._last_agent_hit[0] == 0
    assert env._ball_vel[0, 1] > 0  # on its way up again
    assert len(env.get_steps(A)[1]) == 0


def test_actions_are_mirrored_and_the_net_stops_the_rackets():
    env = Tennis(seed=3)
    env.reset()
    place(env, (-6.0, FLOOR_TOP + 0.5), (6.0, FLOOR_TOP + 0.5), (-9.0, 4.0))
    act(env, {A: [[1, 0, 0]], B: [[1, 0, 0]]})  # +1 = towards the net, for both teams
    d_a, d_b = env.get_steps(A)[0], env.get_steps(B)[0]
    np.testing.assert_allclose(d_a.obs[0][0, 18:20], d_b.obs[0][0, 18:20], atol=1e-5)
    assert env._pos[0, 0] == pytest.approx(-3.0) and env._pos[1, 0] == pytest.approx(3.0)  # 5 steps at 30
    assert d_a.obs[0][0, 20] == 30.0 and d_b.obs[0][0, 20] == 30.0
    for _ in range(3):
        act(env, {A: [[1, 0, 0]], B: [[1, 0, 0]]})
    # put back at x = -1 / 1 before each physics step: seen at most one step (0.6) past it
    assert -1.0 < env._pos[0, 0] <= -0.4 + 1e-9 and 0.4 - 1e-9 <= env._pos[1, 0] < 1.0


def test_jumps_only_below_the_limit():
    env = Tennis(seed=4)
    env.reset()
    place(env, (-6.0, FLOOR_TOP + 0.5), (6.0, -1.0), (-9.0, 4.0))
    env._cont_action[:] = [0.0, 1.0, 0.0]
    env._act()
    assert env._vel[0, 1] == 7.0 and env._vel[1, 1] == 0.0  # B is above y = -1.5


def mirrored(env: Tennis) -> Tennis:
    """A copy of court 0 seen in a mirror: x -> -x, A and B swapped."""
    other = Tennis(seed=99)
    other.reset()
    other._pos[0] = env._pos[1] * [-1, 1]
    other._pos[1] = env._pos[0] * [-1, 1]
    other._vel[0] = env._vel[1] * [-1, 1]
    other._vel[1] = env._vel[0] * [-1, 1]
    other._ball[0] = env._ball[0] * [-1, 1]
    other._ball_vel[0] = env._ball_vel[0] * [-1, 1]
    return other


def test_team_b_sees_and_plays_the_mirror_image_of_team_a():
    env = Tennis(seed=5)
    env.reset()
    place(env, (-6.5, -1.5), (7.2, -1.5), (-6.0, 4.0), ball_vel=(1.0, 0.0))
    other = mirrored(env)
    rng = np.random.default_rng(0)
    for step in range(40):
        a, b = rng.uniform(-1, 1, (2, 1, 3))
        act(env, {A: a, B: b})
        act(other, {A: b, B: a})  # each player's mirror image gets its actions
        for name, twin in ((A, B), (B, A)):
            d, t = env.get_steps(name)
            d2, t2 = other.get_steps(twin)
            assert len(d) == len(d2) and len(t) == len(t2), step
            for x, y in ((d, d2), (t, t2)):
                if len(x):
                    # the stack holds the decisions before place() for two more steps
                    first = 0 if step >= 2 else 18
                    np.testing.assert_allclose(
                        x.obs[0][:, first:], y.obs[0][:, first:], atol=1e-4, err_msg=f"step {step}"
                    )
                    np.testing.assert_array_equal(x.reward, y.reward)
        if len(env.get_steps(A)[1]):  # the point is over: the next serve is random, not mirrored
            break
    assert env._hits[0] + len(env.get_steps(A)[1]) > 0  # something happened


def test_observations_stack_the_last_three_decisions():
    env = Tennis(seed=6)
    env.reset()
    place(env, (-6.0, FLOOR_TOP + 0.5), (6.0, FLOOR_TOP + 0.5), (-9.0, 4.0))
    seen = [env.get_steps(A)[0].obs[0][0]]
    for _ in range(3):
        act(env, {A: [[0.3, 0, 0]], B: [[0, 0, 0]]})
        seen.append(env.get_steps(A)[0].obs[0][0])
    assert (seen[1][:9] == 0).all()
    np.testing.assert_array_equal(seen[1][9:18], seen[0][18:])
    np.testing.assert_array_equal(seen[3][:9], seen[1][18:])
    np.testing.assert_array_equal(seen[3][9:18], seen[2][18:])


def test_interrupted_episodes_restart_the_rackets_but_not_the_point():
    env = Tennis(seed=7, max_steps=7)
    env.reset()
    place(env, (-6.0, FLOOR_TOP + 0.5), (6.0, FLOOR_TOP + 0.5), (-9.0, 5.0))
    act(env, {A: [[0, 0, 0]], B: [[0, 0, 0]]})
    ball = env._ball[0].copy()
    act(env, {A: [[0, 0, 0]], B: [[0, 0, 0]]})
    (d_a, t_a), (_, t_b) = env.get_steps(A), env.get_steps(B)
    assert t_a.interrupted.tolist() == [True] and t_b.interrupted.tolist() == [True]
    assert t_a.reward.tolist() == [0.0]
    assert len(d_a) == 0 and env._academy_step == 7  # reported at once, between two decisions
    assert env._ball[0, 1] < ball[1] < 6.0  # still falling, not served again


def test_ball_scale_is_an_environment_parameter():
    channel = EnvironmentParametersChannel()
    env = make_scene("Tennis", seed=0, side_channels=[channel])
    env.reset()
    assert env._radius[0] == 0.25
    channel.set_float_parameter("scale", 1.0)
    env.reset()
    assert env._radius[0] == 0.5


def test_same_seed_same_game_and_ids_never_reused():
    runs, ids = [], []
    for seed in (3, 3):
        env = Tennis(seed=seed, num_agents=2)
        env.reset()
        rng = np.random.default_rng(0)
        trace, seen = [], set()
        for _ in range(120):
            for name in (A, B):
                d, t = env.get_steps(name)
                trace.append(np.concatenate([d.obs[0].ravel(), t.obs[0].ravel(), t.reward]))
                seen |= set(d.agent_id.tolist()) | set(t.agent_id.tolist())
            act(env, {A: rng.uniform(-1, 1, (2, 3)), B: rng.uniform(-1, 1, (2, 3))})
        runs.append(trace)
        env.reseed(seed)
        env.reset()
        later = set(env.get_steps(A)[0].agent_id.tolist()) | set(env.get_steps(B)[0].agent_id.tolist())
        assert not later & seen
        ids.append(seen)
    for x, y in zip(*runs):
        np.testing.assert_array_equal(x, y)


def points_won(expert_team: int, decisions: int = 600, courts: int = 8, seed: int = 0) -> list[float]:
    """Rewards of the scripted player's team at each point against uniform random play."""
    env = Tennis(seed=seed, num_agents=courts)
    env.reset()
    rng = np.random.default_rng(seed)
    rewards: list[float] = []
    for _ in range(decisions):
        for team, name in enumerate((A, B)):
            d, t = env.get_steps(name)
            if team == expert_team:
                rewards += t.reward.tolist()
            if len(d):
                if team == expert_team:
                    action = env.expert_actions(name, d)
                else:
                    action = ActionTuple(continuous=rng.uniform(-1, 1, (len(d), 3)).astype(np.float32))
                env.set_actions(name, action)
        env.step()
    return rewards


@pytest.mark.parametrize("team", [0, 1])
def test_scripted_player_beats_random_play(team):
    rewards = points_won(team)
    assert len(rewards) >= 60
    assert np.mean(np.asarray(rewards) > 0) >= 0.65  # wins two points in three or better


def test_scripted_player_reads_only_its_own_view():
    obs = np.zeros((2, 9), dtype=np.float32)
    obs[:, 0:2] = [-6.0, FLOOR_TOP + 0.5]
    obs[0, 4:8] = [-3.0, 2.0, 0.0, -5.0]  # the ball drops on our side: go there
    obs[1, 4:8] = [3.0, 2.0, 5.0, 0.0]  # the ball leaves for the other side: wait at home
    action = scripted_player(obs)
    assert action.shape == (2, 3) and action.dtype == np.float32
    assert action[0, 0] > 0.5 and abs(action[1, 0]) < 1e-6
    assert ((action >= -1) & (action <= 1)).all()


@pytest.mark.player
def test_served_by_the_player_like_in_process(tmp_path):
    env, log = open_player(tmp_path, "Tennis", seed=8, scene_params={"num_agents": 2})
    try:
        compare_runs(env, Tennis(seed=8, num_agents=2), steps=150, seed=3, visual_atol=0.0)
    finally:
        close_and_check(env, log)


def test_shipped_ppo_hyperparameters_follow_unity_tennis_yaml():
    from unity_sb3.config.hyperparams import load_hyperparams

    params = load_hyperparams("ppo", "Tennis")
    courts = params["open_kwargs"]["num_agents"]
    assert params["n_steps"] * courts == 20480 and params["batch_size"] == 2048  # buffer_size, batch_size
    assert (params["learning_rate"], params["ent_coef"], params["clip_range"]) == (3e-4, 0.005, 0.2)
    assert (params["gamma"], params["gae_lambda"], params["n_epochs"]) == (0.99, 0.95, 3)
    assert params["normalize"] is True and "256, 256" in params["policy_kwargs"]
    # Unity's self_play section: a run setting unity-sb3 train pops (self-play by default), never PPO's
    assert params["self_play"] == {
        "save_steps": 50000,
        "team_change": 100000,
        "swap_steps": 2000,
        "window": 10,
        "play_against_latest_model_ratio": 0.5,
        "initial_elo": 1200.0,
    }


def test_a_slow_ball_rolls_on_the_floor_without_bouncing_again():
    """Below PhysX's bounce threshold the ball stays on the floor: one contact, no double bounce."""
    env = Tennis(seed=9)
    env.reset()
    place(env, (-6.0, FLOOR_TOP + 0.5), (1.0, FLOOR_TOP + 0.5), (5.0, FLOOR_TOP + 0.25), ball_vel=(3.0, -1.0))
    env._last_agent_hit[0], env._last_floor_hit[0], env._net[0] = (
        0,
        FLOOR_B,
        True,
    )  # A's shot bounced on B's side
    env._on_floor[0] = True
    for _ in range(40):
        act(env, {A: [[0, 0, 0]], B: [[0, 0, 0]]})
        t_a = env.get_steps(A)[1]
        if len(t_a):
            break
    assert t_a.reward.tolist() == [1.0]  # a winner past B ...
    assert t_a.obs[0][0, 22] == pytest.approx(11.88 - 0.25, abs=1e-4)  # ... that reached B's wall
    assert t_a.obs[0][0, 23] == pytest.approx(FLOOR_TOP + 0.25, abs=1e-4)
