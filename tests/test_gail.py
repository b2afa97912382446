"""GAIL's expert batches are in the layout the policy sees: demonstrations go through behavioral
cloning's conversion (the env's ``BehaviorSpaces``) for every visual format, Dict keys,
``flatten_obs`` and every action kind."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)

from unity_sb3 import PPO, SAC, UnityVecEnv, load_demo
from unity_sb3.algorithms.reward_signals import GAILSignal
from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError, parse_reward_signals
from unity_sb3.demos.reader import record_demo
from unity_sb3.scenes import make_scene
from unity_sb3.scenes.scripted import DEFAULT_BEHAVIOR, ScriptedAgent, ScriptedBehavior, ScriptedEnv
from unity_sb3.spaces import discrete_to_box

SMALL = {"hidden_units": 16, "num_layers": 1}
GRID = {"num_agents": 2, "image_size": 36, "grid_size": 5}


def gail(**settings) -> dict:
    return {"gail": {"network_settings": SMALL, **settings}}


# ---------------------------------------------------------------------------------- scenes
class TwoVectorBehavior(ScriptedBehavior):
    """Two equal-shaped vector observations whose names sort opposite to the spec order."""

    def spec(self) -> BehaviorSpec:
        none = (DimensionProperty.NONE,)
        first = ObservationSpec((4,), none, ObservationType.DEFAULT, "zz_first")
        second = ObservationSpec((4,), none, ObservationType.DEFAULT, "aa_second")
        return BehaviorSpec([first, second], self.action_spec)


class TwoVectorEnv(ScriptedEnv):
    """Spec order ``zz_first``, ``aa_second``; the second observation is ``-first - 1``."""

    def _obs(self, behavior, k, state, step_in_episode):  # type: ignore[override]
        first = super()._obs(behavior, k, state, step_in_episode)[0]
        return [first, -first - 1.0]


def two_vector_env(action_spec: ActionSpec | None = None) -> TwoVectorEnv:
    action_spec = ActionSpec.create_discrete((3,)) if action_spec is None else action_spec
    agents = [ScriptedAgent(episode_length=6), ScriptedAgent(episode_length=4)]
    return TwoVectorEnv(TwoVectorBehavior(agents, action_spec=action_spec))


def random_policy(action_spec: ActionSpec, seed: int = 0):
    rng = np.random.default_rng(seed)

    def policy(steps) -> ActionTuple:
        n = len(steps)
        cont = rng.uniform(-1, 1, (n, action_spec.continuous_size)).astype(np.float32)
        disc = np.stack(
            [rng.integers(0, b, n) for b in action_spec.discrete_branches] or [np.zeros(n, int)], axis=1
        )
        return ActionTuple(continuous=cont, discrete=disc[:, : action_spec.discrete_size].astype(np.int32))

    return policy


def record(env, behavior: str, path, action_spec: ActionSpec, n_steps: int = 40) -> str:
    record_demo(env, behavior, random_policy(action_spec), path, n_steps=n_steps)
    env.close()
    return str(path)


@pytest.fixture(scope="module")
def grid_demos(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, str]:
    """GridWorld demos with the camera channel-first (False) and channel-last (True) in Unity."""
    out = {}
    for channels_last in (False, True):
        scene = make_scene("GridWorld", seed=3, channels_last=channels_last, **GRID)
        name = next(iter(scene.behavior_specs))
        path = tmp_path_factory.mktemp("demos") / f"grid_{channels_last}.demo"
        out[channels_last] = record(scene, name, path, scene.behavior_specs[name].action_spec, n_steps=30)
    return out


def expert_of(model):
    expert = model.signals["gail"].expert
    return expert.observations, expert.actions, expert.dones


def transition_rows(demo):
    records, _ = demo.transition_records()
    return records


# ---------------------------------------------------------------------------------- visual formats
@pytest.mark.parametrize("channels_last", [False, True], ids=["unity_chw", "unity_hwc"])
@pytest.mark.parametrize("visual", ["uint8", "float", "uint8_hwc", "float_hwc"])
def test_expert_images_are_in_the_policy_layout_for_every_visual_format(grid_demos, visual, channels_last):
    """``float``: values in [0, 1] like the policy's (they stayed 0-255); ``*_hwc``: a real
    transpose (they were reshaped, scrambling the pixels)."""
    venv = UnityVecEnv(make_scene("GridWorld", seed=0, channels_last=channels_last, **GRID), visual=visual)
    model = PPO(
        "MultiInputPolicy",
        venv,
        n_steps=8,
        batch_size=8,
        device="cpu",
        reward_signals=gail(demo_path=grid_demos[channels_last]),
    )
    obs, actions, _ = expert_of(model)
    demo = load_demo(grid_demos[channels_last])
    rows = transition_rows(demo)
    raw = demo.observations[0][rows]  # Unity's floats in [0, 1], in the spec's axis order
    chw = np.moveaxis(raw, -1, 1) if channels_last else raw
    # SB3 transposes channel-last uint8 images itself (VecTransposeImage): its policy sees CHW
    policy_hwc = visual == "float_hwc"
    expected = np.moveaxis(chw, 1, -1) if policy_hwc else chw
    if visual.startswith("uint8"):
        expected = np.clip(np.rint(expected * 255.0), 0, 255).astype(np.uint8)
    image = obs["CameraSensor"]
    assert image.shape[1:] == model.observation_space["CameraSensor"].shape
    assert image.dtype == model.observation_space["CameraSensor"].dtype
    np.testing.assert_array_equal(image, expected)
    np.testing.assert_array_equal(obs["GoalSensor"], demo.observations[1][rows])
    assert actions.shape == (len(rows), 1)
    np.testing.assert_array_equal(actions[:, 0], demo.discrete_actions[rows, 0])
    venv.close()


@pytest.mark.parametrize("channels_last", [False, True], ids=["unity_chw", "unity_hwc"])
def test_channel_last_uint8_images_are_transposed_not_reshaped_without_a_model(grid_demos, channels_last):
    """A signal built from the spaces alone finds the ``uint8_hwc`` layout (as BC does); the
    images were reshaped from channel-first, scrambling the pixels."""
    venv = UnityVecEnv(
        make_scene("GridWorld", seed=0, channels_last=channels_last, **GRID), visual="uint8_hwc"
    )
    settings = parse_reward_signals(gail(demo_path=grid_demos[channels_last]), 0.99)["gail"]
    signal = GAILSignal(venv.observation_space, venv.action_space, settings, "cpu")
    demo = load_demo(grid_demos[channels_last])
    raw = demo.observations[0][transition_rows(demo)]
    hwc = raw if channels_last else np.moveaxis(raw, 1, -1)
    expected = np.clip(np.rint(hwc * 255.0), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(signal.expert.observations["CameraSensor"], expected)
    venv.close()


def test_float_visual_expert_scores_like_the_policy_images(grid_demos):
    """The discriminator gets the expert's images in the policy's [0, 1] range: an expert image
    and the same image from the env give the same GAIL reward."""
    venv = UnityVecEnv(make_scene("GridWorld", seed=0, **GRID), visual="float")
    model = PPO(
        "MultiInputPolicy",
        venv,
        n_steps=8,
        batch_size=8,
        device="cpu",
        reward_signals=gail(demo_path=grid_demos[False]),
    )
    signal = model.signals["gail"]
    obs, actions, _ = expert_of(model)
    demo = load_demo(grid_demos[False])
    rows = transition_rows(demo)
    as_env_gives = venv.spaces.observations([o[rows] for o in demo.observations])
    np.testing.assert_allclose(
        signal.reward(obs, actions, obs), signal.reward(as_env_gives, actions, as_env_gives), rtol=1e-6
    )
    assert float(obs["CameraSensor"].max()) <= 1.0
    venv.close()


# ---------------------------------------------------------------------------------- Dict keys, flatten
def test_dict_observations_given_per_spec_are_keyed_by_spec_not_sorted_order():
    """Equal-shaped observations given in Unity's per-spec order went to gymnasium's sorted keys
    (``aa_second`` got ``zz_first``'s values)."""
    venv = UnityVecEnv(two_vector_env())
    n = 10
    first = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    second = -first - 1.0
    model = PPO(
        "MultiInputPolicy",
        venv,
        n_steps=8,
        batch_size=8,
        device="cpu",
        reward_signals=gail(demonstrations=([first, second], np.zeros(n, np.int64))),
    )
    obs, _, _ = expert_of(model)
    assert list(model.observation_space.spaces) == ["aa_second", "zz_first"]  # gymnasium sorts
    np.testing.assert_array_equal(obs["zz_first"], first)
    np.testing.assert_array_equal(obs["aa_second"], second)
    venv.close()


def test_dict_observations_per_spec_without_a_unity_env_are_refused_not_guessed():
    space = spaces.Dict(
        {
            "zz_first": spaces.Box(-np.inf, np.inf, (4,), np.float32),
            "aa_second": spaces.Box(-np.inf, np.inf, (4,)),
        }
    )
    first = np.ones((5, 4), np.float32)
    settings = parse_reward_signals(gail(demonstrations=([first, -first], np.zeros(5, np.int64))), 0.99)[
        "gail"
    ]
    signal = GAILSignal(space, spaces.Discrete(3), settings, "cpu")
    with pytest.raises(RewardSignalConfigError, match="must be a dict with keys"):
        _ = signal.expert


def test_dict_observations_from_a_demo_file_keep_their_keys(tmp_path):
    env = two_vector_env()
    path = record(
        env, DEFAULT_BEHAVIOR, tmp_path / "two.demo", env.behavior_specs[DEFAULT_BEHAVIOR].action_spec
    )
    venv = UnityVecEnv(two_vector_env())
    model = PPO(
        "MultiInputPolicy", venv, n_steps=8, batch_size=8, device="cpu", reward_signals=gail(demo_path=path)
    )
    obs, _, _ = expert_of(model)
    np.testing.assert_array_equal(obs["aa_second"], -obs["zz_first"] - 1.0)
    venv.close()


@pytest.mark.parametrize("algo", ["PPO", "SAC"])
def test_flatten_obs_expert_is_one_vector_in_spec_order(tmp_path, algo):
    """``flatten_obs=True``: the demo's observations are concatenated as the env does it (this
    failed with a message about the observation space)."""
    action_spec = ActionSpec.create_continuous(2) if algo == "SAC" else ActionSpec.create_discrete((3,))
    env = two_vector_env(action_spec)
    path = record(env, DEFAULT_BEHAVIOR, tmp_path / "flat.demo", action_spec)
    venv = UnityVecEnv(two_vector_env(action_spec), flatten_obs=True)
    cls, kwargs = (
        (SAC, {"learning_starts": 8, "batch_size": 8})
        if algo == "SAC"
        else (PPO, {"n_steps": 8, "batch_size": 8})
    )
    model = cls("MlpPolicy", venv, device="cpu", reward_signals=gail(demo_path=path), **kwargs)
    obs, _, dones = expert_of(model)
    demo = load_demo(path)
    rows = transition_rows(demo)
    assert obs.shape == (len(rows), 8)
    np.testing.assert_array_equal(
        obs, np.concatenate([demo.observations[0][rows], demo.observations[1][rows]], 1)
    )
    assert dones.sum() > 0  # episode ends reach the discriminator's done input
    venv.close()


def test_expert_batches_are_normalised_like_the_policy_batches_behind_vec_normalize(tmp_path):
    """Behind ``VecNormalize`` the rollout holds normalised observations; the expert's are
    normalised with the statistics of the moment, as behavioral cloning does (they stayed raw,
    so the discriminator told them apart by scale alone)."""
    from stable_baselines3.common.vec_env import VecNormalize

    env = two_vector_env()
    path = record(
        env, DEFAULT_BEHAVIOR, tmp_path / "norm.demo", env.behavior_specs[DEFAULT_BEHAVIOR].action_spec
    )
    venv = VecNormalize(UnityVecEnv(two_vector_env(), flatten_obs=True), norm_reward=False)
    venv.obs_rms.mean[:] = 2.0
    venv.obs_rms.var[:] = 9.0
    model = PPO("MlpPolicy", venv, n_steps=8, batch_size=8, device="cpu", reward_signals=gail(demo_path=path))
    signal = model.signals["gail"]
    normalised = venv.normalize_obs(signal.expert.observations)
    batch = signal.sample_expert(64).observations.numpy()
    distance = np.abs(batch[:, None, :] - normalised[None, :, :]).max(axis=2).min(axis=1)
    assert distance.max() < 1e-5, "every expert row is a normalised demo row"
    venv.close()


# ---------------------------------------------------------------------------------- actions
@pytest.mark.parametrize(
    "action_spec",
    [
        ActionSpec.create_continuous(2),
        ActionSpec.create_discrete((3,)),
        ActionSpec.create_discrete((3, 2)),
        ActionSpec(2, (3, 2)),
    ],
    ids=["continuous", "discrete", "multi_discrete", "hybrid_box"],
)
def test_expert_actions_are_in_the_action_space(tmp_path, action_spec):
    env = two_vector_env(action_spec)
    path = record(env, DEFAULT_BEHAVIOR, tmp_path / "acts.demo", action_spec)
    venv = UnityVecEnv(two_vector_env(action_spec))
    model = PPO(
        "MultiInputPolicy",
        venv,
        n_steps=8,
        batch_size=8,
        device="cpu",
        reward_signals=gail(demo_path=path, use_actions=True),
    )
    _, actions, _ = expert_of(model)
    demo = load_demo(path)
    rows = transition_rows(demo)
    cont, disc = demo.continuous_actions[rows], demo.discrete_actions[rows]
    if action_spec.continuous_size and action_spec.discrete_size:  # UnityVecEnv's hybrid="box"
        expected = np.concatenate([cont, discrete_to_box(disc, action_spec.discrete_branches)], axis=1)
    else:
        expected = cont if action_spec.continuous_size else disc
    np.testing.assert_array_equal(actions, expected)
    signal = model.signals["gail"]
    batch = signal.sample_expert(4)
    assert batch.actions.shape[1] == (
        action_spec.continuous_size + action_spec.discrete_size
        if action_spec.continuous_size
        else action_spec.discrete_size
    )
    signal.update(batch)  # the discriminator takes them (flattened with the policy's action space)
    venv.close()
