"""Tensor names and constants of Unity ML-Agents' inference (``TensorNames.cs``, model API version 3)."""

from __future__ import annotations

MODEL_EXPORT_VERSION = 3
"""ML-Agents' model API version "MLAgents2_0": observations named ``obs_i``, no legacy outputs."""
DEFAULT_OPSET = 9
"""The ONNX opset ML-Agents' serializer writes; both Barracuda and Sentis import it."""
HUGE_NEG = -1e8
"""Logit of a masked action, as sb3-contrib's maskable distributions use."""

# Tensor names of Unity ML-Agents' inference (com.unity.ml-agents Runtime/Inference/TensorNames.cs).
OBSERVATION_PREFIX = "obs_"
ACTION_MASKS = "action_masks"
RECURRENT_IN = "recurrent_in"
RECURRENT_OUT = "recurrent_out"
VERSION_NUMBER = "version_number"
MEMORY_SIZE = "memory_size"
CONTINUOUS_ACTIONS = "continuous_actions"
CONTINUOUS_ACTION_SHAPE = "continuous_action_output_shape"
DETERMINISTIC_CONTINUOUS_ACTIONS = "deterministic_continuous_actions"
DISCRETE_ACTIONS = "discrete_actions"
DISCRETE_ACTION_SHAPE = "discrete_action_output_shape"
DETERMINISTIC_DISCRETE_ACTIONS = "deterministic_discrete_actions"
CONSTANT_OUTPUTS = (VERSION_NUMBER, MEMORY_SIZE, CONTINUOUS_ACTION_SHAPE, DISCRETE_ACTION_SHAPE)
# inputs Unity's ModelRunner knows how to fill (anything else fails its input check)
KNOWN_INPUTS = (ACTION_MASKS, RECURRENT_IN, "epsilon", "sequence_length", "prev_action", "batch_size")
