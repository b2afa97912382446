"""POCA's fast paths compute exactly what the slower code they replace computes (bit for bit), except
the padded critic pass of small minibatches and the two-entity attention, which match the code they
replace within float rounding; its default optimizer is torch's fused (or foreach) Adam."""

from __future__ import annotations

import pytest
import torch as th
from goal_line import GoalLineTeam

from unity_sb3 import UnityVecEnv
from unity_sb3.algorithms.poca.networks import GroupCriticBody, ResidualSelfAttention


def test_default_adam_is_a_multi_tensor_kernel():
    """POCA's default optimizer steps all parameters in one kernel (fused where torch has it)."""
    from unity_sb3.algorithms.optimizers import adam_kernel_kwargs
    from unity_sb3.algorithms.poca import POCA

    kwargs = adam_kernel_kwargs()
    assert kwargs in ({"fused": True}, {"foreach": True})
    env = GoalLineTeam(seed=0)
    try:
        model = POCA("MlpPolicy", UnityVecEnv(env), n_steps=8, batch_size=8, seed=0)
        defaults = model.policy.optimizer.defaults
        assert type(model.policy.optimizer) is th.optim.Adam and defaults["eps"] == 1e-5
        assert all(defaults[key] is value for key, value in kwargs.items())
    finally:
        env.close()


@pytest.mark.parametrize("deterministic", [False, True])
def test_gaussian_paths_equal_sb3_distribution(deterministic):
    """Sampling and evaluating Box actions without the distribution object: SB3's draws and
    actions exactly; its log-probabilities, entropies and gradients to float rounding."""
    from stable_baselines3.common.distributions import DiagGaussianDistribution

    from unity_sb3.algorithms.poca.sampling import diag_gaussian_log_prob_entropy, sample_diag_gaussian

    gen = th.Generator().manual_seed(0)
    mean = (th.randn(64, 3, generator=gen) * 2).requires_grad_(True)
    log_std = (th.randn(3, generator=gen) * 0.5).requires_grad_(True)
    distribution = DiagGaussianDistribution(3).proba_distribution(mean, log_std)
    th.manual_seed(3)
    want = distribution.get_actions(deterministic=deterministic)
    want_log_prob = distribution.log_prob(want)
    th.manual_seed(3)
    actions, log_prob = sample_diag_gaussian(mean, log_std, deterministic)
    assert th.equal(actions, want)
    th.testing.assert_close(log_prob, want_log_prob, rtol=1e-6, atol=1e-5)

    given = want.detach()
    distribution = DiagGaussianDistribution(3).proba_distribution(mean, log_std)
    want_log_prob, want_entropy = distribution.log_prob(given), distribution.entropy()
    want_grads = th.autograd.grad((want_log_prob + 0.1 * want_entropy).sum(), (mean, log_std))
    log_prob, entropy = diag_gaussian_log_prob_entropy(mean, log_std, given)
    grads = th.autograd.grad((log_prob + 0.1 * entropy).sum(), (mean, log_std))
    th.testing.assert_close(log_prob, want_log_prob, rtol=1e-6, atol=1e-5)
    th.testing.assert_close(entropy, want_entropy, rtol=1e-6, atol=1e-6)
    for grad, want_grad in zip(grads, want_grads):
        th.testing.assert_close(grad, want_grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("members", [1, 3])
def test_critic_full_groups_equal_masked_pass(members):
    """Rows whose members are all present skip the attention mask and the masked mean: the same
    values, baselines and gradients as the masked pass with an all-True mask."""
    th.manual_seed(0)
    critic = GroupCriticBody(5, 2, embed_dim=16, n_heads=4, net_arch=[16])
    features = th.randn(20, members, 5)
    actions = th.randn(20, members - 1, 2)
    mask = th.ones(20, members, dtype=th.bool)

    def run(full):
        critic.zero_grad()
        if full:
            values, baselines = critic.value_and_baseline(features, actions, mask)
        else:
            entities, entity_mask = critic.value_and_baseline_entities(features, actions, mask)
            pooled = critic._pool(entities, entity_mask)
            values, baselines = (pooled, pooled) if members == 1 else (pooled[:20], pooled[20:])
        (values.square().sum() + 0.5 * baselines.square().sum()).backward()
        return (
            values.detach(),
            baselines.detach(),
            [p.grad.clone() for p in critic.parameters() if p.grad is not None],
        )

    want, got = run(False), run(True)
    assert th.equal(want[0], got[0]) and th.equal(want[1], got[1])
    assert len(want[2]) == len(got[2]) and all(th.equal(a, b) for a, b in zip(want[2], got[2]))


@pytest.mark.parametrize("embed_dim,n_heads", [(16, 4), (128, 4), (12, 1)])
def test_two_entities_equal_the_attention_kernel(embed_dim, n_heads):
    """Two present entities take the sigmoid form of a two-key softmax: the outputs and gradients of
    torch's attention (the path taken with a mask), to float rounding."""
    th.manual_seed(0)
    block = ResidualSelfAttention(embed_dim, n_heads)
    with th.no_grad():  # non-trivial biases and norms
        for parameter in block.parameters():
            parameter.add_(0.1 * th.randn_like(parameter))
    entities = th.randn(50, 2, embed_dim) * 3

    def run(mask):
        block.zero_grad()
        given = entities.clone().requires_grad_(True)
        out = block(given, mask)
        (out * th.linspace(-1, 1, embed_dim)).square().sum().backward()
        return out.detach(), given.grad, [p.grad.clone() for p in block.parameters()]

    want, got = run(th.ones(50, 2, dtype=th.bool)), run(None)
    th.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    th.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-5)
    for grad, want_grad in zip(got[2], want[2]):
        th.testing.assert_close(grad, want_grad, rtol=1e-4, atol=1e-4)


def test_small_batches_take_one_padded_critic_pass():
    """Below SPLIT_BY_SIZE_MIN_BATCH rows per minibatch the critic takes one padded pass instead of
    one per group size: the same values within float rounding."""
    import gymnasium as gym
    from gymnasium import spaces
    from stable_baselines3.common.vec_env import DummyVecEnv

    from unity_sb3 import POCA
    from unity_sb3.algorithms.poca.poca import SPLIT_BY_SIZE_MIN_BATCH

    class Env(gym.Env):  # never stepped: only the spaces are read
        observation_space = spaces.Box(-1, 1, (3,))
        action_space = spaces.Discrete(2)

    env = DummyVecEnv([Env, Env])
    small = POCA("MlpPolicy", env, n_steps=8, batch_size=SPLIT_BY_SIZE_MIN_BATCH - 1)
    large = POCA("MlpPolicy", env, n_steps=8, batch_size=SPLIT_BY_SIZE_MIN_BATCH)
    assert not small.policy.critic.split_by_size and large.policy.critic.split_by_size

    th.manual_seed(0)
    critic = GroupCriticBody(5, 2, embed_dim=16, n_heads=4, net_arch=[16])
    features, actions = th.randn(40, 3, 5), th.randn(40, 2, 2)
    mask = th.arange(3) < th.randint(1, 4, (40, 1))
    split = critic.value_and_baseline(features, actions, mask)
    critic.split_by_size = False
    padded = critic.value_and_baseline(features, actions, mask)
    for a, b in zip(split, padded):
        assert th.allclose(a, b, atol=1e-5)
