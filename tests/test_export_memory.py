"""ONNX export of ``unity_sb3.RecurrentPPO`` in Unity's recurrent contract: ``recurrent_in``/``recurrent_out``
``(batch, 1, memory_size)`` carry ML-Agents' flat memory of the actor, ``memory_size`` is its size."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import (
    ActionSpec,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)
from test_export import export, make_model, scale_head, unity_observations, vector, visual_chw

from unity_sb3 import RecurrentPPO
from unity_sb3.export import check_onnx, inspect_onnx, predict_unity_actions, run_onnx
from unity_sb3.networks.extractors import UnityMultiInputExtractor

GOAL = ObservationSpec((3,), (DimensionProperty.NONE,), ObservationType.GOAL_SIGNAL, "goal")


@pytest.mark.parametrize(
    ("action_spec", "observations", "policy"),
    [
        (ActionSpec(2, ()), [vector(5)], "MlpLstmPolicy"),
        (ActionSpec(0, (3, 2)), [vector(5)], "MlpLstmPolicy"),
        (ActionSpec(0, (3, 2)), [vector(5)], "MlpLstmPolicy post_memory_arch"),
        (ActionSpec(2, ()), [vector(5), GOAL], "MultiInputLstmPolicy goal_conditioned"),
        pytest.param(
            ActionSpec(0, (3,)),
            [vector(4), visual_chw(1, 36, 36)],
            "MultiInputLstmPolicy",
            marks=pytest.mark.slow,  # the default suite's budget: the CNN export takes ~10 s
        ),
    ],
    ids=["continuous", "multi_discrete", "post_memory_layers", "goal_conditioned_body", "vector_and_image"],
)
def test_exported_memory_model_equals_predict_over_steps(tmp_path, action_spec, observations, policy) -> None:
    spec = BehaviorSpec(observations, action_spec)
    kwargs: dict = (
        dict(features_extractor_kwargs=dict(cnn_output_dim=8)) if policy.startswith("Multi") else {}
    )
    if policy.endswith("post_memory_arch"):  # dense layers after the LSTM travel with the actor
        policy, kwargs = policy.split()[0], dict(post_memory_arch=[10])
    if policy.endswith(
        "goal_conditioned"
    ):  # as the ML-Agents mapping builds it: ML-Agents' body, then the LSTM
        extractor = dict(
            goal_keys=["goal"],
            goal_features=True,
            hidden_layers=[16, 16],
            goal_conditioning="hypernetwork",
        )
        policy, kwargs = (
            policy.split()[0],
            dict(
                net_arch=dict(pi=[], vf=[]),
                features_extractor_class=UnityMultiInputExtractor,
                features_extractor_kwargs=extractor,
            ),
        )
    model = make_model(RecurrentPPO, spec, policy, memory_size=12, sequence_length=4, policy_kwargs=kwargs)
    scale_head(model, 40.0)
    path = export(model, tmp_path, spec)
    info = inspect_onnx(path)
    assert info.memory_size == 12
    assert info.inputs["recurrent_in"] == ("batch", 1, 12) and info.outputs[-1] == "recurrent_out"
    assert check_onnx(path, spec) == []
    n = 8
    memories, state, starts = np.zeros((n, 1, 12), np.float32), None, np.ones(n, bool)
    for step in range(4):
        obs = unity_observations(spec, n=n, seed=20 + step)
        expected, state = predict_unity_actions(
            model, obs, behavior_spec=spec, state=state, episode_start=starts
        )
        starts = np.zeros(n, bool)
        got = run_onnx(path, obs, memories=memories)
        if action_spec.continuous_size:
            np.testing.assert_allclose(got["continuous_actions"], expected.continuous, atol=2e-5)
        else:
            np.testing.assert_array_equal(got["discrete_actions"], expected.discrete)
        memories = got["recurrent_out"]
        np.testing.assert_allclose(memories[:, 0, :], state, atol=2e-5)
    assert np.abs(state).max() > 1e-3  # the memory really moved


def test_hybrid_memory_model_equals_predict_over_steps_under_masks(tmp_path) -> None:
    """Hybrid actions with memory (Unity's ``test_hybrid_recurrent_ppo`` model): both action kinds side
    by side, the masks honoured, the memory carried through ``recurrent_in``/``recurrent_out``."""
    from stable_baselines3.common.vec_env import DummyVecEnv
    from test_export import random_masks
    from test_export_hybrid import HybridSpaceEnv

    spec = BehaviorSpec([vector(5)], ActionSpec(2, (2, 3)))
    env = DummyVecEnv([lambda: HybridSpaceEnv(spec)] * 2)
    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=8, batch_size=8, memory_size=12, sequence_length=4, device="cpu", seed=0
    )
    scale_head(model, 40.0)
    path = export(model, tmp_path, spec)
    info = inspect_onnx(path)
    assert info.memory_size == 12 and info.continuous_size == 2 and info.discrete_branches == (2, 3)
    assert info.inputs["recurrent_in"] == ("batch", 1, 12) and info.inputs["action_masks"] == ("batch", 5)
    assert check_onnx(path, spec) == []
    n = 8
    memories, state, starts = np.zeros((n, 1, 12), np.float32), None, np.ones(n, bool)
    masks = random_masks((2, 3), n=n)
    for step in range(4):
        obs = unity_observations(spec, n=n, seed=30 + step)
        expected, state = predict_unity_actions(
            model, obs, behavior_spec=spec, state=state, episode_start=starts, action_masks=masks
        )
        starts = np.zeros(n, bool)
        got = run_onnx(path, obs, memories=memories, action_masks=masks)
        np.testing.assert_allclose(got["deterministic_continuous_actions"], expected.continuous, atol=2e-5)
        np.testing.assert_array_equal(got["deterministic_discrete_actions"], expected.discrete)
        chosen = got["deterministic_discrete_actions"] + np.array([0, 2])
        assert np.all(np.take_along_axis(masks, chosen, axis=1))
        memories = got["recurrent_out"]
        np.testing.assert_allclose(memories[:, 0, :], state, atol=2e-5)
    assert np.abs(state).max() > 1e-3
