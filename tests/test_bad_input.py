"""Bad input (issue 9): each gets a clear error saying what was wrong and what to do.

Already proven elsewhere (not repeated here): discrete out-of-range actions (tests/test_vec_env.py,
tests/test_gym_env.py, tests/test_spaces.py), corrupt/truncated/random ``.demo`` bytes only raise
``DemoFormatError`` naming record and offset, with hypothesis (tests/test_demo.py), misspelt
ML-Agents config keys with did-you-mean (tests/test_mlagents_config.py), ``base_port`` /
``worker_id`` range and type checks (tests/test_connect.py; more in tests/test_ports.py),
action round trips with a fixed observation (tests/test_spaces.py).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ports import free_base_port
from test_crash_restarts import faulty_factory

from unity_sb3.scenes.scripted import ScriptedAgent, ScriptedBehavior, ScriptedEnv

from mlagents_envs.base_env import (  # isort: skip
    ActionSpec,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)

from unity_sb3.spaces import BehaviorSpaces
from unity_sb3.unity.errors import UnityConfigurationError, UnityObservationError
from unity_sb3.wrappers.gym_env import UnityGymEnv
from unity_sb3.wrappers.vec_env import UnityVecEnv

NAN = float("nan")


# ---------------------------------------------------------------------- actions
def continuous_vec_env() -> UnityVecEnv:
    return UnityVecEnv("Ball3D", open_kwargs={"num_agents": 3})  # Box(-1, 1, (2,)), 3 slots


def hybrid_vec_env() -> tuple[ScriptedEnv, UnityVecEnv]:
    env = ScriptedEnv(ScriptedBehavior([ScriptedAgent(), ScriptedAgent()], action_spec=ActionSpec(1, (3,))))
    return env, UnityVecEnv(env)  # hybrid as Box(-1, 1, (1 + 1,))


BAD_CONTINUOUS = [
    (np.zeros((3, 3), np.float32), r"shape \(3, 3\), expected \(3, 2\)"),
    (np.zeros((4, 2), np.float32), r"shape \(4, 2\), expected \(3, 2\)"),
    (np.zeros(5, np.float32), r"shape \(5,\), expected \(3, 2\)"),
    (np.full((3, 2), NAN, np.float32), "NaN or infinite"),
    (np.full((3, 2), np.inf), "NaN or infinite"),
    (np.array([["a", "b"]] * 3), "continuous actions must be numbers"),
    ({"continuous": np.zeros((3, 2))}, "continuous actions must be numbers, got dict"),
    (None, "actions is None"),
]


@pytest.mark.parametrize(("actions", "match"), BAD_CONTINUOUS, ids=[m for _, m in BAD_CONTINUOUS])
def test_bad_continuous_actions_into_vec_env(actions, match):
    venv = continuous_vec_env()
    venv.reset()
    with pytest.raises(ValueError, match=match):
        venv.step(actions)
    venv.step(np.zeros((3, 2), np.float32))  # the env is still usable afterwards
    venv.close()


@pytest.mark.parametrize(
    ("actions", "match"),
    [
        (np.array([0.1, 0.2, 0.3], np.float32), r"shape \(1, 3\), expected \(1, 2\)"),
        (np.array([NAN, 0.0], np.float32), "NaN or infinite"),
        ("left", "continuous actions must be numbers"),
    ],
)
def test_bad_continuous_actions_into_gym_env(actions, match):
    env = UnityGymEnv("Ball3D", open_kwargs={"num_agents": 1})
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(actions)
    env.close()


def test_out_of_range_continuous_actions_are_clipped_like_ml_agents():
    env = ScriptedEnv([ScriptedAgent()])
    venv = UnityVecEnv(env)
    venv.reset()
    venv.step(np.array([[5.0, -7.5]], np.float32))
    np.testing.assert_array_equal(env.actions_of(0)[0].continuous, [1.0, -1.0])


@pytest.mark.parametrize(
    ("actions", "match"),
    [
        (np.array([[0.0, NAN], [0.0, 0.0]], np.float32), "hybrid actions contain NaN"),
        (np.array([[0.0, np.inf], [0.0, 0.0]], np.float32), "hybrid actions contain NaN"),
        (np.array([[0.0], [0.0]], np.float32), r"hybrid actions have shape \(2, 1\), expected \(2, 2\)"),
        (np.array([["x", "y"], ["z", "w"]]), "hybrid actions must be numbers"),
    ],
)
def test_bad_hybrid_actions(actions, match):
    env, venv = hybrid_vec_env()
    venv.reset()
    with pytest.raises(ValueError, match=match):
        venv.step(actions)
    assert not any(env.actions_of(k) for k in range(2)), "nothing reached Unity"


@pytest.mark.parametrize(
    ("actions", "match"),
    [
        (np.full(9, 1.5), "whole numbers"),
        (np.full(9, NAN), "whole numbers"),
        (np.full(9, -1), "-1 for agent 0 is out of range for branch 0 .size 5.; valid actions are 0..4"),
        (np.full(9, 2**40), "out of range"),
        (np.array(["up"] * 9), "must be integers, got dtype <U2"),
        (np.zeros((9, 2), np.int64), r"shape \(9, 2\), expected \(9, 1\)"),
    ],
)
def test_bad_discrete_actions_into_vec_env(actions, match):
    venv = UnityVecEnv("GridWorld")  # Discrete(5), 9 slots
    venv.reset()
    with pytest.raises(ValueError, match=match):
        venv.step(actions)
    venv.close()


# ---------------------------------------------------------------------- NaN / inf from Unity
@pytest.mark.player
@pytest.mark.parametrize(("mode", "word"), [("nan", "NaN"), ("inf", "infinite values")])
@pytest.mark.parametrize("restart_on_crash", [False, True])
def test_non_finite_observations_name_worker_behavior_agent_and_what_to_check(
    tmp_path, mode, word, restart_on_crash
):
    factory = faulty_factory(tmp_path, free_base_port(), fail_at=2, mode=mode)
    venv = UnityVecEnv(factory, restart_on_crash=restart_on_crash, restart_backoff=0.0)
    try:
        venv.reset()
        with pytest.raises(UnityObservationError) as info:
            for _ in range(5):
                venv.step(np.zeros((venv.num_envs, 2), np.float32))
        message = str(info.value)
        assert message.startswith("Unity worker 0 sent ")
        assert f"{word} in observation 0" in message and "of behavior '3DBall?team=0'" in message
        assert "CollectObservations" in message and "clamp or normalise" in message
        behavior, agent, _ = info.value.problems[0]
        assert behavior == "3DBall?team=0" and isinstance(agent, int)
        assert isinstance(info.value, RuntimeError), "still a RuntimeError, as mlagents_envs raises"
        assert venv.restart_counts == [0], "bad data is not a crash: no restart"
    finally:
        venv.close()


# ---------------------------------------------------------------------- names and keys
@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: UnityVecEnv("Ball3D", behavior_name="3DBal"), "did you mean '3DBall\\?team=0'"),
        (lambda: UnityGymEnv("Ball3D", behavior_name="3dball"), "did you mean '3DBall\\?team=0'"),
        (
            lambda: UnityVecEnv("Ball3D", behavior_name="Walker"),
            r"not found; the scene has \['3DBall\?team=0'\]$",
        ),
        (lambda: UnityVecEnv("Ball3D", open_kwargs={"num_agentz": 2}), "Did you mean 'num_agents'"),
        (lambda: UnityVecEnv("Bal3D"), "not an embedded scene either .*Did you mean the scene 'Ball3D'"),
    ],
    ids=["vec_env", "gym_env", "no_close_match", "scene_param", "scene_name"],
)
def test_unknown_names_get_a_did_you_mean(make, match):
    with pytest.raises((UnityConfigurationError, FileNotFoundError), match=match):
        make()


def test_behavior_name_without_team_suffix_is_accepted():
    venv = UnityVecEnv("Ball3D", behavior_name="3DBall", open_kwargs={"num_agents": 2})
    assert venv.behavior_name == "3DBall?team=0"
    venv.close()


def test_pettingzoo_unknown_behavior():
    from unity_sb3.wrappers.pettingzoo_env import UnityParallelEnv

    with pytest.raises(UnityConfigurationError, match="did you mean 'DungeonEscape\\?team=0'"):
        UnityParallelEnv("Escape", behavior_names=["DungeonEscap"])


@pytest.mark.parametrize(
    ("algo", "key", "close"),
    [
        ("ppo", "learning_rat", "learning_rate"),
        ("sac", "gradient_step", "gradient_steps"),
        ("poca", "n_epoch", "n_epochs"),
    ],
)
def test_misspelt_hyperparameter_gets_a_did_you_mean(algo, key, close):
    from unity_sb3.config.model_args import prepare_model_args

    venv = UnityVecEnv("Escape" if algo == "poca" else "Ball3D", open_kwargs={})
    try:
        with pytest.raises(
            ValueError, match=rf"Unknown hyperparameter '{key}' for {algo}.*Did you mean '{close}'"
        ):
            prepare_model_args(algo, "MlpPolicy", {key: 1, "seed": 0}, venv)
        _, kwargs = prepare_model_args(algo, "MlpPolicy", {close: 1, "seed": 0}, venv)
        assert kwargs == {close: 1, "seed": 0}
    finally:
        venv.close()


def test_cli_train_with_a_misspelt_config_key(tmp_path, capsys):
    from unity_sb3.cli import main

    config = tmp_path / "hyper.yml"
    config.write_text("unity_sb3/Ball3D-v0:\n  n_timesteps: 100\n  n_step: 32\n")
    with pytest.raises(ValueError, match=r"Unknown hyperparameter 'n_step' for ppo.*Did you mean 'n_steps'"):
        main(
            [
                "train",
                "--transport",
                "inprocess",
                "--config",
                str(config),
                "--results-dir",
                str(tmp_path),
                "--no-progress",
            ]
        )


def test_corrupt_demo_into_behavioral_cloning(tmp_path, demo_dir):
    from stable_baselines3 import PPO

    from unity_sb3.algorithms.bc import pretrain_bc
    from unity_sb3.demos.format import DemoFormatError

    data = bytearray((demo_dir / "Expert3DBall.demo").read_bytes())
    broken = tmp_path / "broken.demo"
    broken.write_bytes(bytes(data[: len(data) // 2]))
    venv = UnityVecEnv("Ball3D", open_kwargs={"num_agents": 2})
    model = PPO("MlpPolicy", venv, n_steps=8, batch_size=16, device="cpu")
    with pytest.raises(DemoFormatError, match=r"broken\.demo"):
        pretrain_bc(model, str(broken), epochs=1)
    venv.close()


# ---------------------------------------------------------------------- property-based: spaces
VISUAL_DIMS = {
    "hwc": (
        DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
        DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
        DimensionProperty.NONE,
    ),
    "chw": (
        DimensionProperty.NONE,
        DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
        DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
    ),
}


@st.composite
def observation_specs(draw) -> list[ObservationSpec]:
    specs = []
    for i in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            shape: tuple[int, ...] = (draw(st.integers(1, 6)),)
            dims = (DimensionProperty.NONE,)
        else:
            layout = draw(st.sampled_from(["hwc", "chw"]))
            h, w, c = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
            shape = (h, w, c) if layout == "hwc" else (c, h, w)
            dims = VISUAL_DIMS[layout]
        name = draw(st.sampled_from(["", "ray", "camera", f"obs_{i}"]))
        specs.append(ObservationSpec(shape, dims, ObservationType.DEFAULT, name))
    return specs


@st.composite
def action_specs(draw) -> ActionSpec:
    continuous = draw(st.integers(0, 3))
    branches = tuple(draw(st.lists(st.integers(1, 5), min_size=0 if continuous else 1, max_size=3)))
    return ActionSpec(continuous, branches)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=observation_specs(),
    visual=st.sampled_from(["uint8", "float", "uint8_hwc", "float_hwc"]),
    flatten=st.booleans(),
    n=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
)
def test_observation_round_trip_for_random_specs(specs, visual, flatten, n, seed):
    all_vectors = all(len(s.shape) == 1 for s in specs)
    spec = BehaviorSpec(specs, ActionSpec(1, ()))
    if flatten and not all_vectors:
        with pytest.raises(ValueError, match="flatten=True needs every observation to be 1-D"):
            BehaviorSpaces(spec, visual=visual, flatten=True)
        return
    s = BehaviorSpaces(spec, visual=visual, flatten=flatten)
    rng = np.random.default_rng(seed)
    # Unity sends images in [0, 1]; multiples of 1/255 survive uint8 exactly (as PNG pixels do)
    unity = [
        (rng.integers(0, 256, (n, *sp.shape)) / 255.0).astype(np.float32)
        if len(sp.shape) == 3
        else rng.normal(size=(n, *sp.shape)).astype(np.float32)
        for sp in specs
    ]
    converted = s.observations(unity)
    for i in range(n):
        row = {k: v[i] for k, v in converted.items()} if isinstance(converted, dict) else converted[i]
        assert s.observation_space.contains(row), (s.observation_space, row)
    back = s.to_unity_observations(converted)
    assert len(back) == len(unity)
    for original, restored in zip(unity, back):
        assert restored.dtype == np.float32 and restored.shape == original.shape
        np.testing.assert_allclose(restored, original, atol=1e-6)


@settings(max_examples=80, deadline=None)
@given(
    action=action_specs(),
    hybrid=st.sampled_from(["dict", "tuple", "box"]),
    n=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
)
def test_action_round_trip_and_samples_for_random_specs(action, hybrid, n, seed):
    s = BehaviorSpaces(
        BehaviorSpec([ObservationSpec((2,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "")], action),
        hybrid=hybrid,
    )
    rng = np.random.default_rng(seed)
    cont = rng.uniform(-1, 1, (n, action.continuous_size)).astype(np.float32)
    disc = (
        np.stack([rng.integers(0, b, n) for b in action.discrete_branches], axis=1)
        if action.discrete_branches
        else np.zeros((n, 0), np.int64)
    )
    out = s.to_unity_actions(s.from_unity_actions(cont, disc), n)
    np.testing.assert_allclose(out.continuous, cont, atol=1e-6)
    np.testing.assert_array_equal(out.discrete, disc)
    # anything the space samples is a valid Unity action
    s.action_space.seed(seed)
    samples = [s.action_space.sample() for _ in range(n)]
    if isinstance(s.action_space, spaces.Dict):
        batch = {k: np.stack([x[k] for x in samples]) for k in s.action_space.spaces}
    elif isinstance(s.action_space, spaces.Tuple):
        batch = tuple(np.stack([x[j] for x in samples]) for j in range(2))
    else:
        batch = np.stack(samples)
    sent = s.to_unity_actions(batch, n)
    assert sent.continuous.shape == (n, action.continuous_size) and np.all(np.abs(sent.continuous) <= 1)
    assert sent.discrete.shape == (n, len(action.discrete_branches))
    assert np.all(
        (sent.discrete >= 0) & (sent.discrete < np.asarray(action.discrete_branches, dtype=np.int64))
    )


@settings(max_examples=80, deadline=None)
@given(
    branches=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    n=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
    no_mask=st.booleans(),
)
def test_masks_for_random_branches(branches, n, seed, no_mask):
    s = BehaviorSpaces(
        BehaviorSpec(
            [ObservationSpec((2,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "")],
            ActionSpec(0, tuple(branches)),
        )
    )
    rng = np.random.default_rng(seed)
    unity = None if no_mask else [rng.random((n, b)) < 0.4 for b in branches]  # True = NOT allowed
    flat = s.action_masks(unity, n)
    assert flat.shape == (n, sum(branches)) and flat.dtype == bool
    if unity is None:
        assert flat.all()
    else:
        offsets = np.cumsum([0, *branches])
        for k in range(len(branches)):
            np.testing.assert_array_equal(flat[:, offsets[k] : offsets[k + 1]], ~unity[k])


# ---------------------------------------------------------------------- property-based: actions into a VecEnv
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_garbage_actions_raise_value_error_or_reach_unity_valid(data):
    env = ScriptedEnv(ScriptedBehavior([ScriptedAgent(), ScriptedAgent()], action_spec=ActionSpec(0, (3, 2))))
    venv = UnityVecEnv(env)
    venv.reset()
    shape = data.draw(st.sampled_from([(2, 2), (2,), (4,), (2, 3), (1, 2), (2, 2, 1)]))
    values = data.draw(
        st.lists(
            st.one_of(
                st.integers(-3, 5),
                st.floats(allow_nan=True, allow_infinity=True),
                st.sampled_from([0.0, 1.0]),
            ),
            min_size=int(np.prod(shape)),
            max_size=int(np.prod(shape)),
        )
    )
    actions = np.array(values, dtype=object if any(isinstance(v, float) for v in values) else np.int64)
    actions = actions.astype(np.float64 if actions.dtype == object else np.int64).reshape(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            venv.step(actions)
        except ValueError:
            assert not env.actions_of(0), "a refused action must not reach Unity"
            return
    for k in range(2):
        sent = env.actions_of(k)[0].discrete
        assert 0 <= sent[0] < 3 and 0 <= sent[1] < 2
