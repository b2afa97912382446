"""Reading exported models back: what Unity's loader sees, running them, and the reference actions."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mlagents_envs.base_env import ActionTuple, BehaviorSpec
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy

from unity_sb3.algorithms.distributions import is_hybrid_space
from unity_sb3.export.names import (
    ACTION_MASKS,
    CONSTANT_OUTPUTS,
    CONTINUOUS_ACTION_SHAPE,
    CONTINUOUS_ACTIONS,
    DETERMINISTIC_CONTINUOUS_ACTIONS,
    DETERMINISTIC_DISCRETE_ACTIONS,
    DISCRETE_ACTION_SHAPE,
    DISCRETE_ACTIONS,
    KNOWN_INPUTS,
    MEMORY_SIZE,
    MODEL_EXPORT_VERSION,
    OBSERVATION_PREFIX,
    RECURRENT_IN,
    RECURRENT_OUT,
    VERSION_NUMBER,
)
from unity_sb3.export.specs import (
    behavior_spaces_for,
    entities_from_onnx,
    infer_behavior_spec,
    load_vec_normalize,
    onnx_shape,
    plan_observations,
    policy_of,
)
from unity_sb3.spaces import is_visual
from unity_sb3.unity.compat import channel_axis


def import_onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("ONNX export needs the onnx package: pip install 'unity_sb3[onnx]'") from exc
    return onnx


@dataclass
class OnnxModelInfo:
    """What Unity's loader reads from an exported model.

    :param inputs: input name -> shape (``"batch"`` for the dynamic axis).
    :param outputs: output names in order.
    :param version: ``version_number``.
    :param memory_size: ``memory_size``.
    :param continuous_size: ``continuous_action_output_shape[0]`` (0 without continuous outputs).
    :param discrete_branches: ``discrete_action_output_shape`` flattened (empty without).
    :param metadata: the file's metadata properties.
    :param output_types: output name -> numpy dtype name of its values (``"float32"``, ``"int64"``).
    """

    inputs: dict[str, tuple[int | str, ...]]
    outputs: list[str]
    version: int
    memory_size: int
    continuous_size: int
    discrete_branches: tuple[int, ...]
    metadata: dict[str, str]
    output_types: dict[str, str]


def ort_session(path: str | Path) -> Any:
    try:
        import onnxruntime as ort
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("running ONNX models needs onnxruntime: pip install 'unity_sb3[onnx]'") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def inspect_onnx(path: str | Path) -> OnnxModelInfo:
    """Read an exported model's inputs, outputs and constants (by running it on zeros, as Sentis does)."""
    onnx = import_onnx()
    proto = onnx.load(str(path))
    inputs: dict[str, tuple[int | str, ...]] = {}
    for value in proto.graph.input:
        dims = value.type.tensor_type.shape.dim
        inputs[value.name] = tuple(d.dim_param if d.dim_param else int(d.dim_value) for d in dims)
    outputs = [o.name for o in proto.graph.output]
    feeds = {
        name: np.zeros([1 if isinstance(d, str) else d for d in shape], dtype=np.float32)
        for name, shape in inputs.items()
    }
    if ACTION_MASKS in feeds:
        feeds[ACTION_MASKS][:] = 1.0
    values = dict(zip(outputs, ort_session(path).run(None, feeds)))

    def scalar(name: str) -> int:
        return int(np.ravel(values[name])[0]) if name in values else 0

    branches = tuple(int(b) for b in np.ravel(values.get(DISCRETE_ACTION_SHAPE, np.zeros(0))))
    return OnnxModelInfo(
        inputs=inputs,
        outputs=outputs,
        version=scalar(VERSION_NUMBER),
        memory_size=scalar(MEMORY_SIZE),
        continuous_size=scalar(CONTINUOUS_ACTION_SHAPE),
        discrete_branches=branches,
        metadata={p.key: p.value for p in proto.metadata_props},
        output_types={name: str(value.dtype) for name, value in values.items()},
    )


def check_onnx(path: str | Path, behavior_spec: BehaviorSpec, *, output_types: bool = True) -> list[str]:
    """The checks Unity's model loader makes for a behavior (``SentisModelParamLoader.CheckModel``).

    :param path: an ONNX model file.
    :param behavior_spec: the behavior the model is meant for.
    :param output_types: check the outputs' element types too (integer discrete actions, float32
        elsewhere), as current Unity packages read them; ``False`` for a reader that converts them.
    :return: one message per failed check; empty when Unity would accept the model.
    """
    info = inspect_onnx(path)
    problems: list[str] = []
    if VERSION_NUMBER not in info.outputs:
        return [f'required constant "{VERSION_NUMBER}" was not found in the model file']
    if MEMORY_SIZE not in info.outputs:
        return [f'required constant "{MEMORY_SIZE}" was not found in the model file']
    action_outputs = (
        CONTINUOUS_ACTIONS,
        DISCRETE_ACTIONS,
        DETERMINISTIC_CONTINUOUS_ACTIONS,
        DETERMINISTIC_DISCRETE_ACTIONS,
    )
    if not any(name in info.outputs for name in action_outputs):
        return ["the model does not contain any action output"]
    if output_types:
        for name in (DISCRETE_ACTIONS, DETERMINISTIC_DISCRETE_ACTIONS):
            if name in info.outputs and not info.output_types[name].startswith("int"):
                problems.append(
                    f"{name} holds {info.output_types[name]}; Unity reads discrete actions as integers"
                )
        for name in (CONTINUOUS_ACTIONS, DETERMINISTIC_CONTINUOUS_ACTIONS, *CONSTANT_OUTPUTS):
            if name in info.outputs and info.output_types[name] != "float32":
                problems.append(f"{name} holds {info.output_types[name]}; Unity reads it as float32")
    if info.version != MODEL_EXPORT_VERSION:
        problems.append(f"model API version {info.version}, expected {MODEL_EXPORT_VERSION}")
    obs_specs = list(behavior_spec.observation_specs)
    for i, obs_spec in enumerate(obs_specs):
        name = f"{OBSERVATION_PREFIX}{i}"
        if name not in info.inputs:
            problems.append(f"the model has no input {name} for sensor {i}")
            continue
        shape = tuple(info.inputs[name][1:])
        if shape != onnx_shape(obs_spec):
            problems.append(f"input {name} has shape {shape}, the sensor gives {onnx_shape(obs_spec)}")
    for name in info.inputs:
        index = name[len(OBSERVATION_PREFIX) :]
        if name.startswith(OBSERVATION_PREFIX) and index.isdigit():
            expected = int(index) < len(obs_specs)
        else:
            expected = name in KNOWN_INPUTS
        if not expected:
            problems.append(f"model contains an unexpected input named {name}")
    if info.memory_size > 0:
        if RECURRENT_IN not in info.inputs:
            problems.append("the model has memory_size but no recurrent_in input")
        if RECURRENT_OUT not in info.outputs:
            problems.append("the model has memory_size but no recurrent_out output")
    branches = tuple(int(b) for b in behavior_spec.action_spec.discrete_branches)
    if info.discrete_branches and ACTION_MASKS not in info.inputs:
        problems.append("the model does not contain an action mask input but uses discrete control")
    if info.continuous_size != int(behavior_spec.action_spec.continuous_size):
        problems.append(
            f"continuous action size: the behavior has {behavior_spec.action_spec.continuous_size}, "
            f"the model {info.continuous_size}"
        )
    if info.discrete_branches != branches:
        problems.append(f"discrete branches: the behavior has {branches}, the model {info.discrete_branches}")
    return problems


def run_onnx(
    path: str | Path,
    observations: Sequence[np.ndarray],
    *,
    action_masks: np.ndarray | None = None,
    memories: np.ndarray | None = None,
    session: Any | None = None,
) -> dict[str, np.ndarray]:
    """Run an exported model as Unity's ``ModelRunner`` does and return every output by name.

    :param path: the ONNX file.
    :param observations: one float array per sensor, ``(n_agents, *onnx_shape)`` (visual NCHW;
        rank-2 as Unity's inference lays them out, see :func:`~unity_sb3.export.specs.entities_to_onnx`).
    :param action_masks: ``(n_agents, sum(branches))``, 1/True = allowed (default: all allowed).
    :param memories: ``(n_agents, 1, memory_size)`` for recurrent models (default: zeros).
    :param session: an onnxruntime session to reuse.
    """
    session = session or ort_session(path)
    names = [i.name for i in session.get_inputs()]
    n = len(observations[0])
    feeds: dict[str, np.ndarray] = {}
    for i, obs in enumerate(observations):
        feeds[f"{OBSERVATION_PREFIX}{i}"] = np.ascontiguousarray(obs, dtype=np.float32)
    for value in session.get_inputs():
        if value.name == ACTION_MASKS:
            size = int(value.shape[-1])
            masks = np.ones((n, size)) if action_masks is None else action_masks
            feeds[ACTION_MASKS] = np.asarray(masks, dtype=np.float32).reshape(n, size)
        elif value.name == RECURRENT_IN:
            size = int(value.shape[-1])
            feeds[RECURRENT_IN] = (
                np.zeros((n, 1, size), np.float32) if memories is None else np.asarray(memories, np.float32)
            )
    missing = [name for name in names if name not in feeds]
    if missing:
        raise ValueError(
            f"no values for the model's inputs {missing}; it has {len(observations)} observations"
        )
    outputs = [o.name for o in session.get_outputs()]
    return dict(zip(outputs, session.run(None, {k: v for k, v in feeds.items() if k in names})))


def predict_unity_actions(
    model: BaseAlgorithm | BasePolicy,
    observations: Sequence[np.ndarray],
    *,
    behavior_spec: BehaviorSpec | None = None,
    action_masks: np.ndarray | None = None,
    vec_normalize: Any | None = None,
    state: Any = None,
    episode_start: np.ndarray | None = None,
) -> tuple[ActionTuple, Any]:
    """What this project's wrappers send Unity for a batch of Unity observations.

    Converts with :class:`~unity_sb3.spaces.BehaviorSpaces`, normalises with ``vec_normalize``,
    calls ``model.predict(..., deterministic=True)`` and converts the actions back: the
    reference an exported model is checked against.

    :param observations: one array per sensor in Unity's layout as the ONNX model takes it
        (visual observations NCHW in [0, 1], rank-2 ones as :func:`~unity_sb3.export.specs.entities_to_onnx`
        gives them), ``(n_agents, ...)`` each.
    :param action_masks: ``(n_agents, sum(branches))`` with True/1 = allowed; passed to
        ``predict`` when the model takes masks (MaskablePPO, POCA).
    :param state: recurrent state for RecurrentPPO (``(h, c)``), else None.
    :return: the ``ActionTuple`` and the new recurrent state.
    """
    policy = policy_of(model)
    spec = behavior_spec or infer_behavior_spec(policy.observation_space, policy.action_space)
    routes, mode = plan_observations(spec, policy.observation_space)
    behavior = behavior_spaces_for(
        spec, routes, mode, "tuple" if is_hybrid_space(policy.action_space) else "box"
    )
    unity_obs = []
    for obs, obs_spec in zip(observations, spec.observation_specs):
        obs = np.asarray(obs, dtype=np.float32)
        if (
            is_visual(obs_spec)
            and channel_axis(tuple(obs_spec.shape), tuple(obs_spec.dimension_property)) == 2
        ):
            obs = np.moveaxis(obs, 1, -1)  # NCHW -> Unity's HWC spec layout
        elif len(obs_spec.shape) == 2:
            obs = entities_from_onnx(obs)
        unity_obs.append(obs)
    obs_in = behavior.observations(unity_obs)
    normalizer = load_vec_normalize(vec_normalize)
    if normalizer is not None:
        obs_in = normalizer.normalize_obs(obs_in)
    kwargs: dict[str, Any] = {"state": state, "episode_start": episode_start, "deterministic": True}
    if "action_masks" in inspect.signature(model.predict).parameters:
        if action_masks is not None:
            kwargs["action_masks"] = np.asarray(action_masks, dtype=bool)
    elif action_masks is not None and not np.all(np.asarray(action_masks, dtype=bool)):
        raise ValueError(
            f"{type(model).__name__}.predict takes no action masks; pass all-allowed masks or None"
        )
    actions, new_state = model.predict(obs_in, **kwargs)
    n = len(unity_obs[0])
    return behavior.to_unity_actions(actions, n), new_state
