"""ONNX export for Unity: the exported graph, run with onnxruntime, against ``model.predict``.

Every comparison goes through :func:`unity_sb3.export.predict_unity_actions`, which uses
``BehaviorSpaces`` (the wrappers' conversions), ``VecNormalize.normalize_obs`` and
``model.predict(deterministic=True)``, not the graph's own code. Models are tiny and untrained;
action heads are scaled up where that makes clipping, masking and bins matter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import A2C, DQN, PPO, SAC, TD3
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from unity_sb3.networks.extractors import UnityMultiInputExtractor
from unity_sb3.spaces import BehaviorSpaces

from mlagents_envs.base_env import (  # isort: skip
    ActionSpec,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)
from unity_sb3.export import (  # isort: skip
    DEFAULT_OPSET,
    check_onnx,
    infer_behavior_spec,
    inspect_onnx,
    predict_unity_actions,
    run_onnx,
    to_onnx,
)

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

N = 128  # observations per comparison
SMALL = dict(net_arch=[16])
NONE = DimensionProperty.NONE
TE = DimensionProperty.TRANSLATIONAL_EQUIVARIANCE


def vector(size: int, name: str = "") -> ObservationSpec:
    return ObservationSpec((size,), (NONE,), ObservationType.DEFAULT, name)


def visual_chw(c: int = 3, h: int = 36, w: int = 36, name: str = "") -> ObservationSpec:
    return ObservationSpec((c, h, w), (NONE, TE, TE), ObservationType.DEFAULT, name)


def visual_hwc(h: int = 36, w: int = 36, c: int = 3, name: str = "") -> ObservationSpec:
    return ObservationSpec((h, w, c), (TE, TE, NONE), ObservationType.DEFAULT, name)


def buffer(n: int = 4, d: int = 3, name: str = "") -> ObservationSpec:
    return ObservationSpec((n, d), (DimensionProperty.VARIABLE_SIZE, NONE), ObservationType.DEFAULT, name)


class SpaceEnv(gym.Env):
    """An env that only carries spaces: models are built on it, never trained."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}

    def action_masks(self) -> np.ndarray:
        return np.ones(
            int(np.sum(self.action_space.nvec))
            if hasattr(self.action_space, "nvec")
            else self.action_space.n,
            bool,
        )


def make_model(
    cls: type,
    spec: BehaviorSpec,
    policy: str = "MlpPolicy",
    *,
    visual: str = "uint8",
    flatten=False,
    **kwargs,
):
    behavior = BehaviorSpaces(spec, visual=visual, flatten=flatten, hybrid="box")  # type: ignore[arg-type]
    env = SpaceEnv(behavior.observation_space, behavior.action_space)
    kwargs.setdefault("policy_kwargs", {})
    if cls not in (DQN,):
        kwargs["policy_kwargs"].setdefault("net_arch", [16])
    if cls in (PPO, A2C, MaskablePPO, RecurrentPPO):
        kwargs.setdefault("n_steps", 8)
    if cls in (PPO, MaskablePPO, RecurrentPPO):
        kwargs.setdefault("batch_size", 8)
    if cls in (SAC, TD3, DQN):
        kwargs.setdefault("buffer_size", 16)
    return cls(policy, env, device="cpu", seed=0, **kwargs)


def unity_observations(spec: BehaviorSpec, n: int = N, seed: int = 1) -> list[np.ndarray]:
    """Random observations in the ONNX layout: vectors N(0, 2), images NCHW in [0, 1]."""
    rng = np.random.default_rng(seed)
    out = []
    for obs_spec in spec.observation_specs:
        shape = tuple(obs_spec.shape)
        if len(shape) == 3:
            chw = shape if obs_spec.dimension_property[0] == NONE else (shape[2], shape[0], shape[1])
            out.append(rng.random((n, *chw), dtype=np.float32))
        else:
            out.append((2.0 * rng.standard_normal((n, *shape))).astype(np.float32))
    return out


def random_masks(branches: tuple[int, ...], n: int = N, seed: int = 2) -> np.ndarray:
    """Flat masks (True = allowed) with at least one allowed action per branch."""
    rng = np.random.default_rng(seed)
    parts = []
    for size in branches:
        mask = rng.random((n, size)) < 0.5
        mask[np.arange(n), rng.integers(0, size, n)] = True
        parts.append(mask)
    return np.concatenate(parts, axis=1)


def scale_head(model: Any, factor: float) -> None:
    """Make untrained action heads decisive (logits far apart, means beyond [-1, 1])."""
    policy = model.policy
    head = (
        getattr(policy, "action_net", None)
        or getattr(getattr(policy, "actor", None), "mu", None)
        or getattr(getattr(policy, "q_net", None), "q_net", None)
    )
    with th.no_grad():
        for p in head.parameters():
            p.mul_(factor)


def assert_same_actions(model, path: Path, spec: BehaviorSpec, *, masks=None, vec_normalize=None, obs=None):
    obs = unity_observations(spec) if obs is None else obs
    expected, _ = predict_unity_actions(
        model, obs, behavior_spec=spec, action_masks=masks, vec_normalize=vec_normalize
    )
    got = run_onnx(path, obs, action_masks=masks)
    if spec.action_spec.continuous_size:
        np.testing.assert_allclose(got["deterministic_continuous_actions"], expected.continuous, atol=2e-5)
        np.testing.assert_array_equal(got["continuous_actions"], got["deterministic_continuous_actions"])
        assert np.all(np.abs(got["continuous_actions"]) <= 1.0)
    if spec.action_spec.discrete_size:
        disc = got["deterministic_discrete_actions"]
        assert disc.dtype == np.int64 and disc.shape == (len(obs[0]), spec.action_spec.discrete_size)
        np.testing.assert_array_equal(disc.astype(np.int32), expected.discrete)
        np.testing.assert_array_equal(got["discrete_actions"], disc)
    return got, expected


def export(model, tmp_path: Path, spec: BehaviorSpec | None, name: str = "policy.onnx", **kwargs) -> Path:
    return to_onnx(model, tmp_path / name, behavior_spec=spec, **kwargs)


CONTINUOUS = BehaviorSpec([vector(6)], ActionSpec(3, ()))


# ------------------------------------------------------------------------------- continuous


@pytest.mark.parametrize("cls", [PPO, A2C, SAC, TD3])
def test_continuous_actions_match_predict(tmp_path, cls):
    model = make_model(cls, CONTINUOUS)
    scale_head(model, 300.0 if cls in (PPO, A2C) else 5.0)  # PPO/A2C means beyond [-1, 1]: clipped
    path = export(model, tmp_path, CONTINUOUS)
    got, _ = assert_same_actions(model, path, CONTINUOUS)
    if cls in (PPO, A2C):
        assert np.any(np.abs(got["continuous_actions"]) == 1.0), "the test should exercise the clipping"
    assert check_onnx(path, CONTINUOUS) == []


def test_box_bounds_are_rescaled_then_clipped_for_unity(tmp_path):
    # a TD3 actor trained on Box(-2, 2): predict rescales tanh to [-2, 2]; the wrapper clips to [-1, 1]
    env = SpaceEnv(spaces.Box(-np.inf, np.inf, (6,), np.float32), spaces.Box(-2.0, 2.0, (3,), np.float32))
    model = TD3("MlpPolicy", env, device="cpu", seed=0, buffer_size=16, policy_kwargs=SMALL)
    scale_head(model, 5.0)
    path = export(model, tmp_path, CONTINUOUS)
    obs = unity_observations(CONTINUOUS)
    got = run_onnx(path, obs)["continuous_actions"]
    raw, _ = model.predict(obs[0], deterministic=True)
    assert np.any(np.abs(raw) > 1.0)
    np.testing.assert_allclose(got, np.clip(raw, -1, 1), atol=2e-5)


def test_gsde_squashed_ppo(tmp_path):
    model = make_model(PPO, CONTINUOUS, use_sde=True, policy_kwargs=dict(net_arch=[16], squash_output=True))
    scale_head(model, 20.0)
    assert_same_actions(model, export(model, tmp_path, CONTINUOUS), CONTINUOUS)


# ------------------------------------------------------------------------------- discrete and masks


@pytest.mark.parametrize("branches", [(5,), (3, 2, 4)])
def test_maskable_ppo_applies_masks_like_predict(tmp_path, branches):
    spec = BehaviorSpec([vector(5)], ActionSpec(0, branches))
    model = make_model(MaskablePPO, spec)
    scale_head(model, 30.0)
    path = export(model, tmp_path, spec)
    masks = random_masks(branches)
    got, _ = assert_same_actions(model, path, spec, masks=masks)
    # every chosen action is allowed, and masks changed some choices
    offsets = np.cumsum((0, *branches[:-1]))
    chosen = got["discrete_actions"].astype(int) + offsets
    assert np.all(np.take_along_axis(masks, chosen, axis=1))
    unmasked = run_onnx(path, unity_observations(spec))["discrete_actions"]
    assert np.any(unmasked != got["discrete_actions"])
    assert check_onnx(path, spec) == []


@pytest.mark.parametrize("cls", [PPO, A2C, DQN])
def test_discrete_policies_without_masks(tmp_path, cls):
    spec = BehaviorSpec([vector(5)], ActionSpec(0, (4,)))
    model = make_model(cls, spec, **({"policy_kwargs": dict(net_arch=[16])} if cls is DQN else {}))
    scale_head(model, 30.0)
    path = export(model, tmp_path, spec)
    assert_same_actions(model, path, spec)
    # masks still apply in the exported graph: a fully masked-but-one branch picks that action
    masks = np.zeros((N, 4), bool)
    masks[:, 2] = True
    np.testing.assert_array_equal(
        run_onnx(path, unity_observations(spec), action_masks=masks)["discrete_actions"], 2.0
    )


def test_multidiscrete_ppo(tmp_path):
    spec = BehaviorSpec([vector(5)], ActionSpec(0, (3, 3, 2)))
    model = make_model(PPO, spec)
    scale_head(model, 30.0)
    got, _ = assert_same_actions(model, export(model, tmp_path, spec), spec)
    assert got["discrete_action_output_shape"].tolist() == [[3.0, 3.0, 2.0]]


def test_hybrid_box_policy_splits_into_continuous_and_bins(tmp_path):
    spec = BehaviorSpec([vector(5)], ActionSpec(2, (3, 2)))
    model = make_model(PPO, spec)
    scale_head(model, 100.0)
    path = export(model, tmp_path, spec)
    got, _ = assert_same_actions(model, path, spec)
    assert set(np.unique(got["discrete_actions"][:, 0])) == {0.0, 1.0, 2.0}
    assert set(np.unique(got["discrete_actions"][:, 1])) == {0.0, 1.0}
    info = inspect_onnx(path)
    # Unity fills action_masks for every discrete behavior: the input exists (and is ignored)
    assert list(info.inputs) == ["obs_0", "action_masks"] and info.inputs["action_masks"] == ("batch", 5)
    assert info.continuous_size == 2 and info.discrete_branches == (3, 2)
    assert check_onnx(path, spec) == []


# ------------------------------------------------------------------------------- observations


@pytest.mark.parametrize("layout", ["chw", "hwc"])
@pytest.mark.parametrize("visual", ["uint8", "float"])
@pytest.mark.parametrize("shared", [True, False], ids=["shared_encoder", "critic_encoder"])
def test_visual_cnn_policy(tmp_path, layout, visual, shared):
    # shared=False: the critic has its own encoder, as the ML-Agents mapping builds PPO
    obs_spec = visual_chw() if layout == "chw" else visual_hwc()
    spec = BehaviorSpec([obs_spec], ActionSpec(0, (3,)))
    extractor = dict(features_dim=32, normalized_image=visual == "float")
    policy_kwargs = dict(
        net_arch=[16],
        features_extractor_kwargs=extractor,
        normalize_images=visual == "uint8",
        share_features_extractor=shared,
    )
    model = make_model(PPO, spec, "CnnPolicy", visual=visual, policy_kwargs=policy_kwargs)
    scale_head(model, 50.0)
    path = export(model, tmp_path, spec)
    assert inspect_onnx(path).inputs["obs_0"] == ("batch", 3, 36, 36)  # NCHW whatever Unity's spec layout
    obs = unity_observations(spec, n=48)
    assert_same_actions(model, path, spec, obs=obs)


@pytest.mark.parametrize("pixels", ["k/255", "any float"])
def test_uint8_rounding_matches_the_wrapper(tmp_path, pixels):
    # the graph must land on the very same uint8 values as the wrapper: exactly for Unity's
    # k/255 pixels, and after rounding for arbitrary floats (unscaled continuous head: no clipping
    # hides a difference)
    spec = BehaviorSpec([visual_chw()], ActionSpec(2, ()))
    model = make_model(
        PPO,
        spec,
        "CnnPolicy",
        policy_kwargs=dict(net_arch=[16], features_extractor_kwargs=dict(features_dim=32)),
    )
    scale_head(model, 20.0)
    rng = np.random.default_rng(3)
    if pixels == "k/255":
        obs = [(rng.integers(0, 256, (32, 3, 36, 36)) / 255.0).astype(np.float32)]
    else:
        obs = [rng.random((32, 3, 36, 36), dtype=np.float32)]
    got, _ = assert_same_actions(model, export(model, tmp_path, spec), spec, obs=obs)
    assert np.all(np.abs(got["continuous_actions"]) < 1.0)


def test_channels_last_policy_space(tmp_path):
    # a policy that reads (H, W, C) floats (MlpPolicy on visual="float_hwc"); H != W so a wrong
    # transpose cannot pass unnoticed
    spec = BehaviorSpec([visual_hwc(5, 7, 2)], ActionSpec(2, ()))
    model = make_model(PPO, spec, visual="float_hwc")
    assert model.observation_space.shape == (5, 7, 2)
    scale_head(model, 20.0)
    path = export(model, tmp_path, spec)
    assert inspect_onnx(path).inputs["obs_0"] == ("batch", 2, 5, 7)
    assert_same_actions(model, path, spec)


#: a vector, an HWC image and a buffer sensor whose names sort differently from the sensor order
#: (obs_0 is "zvec", obs_2 is "abuf"), and two masked branches
SENSOR_ORDER = BehaviorSpec(
    [vector(4, "zvec"), visual_hwc(name="cam"), buffer(name="abuf")], ActionSpec(0, (3, 2))
)


def sensor_order_model() -> Any:
    """A decisive MaskablePPO for :data:`SENSOR_ORDER`."""
    model = make_model(
        MaskablePPO,
        SENSOR_ORDER,
        "MultiInputPolicy",
        policy_kwargs=dict(net_arch=[16], features_extractor_kwargs=dict(cnn_output_dim=16)),
    )
    scale_head(model, 30.0)
    return model


def test_dict_observations_follow_sensor_order_not_key_order(tmp_path):
    spec = SENSOR_ORDER
    model = sensor_order_model()
    path = export(model, tmp_path, spec)
    info = inspect_onnx(path)
    assert info.inputs == {
        "obs_0": ("batch", 4),
        "obs_1": ("batch", 3, 36, 36),
        "obs_2": ("batch", 4, 3),
        "action_masks": ("batch", 5),
    }
    assert info.metadata["observation_keys"] == "zvec,cam,abuf"
    assert_same_actions(
        model, path, spec, masks=random_masks((3, 2), n=48), obs=unity_observations(spec, n=48)
    )
    assert check_onnx(path, spec) == []


@pytest.mark.parametrize(
    ("conditioning", "hidden_layers"),
    [("linear", []), ("hypernetwork", []), ("hypernetwork", [16, 16])],
    ids=["hyperlinear", "hypernetwork", "conditioned_body"],
)
@pytest.mark.parametrize("opset", [9, 15])
def test_goal_conditioned_policies(tmp_path, conditioning, hidden_layers, opset):
    """Goal signals generating weights (ML-Agents' ``hyper``): HyperLinear, and ML-Agents' HyperNetwork
    alone or as the last layer of the body (its layer norm and batched product), under onnxruntime."""
    goal = ObservationSpec((3,), (NONE,), ObservationType.GOAL_SIGNAL, "goal")
    spec = BehaviorSpec([vector(5, "ray"), goal], ActionSpec(2, (3,)))
    extractor = dict(
        goal_keys=["goal"],
        goal_features=True,
        goal_hidden_dim=16,
        goal_conditioning=conditioning,
        hidden_layers=hidden_layers,
    )
    model = make_model(
        PPO,
        spec,
        "MultiInputPolicy",
        policy_kwargs=dict(
            net_arch=dict(pi=[], vf=[]) if hidden_layers else [16],
            features_extractor_class=UnityMultiInputExtractor,
            features_extractor_kwargs=extractor,
        ),
    )
    scale_head(model, 30.0)
    path = export(model, tmp_path, spec, opset=opset)
    obs = unity_observations(spec, n=32)
    obs[1] = np.eye(3, dtype=np.float32)[np.arange(32) % 3]  # one-hot goals
    got, _ = assert_same_actions(model, path, spec, obs=obs)
    assert np.ptp(got["deterministic_continuous_actions"], axis=0).min() > 1e-3  # the inputs matter
    assert check_onnx(path, spec) == []


def test_flattened_vector_observations(tmp_path):
    spec = BehaviorSpec([vector(3, "a"), vector(5, "b")], ActionSpec(2, ()))
    model = make_model(PPO, spec, flatten=True)
    scale_head(model, 40.0)
    path = export(model, tmp_path, spec)
    assert list(inspect_onnx(path).inputs) == ["obs_0", "obs_1"]
    assert_same_actions(model, path, spec)


@pytest.mark.parametrize("as_file", [False, True])
def test_vec_normalize_statistics_are_baked_in(tmp_path, as_file):
    spec = BehaviorSpec([vector(6)], ActionSpec(0, (4,)))
    model = make_model(PPO, spec)
    scale_head(model, 30.0)
    venv = VecNormalize(
        DummyVecEnv([lambda: SpaceEnv(model.observation_space, model.action_space)]), clip_obs=1.5
    )
    rng = np.random.default_rng(5)
    venv.obs_rms.mean = rng.normal(size=6) * 3
    venv.obs_rms.var = rng.random(6) * 4 + 0.1
    stats: Any = venv
    if as_file:
        stats = tmp_path / "vecnormalize.pkl"
        venv.save(str(stats))
    path = export(model, tmp_path, spec, vec_normalize=stats)
    assert_same_actions(model, path, spec, vec_normalize=stats)
    # without the statistics the actions differ: the normalisation really is in the graph
    plain = export(model, tmp_path, spec, name="plain.onnx")
    obs = unity_observations(spec)
    assert np.any(run_onnx(plain, obs)["discrete_actions"] != run_onnx(path, obs)["discrete_actions"])


def test_vec_normalize_dict_keys(tmp_path):
    spec = BehaviorSpec([vector(4, "a"), vector(3, "b")], ActionSpec(2, ()))
    model = make_model(PPO, spec, "MultiInputPolicy")
    scale_head(model, 40.0)
    venv = VecNormalize(
        DummyVecEnv([lambda: SpaceEnv(model.observation_space, model.action_space)]), norm_obs_keys=["b"]
    )
    venv.obs_rms["b"].mean = np.array([1.0, -2.0, 3.0])
    venv.obs_rms["b"].var = np.array([0.5, 2.0, 9.0])
    assert_same_actions(model, export(model, tmp_path, spec, vec_normalize=venv), spec, vec_normalize=venv)


# ------------------------------------------------------------------------------- POCA and recurrent


@pytest.mark.parametrize("actions", ["discrete", "continuous"])
def test_poca_actor(tmp_path, actions):
    from unity_sb3.algorithms.poca import POCA

    action_spec = ActionSpec(0, (3, 2)) if actions == "discrete" else ActionSpec(2, ())
    spec = BehaviorSpec([vector(4)], action_spec)
    behavior = BehaviorSpaces(spec)
    env = DummyVecEnv([lambda: SpaceEnv(behavior.observation_space, behavior.action_space)] * 3)
    model = POCA(
        "MlpPolicy", env, n_steps=8, batch_size=8, device="cpu", seed=0, policy_kwargs=dict(net_arch=[16])
    )
    scale_head(model, 30.0)
    path = export(model, tmp_path, spec)
    masks = random_masks((3, 2)) if actions == "discrete" else None
    assert_same_actions(model, path, spec, masks=masks)
    # only the actor is exported: no critic weights in the file
    names = {init.name for init in onnx.load(str(path)).graph.initializer}
    assert not any("critic" in name for name in names)
    assert check_onnx(path, spec) == []


def test_recurrent_ppo_memories_round_trip(tmp_path):
    spec = BehaviorSpec([vector(5)], ActionSpec(2, ()))
    model = make_model(
        RecurrentPPO,
        spec,
        "MlpLstmPolicy",
        policy_kwargs=dict(net_arch=[16], lstm_hidden_size=8, n_lstm_layers=2),
    )
    scale_head(model, 40.0)
    path = export(model, tmp_path, spec)
    info = inspect_onnx(path)
    assert info.memory_size == 2 * 2 * 8
    assert info.inputs["recurrent_in"] == ("batch", 1, 32) and info.outputs[-1] == "recurrent_out"
    assert check_onnx(path, spec) == []
    n = 16
    memories = np.zeros((n, 1, 32), np.float32)
    state = None
    starts = np.ones(n, bool)
    for step in range(3):
        obs = unity_observations(spec, n=n, seed=10 + step)
        expected, state = predict_unity_actions(
            model, obs, behavior_spec=spec, state=state, episode_start=starts
        )
        starts = np.zeros(n, bool)
        got = run_onnx(path, obs, memories=memories)
        np.testing.assert_allclose(got["continuous_actions"], expected.continuous, atol=2e-5)
        memories = got["recurrent_out"]
        h, c = state
        packed = np.concatenate(
            [h.transpose(1, 0, 2).reshape(n, -1), c.transpose(1, 0, 2).reshape(n, -1)], axis=1
        )
        np.testing.assert_allclose(memories[:, 0, :], packed, atol=2e-5)


# ------------------------------------------------------------------------------- what Unity's loader checks


def test_names_shapes_and_constants(tmp_path):
    spec = BehaviorSpec([vector(6), visual_chw(1, 36, 36)], ActionSpec(0, (3, 2)))
    model = make_model(
        MaskablePPO,
        spec,
        "MultiInputPolicy",
        policy_kwargs=dict(net_arch=[16], features_extractor_kwargs=dict(cnn_output_dim=8)),
    )
    path = export(model, tmp_path, spec)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    assert proto.opset_import[0].version == DEFAULT_OPSET
    assert [i.name for i in proto.graph.input] == ["obs_0", "obs_1", "action_masks"]
    assert [o.name for o in proto.graph.output] == [
        "version_number",
        "memory_size",
        "discrete_actions",
        "discrete_action_output_shape",
        "deterministic_discrete_actions",
    ]
    got = run_onnx(path, unity_observations(spec, n=5))
    assert got["version_number"].tolist() == [3.0] and got["memory_size"].tolist() == [0.0]
    assert got["discrete_action_output_shape"].shape == (1, 2)
    assert got["discrete_actions"].shape == (5, 2)
    for name, value in got.items():
        assert value.dtype == (np.int64 if name.endswith("discrete_actions") else np.float32), name
    continuous = export(make_model(PPO, CONTINUOUS), tmp_path, CONTINUOUS, name="c.onnx")
    out = run_onnx(continuous, unity_observations(CONTINUOUS, n=7))
    assert list(out) == [
        "version_number",
        "memory_size",
        "continuous_actions",
        "continuous_action_output_shape",
        "deterministic_continuous_actions",
    ]
    assert out["continuous_action_output_shape"].tolist() == [3.0] and out["continuous_actions"].shape == (
        7,
        3,
    )
    assert list(inspect_onnx(continuous).inputs) == ["obs_0"]  # no masks without discrete actions


def test_check_onnx_reports_a_model_for_another_behavior(tmp_path):
    spec = BehaviorSpec([vector(5)], ActionSpec(0, (3,)))
    path = export(make_model(PPO, spec), tmp_path, spec)
    other = BehaviorSpec([vector(6), vector(2)], ActionSpec(1, (4,)))
    problems = check_onnx(path, other)
    assert any("obs_0 has shape (5,)" in p for p in problems)
    assert any("no input obs_1" in p for p in problems)
    assert any("continuous action size" in p for p in problems)
    assert any("discrete branches" in p for p in problems)


def with_float_discrete_actions(path: Path, target: Path) -> Path:
    """``path`` with its discrete actions cast to float32 (as older exporters wrote them), saved as ``target``."""
    proto = onnx.load(str(path))
    producer = next(node for node in proto.graph.node if "discrete_actions" in node.output)
    producer.output[list(producer.output).index("discrete_actions")] = "discrete_int"
    proto.graph.node.append(onnx.helper.make_node("Cast", ["discrete_int"], ["discrete_actions"], to=1))
    for out in proto.graph.output:
        if out.name.endswith("discrete_actions"):  # the deterministic output copies it
            out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    onnx.save(proto, str(target))
    return target


def test_check_onnx_wants_integer_discrete_actions(tmp_path):
    # a float discrete output is valid ONNX but Unity's applier reads an integer tensor
    spec = BehaviorSpec([vector(5)], ActionSpec(0, (3,)))
    path = export(make_model(PPO, spec), tmp_path, spec)
    floats = with_float_discrete_actions(path, tmp_path / "float.onnx")
    assert check_onnx(path, spec) == [] and check_onnx(floats, spec, output_types=False) == []
    problems = check_onnx(floats, spec)
    assert problems == [
        f"{name} holds float32; Unity reads discrete actions as integers"
        for name in ("discrete_actions", "deterministic_discrete_actions")
    ]


@pytest.mark.parametrize("opset", [9, 13, 15])
def test_opsets(tmp_path, opset):
    spec = BehaviorSpec([vector(5)], ActionSpec(1, (3,)))
    model = make_model(PPO, spec)
    path = export(model, tmp_path, spec, opset=opset, verify=True)
    assert onnx.load(str(path)).opset_import[0].version == opset


def test_spec_is_inferred_from_the_model_spaces(tmp_path):
    spec = BehaviorSpec([visual_chw(3, 36, 36)], ActionSpec(0, (4, 2)))
    model = make_model(
        PPO,
        spec,
        "CnnPolicy",
        policy_kwargs=dict(net_arch=[16], features_extractor_kwargs=dict(features_dim=16)),
    )
    inferred = infer_behavior_spec(model.observation_space, model.action_space)
    assert inferred.observation_specs[0].shape == (3, 36, 36)
    assert inferred.action_spec == ActionSpec(0, (4, 2))
    path = export(model, tmp_path, None, verify=True)
    assert check_onnx(path, spec) == []


# ------------------------------------------------------------------------------- errors


def test_errors_say_what_is_wrong(tmp_path):
    spec = BehaviorSpec([vector(5)], ActionSpec(0, (3,)))
    model = make_model(PPO, spec)
    with pytest.raises(ValueError, match=r"observation 0 .*shape \(6,\).*policy expects \(5,\)"):
        to_onnx(model, tmp_path / "x.onnx", behavior_spec=BehaviorSpec([vector(6)], ActionSpec(0, (3,))))
    with pytest.raises(ValueError, match=r"discrete branches \(4,\)"):
        to_onnx(model, tmp_path / "x.onnx", behavior_spec=BehaviorSpec([vector(5)], ActionSpec(0, (4,))))
    with pytest.raises(ValueError, match="no actions"):
        to_onnx(model, tmp_path / "x.onnx", behavior_spec=BehaviorSpec([vector(5)], ActionSpec(0, ())))
    hybrid = BehaviorSpec([vector(5)], ActionSpec(2, (3,)))
    with pytest.raises(ValueError, match="hybrid"):
        to_onnx(
            make_model(PPO, CONTINUOUS.__class__([vector(5)], ActionSpec(2, ()))),
            tmp_path / "x.onnx",
            behavior_spec=hybrid,
        )
    with pytest.raises(TypeError, match="vec_normalize"):
        to_onnx(model, tmp_path / "x.onnx", behavior_spec=spec, vec_normalize=object())
    with pytest.raises(FileNotFoundError):
        to_onnx(model, tmp_path / "x.onnx", behavior_spec=spec, vec_normalize=tmp_path / "missing.pkl")
    dict_space = spaces.Dict({"camera": spaces.Box(0, 1, (4,)), "vector": spaces.Box(0, 1, (2,))})
    with pytest.raises(ValueError, match="behavior_spec="):
        infer_behavior_spec(dict_space, spaces.Discrete(3))
    assert not (tmp_path / "x.onnx").exists()


def test_a_failed_check_leaves_no_file(tmp_path, monkeypatch):
    import unity_sb3.export.writer as writer

    def mismatch(*args, **kwargs):
        raise AssertionError("actions differ")

    monkeypatch.setattr(writer, "verify_export", mismatch)
    (tmp_path / "old.onnx").write_bytes(b"previous export")
    with pytest.raises(AssertionError, match="actions differ"):
        to_onnx(make_model(PPO, CONTINUOUS), tmp_path / "old.onnx", behavior_spec=CONTINUOUS, verify=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.onnx"]
    assert (tmp_path / "old.onnx").read_bytes() == b"previous export"


def test_unknown_policy_class_is_refused(tmp_path):
    class Custom(BasePolicy):
        def _predict(self, observation, deterministic=False):
            return th.zeros(len(observation), dtype=th.long)

    policy = Custom(spaces.Box(-1, 1, (3,)), spaces.Discrete(2))
    with pytest.raises(NotImplementedError, match="Custom"):
        to_onnx(policy, tmp_path / "x.onnx")


def test_predict_reference_refuses_masks_the_model_cannot_take():
    spec = BehaviorSpec([vector(5)], ActionSpec(0, (3,)))
    model = make_model(PPO, spec)
    obs = unity_observations(spec, n=4)
    masks = np.ones((4, 3), bool)
    masks[0, 1] = False
    with pytest.raises(ValueError, match="takes no action masks"):
        predict_unity_actions(model, obs, behavior_spec=spec, action_masks=masks)


class SmallCnn(BaseFeaturesExtractor):
    """A user's own extractor for GridWorld's 32x32 camera (too small for NatureCNN) + goal."""

    def __init__(self, observation_space: spaces.Dict) -> None:
        super().__init__(observation_space, features_dim=8 * 7 * 7 + 2)
        self.cnn = th.nn.Sequential(th.nn.Conv2d(3, 8, 5, stride=4), th.nn.ReLU(), th.nn.Flatten())

    def forward(self, obs: dict[str, th.Tensor]) -> th.Tensor:
        return th.cat([self.cnn(obs["CameraSensor"]), obs["GoalSensor"]], dim=1)


def test_exported_model_drives_an_embedded_scene(tmp_path):
    # GridWorld (visual k/255 pixels + goal signal + action masks) stepped by the ONNX model as
    # Unity's ModelRunner would: DecisionSteps in Unity's layout, masks inverted to 1 = allowed
    from unity_sb3.scenes import make_scene
    from unity_sb3.unity.compat import channel_axis

    scene = make_scene("GridWorld", num_agents=4)
    name, spec = next(iter(scene.behavior_specs.items()))
    model = make_model(
        MaskablePPO,
        spec,
        "MultiInputPolicy",
        policy_kwargs=dict(net_arch=[16], features_extractor_class=SmallCnn),
    )
    scale_head(model, 30.0)
    path = export(model, tmp_path, spec)
    behavior = BehaviorSpaces(spec)
    blocked = 0
    try:
        scene.reset()
        for _ in range(15):
            steps, _ = scene.get_steps(name)
            if len(steps) == 0:
                scene.step()
                continue
            obs = []
            for o, obs_spec in zip(steps.obs, spec.observation_specs):
                if (
                    len(obs_spec.shape) == 3
                    and channel_axis(obs_spec.shape, obs_spec.dimension_property) == 2
                ):
                    o = np.moveaxis(o, -1, 1)
                obs.append(o)
            masks = behavior.action_masks(steps.action_mask, len(steps))
            blocked += int((~masks).sum())
            got = run_onnx(path, obs, action_masks=masks)
            expected, _ = model.predict(
                behavior.observations(steps.obs), deterministic=True, action_masks=masks
            )
            np.testing.assert_array_equal(got["deterministic_discrete_actions"][:, 0], expected)
            scene.set_actions(name, behavior.to_unity_actions(got["discrete_actions"], len(steps)))
            scene.step()
    finally:
        scene.close()
    assert blocked > 0, "the scene should have masked some actions"


# ------------------------------------------------------------------------------- command line


def test_cli_export_of_a_run_folder(tmp_path, capsys):
    import yaml

    from unity_sb3.cli import main
    from unity_sb3.scenes import make_scene

    scene = make_scene("Ball3D")
    spec = next(iter(scene.behavior_specs.values()))
    scene.close()
    model = make_model(PPO, spec)
    scale_head(model, 40.0)
    run = tmp_path / "results" / "ball"
    run.mkdir(parents=True)
    model.save(run / "model.zip")
    (run / "config.yaml").write_text(yaml.safe_dump({"env": "Ball3D", "algo": "ppo", "normalize": False}))
    assert main(["export", str(run)]) == 0
    out = capsys.readouterr().out
    assert "checked against model.predict" in out and "obs_0" in out
    path = run / "model.onnx"
    assert check_onnx(path, spec) == []
    assert_same_actions(model, path, spec)
    # an explicit algorithm, output and scene, outside a run folder
    alone = tmp_path / "alone.zip"
    model.save(alone)
    assert (
        main(
            [
                "export",
                str(alone),
                "--algo",
                "ppo",
                "--output",
                str(tmp_path / "o" / "b.onnx"),
                "--env",
                "ball3d",
            ]
        )
        == 0
    )
    assert check_onnx(tmp_path / "o" / "b.onnx", spec) == []


def test_cli_export_needs_an_algorithm_and_a_known_scene(tmp_path):
    from unity_sb3.cli import main

    model = make_model(PPO, CONTINUOUS)
    model.save(tmp_path / "m.zip")
    with pytest.raises(SystemExit, match="--algo"):
        main(["export", str(tmp_path / "m.zip")])
    with pytest.raises(SystemExit, match="embedded scene"):
        main(["export", str(tmp_path / "m.zip"), "--algo", "ppo", "--env", "NoSuchScene"])
    with pytest.raises(SystemExit, match="no model"):
        main(["export", str(tmp_path / "missing.zip"), "--algo", "ppo"])


# ------------------------------------------------------------------------------- rank-2 (buffer sensors)

# Unity's own rank-2 test model, com.unity.ml-agents/Tests/Editor/TestModels/discrete_rank2_vector_v2_0.onnx,
# is checked (ParameterLoaderTest.TestCheckModelRank2) against a BufferSensor(maxNumObservables 20,
# observableSize 23), VectorSensor(10) and VectorSensor(8), and discrete branches (3, 3, 3).
UNITY_RANK2 = BehaviorSpec([buffer(20, 23, "BufferSensor"), vector(10), vector(8)], ActionSpec(0, (3, 3, 3)))


def padded_entities(spec: BehaviorSpec, n: int = 48, seed: int = 3) -> list[np.ndarray]:
    """Unity observations whose rank-2 ones hold 0..rows entities, zero rows after, as ONNX inputs."""
    from unity_sb3.export.specs import entities_to_onnx

    obs = unity_observations(spec, n=n, seed=seed)
    rng = np.random.default_rng(seed)
    for i, obs_spec in enumerate(spec.observation_specs):
        if len(obs_spec.shape) == 2:
            rows = obs[i].copy()
            count = rng.integers(0, obs_spec.shape[0] + 1, size=n)
            rows[np.arange(obs_spec.shape[0])[None, :] >= count[:, None]] = 0.0
            obs[i] = entities_to_onnx(rows)
    return obs


def attention_model(spec: BehaviorSpec, cls=PPO):
    from unity_sb3.networks.extractors import UnityMultiInputExtractor

    kwargs = dict(features_extractor_class=UnityMultiInputExtractor, net_arch=[16])
    kwargs["features_extractor_kwargs"] = dict(entity_embedding_size=16)
    return make_model(cls, spec, "MultiInputPolicy", policy_kwargs=kwargs)


@pytest.mark.parametrize("opset", [9, 15])
def test_rank2_inputs_have_the_signature_of_unitys_rank2_test_model(tmp_path, opset):
    model = attention_model(UNITY_RANK2, MaskablePPO)
    assert model.policy.features_extractor.attention is not None
    scale_head(model, 30.0)
    path = export(model, tmp_path, UNITY_RANK2, opset=opset)
    info = inspect_onnx(path)
    assert info.inputs == {
        "obs_0": ("batch", 20, 23),
        "obs_1": ("batch", 10),
        "obs_2": ("batch", 8),
        "action_masks": ("batch", 9),
    }
    assert info.discrete_branches == (3, 3, 3) and info.version == 3 and info.memory_size == 0
    assert check_onnx(path, UNITY_RANK2) == []
    masks = random_masks((3, 3, 3), n=48)
    assert_same_actions(model, path, UNITY_RANK2, masks=masks, obs=padded_entities(UNITY_RANK2))


def test_rank2_input_is_read_as_ml_agents_exporter_reads_it(tmp_path):
    """``obs_i`` of a buffer sensor is transposed and reshaped as ML-Agents' EntityEmbedding does when exporting."""
    from unity_sb3.export.specs import entities_from_onnx, entities_to_onnx

    spec = BehaviorSpec([vector(4, "vec"), buffer(6, 5, "buf")], ActionSpec(0, (5,)))
    model = attention_model(spec)
    scale_head(model, 30.0)
    path = export(model, tmp_path, spec)
    vec, feeds = padded_entities(spec)
    rows = entities_from_onnx(feeds)
    np.testing.assert_array_equal(entities_to_onnx(rows), feeds)
    # obs_i[b] = the rows' values written column after column: x[b, e, f] = rows[b].ravel()[f * 6 + e]
    np.testing.assert_array_equal(feeds[:, 2, 1], rows.reshape(len(rows), -1)[:, 1 * 6 + 2])
    got = run_onnx(path, [vec, feeds])["discrete_actions"][:, 0]
    expected, _ = model.predict({"vec": vec, "buf": rows}, deterministic=True)
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(got, run_onnx(path, [vec, rows])["discrete_actions"][:, 0])


@pytest.mark.parametrize("cls_name", ["SAC", "POCA"])
def test_rank2_attention_exports_for_sac_and_poca(tmp_path, cls_name):
    import unity_sb3

    spec = BehaviorSpec([vector(4, "vec"), buffer(6, 5, "buf")], ActionSpec(2, ()))
    model = attention_model(spec, getattr(unity_sb3, cls_name))
    scale_head(model, 30.0)
    path = export(model, tmp_path, spec)
    assert inspect_onnx(path).inputs["obs_1"] == ("batch", 6, 5)
    assert_same_actions(model, path, spec, obs=padded_entities(spec))
