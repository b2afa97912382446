"""Writing the ONNX file: tracing the graph, restoring dropped inputs, metadata, optional check."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from mlagents_envs.base_env import BehaviorSpec
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy

from unity_sb3.export.graph import UnityPolicyGraph, build_graph, dummy_inputs
from unity_sb3.export.names import (
    ACTION_MASKS,
    CONSTANT_OUTPUTS,
    DEFAULT_OPSET,
    DETERMINISTIC_CONTINUOUS_ACTIONS,
    DETERMINISTIC_DISCRETE_ACTIONS,
    OBSERVATION_PREFIX,
    RECURRENT_IN,
)
from unity_sb3.export.runtime import import_onnx, predict_unity_actions, run_onnx
from unity_sb3.export.specs import ObsRoute, onnx_shape
from unity_sb3.spaces import is_visual


def to_onnx(
    model: BaseAlgorithm | BasePolicy,
    path: str | Path,
    *,
    behavior_spec: BehaviorSpec | None = None,
    vec_normalize: Any | None = None,
    opset: int = DEFAULT_OPSET,
    verify: bool = False,
) -> Path:
    """Write a trained policy as an ONNX model that Unity ML-Agents' inference runs.

    :param model: an SB3 / sb3-contrib algorithm (PPO, A2C, TRPO, MaskablePPO, RecurrentPPO, SAC,
        TQC, TD3, DDPG, DQN), :class:`unity_sb3.POCA` (its shared actor is exported), or a policy.
    :param path: where to write the ``.onnx`` file (parent folders are created).
    :param behavior_spec: the Unity behavior's spec (``UnityVecEnv.spaces.spec``, or the
        scene's ``behavior_specs[name]``). Without it the spec is rebuilt from the policy's spaces
        (see :func:`infer_behavior_spec`): give it for hybrid behaviors and Dict observations.
    :param vec_normalize: a ``VecNormalize`` (or the path of its saved statistics) the model was
        trained behind; its observation normalisation is baked into the graph.
    :param opset: ONNX opset (default 9, as ML-Agents; Sentis imports 7 to 15).
    :param verify: run the file with onnxruntime on random observations and check its actions
        against :func:`predict_unity_actions`; raises ``AssertionError`` on a mismatch.
    :return: the path written.
    :raises ValueError: when the policy's spaces do not fit the behavior spec.
    :raises NotImplementedError: for policy classes the exporter does not know.
    """
    onnx = import_onnx()
    graph, spec, routes, _ = build_graph(model, behavior_spec, vec_normalize)
    policy = graph.head.policy
    graph.to(policy.device)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # written beside the target and moved into place once complete (and verified)
    partial = path.with_name(f".{path.name}.partial")
    input_names, output_names = graph.input_names(), graph.output_names()
    dynamic_axes = {name: {0: "batch"} for name in input_names}
    for name in output_names:
        if name not in CONSTANT_OUTPUTS:
            dynamic_axes[name] = {0: "batch"}
    was_training = policy.training
    policy.set_training_mode(False)
    graph.eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
            th.onnx.export(
                graph,
                dummy_inputs(graph, routes),
                str(partial),
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=dynamic_axes,
                opset_version=int(opset),
                do_constant_folding=True,
                dynamo=False,
            )
        _finish_model(onnx, partial, graph, routes, model)
        if verify:
            verify_export(model, partial, spec, vec_normalize)
        os.replace(partial, path)
    finally:
        policy.set_training_mode(was_training)
        partial.unlink(missing_ok=True)
    return path


def _finish_model(onnx: Any, path: Path, graph: UnityPolicyGraph, routes: list[ObsRoute], model: Any) -> None:
    """Restore inputs the tracer dropped (unused masks of a hybrid policy) and add metadata."""
    proto = onnx.load(str(path))
    present = {i.name for i in proto.graph.input}
    shapes = {f"{OBSERVATION_PREFIX}{i}": r.onnx_shape for i, r in enumerate(routes)}
    shapes[ACTION_MASKS] = (sum(graph.branches),)
    shapes[RECURRENT_IN] = (1, graph.memory)
    ordered = []
    existing = {i.name: i for i in proto.graph.input}
    for name in graph.input_names():
        if name in present:
            ordered.append(existing[name])
        else:
            ordered.append(
                onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, ["batch", *shapes[name]])
            )
    del proto.graph.input[:]
    proto.graph.input.extend(ordered)
    from unity_sb3.version import __version__

    meta = {
        "producer": "unity_sb3",
        "unity_sb3_version": __version__,
        "algorithm": type(model).__name__,
        "observation_keys": ",".join(r.key or "" for r in routes),
        "actions": "deterministic (mode of the policy's distribution) in both outputs",
    }
    if graph.memory:
        meta["memory_layout"] = (
            "recurrent_in/out (batch, 1, 2*layers*hidden) = [h of each layer, c of each layer]"
        )
    del proto.metadata_props[:]
    for key, value in meta.items():
        proto.metadata_props.add(key=key, value=value)
    proto.producer_name = "unity_sb3"
    proto.producer_version = __version__
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))


def verify_export(model: Any, path: Path, spec: BehaviorSpec, vec_normalize: Any, n: int = 64) -> None:
    """Compare the file's actions with :func:`predict_unity_actions` on ``n`` random observations.

    :raises AssertionError: on a mismatch (continuous: more than 1e-4 apart; discrete: any).
    """
    rng = np.random.default_rng(0)
    obs = []
    for obs_spec in spec.observation_specs:
        shape = (n, *onnx_shape(obs_spec))
        obs.append(
            rng.random(shape, dtype=np.float32)
            if is_visual(obs_spec)
            else rng.standard_normal(shape).astype(np.float32)
        )
    expected, _ = predict_unity_actions(model, obs, behavior_spec=spec, vec_normalize=vec_normalize)
    got = run_onnx(path, obs)
    if spec.action_spec.continuous_size:
        np.testing.assert_allclose(got[DETERMINISTIC_CONTINUOUS_ACTIONS], expected.continuous, atol=1e-4)
    if spec.action_spec.discrete_size:
        np.testing.assert_array_equal(got[DETERMINISTIC_DISCRETE_ACTIONS].astype(np.int32), expected.discrete)
