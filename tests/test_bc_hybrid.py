"""Behavioral cloning with hybrid actions: Unity's hybrid .demo file and a recorded HybridLine expert."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.vec_env import DummyVecEnv

from unity_sb3 import PPO, UnityVecEnv, load_demo, pretrain_bc
from unity_sb3.algorithms.bc import bc_data, make_adapter
from unity_sb3.demos.reader import record_demo
from unity_sb3.scenes import make_scene
from unity_sb3.spaces import BehaviorSpaces

NAME = "HybridLine?team=0"


class SpacesOf(gym.Env):
    """Only carries a demo's spaces (UnityVecEnv's 'tuple' hybrid mode)."""

    def __init__(self, behavior: BehaviorSpaces) -> None:
        self.observation_space, self.action_space = behavior.observation_space, behavior.action_space

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


@pytest.fixture
def hybrid_line_demo(tmp_path):
    scene = make_scene("HybridLine", seed=3, num_agents=4)
    path = tmp_path / "HybridLine.demo"
    record_demo(scene, NAME, lambda s: scene.expert_actions(NAME, s), path, n_episodes=40)
    scene.close()
    return path


def test_unitys_hybrid_demo_converts_to_flat_actions_and_trains_a_hybrid_ppo(demo_dir):
    demo = load_demo(demo_dir / "testhybridvis.demo")
    behavior = BehaviorSpaces(demo.behavior_spec, hybrid="tuple")
    model = PPO(
        "MultiInputPolicy",
        DummyVecEnv([lambda: SpacesOf(behavior)]),
        n_steps=8,
        batch_size=8,
        seed=0,
        device="cpu",
        policy_kwargs=dict(net_arch=[16]),
    )
    data = bc_data(model, demo)
    assert data.actions.shape == (len(data), 3 + 1) and data.actions.dtype == np.float32
    t = demo.transitions()
    np.testing.assert_allclose(data.actions[:, :3], np.asarray(t.acts["continuous"]).reshape(-1, 3))
    np.testing.assert_array_equal(data.actions[:, 3], np.asarray(t.acts["discrete"]).reshape(-1))
    history = pretrain_bc(model, demo, epochs=3, batch_size=8, validation_split=0.0, seed=0)
    assert len(history["loss"]) == 3 and all(np.isfinite(history["loss"]))


def test_hybrid_loss_is_squared_error_of_the_mean_plus_each_branchs_cross_entropy(hybrid_line_demo):
    env = UnityVecEnv(make_scene("HybridLine", seed=0, num_agents=2), hybrid="tuple")
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=16, seed=0, device="cpu")
    adapter = make_adapter(model)
    assert adapter.loss == "mse"
    data = bc_data(model, hybrid_line_demo)
    batch = adapter.batch(data.observations[:16], data.actions[:16])
    loss = adapter.actor_loss(batch)
    dist = model.policy.get_distribution(batch.obs)
    mean = dist.distribution.mean
    logits = dist.logits
    expected = ((mean[:, 0] - batch.actions[:, 0]) ** 2) + th.nn.functional.cross_entropy(
        logits, batch.actions[:, 1].long(), reduction="none"
    )
    th.testing.assert_close(loss, expected)
    assert make_adapter(model, loss="nll").loss == "nll"
    env.close()


@pytest.mark.parametrize("memory", [False, True], ids=["ppo", "ppo_with_memory"])
def test_bc_clones_the_hybrid_line_expert(hybrid_line_demo, memory: bool):
    """With memory (RecurrentPPO) the BC loss of sequences reaches both action kinds too."""
    from unity_sb3 import RecurrentPPO

    env = UnityVecEnv(make_scene("HybridLine", seed=5, num_agents=8), hybrid="tuple")
    common = dict(n_steps=8, batch_size=16, seed=0, device="cpu")
    if memory:
        model = RecurrentPPO("MlpLstmPolicy", env, memory_size=16, sequence_length=4, **common)
    else:
        model = PPO("MlpPolicy", env, policy_kwargs=dict(net_arch=[32]), **common)
    assert make_adapter(model).loss == "mse"
    pretrain_bc(
        model, hybrid_line_demo, epochs=30, batch_size=32, learning_rate=3e-3, validation_split=0.0, seed=0
    )
    obs = np.array([[-1.0], [1.0]], dtype=np.float32)
    (continuous, discrete), _ = model.predict(obs, None, np.ones(2), deterministic=True)
    assert continuous[0, 0] < -0.5 and continuous[1, 0] > 0.5
    np.testing.assert_array_equal(discrete[:, 0], [0, 1])
    env.close()


def test_hybrid_actions_of_the_wrong_shape_are_refused():
    env = UnityVecEnv(make_scene("HybridLine", num_agents=2), hybrid="tuple")
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=16, seed=0, device="cpu")
    obs = np.zeros((4, 1), np.float32)
    with pytest.raises(ValueError, match="hybrid actions"):
        bc_data(model, {"observations": obs, "actions": np.zeros((4, 3))})
    with pytest.raises(ValueError, match="out of range"):
        bc_data(model, {"observations": obs, "actions": (np.zeros((4, 1)), np.full((4, 1), 2))})
    data = bc_data(model, {"observations": obs, "actions": (np.zeros((4, 1)), np.ones((4, 1)))})
    np.testing.assert_array_equal(data.actions, [[0.0, 1.0]] * 4)
    env.close()


def test_sac_with_hybrid_actions_clones_with_the_log_likelihood(hybrid_line_demo):
    from unity_sb3 import SAC

    env = UnityVecEnv(make_scene("HybridLine", seed=0, num_agents=2), hybrid="tuple")
    model = SAC("MlpPolicy", env, buffer_size=64, seed=0, device="cpu", policy_kwargs=dict(net_arch=[32]))
    assert make_adapter(model).loss == "nll"
    history = pretrain_bc(model, hybrid_line_demo, epochs=8, batch_size=32, validation_split=0.0, seed=0)
    assert history["loss"][-1] < history["loss"][0]
    env.close()


def test_the_bc_term_of_ppo_trains_with_hybrid_demos(hybrid_line_demo):
    env = UnityVecEnv(make_scene("HybridLine", seed=1, num_agents=4), hybrid="tuple")
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=16,
        batch_size=32,
        n_epochs=1,
        seed=0,
        device="cpu",
        behavioral_cloning={"demo_path": str(hybrid_line_demo), "strength": 1.0, "steps": 0},
    )
    model.learn(128)
    loss = model.logger.name_to_value.get("behavioral_cloning/loss")
    assert loss is not None and np.isfinite(loss)
    env.close()
