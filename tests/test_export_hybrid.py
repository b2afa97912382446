"""ONNX export of hybrid-action policies (PPO's and POCA's Tuple(Box, MultiDiscrete)) in Unity's contract."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from mlagents_envs.base_env import ActionSpec, BehaviorSpec
from stable_baselines3.common.vec_env import DummyVecEnv
from test_export import assert_same_actions, export, random_masks, scale_head, unity_observations, vector

from unity_sb3 import SAC
from unity_sb3.algorithms.poca import POCA
from unity_sb3.algorithms.ppo.ppo import PPO
from unity_sb3.export import check_onnx, inspect_onnx, run_onnx
from unity_sb3.spaces import BehaviorSpaces

# Unity's hybrid test model com.unity.ml-agents/Tests/Editor/TestModels/hybrid0vis8vec_2c_2_3d_v2_0.onnx:
# one vector observation of 8, 2 continuous actions and discrete branches (2, 3)
UNITY_HYBRID = BehaviorSpec([vector(8)], ActionSpec(2, (2, 3)))
UNITY_HYBRID_OUTPUTS = [
    "version_number",
    "memory_size",
    "continuous_actions",
    "continuous_action_output_shape",
    "deterministic_continuous_actions",
    "discrete_actions",
    "discrete_action_output_shape",
    "deterministic_discrete_actions",
]


class HybridSpaceEnv(gym.Env):
    """Carries a hybrid behavior's spaces (UnityVecEnv's 'tuple' mode) and all-allowed masks."""

    def __init__(self, spec: BehaviorSpec) -> None:
        behavior = BehaviorSpaces(spec, hybrid="tuple")
        self.observation_space, self.action_space = behavior.observation_space, behavior.action_space
        self.mask_size = int(sum(spec.action_spec.discrete_branches))

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}

    def action_masks(self) -> np.ndarray:
        return np.ones(self.mask_size, dtype=bool)


def hybrid_model(cls: type, spec: BehaviorSpec = UNITY_HYBRID):
    env = DummyVecEnv([lambda: HybridSpaceEnv(spec)] * 2)
    sizes = dict(buffer_size=16) if cls is SAC else dict(n_steps=8)
    model = cls(
        "MlpPolicy", env, batch_size=8, device="cpu", seed=0, policy_kwargs=dict(net_arch=[16]), **sizes
    )
    scale_head(model, 30.0)
    if cls is SAC:  # scale_head reaches the Gaussian means; make the branches' logits decisive too
        with th.no_grad():
            for p in model.actor.logits.parameters():
                p.mul_(30.0)
    return model


@pytest.mark.parametrize("cls", [PPO, POCA, SAC])
def test_hybrid_policy_has_the_signature_of_unitys_hybrid_test_model(tmp_path, cls):
    model = hybrid_model(cls)
    path = export(model, tmp_path, UNITY_HYBRID)
    info = inspect_onnx(path)
    assert info.inputs == {"obs_0": ("batch", 8), "action_masks": ("batch", 5)}
    assert info.outputs == UNITY_HYBRID_OUTPUTS
    assert info.continuous_size == 2 and info.discrete_branches == (2, 3)
    assert info.version == 3 and info.memory_size == 0
    assert info.output_types["deterministic_discrete_actions"] == "int64"
    assert check_onnx(path, UNITY_HYBRID) == []


@pytest.mark.parametrize("cls", [PPO, POCA, SAC])
def test_onnxruntime_actions_match_predict_under_masks(tmp_path, cls):
    model = hybrid_model(cls)
    path = export(model, tmp_path, UNITY_HYBRID)
    masks = random_masks((2, 3))
    got, _ = assert_same_actions(model, path, UNITY_HYBRID, masks=masks)
    # the masks were honoured: no forbidden branch value chosen
    offsets = np.array([0, 2])
    chosen = got["deterministic_discrete_actions"] + offsets
    assert np.all(np.take_along_axis(masks, chosen, axis=1))
    # and they mattered: without masks some choice differs
    free = run_onnx(path, unity_observations(UNITY_HYBRID), action_masks=np.ones_like(masks))
    assert np.any(free["deterministic_discrete_actions"] != got["deterministic_discrete_actions"])


def test_spec_of_a_hybrid_policy_is_inferred_from_its_tuple_space(tmp_path):
    model = hybrid_model(PPO)
    path = export(model, tmp_path, None)
    info = inspect_onnx(path)
    assert info.continuous_size == 2 and info.discrete_branches == (2, 3)


def test_a_hybrid_policy_for_other_branches_is_refused(tmp_path):
    model = hybrid_model(PPO)
    other = BehaviorSpec([vector(8)], ActionSpec(2, (3, 3)))
    with pytest.raises(ValueError, match="the behavior is hybrid"):
        export(model, tmp_path, other)


def test_a_trained_hybrid_line_policy_exports_and_verifies(tmp_path):
    from unity_sb3.scenes import make_scene
    from unity_sb3.wrappers.vec_env import UnityVecEnv

    env = UnityVecEnv(make_scene("HybridLine", seed=0, num_agents=4), hybrid="tuple")
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(64)
    path = export(model, tmp_path, env.spaces.spec, verify=True)
    assert check_onnx(path, env.spaces.spec) == []
    env.close()
