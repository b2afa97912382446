"""POCA with hybrid actions: the shared actor's hybrid head, the baseline's action encoding, masks, a run on HybridLine."""

from __future__ import annotations

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv
from test_ppo_hybrid import MaskedHybridEnv

from unity_sb3.algorithms.distributions import HybridDistribution
from unity_sb3.algorithms.poca import POCA
from unity_sb3.algorithms.poca.policies import POCAPolicy
from unity_sb3.scenes import make_scene
from unity_sb3.wrappers.vec_env import UnityVecEnv

HYBRID = spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.MultiDiscrete([3, 2])))


def test_the_actor_takes_the_hybrid_distribution_and_the_baseline_one_hot_branches():
    policy = POCAPolicy(spaces.Box(-1, 1, (3,), np.float32), HYBRID, lambda _: 1e-3, net_arch=[8])
    assert isinstance(policy.action_dist, HybridDistribution)
    assert policy.encoded_action_dim == 2 + 5
    stored = th.tensor([[0.5, -0.25, 2.0, 1.0]])
    np.testing.assert_allclose(policy.encode_actions(stored).numpy(), [[0.5, -0.25, 0, 0, 1, 0, 1]])
    actions, log_prob = policy(th.zeros(4, 3))
    assert actions.shape == (4, 4) and log_prob.shape == (4,)


def test_poca_runs_on_hybrid_line_and_predicts_the_tuple():
    env = UnityVecEnv(make_scene("HybridLine", seed=0, num_agents=4), hybrid="tuple")
    model = POCA(
        "MlpPolicy", env, n_steps=16, batch_size=32, n_epochs=2, seed=0, policy_kwargs=dict(net_arch=[16])
    )
    model.learn(128)
    assert model.rollout_buffer.actions.shape[-1] == 2
    (continuous, discrete), _ = model.predict(env.reset(), deterministic=True)
    assert continuous.shape == (4, 1) and discrete.shape == (4, 1) and discrete.dtype == np.int64
    env.close()


def test_masks_reach_the_hybrid_actions_and_the_buffer():
    env = DummyVecEnv([MaskedHybridEnv, MaskedHybridEnv])
    model = POCA(
        "MlpPolicy", env, n_steps=8, batch_size=16, n_epochs=1, seed=0, policy_kwargs=dict(net_arch=[8])
    )
    model.learn(32)
    received = [d for e in env.envs for _, d in e.received]
    assert received and all(tuple(d) == (2, 0) for d in received)
    buffer = model.rollout_buffer
    assert buffer.has_masks and not buffer.action_masks[..., 0].any()
