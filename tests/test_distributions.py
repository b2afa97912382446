"""The hybrid action distribution and the action-layout helpers shared by PPO, POCA, SAC and BC."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from torch.distributions import Categorical, Normal

from unity_sb3.algorithms.distributions import (
    MASKED_LOGIT,
    HybridDistribution,
    action_layout,
    flat_action_space,
    hybrid_env_actions,
    is_hybrid_space,
    join_hybrid_actions,
    split_hybrid_actions,
)

HYBRID = spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.MultiDiscrete([3, 2])))


def _dist(masks=None, seed=0) -> tuple[HybridDistribution, th.Tensor, th.Tensor]:
    th.manual_seed(seed)
    dist = HybridDistribution(2, [3, 2])
    out = th.randn(4, 2 + 5)
    log_std = th.tensor([-0.5, 0.3])
    return dist.proba_distribution(out, log_std, masks), out, log_std


def test_layout_of_a_hybrid_space_is_continuous_size_then_branches():
    assert is_hybrid_space(HYBRID)
    assert not is_hybrid_space(spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))))
    assert action_layout(HYBRID) == (2, [3, 2])
    flat = flat_action_space(HYBRID)
    assert isinstance(flat, spaces.Box) and flat.shape == (4,)
    assert flat_action_space(spaces.Discrete(3)) == spaces.Discrete(3)


def test_split_and_join_round_trip_and_clip_the_continuous_part():
    flat = np.array([[0.5, -3.0, 2.0, 1.0], [0.0, 0.1, 0.0, 0.0]], dtype=np.float32)
    continuous, discrete = split_hybrid_actions(flat, HYBRID)
    assert continuous.dtype == np.float32 and discrete.dtype == np.int64
    np.testing.assert_array_equal(continuous[0], [0.5, -1.0])
    np.testing.assert_array_equal(discrete, [[2, 1], [0, 0]])
    np.testing.assert_array_equal(join_hybrid_actions((continuous, discrete))[1], flat[1])


def test_a_tuple_that_is_not_hybrid_gets_a_clear_error():
    with pytest.raises(ValueError, match="hybrid='tuple'"):
        action_layout(spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))))


def test_log_prob_is_the_gaussian_plus_every_branch():
    dist, out, log_std = _dist()
    actions = dist.sample()
    assert actions.shape == (4, 4)
    normal = Normal(out[:, :2], log_std.exp())
    expected = normal.log_prob(actions[:, :2]).sum(1)
    expected = expected + Categorical(logits=out[:, 2:5]).log_prob(actions[:, 2].long())
    expected = expected + Categorical(logits=out[:, 5:7]).log_prob(actions[:, 3].long())
    th.testing.assert_close(dist.log_prob(actions), expected)
    entropy = normal.entropy().sum(1) + Categorical(logits=out[:, 2:5]).entropy()
    entropy = entropy + Categorical(logits=out[:, 5:7]).entropy()
    th.testing.assert_close(dist.entropy(), entropy)


def test_log_prob_parts_are_each_dimension_then_each_branch_and_sum_to_log_prob():
    dist, out, log_std = _dist()
    actions = dist.sample()
    parts = dist.log_prob_parts(actions)
    assert parts.shape == (4, 2 + 2)
    th.testing.assert_close(parts[:, :2], Normal(out[:, :2], log_std.exp()).log_prob(actions[:, :2]))
    th.testing.assert_close(parts[:, 3], Categorical(logits=out[:, 5:7]).log_prob(actions[:, 3].long()))
    th.testing.assert_close(parts.sum(1), dist.log_prob(actions))


def test_masked_actions_are_never_sampled_and_the_mode_respects_masks():
    masks = np.ones((4, 5), dtype=bool)
    masks[:, 0] = masks[:, 1] = False  # branch 0: only action 2 allowed
    masks[:, 4] = False  # branch 1: only action 0 allowed
    dist, out, _ = _dist(masks)
    for _ in range(20):
        sample = dist.sample()
        assert (sample[:, 2] == 2).all() and (sample[:, 3] == 0).all()
    mode = dist.mode()
    th.testing.assert_close(mode[:, :2], out[:, :2])
    assert (mode[:, 2] == 2).all() and (mode[:, 3] == 0).all()
    # a forced branch adds nothing to the log-probability, and a forbidden action is ~impossible
    assert dist.discrete_log_probs(th.tensor([[2, 0]] * 4)).abs().max() < 1e-5
    assert (dist.discrete_log_probs(th.tensor([[0, 1]] * 4)) < MASKED_LOGIT / 2).all()


def test_a_branch_whose_mask_allows_nothing_is_left_unmasked():
    masks = np.ones((4, 5), dtype=bool)
    masks[:, 3:] = False
    dist, out, _ = _dist(masks)
    th.testing.assert_close(dist.categoricals[1].logits, Categorical(logits=out[:, 5:7]).logits)


def test_the_action_net_outputs_means_then_logits():
    net, log_std = HybridDistribution(2, [3, 2]).proba_distribution_net(latent_dim=8, log_std_init=-1.0)
    assert net.out_features == 7 and log_std.shape == (2,)
    assert th.allclose(log_std, th.full((2,), -1.0))


def test_a_hybrid_distribution_needs_both_parts():
    with pytest.raises(ValueError, match="continuous values and discrete branches"):
        HybridDistribution(0, [2])


def test_sb3_vec_envs_get_one_tuple_per_env_and_other_envs_the_tuple_of_stacks():
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

    flat = np.array([[0.5, -0.5, 2.0, 1.0], [0.0, 0.1, 0.0, 0.0]], dtype=np.float32)
    dummy = VecMonitor(DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2))
    per_env = hybrid_env_actions(flat, HYBRID, dummy)
    assert isinstance(per_env, list) and len(per_env) == 2
    np.testing.assert_array_equal(per_env[1][1], [0, 0])
    stacks = hybrid_env_actions(flat, HYBRID, object())
    assert isinstance(stacks, tuple) and stacks[0].shape == (2, 2) and stacks[1].shape == (2, 2)
