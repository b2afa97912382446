"""POCA's fast paths compute exactly what the slower code they replace computes (bit for bit), except
the padded critic pass of small minibatches, which matches the split one within float rounding."""

from __future__ import annotations

import pytest
import torch as th

from unity_sb3.algorithms.poca.networks import GroupCriticBody
from unity_sb3.algorithms.poca.optim import FlatAdam


def _train(optimizer_class, shapes, steps, seed, skip=None, reload_at=None):
    th.manual_seed(seed)
    params = [th.nn.Parameter(th.randn(shape)) for shape in shapes]
    optimizer = optimizer_class(params, lr=5e-3, eps=1e-5, foreach=True)
    gen = th.Generator().manual_seed(seed + 1)
    for step in range(steps):
        optimizer.zero_grad()
        for k, p in enumerate(params):
            if skip is not None and skip(step, k):
                continue  # no gradient: Adam leaves this parameter (and its step count) alone
            scale = 10.0 ** int(th.randint(-6, 3, (), generator=gen))
            p.grad = th.randn(p.shape, generator=gen) * scale
        optimizer.step()
        if reload_at == step:  # a state saved and loaded mid-run (as a model save/load does)
            optimizer.load_state_dict(optimizer.state_dict())
    return params, optimizer.state_dict()


@pytest.mark.parametrize("case", ["all", "skips", "never", "reload"])
def test_flat_adam_equals_torch_foreach_adam(case):
    """Parameters and state (moments, step counts) equal torch's foreach Adam bit for bit, also when
    some parameters miss gradients (then their step counts differ) or never get one."""
    shapes = [(32, 1), (32,), (2, 32), (2,), (96, 32), (96,), (7, 3, 5), (1,), (33, 17)]
    skip = {
        "all": None,
        "skips": lambda step, k: (k == 1 and step % 7 == 3) or (k == 4 and step % 11 == 5),
        "never": lambda step, k: k in (2, 3),
        "reload": lambda step, k: k == 0 and step % 5 == 0,
    }[case]
    reload_at = 40 if case == "reload" else None
    want, want_state = _train(th.optim.Adam, shapes, 120, 0, skip, reload_at)
    got, got_state = _train(FlatAdam, shapes, 120, 0, skip, reload_at)
    assert all(th.equal(a, b) for a, b in zip(want, got))
    for index, state in want_state["state"].items():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert th.equal(state[key], got_state["state"][index][key])


def test_flat_adam_runs_step_hooks():
    """Without hooks the step skips torch's profiler wrapper; registered hooks still run."""
    param = th.nn.Parameter(th.ones(3))
    optimizer = FlatAdam([param], lr=0.1)
    calls = []
    optimizer.register_step_pre_hook(lambda *args: calls.append("pre"))
    optimizer.register_step_post_hook(lambda *args: calls.append("post"))
    param.grad = th.ones(3)
    optimizer.step()
    assert calls == ["pre", "post"] and not th.equal(param, th.ones(3))


@pytest.mark.parametrize("deterministic", [False, True])
def test_gaussian_paths_equal_sb3_distribution(deterministic):
    """Sampling and evaluating Box actions without the distribution object: SB3's draws,
    log-probabilities, entropies and gradients."""
    from stable_baselines3.common.distributions import DiagGaussianDistribution

    from unity_sb3.algorithms.poca.policies import diag_gaussian_log_prob_entropy, sample_diag_gaussian

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
    assert th.equal(log_prob, want_log_prob)

    given = want.detach()
    distribution = DiagGaussianDistribution(3).proba_distribution(mean, log_std)
    want_log_prob, want_entropy = distribution.log_prob(given), distribution.entropy()
    want_grads = th.autograd.grad((want_log_prob + 0.1 * want_entropy).sum(), (mean, log_std))
    log_prob, entropy = diag_gaussian_log_prob_entropy(mean, log_std, given)
    grads = th.autograd.grad((log_prob + 0.1 * entropy).sum(), (mean, log_std))
    assert th.equal(log_prob, want_log_prob)
    assert th.equal(entropy, want_entropy)
    assert all(th.equal(a, b) for a, b in zip(grads, want_grads))


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
