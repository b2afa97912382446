"""Entity attention (``unity_sb3.networks.attention``): masks, order invariance, the extractor's choice, every learner."""

from __future__ import annotations

import warnings

import pytest
import torch as th
from gymnasium import spaces

from unity_sb3 import PPO, UnityVecEnv
from unity_sb3.networks.attention import (
    EntityAttention,
    ResidualSelfAttention,
    zero_entities_mask,
)
from unity_sb3.networks.extractors import UnityMultiInputExtractor
from unity_sb3.scenes import make_scene

SORTER = "Sorter?team=0"
SMALL_NET = {"features_extractor_class": UnityMultiInputExtractor, "net_arch": [32]}


def entities(batch: int = 3, rows: int = 6, size: int = 5, present: int = 3, seed: int = 0) -> th.Tensor:
    """``present`` random rows then zero padding: ``(batch, rows, size)``."""
    g = th.Generator().manual_seed(seed)
    x = th.zeros(batch, rows, size)
    x[:, :present] = th.randn(batch, present, size, generator=g) + 0.5
    return x


def sorter_env(n: int = 2, **params) -> UnityVecEnv:
    return UnityVecEnv(make_scene("Sorter", seed=0, num_agents=n, **params))


# ------------------------------------------------------------------------------- the layers


def test_zero_rows_are_masked_and_real_rows_are_not():
    x = entities(present=2)
    x[0, 1] = 0.04  # squared sum 5 * 0.0016 < 0.01: padding for ML-Agents too
    mask = zero_entities_mask(x)
    assert mask.shape == (3, 6) and mask.dtype == th.float32
    assert mask[1:, :2].sum() == 0 and mask[:, 2:].eq(1).all()
    assert mask[0, 1] == 1 and mask[0, 0] == 0


def test_output_ignores_entity_order_and_where_the_padding_sits():
    th.manual_seed(0)
    module = EntityAttention(self_size=4, entity_shapes=[(6, 5)], embedding_size=16, num_heads=4)
    x_self, x = th.randn(3, 4), entities()
    shuffled = x[:, [2, 5, 0, 3, 1, 4]]  # the same three entities among the padding, in another order
    th.testing.assert_close(module(x_self, [x]), module(x_self, [shuffled]), rtol=1e-5, atol=1e-5)


def test_output_depends_on_the_entities_and_on_self():
    th.manual_seed(0)
    module = EntityAttention(self_size=4, entity_shapes=[(6, 5)], embedding_size=16)
    x_self, x = th.randn(3, 4), entities()
    other = x.clone()
    other[:, 0] += 1.0
    base = module(x_self, [x])
    assert not th.allclose(base, module(x_self, [other]))
    assert not th.allclose(base, module(x_self + 1.0, [x]))


def test_no_entity_at_all_gives_zeros_not_nan():
    module = EntityAttention(self_size=0, entity_shapes=[(4, 3)], embedding_size=8, num_heads=2)
    out = module(None, [th.zeros(2, 4, 3)])
    assert out.shape == (2, 8) and th.equal(out, th.zeros(2, 8))


def test_several_rank2_observations_attend_together():
    module = EntityAttention(self_size=2, entity_shapes=[(3, 4), (5, 2)], embedding_size=8, num_heads=2)
    assert module.attention.max_entities == 8
    out = module(th.randn(2, 2), [entities(2, 3, 4, 2), entities(2, 5, 2, 1)])
    assert out.shape == (2, 8) and th.isfinite(out).all()


@pytest.mark.parametrize("packed", [False, True], ids=["padded-rows", "real-rows-only"])
@pytest.mark.parametrize("self_size", [0, 4])
def test_fast_path_gives_the_values_and_gradients_of_ml_agents_layout(monkeypatch, self_size, packed):
    """Outside ONNX tracing the layers take cheaper routes (fused norms, self part once, padding cut,
    dense layers on real rows only): same math."""
    from unity_sb3.networks import attention

    monkeypatch.setattr(attention, "PACK_MIN_PADDING_ROWS", 0 if packed else 10**9)
    th.manual_seed(0)
    module = EntityAttention(self_size, [(7, 5), (4, 3)], embedding_size=16, num_heads=4)
    x_self = th.randn(6, self_size) if self_size else None
    first, second = entities(6, 7, 5, present=4, seed=1), entities(6, 4, 3, present=2, seed=2)
    first[0, 1] = 0.0  # padding between real rows
    first[1, 2:4] = 0.0  # fewer rows in one observation: the batch's last real row sets the cut
    second[2] = 0.0  # no entity in the second observation for one row
    second[:, 1] = 0.0
    first[3] = 0.0
    second[3] = 0.0  # nothing at all for one row
    weights = th.linspace(-1, 1, 16)

    def run() -> tuple[th.Tensor, list[th.Tensor]]:
        module.zero_grad()
        out = module(x_self, [first, second])
        (out * weights).sum().backward()
        return out.detach(), [p.grad.clone() for p in module.parameters()]

    fast, fast_grads = run()
    monkeypatch.setattr(attention, "_exporting", lambda: True)  # what ONNX export traces
    reference, reference_grads = run()
    th.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-6)
    assert th.equal(fast[3], th.zeros(16))
    for got, expected in zip(fast_grads, reference_grads):
        th.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_bad_settings_say_what_is_wrong():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        ResidualSelfAttention(10, 4, num_heads=4)
    with pytest.raises(ValueError, match=r"\(max_entities, entity_size\)"):
        EntityAttention(3, [(5,)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"\(max_entities, entity_size\)"):
        EntityAttention(3, [])
    with pytest.raises(ValueError, match="entities must be 'attention' or 'flatten'"):
        UnityMultiInputExtractor(spaces.Box(-1, 1, (4, 3)), entities="pool")


# ------------------------------------------------------------------------------- the extractor


def test_extractor_chooses_attention_for_rank2_observations():
    space = spaces.Dict({"vec": spaces.Box(-1, 1, (4,)), "buf": spaces.Box(-1, 1, (6, 5))})
    extractor = UnityMultiInputExtractor(space, entity_embedding_size=16)
    assert extractor.entity_keys == ["buf"] and extractor.attention is not None
    assert extractor.features_dim == 4 + 16
    obs = {"vec": th.randn(3, 4), "buf": entities()}
    out = extractor(obs)
    assert out.shape == (3, 20)
    th.testing.assert_close(out[:, :4], obs["vec"])  # fixed observations pass through, attention last
    single = UnityMultiInputExtractor(spaces.Box(-1, 1, (6, 5)), entity_embedding_size=16)
    assert single(entities()).shape == (3, 16)


def test_extractor_flattens_only_when_asked_and_warns():
    space = spaces.Dict({"vec": spaces.Box(-1, 1, (4,)), "buf": spaces.Box(-1, 1, (6, 5))})
    with pytest.warns(UserWarning, match="pads and flattens"):
        extractor = UnityMultiInputExtractor(space, entities="flatten")
    assert extractor.attention is None and extractor.features_dim == 4 + 30
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        UnityMultiInputExtractor(space)  # the default warns about nothing


# ------------------------------------------------------------------------------- every learner


def test_ppo_learns_with_a_rank2_observation():
    env = sorter_env()
    assert env.observation_space["BufferSensor"].shape == (20, 22)
    model = PPO("MultiInputPolicy", env, n_steps=16, batch_size=16, n_epochs=1, policy_kwargs=SMALL_NET)
    assert model.policy.features_extractor.entity_keys == ["BufferSensor"]
    model.learn(32)
    env.close()


def test_sac_learns_with_a_rank2_observation():
    from unity_sb3 import SAC

    env = sorter_env()
    model = SAC(
        "MultiInputPolicy",
        env,
        learning_starts=8,
        batch_size=8,
        buffer_size=200,
        policy_kwargs={**SMALL_NET, "net_arch": [16]},
    )
    model.learn(24)
    assert model.policy.actor.features_extractor.attention is not None
    env.close()


def test_poca_learns_with_a_rank2_observation():
    from unity_sb3 import POCA

    env = sorter_env()
    model = POCA(
        "MultiInputPolicy",
        env,
        n_steps=16,
        batch_size=16,
        n_epochs=1,
        policy_kwargs={"features_extractor_class": UnityMultiInputExtractor},
    )
    model.learn(32)
    assert model.policy.features_extractor.attention is not None
    env.close()


@pytest.mark.parametrize("signal", ["curiosity", "rnd"])
def test_reward_signals_encode_rank2_observations_with_attention(signal):
    env = sorter_env()
    settings = {"extrinsic": {}, signal: {"strength": 0.1, "network_settings": {"hidden_units": 16}}}
    model = PPO(
        "MultiInputPolicy",
        env,
        n_steps=16,
        batch_size=16,
        n_epochs=1,
        policy_kwargs=SMALL_NET,
        reward_signals=settings,
    )
    model.learn(32)
    encoders = [m for m in model.signals[signal].modules() if isinstance(m, EntityAttention)]
    assert encoders
    env.close()


@pytest.fixture(scope="module")
def sorter_demo(tmp_path_factory):
    from unity_sb3.demos import record_demo

    scene = make_scene("Sorter", seed=1, num_agents=4)
    path = tmp_path_factory.mktemp("demos") / "SorterExpert.demo"
    record_demo(scene, SORTER, lambda steps: scene.expert_actions(SORTER, steps), path, n_steps=400)
    scene.close()
    return path


def test_gail_and_bc_read_rank2_demonstrations(sorter_demo):
    env = sorter_env()
    model = PPO(
        "MultiInputPolicy",
        env,
        n_steps=16,
        batch_size=16,
        n_epochs=1,
        policy_kwargs=SMALL_NET,
        reward_signals={
            "extrinsic": {},
            "gail": {"demo_path": str(sorter_demo), "network_settings": {"hidden_units": 16}},
        },
        behavioral_cloning={"demo_path": str(sorter_demo), "strength": 0.5, "batch_size": 16},
    )
    model.learn(32)
    assert any(isinstance(m, EntityAttention) for m in model.signals["gail"].modules())
    env.close()


def test_pretrained_bc_fits_rank2_demonstrations(sorter_demo):
    from unity_sb3.algorithms.bc import pretrain_bc

    env = sorter_env()
    model = PPO("MultiInputPolicy", env, n_steps=16, batch_size=16, policy_kwargs=SMALL_NET, seed=0)
    history = pretrain_bc(model, sorter_demo, epochs=6, batch_size=64, learning_rate=3e-3, seed=0)
    assert history["loss"][-1] < 0.8 * history["loss"][0]
    env.close()
