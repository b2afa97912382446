"""PPO with hybrid actions: HybridActorCriticPolicy, flat actions and masks in the buffer, learning on HybridLine."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

from unity_sb3.algorithms.distributions import HybridDistribution
from unity_sb3.algorithms.ppo.buffers import SignalRolloutBuffer
from unity_sb3.algorithms.ppo.hybrid import HybridActorCriticPolicy, HybridMultiInputPolicy
from unity_sb3.algorithms.ppo.ppo import PPO
from unity_sb3.scenes import make_scene
from unity_sb3.wrappers.vec_env import UnityVecEnv

HYBRID = spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.MultiDiscrete([3, 2])))


class MaskedHybridEnv(gym.Env):
    """Observation 1 float; actions (2 continuous, branches [3, 2]); the mask allows only (2, 0).

    Records every action it receives.
    """

    observation_space = spaces.Box(-1, 1, (1,), np.float32)
    action_space = HYBRID

    def __init__(self) -> None:
        self.received: list[tuple[np.ndarray, np.ndarray]] = []
        self.t = 0

    def action_masks(self) -> np.ndarray:
        return np.array([False, False, True, True, False])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        continuous, discrete = action
        self.received.append((np.asarray(continuous), np.asarray(discrete)))
        self.t += 1
        return np.zeros(1, np.float32), float(-abs(continuous[0])), False, self.t >= 8, {}


def _hybrid_line(seed: int = 0, n: int = 4) -> UnityVecEnv:
    return UnityVecEnv(make_scene("HybridLine", seed=seed, num_agents=n), hybrid="tuple")


def test_mlp_policy_becomes_the_hybrid_policy_for_a_tuple_action_space():
    env = _hybrid_line()
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    assert isinstance(model.policy, HybridActorCriticPolicy)
    assert isinstance(model.policy.action_dist, HybridDistribution)
    assert model.policy.action_net.out_features == 1 + 2  # one mean, then the logits of one branch of 2
    assert model.rollout_buffer.actions.shape[-1] == 2  # flat: continuous then the branch index
    env.close()


def test_learn_and_predict_give_the_tuple_batch_and_save_load_keeps_the_policy(tmp_path):
    env = _hybrid_line()
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=32, n_epochs=2, seed=0)
    model.learn(64)
    obs = env.reset()
    (continuous, discrete), _ = model.predict(obs, deterministic=True)
    assert continuous.shape == (4, 1) and continuous.dtype == np.float32
    assert discrete.shape == (4, 1) and discrete.dtype == np.int64
    assert np.all(np.abs(continuous) <= 1.0) and set(np.unique(discrete)) <= {0, 1}
    (one_c, one_d), _ = model.predict(obs[0], deterministic=True)
    assert one_c.shape == (1,) and one_d.shape == (1,)
    model.save(tmp_path / "hybrid.zip")
    loaded = PPO.load(tmp_path / "hybrid.zip", env=env)
    assert isinstance(loaded.policy, HybridActorCriticPolicy)
    (c2, d2), _ = loaded.predict(obs, deterministic=True)
    np.testing.assert_allclose(c2, continuous)
    np.testing.assert_array_equal(d2, discrete)
    env.close()


def test_env_masks_reach_the_actions_and_the_buffer_and_training():
    env = DummyVecEnv([MaskedHybridEnv, MaskedHybridEnv])
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=2, seed=1)
    model.learn(64)
    received = [d for e in env.envs for _, d in e.received]
    assert received and all(tuple(d) == (2, 0) for d in received)
    buffer = model.rollout_buffer
    np.testing.assert_array_equal(buffer.action_masks[0, 0], [False, False, True, True, False])
    assert (buffer.actions[..., 2] == 2).all() and (buffer.actions[..., 3] == 0).all()
    # the stored log-probabilities were taken under the masks: the discrete part adds ~0
    sample = next(buffer.get(8))
    assert sample.action_masks is not None and sample.action_masks.dtype == th.bool
    with th.no_grad():
        _, log_prob, _ = model.policy.evaluate_actions(
            sample.observations, sample.actions, sample.action_masks
        )
        _, unmasked, _ = model.policy.evaluate_actions(sample.observations, sample.actions)
    assert (log_prob > unmasked).all()


def test_the_buffer_keeps_log_probabilities_per_dimension_and_branch_for_a_per_part_ratio(monkeypatch):
    """ML-Agents' PPO clips one ratio per action dimension and branch: the buffer keeps each action's
    log-probability per part (their sum is the joint one), as the collecting policy gave them."""
    env = DummyVecEnv([MaskedHybridEnv, MaskedHybridEnv])
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=2, seed=1)
    checked = []
    original_train = model.train

    def train():
        sample = next(model.rollout_buffer.get(16))
        assert sample.old_log_prob_parts is not None and sample.old_log_prob_parts.shape == (16, 2 + 2)
        th.testing.assert_close(sample.old_log_prob_parts.sum(1), sample.old_log_prob)
        with th.no_grad():  # the policy has not changed since it collected: ratio 1 in every part
            model.policy.evaluate_actions(sample.observations, sample.actions, sample.action_masks)
            parts = model.policy.action_dist.log_prob_parts(sample.actions)
        th.testing.assert_close(parts, sample.old_log_prob_parts, atol=1e-5, rtol=1e-5)
        checked.append(True)
        original_train()

    monkeypatch.setattr(model, "train", train)
    model.learn(64)
    assert len(checked) == 2
    assert np.isfinite(model.logger.name_to_value["train/clip_fraction"])


def test_a_buffer_of_non_hybrid_actions_refuses_log_prob_parts():
    with pytest.raises(ValueError, match="hybrid"):
        SignalRolloutBuffer(4, spaces.Box(-1, 1, (1,)), spaces.Box(-1, 1, (2,)), log_prob_parts=True)


def test_dict_observations_take_the_multi_input_variant():
    class DictObs(MaskedHybridEnv):
        observation_space = spaces.Dict({"goal": spaces.Box(-1, 1, (1,), np.float32)})

        def reset(self, *, seed=None, options=None):
            obs, info = super().reset(seed=seed)
            return {"goal": obs}, info

        def step(self, action):
            obs, *rest = super().step(action)
            return ({"goal": obs}, *rest)

    model = PPO("MultiInputPolicy", DummyVecEnv([DictObs]), n_steps=8, batch_size=8, n_epochs=1, seed=0)
    assert isinstance(model.policy, HybridMultiInputPolicy)
    model.learn(16)


def test_a_non_hybrid_tuple_or_a_box_only_policy_gets_a_clear_error():
    class TwoDiscrete(MaskedHybridEnv):
        action_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2)))

    with pytest.raises(ValueError, match="hybrid Tuple"):
        PPO("MlpPolicy", DummyVecEnv([TwoDiscrete]), n_steps=8, batch_size=8)
    from stable_baselines3.common.policies import ActorCriticPolicy

    class Plain(ActorCriticPolicy):
        pass

    with pytest.raises(ValueError, match="needs a hybrid policy"):
        PPO(Plain, DummyVecEnv([MaskedHybridEnv]), n_steps=8, batch_size=8)
    with pytest.raises(ValueError, match="gSDE"):
        PPO("MlpPolicy", DummyVecEnv([MaskedHybridEnv]), n_steps=8, batch_size=8, use_sde=True)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_solves_hybrid_line_as_unity_learning_test(seed):
    """Unity's test_hybrid_ppo: mean reward >= 0.9 within 20k agent-steps (step_size 0.8)."""
    env = VecMonitor(_hybrid_line(seed, n=8))
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=128,
        batch_size=64,
        n_epochs=3,
        learning_rate=1e-3,
        policy_kwargs=dict(net_arch=[64, 64]),
        seed=seed,
    )
    model.learn(10_000)
    assert np.mean([e["r"] for e in model.ep_info_buffer]) >= 0.9
    env.close()


def test_unity_sb3_train_gives_the_projects_algorithms_the_hybrid_tuple():
    from unity_sb3.run import RunConfig, make_vec_env

    for algo, hybrid in (
        ("ppo", True),
        ("ppo_memory", True),
        ("poca", True),
        ("poca_memory", True),
        ("sac", True),
        ("a2c", False),
        ("recurrent_ppo", False),
    ):
        env = make_vec_env(RunConfig(env="HybridLine", algo=algo, transport="inprocess"))
        assert isinstance(env.action_space, spaces.Tuple) is hybrid, algo
        env.close()
