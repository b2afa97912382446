"""SoccerTwos and StrikersVsGoalie: specs, groups, goals, episode ends, rays, physics, the expert, the player."""

from __future__ import annotations

import numpy as np
import pytest

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.base_env import ActionTuple
from mlagents_envs.side_channel.environment_parameters_channel import EnvironmentParametersChannel
from test_scenes_player import close_and_check, compare_runs, open_player

from unity_sb3.scenes import _soccer_field as field
from unity_sb3.scenes import make_scene
from unity_sb3.scenes.soccer import SoccerTwos
from unity_sb3.scenes.strikers_vs_goalie import StrikersVsGoalie

BLUE, PURPLE = "SoccerTwos?team=0", "SoccerTwos?team=1"
STRIKER, GOALIE = "Striker?team=0", "Goalie?team=1"


def still(env, name: str) -> ActionTuple:
    return env.behavior_specs[name].action_spec.empty_action(len(env.get_steps(name)[0]))


def step(env, policy=still) -> None:
    for name in env.behavior_specs:
        env.set_actions(name, policy(env, name))
    env.step()


def clear_field(env, f: int = 0) -> None:
    """Park the agents of field ``f`` in a row at the middle line, out of the ball's way."""
    st = env._state
    st.pos[f] = [[0.0, z] for z in np.linspace(-6.0, 6.0, st.pos.shape[1])]
    st.vel[f] = 0.0


def test_specs_follow_the_prefabs_sensors_and_actions():
    twos = SoccerTwos(num_agents=1)
    assert list(twos.behavior_specs) == [BLUE, PURPLE]
    for name, color in ((BLUE, "Blue"), (PURPLE, "Purple")):
        spec = twos.behavior_specs[name]
        assert [o.shape for o in spec.observation_specs] == [
            (264,),
            (72,),
        ]  # 336 = 11 + 3 rays x 8 x 3 stacks
        assert [o.name for o in spec.observation_specs] == [
            f"StackingSensor_size3_{color}RayPerceptionSensor",
            f"StackingSensor_size3_{color}RayPerceptionSensorReverse",
        ]
        assert spec.action_spec.discrete_branches == (3, 3, 3) and spec.action_spec.continuous_size == 0
    svg = StrikersVsGoalie(num_agents=1)
    assert [o.shape for o in svg.behavior_specs[STRIKER].observation_specs] == [(231,), (63,)]
    assert [o.shape for o in svg.behavior_specs[GOALIE].observation_specs] == [(738,)]  # 41 rays x 6 x 3


def test_each_team_of_each_field_is_one_group():
    env = SoccerTwos(num_agents=3)
    env.reset()
    blue, purple = env.get_steps(BLUE)[0], env.get_steps(PURPLE)[0]
    assert len(blue) == len(purple) == 6
    assert blue.group_id.tolist() == [1, 1, 3, 3, 5, 5] and purple.group_id.tolist() == [2, 2, 4, 4, 6, 6]
    svg = StrikersVsGoalie(num_agents=2)
    svg.reset()
    assert svg.get_steps(STRIKER)[0].group_id.tolist() == [1, 1, 3, 3]
    assert svg.get_steps(GOALIE)[0].group_id.tolist() == [2, 4]


def test_a_goal_rewards_both_groups_and_ends_both_episodes():
    env = SoccerTwos(num_agents=2, seed=1)
    env.reset()
    ids = {name: env.get_steps(name)[0].agent_id.tolist() for name in (BLUE, PURPLE)}
    clear_field(env)
    env._state.ball[0] = [field.HALF_LENGTH - 0.3, 0.0]  # just before the purple goal (+x)
    env._state.ball_vel[0] = [20.0, 0.0]
    step(env)
    blue_end, purple_end = env.get_steps(BLUE)[1], env.get_steps(PURPLE)[1]
    # the whole field ended, nobody in field 1; blue scored at academy step 1 of 5000
    assert blue_end.agent_id.tolist() == ids[BLUE][:2] and purple_end.agent_id.tolist() == ids[PURPLE][:2]
    np.testing.assert_allclose(blue_end.group_reward, 1.0 - 1.0 / 5000)
    np.testing.assert_allclose(purple_end.group_reward, -1.0)
    assert not blue_end.interrupted.any() and not purple_end.interrupted.any()
    np.testing.assert_array_equal(blue_end.reward, 0.0)  # SoccerTwos' generic agents: no existential reward
    assert np.abs(env._state.ball[0]).max() <= 2.5 and (env._timer == [0, 1]).all()  # field 0 reset
    step(env)  # the new episodes decide under new ids, in their old groups
    blue_now = env.get_steps(BLUE)[0]
    assert not set(blue_now.agent_id[:2].tolist()) & set(ids[BLUE])
    assert blue_now.group_id.tolist() == [1, 1, 3, 3]


def test_own_goal_counts_for_the_other_team():
    env = StrikersVsGoalie(num_agents=1, seed=2)
    env.reset()
    clear_field(env)
    env._state.ball[0] = [-(field.HALF_LENGTH - 0.3), 1.0]  # the strikers' own goal, at -x
    env._state.ball_vel[0] = [-20.0, 0.0]
    step(env)
    np.testing.assert_allclose(env.get_steps(GOALIE)[1].group_reward, [1.0 - 1.0 / 5000])
    np.testing.assert_allclose(env.get_steps(STRIKER)[1].group_reward, [-1.0, -1.0])


def test_max_environment_steps_interrupts_both_groups():
    env = StrikersVsGoalie(num_agents=2, max_steps=12, seed=0)
    env.reset()
    ended = {STRIKER: 0, GOALIE: 0}
    for _ in range(3):  # decisions at academy steps 5 and 10; the interruption at 12
        step(env)
        for name in ended:
            terminal = env.get_steps(name)[1]
            assert terminal.interrupted.all()
            np.testing.assert_array_equal(terminal.group_reward, 0.0)
            ended[name] += len(terminal)
    assert ended == {STRIKER: 4, GOALIE: 2}
    assert env._academy_step == 12


def test_strikers_pay_and_the_goalie_earns_an_existential_reward():
    env = StrikersVsGoalie(num_agents=1, max_steps=1000, seed=0)
    env.reset()
    step(env)  # one decision period: 5 academy steps
    np.testing.assert_allclose(env.get_steps(STRIKER)[0].reward, -5 / 1000, rtol=1e-5)
    np.testing.assert_allclose(env.get_steps(GOALIE)[0].reward, 5 / 1000, rtol=1e-5)


def test_agent_ids_are_never_reused():
    env = SoccerTwos(num_agents=2, max_steps=10, seed=0)
    retired: set[int] = set()
    seen: set[int] = set()
    for seed in (0, 0, 1):  # a reset, a seeded reset that repeats the game, another seed
        env.reseed(seed)
        env.reset()
        for _ in range(8):
            for name in env.behavior_specs:
                decision, terminal = env.get_steps(name)
                assert not set(decision.agent_id.tolist()) & retired
                retired |= set(terminal.agent_id.tolist())
                seen |= set(decision.agent_id.tolist())
            step(env)
        retired |= {i for name in env.behavior_specs for i in env.get_steps(name)[0].agent_id.tolist()}
    assert len(seen) > 3 * 8  # interruptions every 10 academy steps gave new episodes new ids


def test_stacked_rays_start_from_zeros_and_shift_each_decision():
    env = SoccerTwos(num_agents=1, seed=3)
    env.reset()
    size = 11 * 8
    first = env.get_steps(BLUE)[0].obs[0]
    np.testing.assert_array_equal(first[:, : 2 * size], 0.0)  # older frames are empty after a reset
    assert (first[:, 2 * size :] != 0).any()
    step(env)
    second = env.get_steps(BLUE)[0].obs[0]
    np.testing.assert_array_equal(second[:, size : 2 * size], first[:, 2 * size :])


def test_rays_see_the_ball_goals_walls_and_players_as_unity_tags_them():
    sensor = SoccerTwos.SENSORS[0][0]
    np.testing.assert_array_equal(sensor.bearings[:5], [0.0, 12.0, -12.0, 24.0, -24.0])  # Unity's order
    origin, heading = np.array([[0.0, 0.0]]), np.array([90.0])  # blue agent facing +x
    discs = np.array([[[5.0, 0.0], [0.0, 3.0]]])  # the ball ahead, an opponent on the left
    radius = np.array([[field.RAY_HIT_BALL, field.RAY_HIT_AGENT]])
    kinds = np.array([[field.BALL, field.OPPONENT]])
    bearings = np.array([0.0, 180.0, -90.0, 90.0])
    kind, fraction = field.cast_rays(origin, heading, bearings, discs, radius, kinds, np.array([-1.0]))
    assert kind[0].tolist() == [field.BALL, field.OWN_GOAL, field.OPPONENT, field.WALL]
    np.testing.assert_allclose(fraction[0, 0], (5.0 - field.RAY_HIT_BALL) / field.RAY_LENGTH)
    np.testing.assert_allclose(fraction[0, 1], (field.HALF_LENGTH - field.RAY_RADIUS) / field.RAY_LENGTH)
    np.testing.assert_allclose(fraction[0, 3], (field.HALF_WIDTH - field.RAY_RADIUS) / field.RAY_LENGTH)
    features = field.ray_features(kind, fraction, (field.BALL, field.OTHER_GOAL, field.WALL))
    rays = features.reshape(4, 5)
    assert rays[0].tolist()[:4] == [1, 0, 0, 0]  # ball, hit
    assert rays[1].tolist()[:4] == [0, 0, 0, 0]  # own goal is not a tag of this sensor: an untagged hit
    far_kind, far_fraction = field.cast_rays(
        np.array([[-14.0, 0.0]]),
        np.array([90.0]),
        np.array([0.0]),
        discs[:, :0],
        radius[:, :0],
        kinds[:, :0],
        np.array([-1.0]),
    )
    assert far_kind[0, 0] == field.NO_HIT and far_fraction[0, 0] == 1.0  # the other goal is 29 m away


def test_moving_forward_into_the_ball_kicks_it_strafing_only_pushes_it():
    speeds = {}
    for forward, lateral in ((1, 0), (0, 1)):
        state = field.FieldState.zeros(1, 1)
        state.heading[:] = 90.0 if forward else 0.0  # strafing right also moves along +x
        state.ball[0] = [1.2, 0.0]
        actions = np.array([[[forward, lateral, 0]]])
        for _ in range(3):
            field.move_agents(state, actions, np.array([1.0]), np.array([1.0]))
            field.physics_step(
                state, field.KICK_FORCE * (actions[..., 0] == 1), np.zeros((0, 2), dtype=np.intp)
            )
        field.physics_step(state, np.zeros((1, 1)), np.zeros((0, 2), dtype=np.intp))  # the kick lands
        speeds[forward] = state.ball_vel[0, 0]
    kick = field.KICK_FORCE * field.DT / field.BALL_MASS
    assert speeds[1] - speeds[0] > 0.9 * kick


def test_ball_touch_environment_parameter_rewards_touches():
    channel = EnvironmentParametersChannel()
    channel.set_float_parameter("ball_touch", 1.0)
    env = SoccerTwos(num_agents=1, seed=0, side_channels=[channel])
    env.reset()
    st = env._state
    clear_field(env)
    st.pos[0, 0] = [-1.0, 0.0]
    st.heading[0, 0] = 90.0
    st.ball[0] = [0.2, 0.0]

    def forward(env, name):
        return ActionTuple(discrete=np.tile([[1, 0, 0]], (len(env.get_steps(name)[0]), 1)).astype(np.int32))

    step(env, forward)
    assert env.get_steps(BLUE)[0].reward[0] == pytest.approx(0.2)


def expert_vs_random(scene: str, expert: str, steps: int, seed: int) -> dict[str, int]:
    env = make_scene(scene, num_agents=8, seed=seed)
    env.reset()
    rng = np.random.default_rng(seed)
    goals = dict.fromkeys(env.behavior_specs, 0)

    def policy(env, name):
        decision = env.get_steps(name)[0]
        if name == expert:
            return env.expert_actions(name, decision)
        return ActionTuple(discrete=rng.integers(0, 3, (len(decision), 3)).astype(np.int32))

    for _ in range(steps):
        step(env, policy)
        for name in goals:
            terminal = env.get_steps(name)[1]
            goals[name] += len(set(terminal.group_id[terminal.group_reward > 0].tolist()))
    return goals


@pytest.mark.parametrize(
    ("scene", "expert"), [("SoccerTwos", BLUE), ("SoccerTwos", PURPLE), ("StrikersVsGoalie", STRIKER)]
)
def test_scripted_team_beats_random_play(scene, expert):
    goals = expert_vs_random(scene, expert, steps=300, seed=0)  # 8 fields, 1500 academy steps each
    other = next(name for name in goals if name != expert)
    assert goals[expert] >= 6 and goals[expert] >= 2 * goals[other], goals


@pytest.mark.player
def test_soccer_through_the_player_matches_in_process(tmp_path):
    env, log = open_player(tmp_path, "StrikersVsGoalie", seed=4, scene_params={"num_agents": 2})
    try:
        compare_runs(
            env, make_scene("StrikersVsGoalie", seed=4, num_agents=2), steps=80, seed=2, visual_atol=0.0
        )
    finally:
        close_and_check(env, log)


@pytest.mark.parametrize(
    ("scene", "behaviors", "n_timesteps"),
    [
        ("SoccerTwos", {BLUE: (1280, "MultiInputPolicy"), PURPLE: (1280, "MultiInputPolicy")}, 5e7),
        ("StrikersVsGoalie", {STRIKER: (1280, "MultiInputPolicy"), GOALIE: (2560, "MlpPolicy")}, 3e7),
    ],
)
def test_shipped_poca_settings_follow_unitys_configs(scene, behaviors, n_timesteps):
    from unity_sb3.config.hyperparams import load_hyperparams
    from unity_sb3.config.model_args import parse_policy_kwargs, prepare_model_args
    from unity_sb3.run import CADENCE_SETTINGS
    from unity_sb3.wrappers.vec_env import UnityVecEnv

    params = load_hyperparams("poca", scene)
    assert params["n_timesteps"] == n_timesteps and params["open_kwargs"] == {"num_agents": 8}
    assert (params["batch_size"], params["n_epochs"], params["learning_rate"]) == (2048, 3, 3e-4)
    assert (params["ent_coef"], params["clip_range"], params["gae_lambda"], params["gamma"]) == (
        0.005,
        0.2,
        0.95,
        0.99,
    )
    assert params["schedule"] == "constant" and parse_policy_kwargs(params["policy_kwargs"])["net_arch"] == [
        512,
        512,
    ]
    for behavior, (n_steps, policy_name) in behaviors.items():
        venv = UnityVecEnv(scene, behavior_name=behavior, open_kwargs=params["open_kwargs"])
        try:
            # run settings: run.py / run_behaviors.py take these, the algorithm never sees them
            run_settings = ("n_timesteps", "policy", "open_kwargs", "self_play", *CADENCE_SETTINGS)
            args = {k: v for k, v in params.items() if k not in run_settings}
            policy, kwargs = prepare_model_args("poca", params["policy"], args, venv)
        finally:
            venv.close()
        assert (policy, kwargs["n_steps"]) == (policy_name, n_steps)  # 20480 agent steps per update


def test_same_seed_and_actions_give_identical_games():
    def play(seed: int) -> list[np.ndarray]:
        env = SoccerTwos(num_agents=2, seed=seed, max_steps=200)
        env.reset()
        rng = np.random.default_rng(0)
        out = []

        def random_team(env, name):
            return ActionTuple(discrete=rng.integers(0, 3, (len(env.get_steps(name)[0]), 3)).astype(np.int32))

        for _ in range(60):
            step(env, random_team)
            for name in env.behavior_specs:
                decision, terminal = env.get_steps(name)
                out += [*decision.obs, decision.reward, terminal.group_reward]
        return out

    a, b, c = play(7), play(7), play(8)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert any(x.shape != y.shape or not np.array_equal(x, y) for x, y in zip(a, c))


def test_a_scene_without_a_slot_per_agent_is_refused():
    from unity_sb3.unity.errors import UnityConfigurationError

    class Lopsided(SoccerTwos):
        scene_name = "Lopsided"
        AREA_BEHAVIORS = (0, 0, 1, 1, 1)

    with pytest.raises(UnityConfigurationError, match="4 slot\\(s\\) for 5 agent\\(s\\) per field"):
        Lopsided(num_agents=1)
