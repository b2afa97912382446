"""ONNX export of a trained policy in the form Unity ML-Agents' inference engine loads.

:func:`to_onnx` writes an SB3 / sb3-contrib / POCA policy as an ``.onnx`` file that a Unity
``Agent`` with ``BehaviorType`` *Inference Only* (or *Default* without a trainer) runs through
``ModelRunner`` (Inference Engine / Sentis, and the older Barracuda path). The file follows
ML-Agents' own serializer (model API version 3, "MLAgents2_0"):

Inputs (batch axis ``batch``):

- ``obs_i``: the behavior's ``i``-th observation, float32, in Unity's layout: ``(batch, d)``
  for vectors, ``(batch, n, d)`` for buffer sensors (rank-2; the graph reads them as ML-Agents'
  exporter does, ``x.transpose(1, 2).reshape(-1, n, d)``, see ``specs.entities_to_onnx``, so a
  model gets a buffer sensor's rows from Unity's inference as ML-Agents' own Sorter model does),
  ``(batch, C, H, W)`` (NCHW) for visual observations with values in [0, 1];
- ``action_masks``: only with discrete branches, float32 ``(batch, sum(branches))`` with
  1 = allowed, 0 = masked (what Unity's ``ActionMaskInputGenerator`` writes);
- ``recurrent_in``: only for recurrent policies, ``(batch, 1, memory_size)``.

Outputs: ``version_number`` (= 3), ``memory_size`` (0 unless recurrent),
``continuous_actions`` / ``continuous_action_output_shape`` (= ``[c]``) /
``deterministic_continuous_actions`` when the behavior has continuous actions,
``discrete_actions`` / ``discrete_action_output_shape`` (= ``[[b_0, ..., b_k-1]]``) /
``deterministic_discrete_actions`` (action indices per branch, ``(batch, branches)`` int64, as
ML-Agents' exporter writes them: argmax/multinomial results are never cast, and current Unity
packages read this output as an integer tensor) when it has discrete branches, and
``recurrent_out`` for recurrent policies. Every other tensor is float32; constants keep
ML-Agents' shapes: ``[3.0]``, ``[m]``, ``[c]`` and ``[[b_0, ..., b_k-1]]``.

The graph reproduces what the policy does behind this project's wrappers, on the wrappers'
observations (:class:`unity_sb3.spaces.BehaviorSpaces`): visual observations become uint8
images (``round(x * 255)``) when the policy was trained on uint8 images, then the policy's own
``/ 255``; VecNormalize statistics are baked in (``vec_normalize=``); discrete logits are
masked as sb3-contrib's ``MaskablePPO`` does; continuous actions are what the wrapper sends
Unity: Gaussian means clipped to [-1, 1] (PPO, A2C, POCA), or tanh-squashed and rescaled to the
action bounds (SAC, TQC, TD3, DDPG); a hybrid behavior trained in ``"box"`` mode is split back
into continuous actions and discrete bins.

Both the stochastic and the deterministic outputs hold the deterministic action (the mode of the
distribution): Unity's *Deterministic Inference* switch therefore makes no difference, and the
exported agent behaves as ``model.predict(obs, deterministic=True)``.

Running a model in this format, one written here or one ``mlagents-learn`` trained, as Unity's
inference runs it on a ``BaseEnv``: :class:`~unity_sb3.export.onnx_policy.OnnxPolicy`.

Rounding to uint8 uses ``floor(255 x + 0.5)`` (opset 9 has no ``Round``), which differs from
numpy's round-half-to-even only when ``255 x`` is exactly halfway between two integers. The
hybrid bins are computed in float32 (Unity's engines have no float64), numpy computes the last
product in float64: values within 1e-7 of a bin edge may land in the neighbouring bin.
"""

from __future__ import annotations

from unity_sb3.export.command import export_from_args
from unity_sb3.export.names import DEFAULT_OPSET, MODEL_EXPORT_VERSION
from unity_sb3.export.onnx_policy import OnnxPolicy, onnx_episode_returns
from unity_sb3.export.runtime import OnnxModelInfo, check_onnx, inspect_onnx, predict_unity_actions, run_onnx
from unity_sb3.export.specs import infer_behavior_spec
from unity_sb3.export.writer import to_onnx

__all__ = [
    "DEFAULT_OPSET",
    "MODEL_EXPORT_VERSION",
    "OnnxModelInfo",
    "OnnxPolicy",
    "check_onnx",
    "export_from_args",
    "infer_behavior_spec",
    "inspect_onnx",
    "onnx_episode_returns",
    "predict_unity_actions",
    "run_onnx",
    "to_onnx",
]
