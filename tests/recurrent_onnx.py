"""Test helper: an exported recurrent policy against ``predict``, with the memory carried step by step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from unity_sb3.export import check_onnx, infer_behavior_spec, inspect_onnx, predict_unity_actions, run_onnx


def assert_onnx_carries_memory(
    model: Any, path: Path, memory_size: int, n_agents: int = 5, steps: int = 3
) -> None:
    """Unity's recurrent contract: ``recurrent_in`` ``(batch, 1, memory_size)`` in, ``recurrent_out``
    equal to ``predict``'s memory, and the same actions, for ``steps`` steps of random vector observations.

    :param model: a recurrent model with one vector observation whose ``predict`` returns ``(n, memory_size)`` memories.
    :param path: the exported ONNX file.
    :param memory_size: the memory floats per agent the model should declare.
    """
    info = inspect_onnx(path)
    assert info.memory_size == memory_size and info.inputs["recurrent_in"] == ("batch", 1, memory_size)
    assert check_onnx(path, infer_behavior_spec(model.observation_space, model.action_space)) == []
    rng = np.random.default_rng(0)
    size = int(np.prod(model.observation_space.shape))
    memories, state = np.zeros((n_agents, 1, memory_size), np.float32), None
    starts = np.ones(n_agents, bool)
    for _ in range(steps):
        obs = [rng.uniform(-1, 1, size=(n_agents, size)).astype(np.float32)]
        expected, state = predict_unity_actions(model, obs, state=state, episode_start=starts)
        starts = np.zeros(n_agents, bool)
        got = run_onnx(path, obs, memories=memories)
        memories = got["recurrent_out"]
        np.testing.assert_allclose(memories[:, 0], state, atol=2e-5)
        if expected.continuous.size:
            np.testing.assert_allclose(got["continuous_actions"], expected.continuous, atol=2e-5)
        if expected.discrete.size:
            np.testing.assert_array_equal(got["discrete_actions"], expected.discrete)
