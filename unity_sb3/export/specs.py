"""Behavior specs and policy spaces: which Unity observation feeds which part of the policy."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from mlagents_envs.base_env import (
    ActionSpec,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy

from unity_sb3.algorithms.distributions import action_layout, is_hybrid_space
from unity_sb3.spaces import BehaviorSpaces, is_visual, observation_keys
from unity_sb3.unity.compat import channel_axis


def infer_behavior_spec(observation_space: spaces.Space, action_space: spaces.Space) -> BehaviorSpec:
    """Rebuild a Unity ``BehaviorSpec`` from a policy's spaces, when the real one is not at hand.

    A ``Box`` action space is read as continuous actions (a hybrid behavior trained in ``"box"``
    mode cannot be told apart: pass its real spec). A ``Dict`` observation space only tells the
    sensors' order when its keys are ``obs_0, obs_1, ...``.

    :param observation_space: the policy's observation space (3-D ``Box`` = visual, CHW when
        the first axis has at most 4 entries, else HWC).
    :param action_space: ``Box``, ``Discrete`` or ``MultiDiscrete``.
    :return: the spec; visual observations are described channel-first (as Unity >= 3 sends them).
    """
    if isinstance(observation_space, spaces.Dict):
        keys = list(observation_space.spaces)
        order = sorted(keys, key=lambda k: int(k[4:]) if k[4:].isdigit() else -1)
        if any(not (k.startswith("obs_") and k[4:].isdigit()) for k in keys) or [
            int(k[4:]) for k in order
        ] != list(range(len(keys))):
            raise ValueError(
                f"cannot tell the order of Unity's sensors from the Dict keys {keys}: gymnasium sorts "
                "Dict keys by name. Pass behavior_spec= (e.g. env.spaces.spec of the UnityVecEnv, or "
                "the scene's behavior_specs[name])."
            )
        subspaces = [observation_space[k] for k in order]
    elif isinstance(observation_space, spaces.Box):
        subspaces = [observation_space]
    else:
        raise ValueError(f"Unity observations are Box or Dict spaces, got {observation_space}")
    obs_specs = []
    for i, sub in enumerate(subspaces):
        if not isinstance(sub, spaces.Box):
            raise ValueError(f"Unity observations are Box spaces, got {sub} for observation {i}")
        shape = tuple(int(d) for d in sub.shape)
        if len(shape) == 3:
            chw = shape if shape[0] <= 4 or shape[2] > 4 else (shape[2], shape[0], shape[1])
            props = (
                DimensionProperty.NONE,
                DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
                DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
            )
            shape = chw
        elif len(shape) == 2:
            props = (DimensionProperty.VARIABLE_SIZE, DimensionProperty.NONE)
        else:
            props = (DimensionProperty.NONE,) * len(shape)
        obs_specs.append(ObservationSpec(shape, props, ObservationType.DEFAULT, f"obs_{i}"))
    if isinstance(action_space, spaces.Box):
        action_spec = ActionSpec(int(np.prod(action_space.shape)), ())
    elif isinstance(action_space, spaces.Discrete):
        action_spec = ActionSpec(0, (int(action_space.n),))
    elif isinstance(action_space, spaces.MultiDiscrete):
        action_spec = ActionSpec(0, tuple(int(n) for n in np.ravel(action_space.nvec)))
    elif is_hybrid_space(action_space):
        c, branches = action_layout(action_space)
        action_spec = ActionSpec(c, tuple(branches))
    else:
        raise ValueError(
            f"Unity actions are Box, Discrete, MultiDiscrete or hybrid Tuple(Box, MultiDiscrete) spaces, got {action_space}"
        )
    return BehaviorSpec(obs_specs, action_spec)


def entities_to_onnx(rows: np.ndarray) -> np.ndarray:
    """A batch of rank-2 observations ``(n, entities, features)`` as the ``obs_i`` tensor of Unity's inference.

    ML-Agents' exporter reads a rank-2 input ``x`` as ``x.transpose(1, 2).reshape(-1, entities,
    features)`` (``EntityEmbedding`` and ``get_zero_entities_mask`` under ``exporting_to_onnx``),
    because Unity's inference writes a buffer sensor's rows that way; the exported graph does the
    same, so this is the tensor that gives the model back ``rows``. Inverse of :func:`entities_from_onnx`.
    """
    n, entities, features = rows.shape
    return np.ascontiguousarray(np.asarray(rows).reshape(n, features, entities).transpose(0, 2, 1))


def entities_from_onnx(x: np.ndarray) -> np.ndarray:
    """The rows a rank-2 ``obs_i`` tensor stands for (what the exported graph reads); inverse of :func:`entities_to_onnx`."""
    n, entities, features = x.shape
    return np.ascontiguousarray(np.asarray(x).transpose(0, 2, 1).reshape(n, entities, features))


def onnx_shape(spec: ObservationSpec) -> tuple[int, ...]:
    """Per-agent shape of an observation's ONNX input: NCHW for visual observations."""
    shape = tuple(int(d) for d in spec.shape)
    if not is_visual(spec):
        return shape
    if channel_axis(shape, tuple(spec.dimension_property)) == 0:
        return shape
    return (shape[2], shape[0], shape[1])


@dataclass(frozen=True)
class ObsRoute:
    """How one Unity observation reaches the policy."""

    key: str | None  # Dict key (None: the policy's space is a Box)
    onnx_shape: tuple[int, ...]
    visual: bool
    channels_last: bool  # the policy wants (H, W, C)
    uint8: bool  # the policy's space holds uint8 images: round(x * 255)
    entities: bool = False  # rank-2 (buffer sensor): read as ML-Agents' exporter does (entities_from_onnx)


def plan_observations(spec: BehaviorSpec, space: spaces.Space) -> tuple[list[ObsRoute], str]:
    """Match the behavior's observations with the policy's observation space.

    :return: one route per observation, and the mode: ``"single"``, ``"flat"`` or ``"dict"``.
    """
    obs_specs = list(spec.observation_specs)
    if not obs_specs:
        raise ValueError("the behavior has no observations; there is nothing to feed the policy")
    described = [tuple(int(d) for d in s.shape) for s in obs_specs]

    def route(i: int, sub: spaces.Space, key: str | None) -> ObsRoute:
        obs_spec = obs_specs[i]
        unity_shape = onnx_shape(obs_spec)
        if not isinstance(sub, spaces.Box):
            raise ValueError(f"observation {i} must map to a Box space, the policy has {sub}")
        target = tuple(int(d) for d in sub.shape)
        channels_last = False
        if is_visual(obs_spec):
            c, h, w = unity_shape
            if target != (c, h, w):
                if target != (h, w, c):
                    raise ValueError(
                        f"visual observation {i} ({key or 'the only observation'}) is {obs_spec.shape} in Unity "
                        f"but the policy expects {target}; expected ({c}, {h}, {w}) or ({h}, {w}, {c})"
                    )
                channels_last = True
        elif target != unity_shape:
            raise ValueError(
                f"observation {i} ({key or 'the only observation'}) has shape {unity_shape} in Unity but the "
                f"policy expects {target}; pass the behavior_spec the model was trained on"
            )
        uint8 = bool(is_visual(obs_spec) and sub.dtype == np.uint8)
        entities = len(obs_spec.shape) == 2
        return ObsRoute(key, unity_shape, is_visual(obs_spec), channels_last, uint8, entities)

    if isinstance(space, spaces.Dict):
        keys = observation_keys(obs_specs)
        if set(keys) != set(space.spaces):
            raise ValueError(
                f"the policy's Dict observation keys {sorted(space.spaces)} do not match the behavior's "
                f"observations {keys} (shapes {described}); pass the behavior_spec the model was trained on"
            )
        return [route(i, space[k], k) for i, k in enumerate(keys)], "dict"
    if not isinstance(space, spaces.Box):
        raise ValueError(f"Unity observations map to Box or Dict spaces, the policy has {space}")
    if len(obs_specs) == 1:
        return [route(0, space, None)], "single"
    sizes = [int(np.prod(s)) for s in described]
    if any(len(s) != 1 for s in described) or tuple(space.shape) != (sum(sizes),):
        raise ValueError(
            f"the behavior has {len(obs_specs)} observations of shapes {described} but the policy takes one "
            f"Box of shape {space.shape}; only several 1-D observations can be concatenated into one vector"
        )
    routes = [
        route(i, spaces.Box(-np.inf, np.inf, (size,), np.float32), None) for i, size in enumerate(sizes)
    ]
    return routes, "flat"


def check_actions(spec: BehaviorSpec, space: spaces.Space) -> bool:
    """Validate the policy's action space against the behavior's; True for a hybrid ``"box"`` policy
    (False for a hybrid ``Tuple(Box, MultiDiscrete)`` one, whose head gives means then logits)."""
    c = int(spec.action_spec.continuous_size)
    branches = tuple(int(b) for b in spec.action_spec.discrete_branches)
    if not c and not branches:
        raise ValueError(
            "the behavior has no actions; Unity's inference needs at least one action output "
            "(continuous or discrete)"
        )
    hint = "pass the behavior_spec the model was trained on"
    if c and branches:
        if is_hybrid_space(space):
            if action_layout(space) != (c, list(branches)):
                raise ValueError(
                    f"the behavior is hybrid ({c} continuous, branches {branches}) but the policy's space is {space}; "
                    f"{hint}"
                )
            return False
        if not isinstance(space, spaces.Box) or tuple(space.shape) != (c + len(branches),):
            raise ValueError(
                f"the behavior is hybrid ({c} continuous, branches {branches}): the policy's action space must "
                f"be Box({c + len(branches)},) as UnityVecEnv's 'box' mode gives, or Tuple(Box({c},), "
                f"MultiDiscrete({list(branches)})) as its 'tuple' mode gives, got {space}; {hint}"
            )
        return True
    if c:
        if not isinstance(space, spaces.Box) or tuple(space.shape) != (c,):
            raise ValueError(
                f"the behavior has {c} continuous actions but the policy's space is {space}; {hint}"
            )
        return False
    if isinstance(space, spaces.Discrete):
        ok = branches == (int(space.n),)
    elif isinstance(space, spaces.MultiDiscrete):
        ok = tuple(int(n) for n in np.ravel(space.nvec)) == branches
    else:
        ok = False
    if not ok:
        raise ValueError(
            f"the behavior has discrete branches {branches} but the policy's space is {space}; {hint}"
        )
    return False


def behavior_spaces_for(
    spec: BehaviorSpec, routes: list[ObsRoute], mode: str, hybrid: str = "box"
) -> BehaviorSpaces:
    visual = [r for r in routes if r.visual]
    uint8 = visual[0].uint8 if visual else True
    hwc = visual[0].channels_last if visual else False
    if any(r.uint8 != uint8 or r.channels_last != hwc for r in visual):
        raise ValueError(
            "the policy mixes visual formats; BehaviorSpaces uses one for all visual observations"
        )
    mode_name = ("uint8" if uint8 else "float") + ("_hwc" if hwc else "")
    return BehaviorSpaces(spec, visual=mode_name, flatten=mode == "flat", hybrid=hybrid)  # type: ignore[arg-type]


def policy_of(model: BaseAlgorithm | BasePolicy) -> BasePolicy:
    if isinstance(model, BasePolicy):
        return model
    policy = getattr(model, "policy", None)
    if not isinstance(policy, BasePolicy):
        raise TypeError(f"expected an SB3 algorithm or policy, got {type(model).__name__}")
    return policy


def load_vec_normalize(vec_normalize: Any) -> Any:
    """A VecNormalize (or its saved ``.pkl`` path) -> the object holding the statistics."""
    if vec_normalize is None:
        return None
    if isinstance(vec_normalize, (str, Path)):
        path = Path(vec_normalize)
        if not path.is_file():
            raise FileNotFoundError(f"no VecNormalize statistics at {path}")
        with open(path, "rb") as f:
            vec_normalize = pickle.load(f)
    if not hasattr(vec_normalize, "obs_rms") or not hasattr(vec_normalize, "clip_obs"):
        raise TypeError(
            f"vec_normalize must be a VecNormalize or the path of one saved with VecNormalize.save, "
            f"got {type(vec_normalize).__name__}"
        )
    return vec_normalize
