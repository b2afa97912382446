"""Embedded scenes: BaseEnv contract, Unity semantics, determinism, experts, side channels."""

from __future__ import annotations

import subprocess
import sys
import uuid

import numpy as np
import pytest

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.base_env import ActionTuple, BaseEnv, DecisionSteps, TerminalSteps
from mlagents_envs.exception import UnityActionException, UnityEnvironmentException, UnitySideChannelException
from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel
from mlagents_envs.side_channel.environment_parameters_channel import EnvironmentParametersChannel
from mlagents_envs.side_channel.side_channel_manager import SideChannelManager
from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod, StatsSideChannel

from unity_sb3.scenes import describe_scene, list_scenes, make_scene, scene_class
from unity_sb3.scenes.random_play import random_actions as random_unity_actions
from unity_sb3.scenes.side_channels import (
    STATS_CHANNEL_ID,
    Sampler,
    UnitySideChannels,
    pack_messages,
    split_messages,
)
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers._steps import ARRAY_STEPS, StepReader

# single-behavior scenes; scenes with several behaviors (competitive) have test modules of their own
SCENES = [name for name in list_scenes() if len(scene_class(name).behavior_names_of()) == 1]
BEHAVIORS = {
    "Ball3D": "3DBall?team=0",
    "GridWorld": "GridWorld?team=0",
    "Escape": "DungeonEscape?team=0",
    "PyramidsLite": "Pyramids?team=0",
    "Basic": "Basic?team=0",
    "Sorter": "Sorter?team=0",
    "HybridLine": "HybridLine?team=0",
    "Hallway": "Hallway?team=0",
}
# small but representative settings per scene, to keep the file fast
SMALL = {
    "Ball3D": {"num_agents": 4, "max_steps": 400},
    "GridWorld": {"num_agents": 3},
    "Escape": {"num_agents": 6},
    "PyramidsLite": {"num_agents": 3, "max_steps": 60, "room_size": 7},
    "Basic": {"num_agents": 3},
    "Sorter": {"num_agents": 3},
    "HybridLine": {"num_agents": 3},
    "Hallway": {"num_agents": 3, "max_steps": 600},
}
# scenes without randomness (every episode starts the same, whatever the seed)
DETERMINISTIC = {"Basic"}


def random_actions(
    env: BaseEnv, behavior: str, steps: DecisionSteps, rng: np.random.Generator
) -> ActionTuple:
    """Uniform random actions that respect action masks (a masked branch value is never drawn)."""
    return random_unity_actions(env.behavior_specs[behavior], steps, rng)


def run(env, behavior: str, policy: str, n_steps: int, seed: int = 0):
    """Run a policy; yield (decision_steps, terminal_steps) after each reset/step."""
    rng = np.random.default_rng(seed)
    env.reset()
    for _ in range(n_steps):
        d, t = env.get_steps(behavior)
        yield d, t
        if len(d):
            act = (
                env.expert_actions(behavior, d)
                if policy == "expert"
                else random_actions(env, behavior, d, rng)
            )
            env.set_actions(behavior, act)
        env.step()


def episode_returns(env, behavior: str, policy: str, n_steps: int, seed: int = 0) -> list[float]:
    """Sum of individual + group rewards of every finished episode."""
    running: dict[int, float] = {}
    finished = []
    for d, t in run(env, behavior, policy, n_steps, seed):
        for i, agent in enumerate(t.agent_id):
            finished.append(running.pop(int(agent), 0.0) + float(t.reward[i] + t.group_reward[i]))
        for i, agent in enumerate(d.agent_id):
            running[int(agent)] = running.get(int(agent), 0.0) + float(d.reward[i] + d.group_reward[i])
    return finished


def assert_steps_equal(
    a: tuple[DecisionSteps, TerminalSteps], b: tuple[DecisionSteps, TerminalSteps], id_offset: int = 0
) -> None:
    """Same steps; ``b``'s agent ids are ``a``'s plus ``id_offset`` (ids are never reused)."""
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for ox, oy in zip(x.obs, y.obs):
            np.testing.assert_array_equal(ox, oy)
        np.testing.assert_array_equal(x.reward, y.reward)
        np.testing.assert_array_equal(x.agent_id + id_offset, y.agent_id)
        np.testing.assert_array_equal(x.group_id, y.group_id)
        np.testing.assert_array_equal(x.group_reward, y.group_reward)
    if a[0].action_mask is not None:
        for mx, my in zip(a[0].action_mask, b[0].action_mask):
            np.testing.assert_array_equal(mx, my)
    np.testing.assert_array_equal(a[1].interrupted, b[1].interrupted)


# ---------------------------------------------------------------------------------------------- API


def test_list_and_describe():
    assert SCENES[0] == "Ball3D" and set(SCENES) <= set(BEHAVIORS)
    for name in SCENES:
        text = describe_scene(name)
        assert BEHAVIORS[name] in text and "num_agents" in text and "observation 0" in text


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("NoSuchScene", {}, "Unknown scene 'NoSuchScene'; available scenes: Ball3D"),
        ("Ball3D", {"masss": 2.0}, "Unknown parameter.*'masss'.*valid parameters:.*mass"),
        ("Ball3D", {"num_agents": 0}, "'num_agents'.*>= 1"),
        ("Ball3D", {"num_agents": 2.5}, "'num_agents'.*must be a finite int"),
        ("Ball3D", {"mass": -1.0}, "'mass' must be > 0"),
        ("Ball3D", {"max_steps": -3}, "'max_steps'.*>= 0"),
        ("Ball3D", {"stable_agent_ids": 1}, "'stable_agent_ids'.*bool"),
    ],
)
def test_bad_input_is_a_clear_error(name, params, match):
    with pytest.raises(UnityConfigurationError, match=match):
        make_scene(name, **params)


def test_describe_command(capsys):
    from unity_sb3.scenes.__main__ import main

    main(["gridworld"])
    assert "'GridWorld?team=0'" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["Nope"])
    assert "Unknown scene 'Nope'" in capsys.readouterr().err


def test_gymnasium_ids_are_registered_cheaply():
    import gymnasium

    from unity_sb3.scenes import EmbeddedScene
    from unity_sb3.scenes.registration import register_gymnasium_ids

    assert register_gymnasium_ids() == [f"unity_sb3/{name}-v0" for name in list_scenes()]  # idempotent
    spec = gymnasium.spec("unity_sb3/Ball3D-v0")
    assert spec.entry_point == "unity_sb3.wrappers.gym_env:UnityGymEnv" and spec.kwargs == {"env": "Ball3D"}
    assert isinstance(make_scene("Ball3D", num_agents=1), EmbeddedScene)
    # importing the package (which registers the ids) loads neither torch nor a scene module
    code = (
        "import sys, unity_sb3, gymnasium; "
        "assert 'unity_sb3/GridWorld-v0' in gymnasium.registry; "
        "assert 'torch' not in sys.modules and 'unity_sb3.scenes.ball3d' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_scene_name_is_case_insensitive():
    assert make_scene("ball3d", num_agents=2).scene_name == "Ball3D"


# ------------------------------------------------------------------------------------ BaseEnv contract


@pytest.mark.parametrize("name", SCENES)
def test_base_env_contract(name):
    behavior = BEHAVIORS[name]
    env = make_scene(name, seed=3, **SMALL[name])
    assert isinstance(env, BaseEnv)
    assert list(env.behavior_specs) == [behavior]
    spec = env.behavior_specs[behavior]
    with pytest.raises(UnityEnvironmentException, match="reset"):
        env.get_steps(behavior)
    with pytest.raises(UnityActionException, match="does not correspond"):
        env.get_steps("Nope?team=0")
    env.reset()
    d, t = env.get_steps(behavior)
    assert len(d) == env.num_agents and len(t) == 0
    rng = np.random.default_rng(0)
    seen_terminal = False
    for _ in range(150):
        d, t = env.get_steps(behavior)
        for steps in (d, t):
            assert steps.agent_id.dtype == np.int32
            assert len(set(steps.agent_id.tolist())) == len(steps)
            for obs, ospec in zip(steps.obs, spec.observation_specs):
                assert obs.dtype == np.float32 and obs.shape == (len(steps), *ospec.shape)
            assert steps.reward.dtype == np.float32 and steps.reward.shape == (len(steps),)
            assert np.asarray(steps.group_id).shape == (len(steps),)
        assert t.interrupted.shape == (len(t),)
        seen_terminal |= len(t) > 0
        if spec.action_spec.discrete_size and len(d):
            assert [m.shape for m in d.action_mask] == [
                (len(d), b) for b in spec.action_spec.discrete_branches
            ]
        with pytest.raises(UnityActionException, match="needs a"):
            env.set_actions(behavior, spec.action_spec.empty_action(len(d) + 1))
        with pytest.raises(IndexError, match="did not request a decision"):
            env.set_action_for_agent(behavior, 10**6, spec.action_spec.empty_action(1))
        env.set_actions(behavior, random_actions(env, behavior, d, rng))
        env.step()
    assert seen_terminal
    env.close()
    with pytest.raises(UnityEnvironmentException, match="closed"):
        env.step()


@pytest.mark.parametrize("name", list_scenes())
def test_batches_are_in_the_array_form_the_scene_declares(name):
    """``EmbeddedScene.array_steps``: the wrappers read a scene's batches without checks, so every batch
    must be one that ``StepReader``'s checks return as it is (empty ones: arrays of the specs' shapes)."""
    env = make_scene(name, seed=1, **SMALL.get(name, {"max_steps": 40}))  # (short episodes: terminal batches)
    assert getattr(env, ARRAY_STEPS)
    readers = {behavior: StepReader(behavior, spec) for behavior, spec in env.behavior_specs.items()}
    rng = np.random.default_rng(0)
    env.reset()
    ended = 0
    for _ in range(120):
        for behavior, reader in readers.items():
            d, t = env.get_steps(behavior)
            for steps, normalized in ((d, reader.decisions(d)), (t, reader.terminals(t))):
                if len(steps):
                    assert normalized is steps
                else:
                    assert [o.shape for o in steps.obs] == [o.shape for o in normalized.obs]
            ended += len(t)
            env.set_actions(behavior, random_unity_actions(env.behavior_specs[behavior], d, rng))
        env.step()
    env.close()
    assert ended  # terminal batches were checked too


@pytest.mark.parametrize("name", [s for s in SCENES if s != "Ball3D"])
def test_discrete_actions_out_of_range_are_refused(name):
    behavior = BEHAVIORS[name]
    env = make_scene(name, **SMALL[name])
    env.reset()
    n = len(env.get_steps(behavior)[0])
    action_spec = env.behavior_specs[behavior].action_spec
    bad = np.full((n, action_spec.discrete_size), 99, dtype=np.int32)
    continuous = np.zeros((n, action_spec.continuous_size), dtype=np.float32)  # hybrid scenes
    with pytest.raises(UnityActionException, match=r"\[0, branch size\)"):
        env.set_actions(behavior, ActionTuple(continuous=continuous, discrete=bad))


@pytest.mark.parametrize("name", SCENES)
def test_same_seed_same_actions_identical_steps(name):
    behavior = BEHAVIORS[name]
    a, b, c = (make_scene(name, seed=s, **SMALL[name]) for s in (7, 7, 8))
    steps_a = list(run(a, behavior, "random", 200, seed=1))
    steps_b = list(run(b, behavior, "random", 200, seed=1))
    for x, y in zip(steps_a, steps_b):
        assert_steps_equal(x, y)
    first_c = next(run(c, behavior, "random", 1))
    if name not in DETERMINISTIC:
        assert not all(np.array_equal(x, y) for x, y in zip(steps_a[0][0].obs, first_c[0].obs))
    # reseed (what the player does with the handshake seed) == a fresh scene with that seed, but
    # with new agent ids: like Unity's, the id counter never restarts
    used = set(first_c[0].agent_id.tolist())
    c.reseed(7)
    replay = list(run(c, behavior, "random", 50, seed=1))
    assert not used & set(replay[0][0].agent_id.tolist())
    offset = int(replay[0][0].agent_id[0]) - int(steps_a[0][0].agent_id[0])
    for x, y in zip(steps_a[:50], replay):
        assert_steps_equal(x, y, id_offset=offset)


@pytest.mark.parametrize("name", SCENES)
def test_agent_ids_never_reused_across_resets_and_reseeds(name):
    """Unity never gives an id twice, not even after a reset with a seed; neither do the scenes."""
    behavior = BEHAVIORS[name]
    env = make_scene(name, seed=0, **SMALL[name])
    episodes: list[set[int]] = []
    for seed in (0, 0, 1):
        env.reseed(seed)
        ids: set[int] = set()
        for d, t in run(env, behavior, "random", 40):
            ids |= set(d.agent_id.tolist()) | set(t.agent_id.tolist())
        assert all(not ids & earlier for earlier in episodes)
        episodes.append(ids)


@pytest.mark.parametrize("name", SCENES)
@pytest.mark.parametrize("stable", [False, True])
def test_agent_ids_per_episode(name, stable):
    """Default: a new id for every episode (older Unity); stable_agent_ids keeps one id per agent."""
    behavior = BEHAVIORS[name]
    env = make_scene(name, seed=0, stable_agent_ids=stable, **SMALL[name])
    all_ids, ended = set(), set()
    for d, t in run(env, behavior, "random", 300):
        ended |= set(t.agent_id.tolist())
        all_ids |= set(d.agent_id.tolist()) | set(t.agent_id.tolist())
        if not stable:
            assert not set(d.agent_id.tolist()) & ended  # an ended episode's id never asks again
    assert ended
    if stable:
        assert all_ids == set(range(env.num_agents))
    else:
        assert len(all_ids) > env.num_agents


@pytest.mark.parametrize("name", SCENES)
def test_interrupted_on_max_steps(name):
    """Agents that get no actions (zeros: stay / keep the tilt) are interrupted at max_steps."""
    behavior = BEHAVIORS[name]
    params = {**SMALL[name], "max_steps": 10 if name == "Ball3D" else 4}
    if name == "Escape":
        params["guard_move_prob"] = 0.0
    env = make_scene(name, seed=0, **params)
    env.reset()
    interrupted = []
    for _ in range(12):
        env.step()
        interrupted += env.get_steps(behavior)[1].interrupted.tolist()
    assert len(interrupted) >= 2 * env.num_agents and all(interrupted)


# (expert mean return >=, random mean return <) per finished agent episode (group reward included)
EXPERT_VS_RANDOM = {
    "Ball3D": (90.0, 30.0),
    "GridWorld": (0.5, 0.1),
    "Escape": (0.6, 0.2),
    "PyramidsLite": (1.5, 0.5),
    "Basic": (0.9, 0.3),
    "Sorter": (1.5, 0.0),
    "HybridLine": (1.0, 0.3),
    "Hallway": (0.5, 0.0),
}
STAT_KEYS = {
    "Ball3D": "Environment/BallMass",
    "GridWorld": "GridWorld/SuccessRate",
    "Escape": "Escape/SuccessRate",
    "PyramidsLite": "Pyramids/SuccessRate",
    "Hallway": "Hallway/SuccessRate",
}


@pytest.mark.parametrize("name", SCENES)
def test_expert_beats_random(name):
    behavior = BEHAVIORS[name]
    budget = {
        "Ball3D": 1100,
        "GridWorld": 300,
        "Escape": 400,
        "PyramidsLite": 500,
        "Basic": 300,
        "Sorter": 300,
        "HybridLine": 300,
        "Hallway": 300,
    }[name]
    params = {"Ball3D": {"num_agents": 4}, "Escape": {"num_agents": 12}, "Hallway": {"max_steps": 900}}.get(
        name, {}
    )
    expert = episode_returns(make_scene(name, seed=1, **params), behavior, "expert", budget)
    random = episode_returns(make_scene(name, seed=1, **params), behavior, "random", budget)
    assert len(expert) >= 4 and len(random) >= 4
    expert_min, random_max = EXPERT_VS_RANDOM[name]
    assert np.mean(expert) >= expert_min
    assert np.mean(random) < random_max


@pytest.mark.parametrize("name", [s for s in SCENES if s in STAT_KEYS])  # Basic records no stats
def test_stats_come_back_in_process(name):
    stats = StatsSideChannel()
    reporting = {"report_parameters": True} if name == "Ball3D" else {}  # Unity's 3DBall reports none
    env = make_scene(name, seed=0, side_channels=[stats], **SMALL[name], **reporting)
    for _ in run(env, BEHAVIORS[name], "expert", 60):
        pass
    reported = stats.get_and_reset_stats()[STAT_KEYS[name]]
    assert reported and all(method == StatsAggregationMethod.AVERAGE for _, method in reported)
    if name != "Ball3D":  # success rates of the expert
        assert np.mean([value for value, _ in reported]) > 0.9


# ------------------------------------------------------------------------------------------- Ball3D


def test_ball3d_layout_and_decision_period():
    env = make_scene("Ball3D", seed=0, max_steps=50)
    assert env.behavior_specs["3DBall?team=0"].observation_specs[0].shape == (8,)
    assert env.behavior_specs["3DBall?team=0"].action_spec.continuous_size == 2
    steps = list(run(env, "3DBall?team=0", "expert", 11))
    # one step() = 5 physics steps: max_steps=50 ends every episode at the 10th step, and the new
    # episodes ask for a decision in the same step
    assert all(len(t) == 0 for _d, t in steps[:10])
    d, t = steps[10]
    assert len(t) == 12 and t.interrupted.all() and len(d) == 12
    assert not set(d.agent_id.tolist()) & set(t.agent_id.tolist())
    np.testing.assert_allclose(t.reward, 0.1)
    np.testing.assert_allclose(steps[3][0].reward, 0.1)
    np.testing.assert_array_equal(steps[0][0].reward, 0.0)


def test_ball3d_falls_between_decisions_are_reported_alone():
    """A ball lost mid-interval is reported at the next physics step with no DecisionSteps (as Unity)."""
    env = make_scene("Ball3D", seed=2, num_agents=12)
    saw_terminal_only = False
    for d, t in run(env, "3DBall?team=0", "random", 200):
        if len(t):
            np.testing.assert_allclose(t.reward, -1.0)
            assert not t.interrupted.any()
        if len(t) and len(d) == 0:
            saw_terminal_only = True
    assert saw_terminal_only


def test_ball3d_actions_only_reach_deciding_agents():
    env = make_scene("Ball3D", seed=0, num_agents=3)
    env.reset()
    d, _ = env.get_steps("3DBall?team=0")
    env.set_action_for_agent(
        "3DBall?team=0", int(d.agent_id[1]), ActionTuple(continuous=np.ones((1, 2), np.float32))
    )
    env.step()
    d2, _ = env.get_steps("3DBall?team=0")
    tilt = np.degrees(2 * np.arcsin(d2.obs[0][:, :2])) - np.degrees(2 * np.arcsin(d.obs[0][:, :2]))
    # 5 physics steps x 2 degrees about each axis (the turns compose, so z and x read ~10 degrees)
    np.testing.assert_allclose(tilt[1], [10.0, 10.0], atol=0.2)
    np.testing.assert_allclose(tilt[[0, 2]], 0.0, atol=1e-4)  # missing actions are zeros


def test_actions_set_before_a_reset_are_dropped():
    env = make_scene("Ball3D", seed=0, num_agents=3)
    env.reset()
    env.set_actions("3DBall?team=0", ActionTuple(continuous=np.ones((3, 2), np.float32)))
    env.reset()
    before = env.get_steps("3DBall?team=0")[0].obs[0][:, :2]
    env.step()
    np.testing.assert_allclose(env.get_steps("3DBall?team=0")[0].obs[0][:, :2], before, atol=1e-6)


def _settled_ball(**params) -> np.ndarray:
    env = make_scene("Ball3D", seed=4, num_agents=2, **params)
    steps = list(run(env, "3DBall?team=0", "expert", 30))
    return steps[-1][0].obs[0]


def test_ball3d_parameters_change_physics():
    base = _settled_ball()
    big = _settled_ball(scale=2.0)
    assert np.all(big[:, 3] > base[:, 3] + 0.4)  # rest height = top + radius
    # as in Unity, the ball's mass changes nothing (it only touches a static collider); gravity does
    light, heavy, moon = (
        make_scene("Ball3D", seed=5, num_agents=4, **p)
        for p in ({"mass": 0.5}, {"mass": 5.0}, {"gravity": 1.6})
    )
    last = [list(run(env, "3DBall?team=0", "expert", 20))[-1][0].obs[0] for env in (light, heavy, moon)]
    np.testing.assert_array_equal(last[0], last[1])
    assert not np.allclose(last[0][:, 5:], last[2][:, 5:])


def test_ball3d_environment_parameters_in_process():
    params = EnvironmentParametersChannel()
    stats = StatsSideChannel()
    engine = EngineConfigurationChannel()
    env = make_scene(
        "Ball3D", seed=4, num_agents=2, report_parameters=True, side_channels=[params, stats, engine]
    )
    params.set_float_parameter("scale", 2.0)
    params.set_uniform_sampler_parameters("mass", 3.0, 4.0, seed=9)
    engine.set_configuration_parameters(time_scale=20.0, width=64, height=48)
    settled = list(run(env, "3DBall?team=0", "expert", 30))[-1][0].obs[0]
    np.testing.assert_allclose(settled[:, 3], _settled_ball(scale=2.0)[:, 3])
    assert env.side_channels.engine_config.time_scale == 20.0
    assert (env.side_channels.engine_config.width, env.side_channels.engine_config.height) == (64, 48)
    reported = stats.get_and_reset_stats()
    masses = [v for v, _ in reported["Environment/BallMass"]]
    assert len(masses) == 2 and all(3.0 <= m <= 4.0 for m in masses)
    assert reported["Environment/BallScale"] == [(2.0, StatsAggregationMethod.AVERAGE)] * 2


# -------------------------------------------------------------------------------------- side channels


def test_side_channel_codec_round_trip():
    params, engine = EnvironmentParametersChannel(), EngineConfigurationChannel()
    params.set_float_parameter("mass", 2.5)
    params.set_uniform_sampler_parameters("scale", 0.5, 1.5, seed=1)
    params.set_gaussian_sampler_parameters("gravity", 9.0, 0.1, seed=2)
    params.set_multirangeuniform_sampler_parameters("size", [(1.0, 2.0), (5.0, 6.0)], seed=3)
    engine.set_configuration_parameters(quality_level=3, target_frame_rate=30, capture_frame_rate=50)
    blob = bytes(SideChannelManager([params, engine]).generate_side_channel_messages())
    unity = UnitySideChannels()
    unity.receive(blob)
    values = unity.environment_parameters
    assert values["mass"] == 2.5
    assert isinstance(values["scale"], Sampler) and values["scale"].kind == "uniform"
    scale = unity.get_with_default("scale", 1.0, 1000)
    assert scale.min() >= 0.5 and scale.max() <= 1.5 and scale.std() > 0.2
    assert abs(unity.get_with_default("gravity", 0.0, 1000).mean() - 9.0) < 0.02
    size = unity.get_with_default("size", 0.0, 1000)
    assert np.all(((size >= 1) & (size <= 2)) | ((size >= 5) & (size <= 6))) and (size > 3).any()
    np.testing.assert_array_equal(unity.get_with_default("absent", 7.0, 3), [7.0, 7.0, 7.0])
    cfg = unity.engine_config
    assert (cfg.quality_level, cfg.target_frame_rate, cfg.capture_frame_rate) == (3, 30, 50)
    # same seed => same samples, as Unity's seeded samplers
    again = UnitySideChannels()
    again.receive(blob)
    np.testing.assert_array_equal(again.get_with_default("scale", 1.0, 1000), scale)
    # stats Unity -> Python
    unity.add_stat("Scene/Success", 1.0, StatsAggregationMethod.AVERAGE)
    unity.add_stat("Scene/Count", 3.0, StatsAggregationMethod.SUM)
    stats = StatsSideChannel()
    SideChannelManager([stats]).process_side_channel_message(unity.drain())
    assert stats.get_and_reset_stats() == {
        "Scene/Success": [(1.0, StatsAggregationMethod.AVERAGE)],
        "Scene/Count": [(3.0, StatsAggregationMethod.SUM)],
    }
    assert unity.drain() == b""
    messages = [(STATS_CHANNEL_ID, b"abc"), (uuid.uuid4(), b"")]
    assert split_messages(pack_messages(messages)) == messages


@pytest.mark.parametrize("cut", [5, 19, 21])
def test_truncated_side_channel_data_is_a_clear_error(cut):
    blob = pack_messages([(STATS_CHANNEL_ID, b"abcdef")])
    with pytest.raises(UnitySideChannelException, match=r"truncated|declares"):
        split_messages(blob[:cut])


def test_ball3d_sends_no_stats_unless_asked():
    """Unity's Ball3DAgent records no statistics: by default the scene sends no side-channel bytes,
    while the sampled parameters still apply (the ball's size shows in where it rests)."""
    params = EnvironmentParametersChannel()
    params.set_float_parameter("scale", 2.0)
    env = make_scene("Ball3D", seed=0, num_agents=2)
    env.receive_side_channel_data(bytes(SideChannelManager([params]).generate_side_channel_messages()))
    env.reset()
    for _ in range(3):
        env.step()
    assert env.drain_side_channel_data() == b""
    np.testing.assert_allclose(env._radius, 1.0)


def test_player_side_methods_on_scene():
    """What the stand-in player calls: receive_side_channel_data / drain_side_channel_data."""
    params = EnvironmentParametersChannel()
    params.set_float_parameter("mass", 2.0)
    env = make_scene("Ball3D", seed=0, num_agents=2, report_parameters=True)
    env.receive_side_channel_data(bytes(SideChannelManager([params]).generate_side_channel_messages()))
    env.reset()
    stats = StatsSideChannel()
    SideChannelManager([stats]).process_side_channel_message(env.drain_side_channel_data())
    assert stats.get_and_reset_stats()["Environment/BallMass"] == [(2.0, StatsAggregationMethod.AVERAGE)] * 2
    assert env.drain_side_channel_data() == b""


# ----------------------------------------------------------------------------------------- GridWorld


@pytest.mark.parametrize("channels_last", [False, True])
def test_gridworld_masks_match_walls_and_expert_respects_them(channels_last):
    env = make_scene(
        "GridWorld", seed=2, num_agents=6, grid_size=4, image_size=24, channels_last=channels_last
    )
    spec = env.behavior_specs["GridWorld?team=0"]
    assert spec.observation_specs[0].shape == ((24, 24, 3) if channels_last else (3, 24, 24))
    assert spec.observation_specs[1].observation_type.name == "GOAL_SIGNAL"
    masked_seen = 0
    for d, _t in run(env, "GridWorld?team=0", "expert", 120):
        image = d.obs[0] if channels_last else d.obs[0].transpose(0, 2, 3, 1)
        x, y = env._find(image, np.array([0.0, 0.0, 1.0])).T  # the agent, read from the image
        mask = d.action_mask[0]
        np.testing.assert_array_equal(mask[:, 0], False)  # "stay" is always allowed
        np.testing.assert_array_equal(mask[:, 1], y == 3)  # up
        np.testing.assert_array_equal(mask[:, 2], y == 0)  # down
        np.testing.assert_array_equal(mask[:, 3], x == 0)  # left
        np.testing.assert_array_equal(mask[:, 4], x == 3)  # right
        masked_seen += int(mask.sum())
        chosen = env.expert_actions("GridWorld?team=0", d).discrete[:, 0]
        assert not mask[np.arange(len(d)), chosen].any()
    assert masked_seen > 0


def test_gridworld_without_masks():
    env = make_scene("GridWorld", seed=2, num_agents=6, mask_actions=False)
    for d, _t in run(env, "GridWorld?team=0", "random", 30):
        assert not any(m.any() for m in d.action_mask)  # all allowed, as rpc_utils reports no mask
    assert (
        np.mean(
            episode_returns(
                make_scene("GridWorld", seed=1, mask_actions=False), "GridWorld?team=0", "expert", 100
            )
        )
        > 0.5
    )


def test_gridworld_rewards():
    env = make_scene("GridWorld", seed=0, num_agents=4)
    rewards = []
    for d, t in run(env, "GridWorld?team=0", "random", 200):
        if len(d) and len(t) == 0:
            np.testing.assert_allclose(d.reward[d.reward != 0], -0.01, rtol=1e-6)
        rewards += t.reward[~t.interrupted].tolist()
    assert set(np.round(rewards, 4)) <= {1.0, -1.0} and len(set(np.round(rewards, 4))) == 2


# -------------------------------------------------------------------------------------------- Escape


def test_escape_dead_agents_leave_until_group_reset():
    env = make_scene("Escape", seed=3, num_agents=6)
    behavior = "DungeonEscape?team=0"
    dead: set[int] = set()
    wins = deaths = 0
    previous_ids: set[int] = set()
    for d, t in run(env, behavior, "expert", 300):
        ids, ended = set(d.agent_id.tolist()), set(t.agent_id.tolist())
        assert not (ids | ended) & dead, "a dead agent came back"
        assert set(np.unique(d.group_id).tolist()) <= {1, 2}
        for i, agent in enumerate(t.agent_id.tolist()):
            group_done = [
                a for a, g in zip(d.agent_id.tolist(), d.group_id) if g == t.group_id[i] and a in previous_ids
            ]
            if t.group_reward[i] == 0 and not t.interrupted[i] and group_done:
                dead.add(agent)  # died while its group plays on
                deaths += 1
                assert len(group_done) == 2  # the other two still ask for decisions
            elif t.group_reward[i] > 0:
                wins += 1
        previous_ids = ids
        np.testing.assert_array_equal(d.reward, 0.0)  # no individual reward, only the group's
    assert deaths >= 4 and wins >= 8


def test_escape_group_interrupted_on_max_steps():
    env = make_scene("Escape", seed=0, num_agents=3, max_steps=5, guard_move_prob=0.0)
    stays = ActionTuple(discrete=np.zeros((3, 1), dtype=np.int32))
    env.reset()
    for _ in range(5):
        env.set_actions("DungeonEscape?team=0", stays)
        env.step()
    d, t = env.get_steps("DungeonEscape?team=0")
    assert len(t) == 3 and t.interrupted.all() and (np.asarray(t.group_id) == 1).all()
    assert len(d) == 3 and not set(d.agent_id.tolist()) & set(t.agent_id.tolist())


@pytest.mark.parametrize("prob", [0.0, 1.0])
def test_escape_guard_speed_is_an_environment_parameter(prob):
    params = EnvironmentParametersChannel()
    params.set_float_parameter("guard_move_prob", prob)
    env = make_scene("Escape", seed=0, num_agents=12, side_channels=[params])
    env.reset()
    moves = 0
    for _ in range(10):
        before, alive = env._guard.copy(), env._guard_alive.copy()
        env.step()  # no actions: everybody stays
        moves += int((alive & (env._guard != before).any(axis=1)).sum())
    assert (moves >= 10) if prob == 1.0 else (moves == 0)


# -------------------------------------------------------------------------------------- PyramidsLite


PYR = "Pyramids?team=0"


def pyramids_rays(obs: np.ndarray) -> np.ndarray:
    """``(m, 8, 5)`` ray features of PyramidsLite observations."""
    from unity_sb3.scenes.pyramids import RAY_FEATURES, RAY_START, RAYS

    return obs[:, RAY_START:].reshape(len(obs), len(RAYS), RAY_FEATURES)


def test_pyramids_layout():
    from unity_sb3.scenes.pyramids import OBS_SIZE

    env = make_scene("PyramidsLite", seed=0, num_agents=2, room_size=9)
    spec = env.behavior_specs[PYR]
    assert OBS_SIZE == 43 and spec.observation_specs[0].shape == (43,)
    assert tuple(spec.action_spec.discrete_branches) == (5,)
    env.reset()
    obs = env.get_steps(PYR)[0].obs[0]
    rays = pyramids_rays(obs)
    np.testing.assert_array_equal(rays[..., :4].sum(axis=2), 1.0)  # exactly one tag per ray
    assert ((rays[..., 4] > 0) & (rays[..., 4] <= 1)).all()
    np.testing.assert_array_equal(obs[:, 0], 0.0)  # switch off at the start
    np.testing.assert_array_equal(obs[:, 1:3], env._pos / 8)


@pytest.mark.parametrize(
    ("pos", "switch", "on", "target", "expected"),
    [
        # agent in the middle of a 5x5 room, switch 2 cells north: N ray sees it, E ray the wall 3 steps away
        ((2, 2), (2, 4), False, (0, 0), {0: ("switch_off", 2), 2: ("wall", 3), 5: ("wall", 3)}),
        # switch on, target beyond it on the same ray: the switch hides it; target on the SW diagonal
        ((2, 2), (2, 3), True, (2, 4), {0: ("switch_on", 1), 5: ("wall", 3)}),
        ((2, 2), (3, 3), True, (0, 0), {1: ("switch_on", 1), 5: ("target", 2)}),
        # a target that is not there yet (switch off) is not seen
        ((0, 0), (4, 4), False, (0, 3), {0: ("wall", 5), 1: ("switch_off", 4), 6: ("wall", 1)}),
        # objects off every ray are not seen
        ((0, 0), (1, 2), True, (2, 1), {0: ("wall", 5), 1: ("wall", 5), 2: ("wall", 5)}),
    ],
)
def test_pyramids_rays(pos, switch, on, target, expected):
    from unity_sb3.scenes.pyramids import cast_rays

    tags = ["switch_off", "switch_on", "target", "wall"]
    arr = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
    rays = cast_rays(arr(pos), arr(switch), np.array([on]), arr(target), 5)[0]
    for r, (tag, dist) in expected.items():
        assert tags[int(rays[r, :4].argmax())] == tag, (r, rays[r])
        assert rays[r, 4] == pytest.approx(dist / 5)


def test_pyramids_target_appears_only_after_the_switch():
    env = make_scene("PyramidsLite", seed=0, num_agents=4, room_size=9, max_steps=100)
    pressed_seen = target_seen = False
    for d, t in run(env, PYR, "expert", 120):
        obs, rays = d.obs[0], pyramids_rays(d.obs[0])
        off = obs[:, 0] == 0
        assert not rays[off, :, 2].any()  # no target before the press
        assert not rays[off, :, 1].any() and not rays[~off, :, 0].any()  # the switch shows its state
        pressed_seen |= bool((~off).any())
        target_seen |= bool(rays[~off, :, 2].any())
        # +2 replaces the step cost at the target (SetReward); timeouts end with the step cost
        assert set(np.round(t.reward, 4).tolist()) <= {2.0, -0.001}
    assert pressed_seen and target_seen


def test_pyramids_switch_then_target_by_hand():
    env = make_scene("PyramidsLite", seed=3, num_agents=1, room_size=5, stable_agent_ids=True)
    env.reset()
    env._pos[0], env._switch[0] = (0, 0), (2, 0)

    def step(action: int):
        env.set_actions(PYR, ActionTuple(discrete=np.array([[action]], dtype=np.int32)))
        env.step()
        return env.get_steps(PYR)

    d, t = step(4)  # right: next to the switch
    assert len(t) == 0 and d.obs[0][0, 0] == 0 and d.reward[0] == pytest.approx(-0.001)
    d, t = step(4)  # onto the switch: it turns on and the target appears elsewhere
    assert d.obs[0][0, 0] == 1.0 and len(t) == 0
    target = env._target[0].copy()
    assert not (target == env._switch[0]).all()
    env._pos[0] = target + np.array([-1 if target[0] > 0 else 1, 0])
    d, t = step(4 if target[0] > 0 else 3)
    assert len(t) == 1 and t.reward[0] == 2.0 and not t.interrupted[0]
    assert d.obs[0][0, 0] == 0  # the new episode starts with the switch off


@pytest.mark.parametrize("room_size", [5, 8, 15, 31])
def test_pyramids_expert_always_succeeds(room_size):
    from unity_sb3.scenes.pyramids import PyramidsLite

    stats = StatsSideChannel()
    limit = 8 * room_size
    env = make_scene(
        "PyramidsLite",
        seed=room_size,
        num_agents=16,
        room_size=room_size,
        max_steps=limit,
        side_channels=[stats],
    )
    returns = episode_returns(env, PYR, "expert", 3 * limit)
    assert len(returns) >= 16
    assert min(returns) > 2.0 - 0.001 * limit  # every episode reached the target, none timed out
    success = [v for v, _ in stats.get_and_reset_stats()["Pyramids/SuccessRate"]]
    assert len(success) >= len(returns) and all(success)  # (run() does not yield the last step)
    assert PyramidsLite.PARAMS["room_size"] <= 31


def test_pyramids_random_play_rarely_succeeds():
    """At the default room size and step limit a random walk reaches the target in < 5% of episodes."""
    returns = episode_returns(make_scene("PyramidsLite", seed=5, num_agents=16), PYR, "random", 3000)
    assert len(returns) >= 100
    assert np.mean(np.array(returns) > 1.0) < 0.05


def test_pyramids_room_size_is_checked():
    with pytest.raises(UnityConfigurationError, match="'room_size' must be in \\[5, 256\\], got 4"):
        make_scene("PyramidsLite", room_size=4)
