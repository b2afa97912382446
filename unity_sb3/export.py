"""ONNX export of a trained policy in the form Unity ML-Agents' inference engine loads.

:func:`to_onnx` writes an SB3 / sb3-contrib / POCA policy as an ``.onnx`` file that a Unity
``Agent`` with ``BehaviorType`` *Inference Only* (or *Default* without a trainer) runs through
``ModelRunner`` (Inference Engine / Sentis, and the older Barracuda path). The file follows
ML-Agents' own serializer (model API version 3, "MLAgents2_0"):

Inputs (batch axis ``batch``):

- ``obs_i``: the behavior's ``i``-th observation, float32, in Unity's layout: ``(batch, d)``
  for vectors, ``(batch, n, d)`` for buffer sensors, ``(batch, C, H, W)`` (NCHW) for visual
  observations with values in [0, 1];
- ``action_masks``: only with discrete branches, float32 ``(batch, sum(branches))`` with
  1 = allowed, 0 = masked (what Unity's ``ActionMaskInputGenerator`` writes);
- ``recurrent_in``: only for recurrent policies, ``(batch, 1, memory_size)``.

Outputs: ``version_number`` (= 3), ``memory_size`` (0 unless recurrent),
``continuous_actions`` / ``continuous_action_output_shape`` (= ``[c]``) /
``deterministic_continuous_actions`` when the behavior has continuous actions,
``discrete_actions`` / ``discrete_action_output_shape`` (= ``[[b_0, ..., b_k-1]]``) /
``deterministic_discrete_actions`` (action indices per branch, as floats) when it has discrete
branches, and ``recurrent_out`` for recurrent policies.

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

Rounding to uint8 uses ``floor(255 x + 0.5)`` (opset 9 has no ``Round``), which differs from
numpy's round-half-to-even only when ``255 x`` is exactly halfway between two integers. The
hybrid bins are computed in float32 (Unity's engines have no float64), numpy computes the last
product in float64: values within 1e-7 of a bin edge may land in the neighbouring bin.
"""

from __future__ import annotations

import inspect
import pickle
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.preprocessing import preprocess_obs
from torch import nn

from unity_sb3.spaces import BehaviorSpaces, is_visual, observation_keys
from unity_sb3.unity.compat import channel_axis

__all__ = [
    "DEFAULT_OPSET",
    "MODEL_EXPORT_VERSION",
    "OnnxModelInfo",
    "check_onnx",
    "infer_behavior_spec",
    "inspect_onnx",
    "predict_unity_actions",
    "run_onnx",
    "to_onnx",
]

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


# ---------------------------------------------------------------------------------- specs


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
    else:
        raise ValueError(f"Unity actions are Box, Discrete or MultiDiscrete spaces, got {action_space}")
    return BehaviorSpec(obs_specs, action_spec)


def _onnx_shape(spec: ObservationSpec) -> tuple[int, ...]:
    """Per-agent shape of an observation's ONNX input: NCHW for visual observations."""
    shape = tuple(int(d) for d in spec.shape)
    if not is_visual(spec):
        return shape
    if channel_axis(shape, tuple(spec.dimension_property)) == 0:
        return shape
    return (shape[2], shape[0], shape[1])


@dataclass(frozen=True)
class _ObsRoute:
    """How one Unity observation reaches the policy."""

    key: str | None  # Dict key (None: the policy's space is a Box)
    onnx_shape: tuple[int, ...]
    visual: bool
    channels_last: bool  # the policy wants (H, W, C)
    uint8: bool  # the policy's space holds uint8 images: round(x * 255)


def _plan_observations(spec: BehaviorSpec, space: spaces.Space) -> tuple[list[_ObsRoute], str]:
    """Match the behavior's observations with the policy's observation space.

    :return: one route per observation, and the mode: ``"single"``, ``"flat"`` or ``"dict"``.
    """
    obs_specs = list(spec.observation_specs)
    if not obs_specs:
        raise ValueError("the behavior has no observations; there is nothing to feed the policy")
    described = [tuple(int(d) for d in s.shape) for s in obs_specs]

    def route(i: int, sub: spaces.Space, key: str | None) -> _ObsRoute:
        obs_spec = obs_specs[i]
        onnx_shape = _onnx_shape(obs_spec)
        if not isinstance(sub, spaces.Box):
            raise ValueError(f"observation {i} must map to a Box space, the policy has {sub}")
        target = tuple(int(d) for d in sub.shape)
        channels_last = False
        if is_visual(obs_spec):
            c, h, w = onnx_shape
            if target != (c, h, w):
                if target != (h, w, c):
                    raise ValueError(
                        f"visual observation {i} ({key or 'the only observation'}) is {obs_spec.shape} in Unity "
                        f"but the policy expects {target}; expected ({c}, {h}, {w}) or ({h}, {w}, {c})"
                    )
                channels_last = True
        elif target != onnx_shape:
            raise ValueError(
                f"observation {i} ({key or 'the only observation'}) has shape {onnx_shape} in Unity but the "
                f"policy expects {target}; pass the behavior_spec the model was trained on"
            )
        uint8 = bool(is_visual(obs_spec) and sub.dtype == np.uint8)
        return _ObsRoute(key, onnx_shape, is_visual(obs_spec), channels_last, uint8)

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


def _check_actions(spec: BehaviorSpec, space: spaces.Space) -> bool:
    """Validate the policy's action space against the behavior's; True for a hybrid ``"box"`` policy."""
    c = int(spec.action_spec.continuous_size)
    branches = tuple(int(b) for b in spec.action_spec.discrete_branches)
    if not c and not branches:
        raise ValueError(
            "the behavior has no actions; Unity's inference needs at least one action output "
            "(continuous or discrete)"
        )
    hint = "pass the behavior_spec the model was trained on"
    if c and branches:
        if not isinstance(space, spaces.Box) or tuple(space.shape) != (c + len(branches),):
            raise ValueError(
                f"the behavior is hybrid ({c} continuous, branches {branches}): the policy's action space must "
                f"be Box({c + len(branches)},) as UnityVecEnv's 'box' mode gives, got {space}; {hint}"
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


# ---------------------------------------------------------------------------------- graph pieces


class _ObservationAdapter(nn.Module):
    """Unity's observation tensors -> the policy's observation (tensor or dict), VecNormalize included."""

    def __init__(self, routes: list[_ObsRoute], mode: str, vec_normalize: Any | None) -> None:
        super().__init__()
        self.routes = routes
        self.mode = mode
        self.clip_obs = 0.0
        self.normalized: list[str] = []  # keys ("" for a Box observation) with baked statistics
        if vec_normalize is not None and getattr(vec_normalize, "norm_obs", False):
            self.clip_obs = float(vec_normalize.clip_obs)
            eps = float(vec_normalize.epsilon)
            rms = vec_normalize.obs_rms
            if mode == "dict":
                if not isinstance(rms, dict):
                    raise ValueError(
                        "vec_normalize holds statistics for a Box observation, the policy takes a Dict"
                    )
                stats = {k: rms[k] for k in (vec_normalize.norm_obs_keys or [])}
            else:
                if isinstance(rms, dict):
                    raise ValueError(
                        "vec_normalize holds statistics for a Dict observation, the policy takes a Box"
                    )
                stats = {"": rms}
            for index, (key, value) in enumerate(stats.items()):
                mean = np.asarray(value.mean, dtype=np.float64)
                std = np.sqrt(np.asarray(value.var, dtype=np.float64) + eps)
                self.register_buffer(f"obs_mean_{index}", th.as_tensor(mean, dtype=th.float32))
                self.register_buffer(f"obs_std_{index}", th.as_tensor(std, dtype=th.float32))
                self.normalized.append(key)

    def _normalize(self, index: int, x: th.Tensor) -> th.Tensor:
        mean, std = getattr(self, f"obs_mean_{index}"), getattr(self, f"obs_std_{index}")
        if tuple(mean.shape) != tuple(x.shape[1:]):
            raise ValueError(
                f"vec_normalize statistics have shape {tuple(mean.shape)}, observations {tuple(x.shape[1:])}"
            )
        return th.clamp((x - mean) / std, -self.clip_obs, self.clip_obs)

    def forward(self, inputs: Sequence[th.Tensor]) -> th.Tensor | dict[str, th.Tensor]:
        parts = []
        for route, x in zip(self.routes, inputs):
            if route.visual:
                if route.channels_last:
                    x = x.permute(0, 2, 3, 1)
                if route.uint8:
                    x = th.clamp(th.floor(x * 255.0 + 0.5), 0.0, 255.0)
            parts.append(x)
        if self.mode == "dict":
            obs: dict[str, th.Tensor] = {r.key: p for r, p in zip(self.routes, parts)}  # type: ignore[misc]
            for index, key in enumerate(self.normalized):
                obs[key] = self._normalize(index, obs[key])
            return obs
        single = parts[0] if self.mode == "single" else th.cat(parts, dim=1)
        if self.normalized:
            single = self._normalize(0, single)
        return single


class _BoxBounds(nn.Module):
    """Clip to, or rescale from [-1, 1] to, a Box action space's bounds (as SB3's ``predict``)."""

    def __init__(self, space: spaces.Box) -> None:
        super().__init__()
        self.register_buffer("low", th.as_tensor(np.asarray(space.low, dtype=np.float32).reshape(-1)))
        self.register_buffer("high", th.as_tensor(np.asarray(space.high, dtype=np.float32).reshape(-1)))

    def clip(self, actions: th.Tensor) -> th.Tensor:
        return th.min(th.max(actions, self.low), self.high)

    def unscale(self, scaled: th.Tensor) -> th.Tensor:
        return self.low + 0.5 * (scaled + 1.0) * (self.high - self.low)


def _features(policy: Any, extractor: nn.Module, obs: Any) -> th.Tensor:
    return extractor(preprocess_obs(obs, policy.observation_space, normalize_images=policy.normalize_images))


class _ActorHead(nn.Module):
    """A policy's deterministic output: action logits (discrete) or the action in the space's bounds (Box).

    :param policy: the SB3 policy.
    :param kind: ``"actor_critic"`` (PPO, A2C, TRPO, MaskablePPO, RecurrentPPO), ``"poca"``,
        ``"squashed"`` (SAC, TQC), ``"deterministic"`` (TD3, DDPG) or ``"q"`` (DQN).
    """

    def __init__(self, policy: BasePolicy, kind: str) -> None:
        super().__init__()
        self.policy = policy
        self.kind = kind
        self.box = isinstance(policy.action_space, spaces.Box)
        self.bounds = _BoxBounds(policy.action_space) if self.box else None
        self.lstm: nn.LSTM | None = getattr(policy, "lstm_actor", None) if kind == "actor_critic" else None
        self.memory_size = 0
        if self.lstm is not None:
            self.memory_size = 2 * self.lstm.num_layers * self.lstm.hidden_size

    def _lstm_step(self, features: th.Tensor, memory: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        # memory (batch, 1, 2 * layers * hidden) = [h of every layer, c of every layer]
        assert self.lstm is not None
        layers, hidden = self.lstm.num_layers, self.lstm.hidden_size
        flat = memory[:, 0, :]
        h = flat[:, : layers * hidden].reshape(-1, layers, hidden).permute(1, 0, 2).contiguous()
        c = flat[:, layers * hidden :].reshape(-1, layers, hidden).permute(1, 0, 2).contiguous()
        out, (h_new, c_new) = self.lstm(features.unsqueeze(0), (h, c))
        new_memory = th.cat(
            [
                h_new.permute(1, 0, 2).reshape(-1, layers * hidden),
                c_new.permute(1, 0, 2).reshape(-1, layers * hidden),
            ],
            dim=1,
        )
        return out[0], new_memory.unsqueeze(1)

    def forward(self, obs: Any, memory: th.Tensor | None = None) -> tuple[th.Tensor, th.Tensor | None]:
        policy: Any = self.policy
        new_memory = None
        if self.kind == "actor_critic":
            features = _features(policy, policy.pi_features_extractor, obs)
            if self.lstm is not None:
                assert memory is not None
                features, new_memory = self._lstm_step(features, memory)
            out = policy.action_net(policy.mlp_extractor.forward_actor(features))
            squash = bool(getattr(policy, "squash_output", False))
            if self.box and squash:  # gSDE with squash_output: the mode is tanh(mean)
                out = th.tanh(out)
        elif self.kind == "poca":
            out = policy.action_net(policy.actor_net(_features(policy, policy.features_extractor, obs)))
            squash = False
        elif self.kind == "squashed":
            mean, _, _ = policy.actor.get_action_dist_params(obs)
            out, squash = th.tanh(mean), True
        elif self.kind == "deterministic":
            out, squash = policy.actor(obs), True
        else:  # "q": Q-values play the role of logits
            out, squash = policy.q_net(obs), False
        if self.box:
            assert self.bounds is not None
            out = self.bounds.unscale(out) if squash else self.bounds.clip(out)
        return out, new_memory


def _head_kind(policy: BasePolicy) -> str:
    """Which :class:`_ActorHead` path reads this policy."""
    from stable_baselines3.common.policies import ActorCriticPolicy

    try:
        from unity_sb3.algorithms.poca.policies import POCAPolicy
    except ImportError:  # pragma: no cover - partial checkout
        POCAPolicy = ()  # type: ignore[assignment,misc]
    if isinstance(policy, POCAPolicy):
        return "poca"
    maskable: tuple[type, ...] = ()
    try:
        from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

        maskable = (MaskableActorCriticPolicy,)
    except ImportError:  # pragma: no cover - sb3-contrib is a dependency
        pass
    if isinstance(policy, (ActorCriticPolicy, *maskable)):
        return "actor_critic"
    actor = getattr(policy, "actor", None)
    if actor is not None and hasattr(actor, "get_action_dist_params"):
        return "squashed"
    if actor is not None and hasattr(actor, "mu"):
        return "deterministic"
    if hasattr(policy, "q_net") and not hasattr(policy, "quantile_net"):
        return "q"
    raise NotImplementedError(
        f"ONNX export does not know the policy class {type(policy).__name__}; supported: PPO, A2C, TRPO, "
        "MaskablePPO, RecurrentPPO, SAC, TQC, TD3, DDPG, DQN and POCA policies"
    )


class _UnityPolicyGraph(nn.Module):
    """The exported module: Unity's inputs in, Unity's outputs out (see the module docstring)."""

    def __init__(
        self, adapter: _ObservationAdapter, head: _ActorHead, spec: BehaviorSpec, hybrid_box: bool
    ) -> None:
        super().__init__()
        self.adapter = adapter
        self.head = head
        self.n_obs = len(spec.observation_specs)
        self.continuous_size = int(spec.action_spec.continuous_size)
        self.branches = [int(b) for b in spec.action_spec.discrete_branches]
        self.hybrid_box = hybrid_box
        self.has_masks = bool(self.branches)
        self.memory = head.memory_size
        # constants as Unity reads them; shapes follow ML-Agents' exporter
        self.register_buffer("version_number", th.tensor([float(MODEL_EXPORT_VERSION)]))
        self.register_buffer("memory_size", th.tensor([float(self.memory)]))
        self.register_buffer("continuous_shape", th.tensor([float(self.continuous_size)]))
        self.register_buffer("discrete_shape", th.tensor([[float(b) for b in self.branches]]))
        self.register_buffer("branch_sizes", th.tensor([float(b) for b in self.branches]))

    def input_names(self) -> list[str]:
        names = [f"{OBSERVATION_PREFIX}{i}" for i in range(self.n_obs)]
        if self.has_masks:
            names.append(ACTION_MASKS)
        if self.memory:
            names.append(RECURRENT_IN)
        return names

    def output_names(self) -> list[str]:
        names = [VERSION_NUMBER, MEMORY_SIZE]
        if self.continuous_size:
            names += [CONTINUOUS_ACTIONS, CONTINUOUS_ACTION_SHAPE, DETERMINISTIC_CONTINUOUS_ACTIONS]
        if self.branches:
            names += [DISCRETE_ACTIONS, DISCRETE_ACTION_SHAPE, DETERMINISTIC_DISCRETE_ACTIONS]
        if self.memory:
            names.append(RECURRENT_OUT)
        return names

    def _discrete_from_logits(self, logits: th.Tensor, masks: th.Tensor) -> th.Tensor:
        # MaskablePPO: masked logits become HUGE_NEG. The arithmetic form keeps allowed logits
        # bit for bit (x * 1 + 0 * HUGE_NEG) and needs no Where op on older engines.
        logits = logits * masks + (1.0 - masks) * HUGE_NEG
        choices = []
        start = 0
        for size in self.branches:
            choices.append(th.argmax(logits[:, start : start + size], dim=1, keepdim=True))
            start += size
        return th.cat(choices, dim=1).float()

    def _discrete_from_box(self, values: th.Tensor) -> th.Tensor:
        # unity_sb3.spaces.box_to_discrete: branch b splits [-1, 1] into b equal bins
        scaled = (th.clamp(values, -1.0, 1.0) + 1.0) / 2.0 * self.branch_sizes
        return th.min(th.floor(scaled), self.branch_sizes - 1.0)

    def forward(self, *inputs: th.Tensor) -> tuple[th.Tensor, ...]:
        obs = self.adapter(inputs[: self.n_obs])
        masks = inputs[self.n_obs] if self.has_masks else None
        memory = inputs[-1] if self.memory else None
        out, new_memory = self.head(obs, memory)
        outputs = [self.version_number, self.memory_size]
        continuous = discrete = None
        if self.hybrid_box:
            continuous = th.clamp(out[:, : self.continuous_size], -1.0, 1.0)
            discrete = self._discrete_from_box(out[:, self.continuous_size :])
        elif self.continuous_size:
            continuous = th.clamp(out, -1.0, 1.0)
        else:
            assert masks is not None
            discrete = self._discrete_from_logits(out, masks)
        if continuous is not None:
            outputs += [continuous, self.continuous_shape, continuous]
        if discrete is not None:
            outputs += [discrete, self.discrete_shape, discrete]
        if self.memory:
            assert new_memory is not None
            outputs.append(new_memory)
        return tuple(outputs)


# ---------------------------------------------------------------------------------- export


def _policy_of(model: BaseAlgorithm | BasePolicy) -> BasePolicy:
    if isinstance(model, BasePolicy):
        return model
    policy = getattr(model, "policy", None)
    if not isinstance(policy, BasePolicy):
        raise TypeError(f"expected an SB3 algorithm or policy, got {type(model).__name__}")
    return policy


def _load_vec_normalize(vec_normalize: Any) -> Any:
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


def _build_graph(
    model: BaseAlgorithm | BasePolicy, behavior_spec: BehaviorSpec | None, vec_normalize: Any
) -> tuple[_UnityPolicyGraph, BehaviorSpec, list[_ObsRoute], str]:
    policy = _policy_of(model)
    spec = behavior_spec or infer_behavior_spec(policy.observation_space, policy.action_space)
    routes, mode = _plan_observations(spec, policy.observation_space)
    hybrid_box = _check_actions(spec, policy.action_space)
    kind = _head_kind(policy)
    if kind == "q" and int(spec.action_spec.continuous_size):
        raise ValueError("a Q-network policy (DQN) has no continuous actions to export")
    adapter = _ObservationAdapter(routes, mode, _load_vec_normalize(vec_normalize))
    head = _ActorHead(policy, kind)
    return _UnityPolicyGraph(adapter, head, spec, hybrid_box), spec, routes, mode


def _dummy_inputs(graph: _UnityPolicyGraph, routes: list[_ObsRoute], batch: int = 1) -> tuple[th.Tensor, ...]:
    device = next((p.device for p in graph.head.policy.parameters()), th.device("cpu"))
    tensors = [th.zeros((batch, *r.onnx_shape), device=device) for r in routes]
    if graph.has_masks:
        tensors.append(th.ones((batch, sum(graph.branches)), device=device))
    if graph.memory:
        tensors.append(th.zeros((batch, 1, graph.memory), device=device))
    return tuple(tensors)


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
    onnx = _import_onnx()
    graph, spec, routes, _ = _build_graph(model, behavior_spec, vec_normalize)
    policy = graph.head.policy
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    inputs = _dummy_inputs(graph, routes)
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
                inputs,
                str(path),
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=dynamic_axes,
                opset_version=int(opset),
                do_constant_folding=True,
                dynamo=False,
            )
    finally:
        policy.set_training_mode(was_training)
    _finish_model(onnx, path, graph, routes, model)
    if verify:
        _verify(model, path, spec, vec_normalize)
    return path


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("ONNX export needs the onnx package: pip install 'unity_sb3[onnx]'") from exc
    return onnx


def _finish_model(
    onnx: Any, path: Path, graph: _UnityPolicyGraph, routes: list[_ObsRoute], model: Any
) -> None:
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


# ---------------------------------------------------------------------------------- reading back


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
    """

    inputs: dict[str, tuple[int | str, ...]]
    outputs: list[str]
    version: int
    memory_size: int
    continuous_size: int
    discrete_branches: tuple[int, ...]
    metadata: dict[str, str]


def _session(path: str | Path) -> Any:
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
    onnx = _import_onnx()
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
    values = dict(zip(outputs, _session(path).run(None, feeds)))

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
    )


def check_onnx(path: str | Path, behavior_spec: BehaviorSpec) -> list[str]:
    """The checks Unity's model loader makes for a behavior (``SentisModelParamLoader.CheckModel``).

    :param path: an ONNX model file.
    :param behavior_spec: the behavior the model is meant for.
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
    if info.version != MODEL_EXPORT_VERSION:
        problems.append(f"model API version {info.version}, expected {MODEL_EXPORT_VERSION}")
    obs_specs = list(behavior_spec.observation_specs)
    for i, obs_spec in enumerate(obs_specs):
        name = f"{OBSERVATION_PREFIX}{i}"
        if name not in info.inputs:
            problems.append(f"the model has no input {name} for sensor {i}")
            continue
        shape = tuple(info.inputs[name][1:])
        if shape != _onnx_shape(obs_spec):
            problems.append(f"input {name} has shape {shape}, the sensor gives {_onnx_shape(obs_spec)}")
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
    :param observations: one float array per sensor, ``(n_agents, *onnx_shape)`` (visual NCHW).
    :param action_masks: ``(n_agents, sum(branches))``, 1/True = allowed (default: all allowed).
    :param memories: ``(n_agents, 1, memory_size)`` for recurrent models (default: zeros).
    :param session: an onnxruntime session to reuse.
    """
    session = session or _session(path)
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


# ---------------------------------------------------------------------------------- reference


def _spaces_for(spec: BehaviorSpec, routes: list[_ObsRoute], mode: str) -> BehaviorSpaces:
    visual = [r for r in routes if r.visual]
    uint8 = visual[0].uint8 if visual else True
    hwc = visual[0].channels_last if visual else False
    if any(r.uint8 != uint8 or r.channels_last != hwc for r in visual):
        raise ValueError(
            "the policy mixes visual formats; BehaviorSpaces uses one for all visual observations"
        )
    mode_name = ("uint8" if uint8 else "float") + ("_hwc" if hwc else "")
    return BehaviorSpaces(spec, visual=mode_name, flatten=mode == "flat", hybrid="box")  # type: ignore[arg-type]


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
        (visual observations NCHW in [0, 1]), ``(n_agents, ...)`` each.
    :param action_masks: ``(n_agents, sum(branches))`` with True/1 = allowed; passed to
        ``predict`` when the model takes masks (MaskablePPO, POCA).
    :param state: recurrent state for RecurrentPPO (``(h, c)``), else None.
    :return: the ``ActionTuple`` and the new recurrent state.
    """
    policy = _policy_of(model)
    spec = behavior_spec or infer_behavior_spec(policy.observation_space, policy.action_space)
    routes, mode = _plan_observations(spec, policy.observation_space)
    behavior = _spaces_for(spec, routes, mode)
    unity_obs = []
    for obs, obs_spec in zip(observations, spec.observation_specs):
        obs = np.asarray(obs, dtype=np.float32)
        if (
            is_visual(obs_spec)
            and channel_axis(tuple(obs_spec.shape), tuple(obs_spec.dimension_property)) == 2
        ):
            obs = np.moveaxis(obs, 1, -1)  # NCHW -> Unity's HWC spec layout
        unity_obs.append(obs)
    obs_in = behavior.observations(unity_obs)
    normalizer = _load_vec_normalize(vec_normalize)
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


def _verify(model: Any, path: Path, spec: BehaviorSpec, vec_normalize: Any, n: int = 64) -> None:
    rng = np.random.default_rng(0)
    obs = []
    for obs_spec in spec.observation_specs:
        shape = (n, *_onnx_shape(obs_spec))
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


# ---------------------------------------------------------------------------------- command line


def export_from_args(args: Any) -> int:
    """``unity-sb3 export MODEL_ZIP [--algo ALGO] [--output PATH] [--env SCENE]``."""
    import yaml

    from unity_sb3.algorithms.registry import algorithm_class

    model_path = Path(args.model)
    if model_path.is_dir():
        model_path = model_path / "model.zip"
    if not model_path.is_file():
        raise SystemExit(f"unity-sb3 export: no model at {model_path}")
    run_dir = model_path.parent
    config: dict[str, Any] = {}
    for folder in (run_dir, run_dir.parent):  # model.zip, or checkpoints/<name>.zip
        if (folder / "config.yaml").is_file():
            config = yaml.safe_load((folder / "config.yaml").read_text()) or {}
            run_dir = folder
            break
    algo = args.algo or config.get("algo")
    if not algo:
        raise SystemExit("unity-sb3 export: cannot tell the algorithm; pass --algo (e.g. --algo ppo)")
    model = algorithm_class(algo).load(str(model_path), device="cpu")
    spec = None
    scene = args.env or config.get("env")
    if scene:
        spec = _scene_spec(str(scene), config.get("behavior"), explicit=bool(args.env))
    stats = run_dir / "vecnormalize.pkl"
    vec_normalize = stats if config.get("normalize") and stats.is_file() else None
    output = Path(args.output) if args.output else model_path.with_suffix(".onnx")
    try:
        import onnxruntime  # noqa: F401

        verify = True
    except ImportError:  # pragma: no cover - depends on the install
        verify = False
    to_onnx(model, output, behavior_spec=spec, vec_normalize=vec_normalize, verify=verify)
    info = inspect_onnx(output)
    print(f"wrote {output}" + (" (checked against model.predict with onnxruntime)" if verify else ""))
    print("  inputs:  " + ", ".join(f"{k} {list(v)}" for k, v in info.inputs.items()))
    print("  outputs: " + ", ".join(info.outputs))
    print(
        f"  version {info.version}, memory_size {info.memory_size}, continuous {info.continuous_size}, "
        f"discrete branches {list(info.discrete_branches)}"
    )
    return 0


def _scene_spec(scene: str, behavior: str | None, explicit: bool) -> BehaviorSpec | None:
    """The behavior spec of an embedded scene; None for a Unity build (unless named with --env)."""
    from unity_sb3.envs import list_scenes, make_scene

    if scene.lower() not in {s.lower() for s in list_scenes()}:
        if explicit:
            raise SystemExit(
                f"unity-sb3 export: --env takes an embedded scene ({', '.join(list_scenes())}); for a Unity "
                "build leave it out and the spec is rebuilt from the model's spaces"
            )
        return None
    env = make_scene(scene)
    try:
        specs = dict(env.behavior_specs)
    finally:
        env.close()
    if behavior:
        matches = [k for k in specs if k == behavior or k.split("?")[0] == behavior.split("?")[0]]
        if not matches:
            raise SystemExit(
                f"unity-sb3 export: scene {scene} has no behavior {behavior!r}; it has {list(specs)}"
            )
        return specs[matches[0]]
    if len(specs) != 1:
        raise SystemExit(
            f"unity-sb3 export: scene {scene} has behaviors {list(specs)}; the run must name one"
        )
    return next(iter(specs.values()))
