"""Reward signals on fixed batches, in the spirit of ML-Agents' own reward-provider tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces

from unity_sb3.algorithms.mixin import make_bc_module
from unity_sb3.algorithms.reward_signals import (
    CuriositySignal,
    ExpertData,
    GAILSignal,
    RNDSignal,
    load_expert_data,
    make_reward_signals,
)
from unity_sb3.algorithms.reward_signals.networks import ActionFlattener, ObservationEncoder
from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError, parse_reward_signals

SMALL = {"hidden_units": 32, "num_layers": 1}


def settings(name: str, **overrides) -> dict:
    config = {"network_settings": SMALL, **overrides}
    return parse_reward_signals({name: config}, default_gamma=0.99)[name]


def sample(space: spaces.Space, n: int, rng: np.random.Generator) -> np.ndarray | dict:
    if isinstance(space, spaces.Dict):
        return {k: sample(s, n, rng) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):  # hybrid: flat rows, continuous values then branch indices
        parts = [np.asarray(sample(s, n, rng), np.float32).reshape(n, -1) for s in space.spaces]
        return np.concatenate(parts, axis=1)
    space.seed(int(rng.integers(1 << 30)))
    return np.stack([space.sample() for _ in range(n)])


#: a hybrid action space (UnityVecEnv(..., hybrid="tuple")); its batches are flat rows
HYBRID = spaces.Tuple((spaces.Box(-1, 1, (1,), np.float32), spaces.MultiDiscrete([2, 3])))


# ---------------------------------------------------------------- configuration
def test_defaults_follow_ml_agents():
    parsed = parse_reward_signals({"extrinsic": {}, "curiosity": None, "rnd": {}}, default_gamma=0.99)
    assert list(parsed) == ["extrinsic", "curiosity", "rnd"]
    assert parsed["extrinsic"]["strength"] == 1.0 and parsed["extrinsic"]["gamma"] == 0.99
    assert parsed["curiosity"]["learning_rate"] == 3e-4
    assert parsed["rnd"]["learning_rate"] == 1e-4
    assert parsed["curiosity"]["network_settings"]["hidden_units"] == 128
    assert parsed["curiosity"]["network_settings"]["num_layers"] == 2


def test_gamma_defaults_to_the_algorithm_gamma():
    parsed = parse_reward_signals({"extrinsic": {}, "rnd": {"gamma": 0.9}}, default_gamma=0.95)
    assert parsed["extrinsic"]["gamma"] == 0.95
    assert parsed["rnd"]["gamma"] == 0.9


def test_encoding_size_sets_hidden_units_unless_network_settings_given():
    assert (
        settings("curiosity", encoding_size=64, network_settings=None)["network_settings"]["hidden_units"]
        == 64
    )
    both = parse_reward_signals(
        {"curiosity": {"encoding_size": 64, "network_settings": {"hidden_units": 16}}}, default_gamma=0.99
    )
    assert both["curiosity"]["network_settings"]["hidden_units"] == 16


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"curiousity": {}}, "Did you mean 'curiosity'"),
        ({"curiosity": {"learning_rte": 1e-3}}, "Did you mean 'learning_rate'"),
        ({"curiosity": {"network_settings": {"hiden_units": 3}}}, "Did you mean 'hidden_units'"),
        ({"gail": {"strength": 0.1}}, "needs expert data"),
        ({"extrinsic": {"gamma": 1.5}}, "gamma=1.5 is outside"),
        ({"extrinsic": {"strength": "high"}}, "strength must be a number"),
        ({"rnd": {"learning_rate": 0}}, "learning_rate must be > 0"),
        ({"curiosity": {"network_settings": {"vis_encode_type": "simpel"}}}, "Did you mean 'simple'"),
        ({}, "reward_signals is empty"),
        (["extrinsic"], "must be a dict"),
    ],
)
def test_bad_configs_say_what_is_wrong(config, message):
    with pytest.raises(RewardSignalConfigError, match=message):
        parse_reward_signals(config, default_gamma=0.99)


def test_none_means_no_signals():
    assert parse_reward_signals(None, default_gamma=0.99) is None


def test_memory_is_ignored_with_a_warning():
    with pytest.warns(UserWarning, match="memory is ignored"):
        parse_reward_signals({"rnd": {"network_settings": {"memory": {"sequence_length": 8}}}}, 0.99)


def test_bc_hook_builds_nothing_without_settings_and_refuses_non_dict_settings():
    assert make_bc_module(object(), None) is None
    with pytest.raises(RewardSignalConfigError, match="behavioral_cloning must be a dict like"):
        make_bc_module(object(), "x.demo")


# ---------------------------------------------------------------- networks
@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(-1, 1, (5,), np.float32),
        spaces.Box(0, 255, (3, 32, 32), np.uint8),  # SB3 channel-first image
        spaces.Box(0, 255, (7, 7, 2), np.uint8),  # small channel-last image
        spaces.Box(0, 1, (9, 9, 3), np.float32),  # float image, Unity layout
        spaces.Discrete(4),
        spaces.Dict(
            {"ray": spaces.Box(-1, 1, (6,), np.float32), "cam": spaces.Box(0, 255, (1, 8, 8), np.uint8)}
        ),
    ],
)
def test_encoder_handles_vector_visual_and_dict_observations(space):
    encoder = ObservationEncoder(
        space, {**parse_reward_signals({"rnd": {}}, 0.99)["rnd"]["network_settings"], **SMALL}
    )
    rng = np.random.default_rng(0)
    batch = sample(space, 4, rng)
    obs = {k: th.as_tensor(v) for k, v in batch.items()} if isinstance(batch, dict) else th.as_tensor(batch)
    out = encoder(obs)
    assert out.shape == (4, 32)
    assert th.isfinite(out).all()


@pytest.mark.parametrize(
    ("encode_type", "side", "first_conv"),
    [
        ("match3", 8, (35, 3)),
        ("resnet", 20, (16, 3)),
        ("simple", 24, (16, 8)),
        ("nature_cnn", 40, (32, 8)),
        ("nature_cnn", 24, (16, 8)),  # too small for nature_cnn (36): the largest that fits, simple
        ("simple", 8, (35, 3)),  # too small for simple (20): match3
        ("fully_connected", 8, None),
    ],
)
def test_encoder_uses_the_requested_mlagents_visual_encoder(encode_type, side, first_conv):
    network_settings = {**settings("rnd")["network_settings"], "vis_encode_type": encode_type}
    encoder = ObservationEncoder(spaces.Box(0, 255, (3, side, side), np.uint8), network_settings)
    convs = [m for m in encoder.modules() if isinstance(m, th.nn.Conv2d)]
    assert ((convs[0].out_channels, convs[0].kernel_size[0]) if convs else None) == first_conv
    out = encoder(th.zeros((2, 3, side, side), dtype=th.uint8))
    assert out.shape == (2, 32) and th.isfinite(out).all()


@pytest.mark.parametrize(
    ("space", "actions", "expected"),
    [
        (spaces.Box(-1, 1, (2,)), [[0.5, -0.5]], [[0.5, -0.5]]),
        (spaces.Discrete(3), [[2]], [[0, 0, 1]]),
        (spaces.MultiDiscrete([2, 3]), [[1, 0]], [[0, 1, 1, 0, 0]]),
        (HYBRID, [[0.5, 1.0, 0.0]], [[0.5, 0, 1, 1, 0, 0]]),
    ],
)
def test_action_flattener(space, actions, expected):
    flat = ActionFlattener(space)
    assert flat(th.as_tensor(actions)).tolist() == expected
    assert flat.flattened_size == len(expected[0])


# ---------------------------------------------------------------- curiosity
ACTION_SPACES = [
    spaces.Box(-1, 1, (2,), np.float32),
    spaces.Discrete(3),
    spaces.MultiDiscrete([3, 2]),
    HYBRID,
]


def _dynamics_batch(action_space: spaces.Space, n: int = 64, seed: int = 0):
    """A fixed batch whose next observation is a deterministic, invertible function of (obs, action)."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    actions = sample(action_space, n, rng)
    flat = ActionFlattener(action_space)(th.as_tensor(actions)).numpy()
    mixing = np.random.default_rng(1).normal(size=(flat.shape[1], 4)).astype(np.float32)
    next_obs = obs + flat @ mixing
    return obs, actions, next_obs


@pytest.mark.parametrize("action_space", ACTION_SPACES, ids=["box", "discrete", "multidiscrete", "hybrid"])
def test_curiosity_reward_and_losses_fall_on_a_fixed_batch(action_space):
    th.manual_seed(0)
    obs_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    signal = CuriositySignal(obs_space, action_space, settings("curiosity", learning_rate=3e-3), "cpu")
    obs, actions, next_obs = _dynamics_batch(action_space)
    batch = signal.batch(obs, actions, next_obs)
    first = signal.update(batch)
    reward_before = signal.reward(obs, actions, next_obs).mean()
    for _ in range(300):
        last = signal.update(batch)
    reward_after = signal.reward(obs, actions, next_obs).mean()
    assert reward_after < 0.2 * reward_before
    assert last["forward_loss"] < 0.02
    assert last["inverse_loss"] < 0.1 * first["inverse_loss"]
    assert last["inverse_loss"] < 0.15


def test_curiosity_reward_is_zero_before_the_first_update_and_clipped_by_strength():
    th.manual_seed(0)
    obs_space, act_space = spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(3)
    signal = CuriositySignal(obs_space, act_space, settings("curiosity", strength=50.0), "cpu")
    obs, actions, next_obs = _dynamics_batch(act_space)
    assert np.all(signal.reward(obs, actions, next_obs) == 0.0)
    signal.update(signal.batch(obs, actions, next_obs))
    rewards = signal.reward(obs, actions, 100.0 * next_obs)
    assert rewards.max() == pytest.approx(1.0 / 50.0)


def test_curiosity_on_visual_dict_observations():
    th.manual_seed(0)
    obs_space = spaces.Dict(
        {"cam": spaces.Box(0, 255, (1, 12, 12), np.uint8), "vec": spaces.Box(-1, 1, (3,), np.float32)}
    )
    act_space = spaces.Discrete(4)
    signal = CuriositySignal(obs_space, act_space, settings("curiosity", learning_rate=1e-3), "cpu")
    rng = np.random.default_rng(0)
    obs, next_obs = sample(obs_space, 32, rng), sample(obs_space, 32, rng)
    actions = sample(act_space, 32, rng)
    batch = signal.batch(obs, actions, next_obs)
    signal.update(batch)
    before = signal.reward(obs, actions, next_obs).mean()
    for _ in range(60):
        signal.update(batch)
    assert signal.reward(obs, actions, next_obs).mean() < before


def test_inactive_steps_do_not_change_the_losses():
    th.manual_seed(0)
    obs_space, act_space = spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Box(-1, 1, (2,), np.float32)
    signal = CuriositySignal(obs_space, act_space, settings("curiosity"), "cpu")
    obs, actions, next_obs = _dynamics_batch(act_space, n=16)
    weights = np.ones(16, np.float32)
    weights[8:] = 0.0
    garbage_next = next_obs.copy()
    garbage_next[8:] = 1e3  # placeholder observations
    clean = signal.losses(signal.batch(obs[:8], actions[:8], next_obs[:8]))
    masked = signal.losses(signal.batch(obs, actions, garbage_next, weights=weights))
    for a, b in zip(clean, masked):
        assert a.item() == pytest.approx(b.item(), rel=1e-5)


# ---------------------------------------------------------------- RND
def test_rnd_reward_falls_on_repeated_states_but_not_on_new_ones():
    th.manual_seed(0)
    obs_space, act_space = spaces.Box(-np.inf, np.inf, (6,), np.float32), spaces.Discrete(2)
    signal = RNDSignal(obs_space, act_space, settings("rnd", learning_rate=3e-3), "cpu")
    rng = np.random.default_rng(0)
    seen = rng.normal(size=(32, 6)).astype(np.float32)
    novel = rng.normal(loc=3.0, size=(32, 6)).astype(np.float32)
    actions = np.zeros((32, 1))
    before = signal.reward(seen, actions, seen).mean()
    batch = signal.batch(seen, actions, seen)
    for _ in range(300):
        stats = signal.update(batch)
    after_seen = signal.reward(seen, actions, seen).mean()
    after_novel = signal.reward(novel, actions, novel).mean()
    assert after_seen < 0.1 * before
    assert after_novel > 5 * after_seen
    assert stats["loss"] == pytest.approx(after_seen, rel=0.2)


def test_rnd_target_is_fixed():
    signal = RNDSignal(spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(2), settings("rnd"), "cpu")
    target = [p.detach().clone() for p in signal.target.parameters()]
    obs = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    for _ in range(5):
        signal.update(signal.batch(obs, np.zeros((8, 1)), obs))
    assert all(th.equal(a, b) for a, b in zip(target, signal.target.parameters()))


@pytest.mark.parametrize(
    ("name", "signal_class", "encoder"),
    [("rnd", RNDSignal, "predictor"), ("curiosity", CuriositySignal, "encoder")],
)
def test_normalize_true_updates_running_statistics(name, signal_class, encoder):
    s = settings(name, network_settings={**SMALL, "normalize": True})
    signal = signal_class(spaces.Box(-np.inf, np.inf, (3,), np.float32), spaces.Discrete(2), s, "cpu")
    obs = np.random.default_rng(0).normal(loc=5.0, size=(64, 3)).astype(np.float32)
    signal.update(signal.batch(obs, np.zeros((64, 1)), obs))
    normalizer = getattr(signal, encoder).normalizers["obs"]
    assert np.allclose(normalizer.mean.numpy(), obs.mean(0), atol=1e-3)
    assert np.allclose(normalizer.var.numpy(), obs.var(0), rtol=0.05)


# ---------------------------------------------------------------- GAIL
def _expert_and_random(n: int = 128, seed: int = 0):
    rng = np.random.default_rng(seed)
    expert_obs = rng.normal(loc=1.5, scale=0.5, size=(n, 4)).astype(np.float32)
    expert_actions = np.ones((n, 1), np.int64)
    policy_obs = rng.normal(size=(n, 4)).astype(np.float32)
    policy_actions = rng.integers(0, 3, size=(n, 1))
    return expert_obs, expert_actions, policy_obs, policy_actions


@pytest.mark.parametrize(
    ("use_actions", "use_vail"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_gail_discriminator_separates_expert_from_random(use_actions, use_vail):
    th.manual_seed(0)
    expert_obs, expert_actions, policy_obs, policy_actions = _expert_and_random()
    s = settings(
        "gail",
        demonstrations=(expert_obs, expert_actions),
        use_actions=use_actions,
        use_vail=use_vail,
        learning_rate=1e-3,
    )
    signal = GAILSignal(spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(3), s, "cpu")
    batch = signal.batch(policy_obs, policy_actions, policy_obs, np.zeros(len(policy_obs)))
    for _ in range(300):
        stats = signal.update(batch)
    expert_reward = signal.reward(expert_obs, expert_actions, expert_obs).mean()
    policy_reward = signal.reward(policy_obs, policy_actions, policy_obs).mean()
    assert expert_reward > 1.5 * policy_reward
    assert stats["expert_estimate"] > stats["policy_estimate"] + 0.15
    assert "gradient_penalty" in stats
    if use_vail:
        assert stats["beta"] >= 0.0 and "kl_loss" in stats


def test_gail_expert_data_from_arrays_dicts_and_demonstrations():
    from mlagents_envs.base_env import (
        ActionSpec,
        BehaviorSpec,
        DimensionProperty,
        ObservationSpec,
        ObservationType,
    )

    from unity_sb3.demos.dataset import Demonstration

    obs_space, act_space = spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(3)
    obs, acts = np.zeros((5, 4), np.float32), np.array([0, 1, 2, 1, 0])
    for data in [(obs, acts), {"observations": obs, "actions": acts, "dones": np.zeros(5)}]:
        expert = load_expert_data({"demonstrations": data}, obs_space, act_space)
        assert expert.n == 5 and expert.actions.shape == (5, 1)
    expert = load_expert_data({"demonstrations": (obs, acts, [0, 0, 1, 0, 1])}, obs_space, act_space)
    assert expert.dones.tolist() == [0, 0, 1, 0, 1]

    # two episodes (3 and 2 transitions); the second ends by interruption: still a done
    spec = BehaviorSpec(
        [ObservationSpec((4,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "v")],
        ActionSpec.create_discrete((3,)),
    )
    rows = np.arange(20, dtype=np.float32).reshape(5, 4) / 20
    next_rows = np.concatenate([rows[1:], rows[:1] + 0.5])
    truncated = [{}, {}, {}, {}, {"TimeLimit.truncated": True}]
    demo = Demonstration.from_transitions(rows, acts, next_rows, [0, 0, 1, 0, 1], spec, infos=truncated)
    expert = load_expert_data({"demonstrations": demo}, obs_space, act_space)
    assert np.array_equal(expert.observations, rows) and expert.actions[:, 0].tolist() == acts.tolist()
    assert expert.dones.tolist() == [0, 0, 1, 0, 1]


def test_gail_unity_layout_arrays_without_a_unity_env_are_refused():
    """One array per observation spec (Unity's layout) needs the behavior's spec to be converted."""
    obs_space = spaces.Box(0, 255, (3, 6, 5), np.uint8)
    hwc = np.full((2, 6, 5, 3), 0.5, np.float32)
    with pytest.raises(RewardSignalConfigError, match="Unity's layout"):
        load_expert_data(
            {"demonstrations": ([hwc], np.zeros((2, 2), np.float32))}, obs_space, spaces.Box(-1, 1, (2,))
        )


def test_gail_rejects_mismatched_expert_data():
    with pytest.raises(RewardSignalConfigError, match="same non-zero number of rows"):
        ExpertData(np.zeros((3, 4)), np.zeros((2, 1)))
    with pytest.raises(RewardSignalConfigError, match="observation space needs"):
        load_expert_data(
            {"demonstrations": (np.zeros((3, 7)), np.zeros(3))}, spaces.Box(-1, 1, (4,)), spaces.Discrete(2)
        )
    with pytest.raises(RewardSignalConfigError, match="got int"):
        load_expert_data({"demonstrations": 42}, spaces.Box(-1, 1, (4,)), spaces.Discrete(2))


def test_gail_loads_expert_data_lazily():
    s = settings("gail", demo_path="/nonexistent/expert.demo")
    signal = GAILSignal(spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2), s, "cpu")
    obs = np.zeros((2, 4), np.float32)
    assert signal.reward(obs, np.zeros((2, 1)), obs).shape == (2,)  # no demo needed to score
    with pytest.raises((FileNotFoundError, OSError, ValueError)):
        signal.sample_expert(4)


def test_gail_reads_a_recorded_demo_file(tmp_path):
    envs = pytest.importorskip("unity_sb3.scenes")
    demo = pytest.importorskip("unity_sb3.demos.writer")
    scene = envs.make_scene("Ball3D", seed=0)
    name = next(iter(scene.behavior_specs))
    path = tmp_path / "expert.demo"
    demo.record_demo(scene, name, lambda steps: scene.expert_actions(name, steps), path, n_steps=60)
    scene.close()
    from unity_sb3.spaces import BehaviorSpaces

    behavior_spaces = BehaviorSpaces(scene.behavior_specs[name])
    s = settings("gail", demo_path=str(path))
    expert = load_expert_data(s, behavior_spaces.observation_space, behavior_spaces.action_space)
    assert expert.n > 0
    assert expert.observations.shape[1:] == behavior_spaces.observation_space.shape


# ---------------------------------------------------------------- factory / state
def test_make_reward_signals_skips_extrinsic_and_keeps_order():
    parsed = parse_reward_signals({"rnd": {}, "extrinsic": {}, "curiosity": {}}, 0.99)
    signals = make_reward_signals(parsed, spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(2), "cpu")
    assert list(signals) == ["rnd", "curiosity"]


def test_signal_state_dict_round_trip_gives_identical_rewards():
    th.manual_seed(0)
    obs_space, act_space = spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(3)
    a = CuriositySignal(obs_space, act_space, settings("curiosity"), "cpu")
    obs, actions, next_obs = _dynamics_batch(act_space, n=8)
    a.update(a.batch(obs, actions, next_obs))
    th.manual_seed(1)
    b = CuriositySignal(obs_space, act_space, settings("curiosity"), "cpu")
    b.load_state_dict(a.state_dict())
    b.optimizer.load_state_dict(a.optimizer.state_dict())
    assert np.array_equal(a.reward(obs, actions, next_obs), b.reward(obs, actions, next_obs))
    a.update(a.batch(obs, actions, next_obs))
    b.update(b.batch(obs, actions, next_obs))
    assert np.allclose(a.reward(obs, actions, next_obs), b.reward(obs, actions, next_obs), atol=1e-6)
