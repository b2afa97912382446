"""Visual encoders (``unity_sb3.networks.extractors``): shapes, errors, SB3 algorithms, POCA, ONNX export, GridWorld."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from mlagents_envs.base_env import (
    ActionSpec,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.vec_env import DummyVecEnv

from unity_sb3.networks.extractors import (
    ENCODERS,
    MIN_RESOLUTION,
    UnityCnn,
    UnityMultiInputExtractor,
    encoders_for,
)

NONE, TE = DimensionProperty.NONE, DimensionProperty.TRANSLATIONAL_EQUIVARIANCE
KWARGS = dict(encoder="simple", cnn_output_dim=16)


def image_space(side: int, channels: int = 3, dtype=np.uint8) -> spaces.Box:
    high = 255 if dtype == np.uint8 else 1.0
    return spaces.Box(0, high, (channels, side, side), dtype)


def batch(space: spaces.Space, n: int = 4, seed: int = 0):
    space.seed(seed)
    samples = [space.sample() for _ in range(n)]
    if isinstance(space, spaces.Dict):
        return {k: th.as_tensor(np.stack([s[k] for s in samples])) for k in space.spaces}
    return th.as_tensor(np.stack(samples))


# ------------------------------------------------------------------------------- UnityCnn


@pytest.mark.parametrize("encoder", ENCODERS)
@pytest.mark.parametrize("extra", [0, 19], ids=["min_side", "larger"])
def test_unity_cnn_shapes_at_min_and_larger_sizes(encoder: str, extra: int) -> None:
    side = MIN_RESOLUTION[encoder] + extra
    space = spaces.Box(0, 255, (3, side, side + 3), np.uint8)  # non-square too
    cnn = UnityCnn(space, features_dim=24, encoder=encoder)
    out = cnn(batch(space, n=5))
    assert out.shape == (5, 24) and out.dtype == th.float32
    assert cnn.features_dim == 24 and th.isfinite(out).all()


@pytest.mark.parametrize("encoder", ENCODERS)
def test_uint8_is_scaled_like_sb3_and_float_is_used_as_is(encoder: str) -> None:
    side = max(MIN_RESOLUTION[encoder], 8)
    cnn = UnityCnn(image_space(side), features_dim=8, encoder=encoder)
    pixels = batch(image_space(side))
    scaled = pixels.float() / 255.0
    np.testing.assert_allclose(cnn(pixels).detach(), cnn(scaled).detach(), rtol=1e-5, atol=1e-6)
    # the same numbers as floats 0..255 are not rescaled: a float image is taken as it is
    assert not th.allclose(cnn(pixels.float()), cnn(scaled))


@pytest.mark.parametrize("encoder", [e for e in ENCODERS if MIN_RESOLUTION[e] > 1])
def test_too_small_image_names_an_encoder_that_fits(encoder: str) -> None:
    side = MIN_RESOLUTION[encoder] - 1
    fits = encoders_for(side, side)
    assert fits and all(MIN_RESOLUTION[f] <= side for f in fits) and encoder not in fits
    with pytest.raises(ValueError, match=f"smaller than the .*{encoder!r}.*Use encoder={fits[0]!r}") as err:
        UnityCnn(image_space(side), encoder=encoder)
    assert f"{side}x{side}" in str(err.value)
    UnityCnn(image_space(side), encoder=fits[0])  # the suggestion works


def test_simple_on_16px_suggests_resnet_and_channel_last_gets_a_hint() -> None:
    with pytest.raises(
        ValueError, match="Use encoder='resnet' \\(also possible: 'match3', 'fully_connected'\\)"
    ):
        UnityCnn(image_space(16), encoder="simple")
    with pytest.raises(ValueError, match="looks channel-last"):
        UnityCnn(spaces.Box(0, 255, (32, 32, 3), np.uint8), encoder="simple")


@pytest.mark.parametrize(
    ("space", "kwargs", "match"),
    [
        (spaces.Box(-1, 1, (8,), np.float32), {}, "3-D Box"),
        (spaces.Discrete(3), {}, "3-D Box"),
        (image_space(32), {"encoder": "nature"}, "Unknown visual encoder 'nature'"),
        (image_space(32), {"features_dim": 0}, "features_dim must be a positive integer"),
    ],
)
def test_unity_cnn_bad_arguments(space, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        UnityCnn(space, **kwargs)


@pytest.mark.parametrize("encoder", ENCODERS)
def test_gradients_reach_every_parameter(encoder: str) -> None:
    space = spaces.Dict(
        {"camera": image_space(max(MIN_RESOLUTION[encoder], 6)), "goal": spaces.Box(0, 1, (2,))}
    )
    extractor = UnityMultiInputExtractor(space, encoder=encoder, cnn_output_dim=8)
    obs = batch(space, n=6)
    obs["camera"] = obs["camera"].float() / 255.0
    obs["goal"].requires_grad_(True)
    extractor(obs).square().sum().backward()
    for name, param in extractor.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert obs["goal"].grad.abs().sum() > 0


# ------------------------------------------------------------------------------- UnityMultiInputExtractor


def test_dict_combines_images_vectors_and_buffers_in_key_order() -> None:
    space = spaces.Dict(
        {
            "camera": image_space(24),
            "grid": spaces.Box(0, 1, (6, 20, 20), np.float32),  # a float grid sensor is an image too
            "rays": spaces.Box(-1, 1, (7,), np.float32),
            "buffer": spaces.Box(-1, 1, (4, 3), np.float32),
        }
    )
    with pytest.warns(UserWarning, match="pads and flattens"):  # attention is the default for buffers
        extractor = UnityMultiInputExtractor(space, encoder="simple", cnn_output_dim=10, entities="flatten")
    assert extractor.features_dim == 12 + 10 + 10 + 7
    # gymnasium sorts Dict keys; SB3 hands observations over in that order
    kinds = {key: type(m).__name__ for key, m in extractor.extractors.items()}
    assert list(kinds) == ["buffer", "camera", "grid", "rays"]
    assert kinds == {"buffer": "Flatten", "camera": "UnityCnn", "grid": "UnityCnn", "rays": "Flatten"}
    obs = batch(space, n=3)
    with th.no_grad():
        out = extractor(obs)
        camera, grid = (
            extractor.extractors["camera"](obs["camera"]),
            extractor.extractors["grid"](obs["grid"]),
        )
    assert out.shape == (3, 39)
    np.testing.assert_allclose(out[:, :12], obs["buffer"].reshape(3, 12))
    np.testing.assert_allclose(out[:, 12:22], camera)
    np.testing.assert_allclose(out[:, 22:32], grid)
    np.testing.assert_allclose(out[:, 32:], obs["rays"])


def test_dict_error_names_the_key_of_the_small_image() -> None:
    space = spaces.Dict({"camera": image_space(32), "board": spaces.Box(0, 1, (8, 8, 8), np.float32)})
    with pytest.raises(ValueError, match=r"Observation 'board'.*Use encoder='match3'"):
        UnityMultiInputExtractor(space, encoder="simple")
    assert UnityMultiInputExtractor(space, encoder="match3", cnn_output_dim=4).features_dim == 8


@pytest.mark.parametrize(
    ("space", "dim"),
    [(spaces.Box(-1, 1, (5,), np.float32), 5), (image_space(20), 16)],
    ids=["vector", "image"],
)
def test_single_box_space(space, dim) -> None:
    extractor = UnityMultiInputExtractor(space, **KWARGS)
    assert extractor.features_dim == dim and extractor(batch(space)).shape == (4, dim)


def test_dict_bad_arguments() -> None:
    with pytest.raises(ValueError, match="Dict or Box"):
        UnityMultiInputExtractor(spaces.Discrete(4))
    with pytest.raises(ValueError, match="Unknown visual encoder 'Simple'"):
        UnityMultiInputExtractor(spaces.Dict({"a": spaces.Box(0, 1, (2,))}), encoder="Simple")


def test_goal_signal_conditions_the_features() -> None:
    space = spaces.Dict({"CameraSensor": image_space(20), "GoalSensor": spaces.Box(0, 1, (2,), np.float32)})
    extractor = UnityMultiInputExtractor(space, encoder="simple", cnn_output_dim=12, goal_keys=["GoalSensor"])
    assert extractor.features_dim == 128 and extractor.goal_keys == ["GoalSensor"]
    assert list(extractor.extractors) == ["CameraSensor"]  # the goal is not concatenated
    obs = batch(space, n=6)
    green = {**obs, "GoalSensor": th.tensor([[1.0, 0.0]]).repeat(6, 1)}
    red = {**obs, "GoalSensor": th.tensor([[0.0, 1.0]]).repeat(6, 1)}
    assert extractor(green).shape == (6, 128)
    assert not th.allclose(extractor(green), extractor(red))
    # a one-hot goal picks one dense layer: relu(features @ W_green + b(green))
    with th.no_grad():
        features = extractor.extractors["CameraSensor"](obs["CameraSensor"])
        layer = extractor.conditioning
        expected = th.relu(features @ layer.weight[0].reshape(12, 128) + layer.bias(green["GoalSensor"]))
        np.testing.assert_allclose(extractor(green), expected, rtol=1e-5, atol=1e-6)
    extractor(green).sum().backward()
    weight = extractor.conditioning.weight
    assert weight.grad[0].abs().sum() > 0 and weight.grad[1].abs().sum() == 0  # only the green goal's layer


def test_image_goal_conditions_through_its_own_encoder() -> None:
    """ML-Agents conditions on a goal image's encoding (Unity's ``test_var_len_obs_and_goal_*`` with a camera goal)."""
    space = spaces.Dict({"goal_camera": image_space(20), "ray": spaces.Box(-1, 1, (3,), np.float32)})
    extractor = UnityMultiInputExtractor(
        space, cnn_output_dim=12, goal_keys=["goal_camera"], goal_hidden_dim=8
    )
    assert list(extractor.extractors) == ["ray"] and isinstance(
        extractor.goal_encoders["goal_camera"], UnityCnn
    )
    assert extractor.conditioning.goal_features == 12 and extractor.features_dim == 8
    obs = batch(space, n=4)
    dark, bright = th.zeros_like(obs["goal_camera"]), th.ones_like(obs["goal_camera"])
    assert not th.allclose(extractor({**obs, "goal_camera": dark}), extractor({**obs, "goal_camera": bright}))
    extractor({**obs, "goal_camera": bright}).sum().backward()
    assert all(p.grad is not None for p in extractor.goal_encoders.parameters())


@pytest.mark.parametrize("goal", ["vector", "image"])
def test_goal_features_encode_the_goal_as_an_observation_too(goal: str) -> None:
    """``goal_features=True`` (ML-Agents' hyper): the goal's encoding is a feature and conditions them."""
    goal_space = spaces.Box(-1, 1, (2,), np.float32) if goal == "vector" else image_space(20)
    space = spaces.Dict({"goal": goal_space, "ray": spaces.Box(-1, 1, (3,), np.float32)})
    extractor = UnityMultiInputExtractor(
        space, cnn_output_dim=12, goal_keys=["goal"], goal_hidden_dim=8, goal_features=True
    )
    goal_dim = 2 if goal == "vector" else 12
    assert list(extractor.extractors) == ["goal", "ray"] and extractor.goal_encoders is None
    assert (
        extractor.conditioning.in_features == goal_dim + 3
        and extractor.conditioning.goal_features == goal_dim
    )
    obs = batch(space, n=5)
    with th.no_grad():
        parts = [extractor.extractors[k](obs[k]).float() for k in ("goal", "ray")]
        expected = extractor.conditioning(th.cat(parts, dim=1), parts[0])
    th.testing.assert_close(extractor(obs), expected)
    # a goal alone is allowed then: it conditions its own encoding
    alone = UnityMultiInputExtractor(
        spaces.Dict({"goal": goal_space}), goal_keys=["goal"], goal_features=True
    )
    assert alone(batch(spaces.Dict({"goal": goal_space}), n=2)).shape == (2, 128)


@pytest.mark.parametrize(
    ("goal_keys", "match"),
    [
        (["Goal"], "'Goal' is not an observation key"),
        (["Buffer"], "'Buffer' is a variable-length .* goal signals must be vectors or images"),
        (["GoalSensor", "Other"], "nothing is left"),
    ],
)
def test_bad_goal_keys(goal_keys, match) -> None:
    space = spaces.Dict(
        {
            "CameraSensor": image_space(20),
            "GoalSensor": spaces.Box(0, 1, (2,), np.float32),
            "Buffer": spaces.Box(-1, 1, (4, 3), np.float32),
        }
    )
    if "Other" in goal_keys:
        space = spaces.Dict({"GoalSensor": spaces.Box(0, 1, (2,)), "Other": spaces.Box(0, 1, (3,))})
    with pytest.raises(ValueError, match=match):
        UnityMultiInputExtractor(space, goal_keys=goal_keys)


# ------------------------------------------------------------------------------- with SB3 and POCA


class DictEnv(gym.Env):
    """A 20x20 uint8 camera + a goal vector; reward 1 for action 1 when goal[0] > 0.5. With masks."""

    def __init__(self, continuous: bool = False) -> None:
        self.observation_space = spaces.Dict(
            {"camera": image_space(20), "goal": spaces.Box(0, 1, (2,), np.float32)}
        )
        self.action_space = spaces.Box(-1, 1, (2,), np.float32) if continuous else spaces.Discrete(3)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return {
            "camera": self.np_random.integers(0, 256, (3, 20, 20), dtype=np.uint8),
            "goal": self.np_random.random(2).astype(np.float32),
        }

    def step(self, action):
        self.t += 1
        return self._obs(), float(np.asarray(action).sum() > 0.5), False, self.t >= 8, {}

    def action_masks(self) -> np.ndarray:
        return np.array([True, True, False])


@pytest.mark.parametrize(
    ("cls", "policy", "kwargs"),
    [
        (PPO, "MultiInputPolicy", dict(n_steps=16, batch_size=16)),
        (MaskablePPO, "MultiInputPolicy", dict(n_steps=16, batch_size=16)),
        (RecurrentPPO, "MultiInputLstmPolicy", dict(n_steps=16, batch_size=16)),
        (SAC, "MultiInputPolicy", dict(buffer_size=64, learning_starts=8, batch_size=8)),
    ],
    ids=["ppo", "maskable_ppo", "recurrent_ppo", "sac"],
)
def test_sb3_algorithms_train_save_and_load(tmp_path, cls, policy, kwargs) -> None:
    env = DummyVecEnv([lambda: DictEnv(continuous=cls is SAC)] * 2)
    policy_kwargs = dict(
        net_arch=[16], features_extractor_class=UnityMultiInputExtractor, features_extractor_kwargs=KWARGS
    )
    model = cls(policy, env, seed=0, device="cpu", policy_kwargs=policy_kwargs, **kwargs)
    extractor = model.policy.actor.features_extractor if cls is SAC else model.policy.features_extractor
    assert isinstance(extractor, UnityMultiInputExtractor)
    before = [p.detach().clone() for p in extractor.parameters()]
    model.learn(48)
    assert any(not th.equal(a, b) for a, b in zip(before, extractor.parameters())), (
        "the encoder did not train"
    )

    # the policy scales uint8 images once: its features equal the extractor's on raw pixels
    obs = env.reset()
    obs_tensor, _ = model.policy.obs_to_tensor(obs)
    with th.no_grad():
        via_policy = model.policy.extract_features(obs_tensor, extractor)
        direct = extractor({k: th.as_tensor(v) for k, v in obs.items()})
    np.testing.assert_allclose(via_policy, direct, rtol=1e-5, atol=1e-6)

    model.save(tmp_path / "model")
    loaded = cls.load(tmp_path / "model", device="cpu")
    np.testing.assert_array_equal(
        model.predict(obs, deterministic=True)[0], loaded.predict(obs, deterministic=True)[0]
    )


def test_poca_actor_and_critic_use_the_extractor() -> None:
    import unity_sb3

    env = unity_sb3.UnityVecEnv("GridWorld", open_kwargs={"num_agents": 3, "seed": 0})
    try:
        model = unity_sb3.POCA(
            "MultiInputPolicy",
            env,
            n_steps=8,
            batch_size=12,
            n_epochs=1,
            seed=0,
            policy_kwargs=dict(
                net_arch=[16],
                critic_embed_dim=16,
                features_extractor_class=UnityMultiInputExtractor,
                features_extractor_kwargs=KWARGS,
            ),
        )
        critic = model.policy.critic_features_extractor
        assert isinstance(model.policy.features_extractor, UnityMultiInputExtractor)
        assert isinstance(critic, UnityMultiInputExtractor) and critic is not model.policy.features_extractor
        before = [p.detach().clone() for p in critic.parameters()]
        model.learn(48)
        assert any(not th.equal(a, b) for a, b in zip(before, critic.parameters()))
    finally:
        env.close()


# ------------------------------------------------------------------------------- ONNX export


@pytest.mark.parametrize(
    ("encoder", "goal_keys", "goal_features"),
    [
        *((e, (), False) for e in ENCODERS),
        ("simple", ("GoalSensor",), False),
        ("simple", ("CameraSensor",), False),
        ("simple", ("GoalSensor",), True),
    ],
    ids=[*ENCODERS, "simple_goal_conditioned", "simple_image_goal_conditioned", "simple_goal_features"],
)
def test_onnx_export_of_maskable_ppo_matches_predict(
    tmp_path, encoder: str, goal_keys, goal_features
) -> None:
    pytest.importorskip("onnxruntime")
    from unity_sb3.export import predict_unity_actions, run_onnx, to_onnx
    from unity_sb3.spaces import BehaviorSpaces

    # GridWorld's layout: a 3x32x32 camera (36x36 for nature_cnn) (NCHW, [0, 1]), a goal one-hot, one branch of 5, masks
    side = max(32, MIN_RESOLUTION[encoder])
    camera = ObservationSpec((3, side, side), (NONE, TE, TE), ObservationType.DEFAULT, "CameraSensor")
    goal = ObservationSpec((2,), (NONE,), ObservationType.GOAL_SIGNAL, "GoalSensor")
    spec = BehaviorSpec([camera, goal], ActionSpec.create_discrete((5,)))
    behavior = BehaviorSpaces(spec)

    class SpaceEnv(gym.Env):
        observation_space, action_space = behavior.observation_space, behavior.action_space

        def reset(self, *, seed=None, options=None):
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, False, False, {}

        def action_masks(self):
            return np.ones(5, bool)

    model = MaskablePPO(
        "MultiInputPolicy",
        SpaceEnv(),
        n_steps=8,
        batch_size=8,
        seed=0,
        device="cpu",
        policy_kwargs=dict(
            net_arch=[16],
            features_extractor_class=UnityMultiInputExtractor,
            features_extractor_kwargs=dict(
                encoder=encoder, cnn_output_dim=16, goal_keys=goal_keys, goal_features=goal_features
            ),
        ),
    )
    with th.no_grad():  # decisive logits, so that float rounding cannot flip an argmax
        model.policy.action_net.weight.mul_(30.0)
    path = to_onnx(model, tmp_path / "gridworld.onnx", behavior_spec=spec)
    rng = np.random.default_rng(1)
    n = 64
    obs = [
        rng.random((n, 3, side, side), dtype=np.float32),
        np.eye(2, dtype=np.float32)[rng.integers(0, 2, n)],
    ]
    masks = rng.random((n, 5)) < 0.6
    masks[np.arange(n), rng.integers(0, 5, n)] = True
    expected, _ = predict_unity_actions(model, obs, behavior_spec=spec, action_masks=masks)
    got = run_onnx(path, obs, action_masks=masks)["deterministic_discrete_actions"]
    np.testing.assert_array_equal(got.astype(np.int32), expected.discrete)
    assert len(np.unique(got)) > 1, "the comparison should cover several actions"
    assert np.all(masks[np.arange(n), got[:, 0]]), "the exported graph chose a masked action"


# ------------------------------------------------------------------------------- configuration


def test_policy_kwargs_strings_can_name_the_extractors() -> None:
    from unity_sb3.config.model_args import parse_policy_kwargs

    kwargs = parse_policy_kwargs(
        "dict(features_extractor_class=UnityMultiInputExtractor, features_extractor_kwargs=dict(encoder='resnet'))"
    )
    assert kwargs["features_extractor_class"] is UnityMultiInputExtractor
    assert (
        parse_policy_kwargs("dict(features_extractor_class=UnityCnn)")["features_extractor_class"] is UnityCnn
    )


@pytest.mark.parametrize("encoder", ENCODERS)
def test_mlagents_vis_encode_type_maps_to_the_encoder(encoder: str) -> None:
    from pathlib import Path

    import yaml

    from unity_sb3.config.mlagents import convert_mlagents_config
    from unity_sb3.config.model_args import parse_policy_kwargs

    config = yaml.safe_load(
        (Path(__file__).parent / "data" / "mlagents_configs" / "3DBall_ppo.yaml").read_text()
    )
    config["behaviors"]["3DBall"]["network_settings"]["vis_encode_type"] = encoder
    units = config["behaviors"]["3DBall"]["network_settings"]["hidden_units"]
    run = convert_mlagents_config(config)
    kwargs = parse_policy_kwargs(run.hyperparams["policy_kwargs"])
    assert kwargs["features_extractor_class"] is UnityMultiInputExtractor
    # ML-Agents' visual encoders end in a dense layer of hidden_units
    assert kwargs["features_extractor_kwargs"] == {"encoder": encoder, "cnn_output_dim": units}
    assert "network_settings.vis_encode_type" not in {row.source for row in run.unhonored}


@pytest.mark.parametrize("algo", ["maskable_ppo", "ppo"])
def test_gridworld_hyperparams_use_the_extractor_at_32_pixels_and_train(algo: str) -> None:
    # the fast check that the shipped GridWorld settings build and train; learning: the slow test below
    import unity_sb3
    from unity_sb3.algorithms.registry import algorithm_class
    from unity_sb3.config.hyperparams import load_hyperparams
    from unity_sb3.config.model_args import prepare_model_args

    params = load_hyperparams(algo, "GridWorld")
    assert "image_size" not in (params.get("open_kwargs") or {})  # the scene's own 32x32
    params = {
        k: v for k, v in params.items() if k not in ("n_timesteps", "policy", "normalize", "open_kwargs")
    }
    env = unity_sb3.UnityVecEnv("GridWorld", open_kwargs={"seed": 0})
    try:
        assert env.observation_space["CameraSensor"].shape == (3, 32, 32)
        policy, kwargs = prepare_model_args(
            algo, "MultiInputPolicy", {**params, "n_steps": 8, "batch_size": 36}, env
        )
        model = algorithm_class(algo)(policy, env, seed=0, device="cpu", **kwargs)
        extractor = model.policy.features_extractor
        assert isinstance(extractor, UnityMultiInputExtractor) and extractor.goal_keys == ["GoalSensor"]
        before = [p.detach().clone() for p in extractor.parameters()]
        model.learn(144)
        assert all(not th.equal(a, b) for a, b in zip(before, extractor.parameters()))
    finally:
        env.close()


def _mean_episode_reward(env, act, episodes: int) -> float:
    """Mean reward of the first ``episodes`` episodes that finish (all slots stepped together)."""
    obs = env.reset()
    totals, running = [], np.zeros(env.num_envs)
    while len(totals) < episodes:
        obs, rewards, dones, _ = env.step(act(obs))
        running += rewards
        totals += list(running[dones])
        running[dones] = 0.0
    return float(np.mean(totals[:episodes]))


@pytest.mark.slow
def test_maskable_ppo_learns_default_gridworld_with_the_simple_encoder() -> None:
    # default scene: 3x32x32 camera + goal signal, 5x5 room, action masks; the shipped settings.
    # 80k steps: 1.5 to 5 minutes here (reward >= 0.8 after about 50k steps when measured)
    import unity_sb3

    env = unity_sb3.UnityVecEnv("GridWorld", open_kwargs={"seed": 0})
    try:
        rng = np.random.default_rng(0)
        random = _mean_episode_reward(
            env, lambda obs: np.array([rng.choice(np.flatnonzero(m)) for m in env.action_masks()]), 90
        )
        model = MaskablePPO(
            "MultiInputPolicy",
            env,
            n_steps=128,
            batch_size=256,
            n_epochs=4,
            learning_rate=1e-3,
            gamma=0.9,
            seed=0,
            device="cpu",
            policy_kwargs=dict(
                net_arch=[128],
                features_extractor_class=UnityMultiInputExtractor,
                features_extractor_kwargs=dict(encoder="simple", goal_keys=["GoalSensor"]),
            ),
        )
        model.learn(80_000)
        trained = _mean_episode_reward(
            env, lambda obs: model.predict(obs, deterministic=True, action_masks=env.action_masks())[0], 90
        )
    finally:
        env.close()
    # -0.01 per step, +1 at the goal the signal names, -1 at the other, 100 steps at most
    assert random < 0.0 and trained > 0.5 and trained > random + 0.6, (random, trained)


def test_hidden_layers_add_ml_agents_body_after_the_concatenation() -> None:
    space = spaces.Dict(
        {"a": spaces.Box(-1, 1, (4,), np.float32), "goal": spaces.Box(0, 1, (2,), np.float32)}
    )
    extractor = UnityMultiInputExtractor(space, goal_keys=["goal"], goal_hidden_dim=8, hidden_layers=[16, 6])
    assert extractor.features_dim == 6
    dense = [m for m in extractor.body if isinstance(m, th.nn.Linear)]
    assert [(d.in_features, d.out_features) for d in dense] == [(8, 16), (16, 6)]  # after the goal layer
    out = extractor({"a": th.zeros(3, 4), "goal": th.tensor([[1.0, 0.0]] * 3)})
    assert out.shape == (3, 6)
    assert UnityMultiInputExtractor(space).body is None
    with pytest.raises(ValueError, match="hidden_layers must be positive integers"):
        UnityMultiInputExtractor(space, hidden_layers=[0])
