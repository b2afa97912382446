"""The exported torch module: Unity's inputs -> the policy's deterministic action -> Unity's outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from mlagents_envs.base_env import BehaviorSpec
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.preprocessing import preprocess_obs
from torch import nn

from unity_sb3.algorithms.distributions import is_hybrid_space
from unity_sb3.export.names import (
    ACTION_MASKS,
    CONTINUOUS_ACTION_SHAPE,
    CONTINUOUS_ACTIONS,
    DETERMINISTIC_CONTINUOUS_ACTIONS,
    DETERMINISTIC_DISCRETE_ACTIONS,
    DISCRETE_ACTION_SHAPE,
    DISCRETE_ACTIONS,
    HUGE_NEG,
    MEMORY_SIZE,
    MODEL_EXPORT_VERSION,
    OBSERVATION_PREFIX,
    RECURRENT_IN,
    RECURRENT_OUT,
    VERSION_NUMBER,
)
from unity_sb3.export.specs import (
    ObsRoute,
    check_actions,
    infer_behavior_spec,
    load_vec_normalize,
    plan_observations,
    policy_of,
)
from unity_sb3.networks.memory import LSTMMemory


class ObservationAdapter(nn.Module):
    """Unity's observation tensors -> the policy's observation (tensor or dict), VecNormalize included."""

    def __init__(self, routes: list[ObsRoute], mode: str, vec_normalize: Any | None) -> None:
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
            if route.entities:  # as ML-Agents' exporter reads a rank-2 input (specs.entities_from_onnx)
                rows, size = route.onnx_shape
                x = th.transpose(x, 1, 2).reshape(-1, rows, size)
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


class BoxBounds(nn.Module):
    """Clip to, or rescale from [-1, 1] to, a Box action space's bounds (as SB3's ``predict``)."""

    def __init__(self, space: spaces.Box) -> None:
        super().__init__()
        low = np.asarray(space.low, dtype=np.float32).reshape(-1)
        high = np.asarray(space.high, dtype=np.float32).reshape(-1)
        # Unity's own [-1, 1] needs no extra ops: the final clip for Unity does it
        self.unit = bool(np.all(low == -1.0) and np.all(high == 1.0))
        self.register_buffer("low", th.as_tensor(low))
        self.register_buffer("high", th.as_tensor(high))

    def clip(self, actions: th.Tensor) -> th.Tensor:
        return actions if self.unit else th.min(th.max(actions, self.low), self.high)

    def unscale(self, scaled: th.Tensor) -> th.Tensor:
        return scaled if self.unit else self.low + 0.5 * (scaled + 1.0) * (self.high - self.low)


def _features(policy: Any, extractor: nn.Module, obs: Any) -> th.Tensor:
    return extractor(preprocess_obs(obs, policy.observation_space, normalize_images=policy.normalize_images))


class ActorHead(nn.Module):
    """A policy's deterministic output: action logits (discrete) or the action in the space's bounds (Box).

    :param policy: the SB3 policy.
    :param kind: ``"actor_critic"`` (PPO, A2C, TRPO, MaskablePPO, RecurrentPPO), ``"poca"``,
        ``"squashed"`` (SAC, TQC), ``"branched"`` (the project's SAC with discrete actions: its
        per-branch logits), ``"deterministic"`` (TD3, DDPG) or ``"q"`` (DQN).
    """

    def __init__(self, policy: BasePolicy, kind: str) -> None:
        super().__init__()
        self.policy = policy
        self.kind = kind
        self.box = isinstance(policy.action_space, spaces.Box)
        self.bounds = BoxBounds(policy.action_space) if self.box else None
        self.lstm: nn.Module | None = getattr(policy, "lstm_actor", None) if kind == "actor_critic" else None
        self.memory_size = 0
        if isinstance(self.lstm, LSTMMemory):  # unity_sb3.RecurrentPPO: ML-Agents' flat memory
            self.memory_size = self.lstm.memory_size
        elif self.lstm is not None:
            self.memory_size = 2 * self.lstm.num_layers * self.lstm.hidden_size
        elif kind in ("squashed", "branched", "poca"):  # the project's SAC or POCA with memory: flat memory
            self.memory_size = int(getattr(policy, "memory_size", 0))

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
        sac_memory = self.kind in ("squashed", "branched") and self.memory_size > 0
        if sac_memory:  # one step of the actor's LSTM from the memory Unity feeds back
            from unity_sb3.algorithms.sac.recurrent import SequenceBatch

            assert memory is not None
            obs = SequenceBatch(obs, None, memory[:, 0, :])
        if self.kind == "actor_critic":
            features = _features(policy, policy.pi_features_extractor, obs)
            if isinstance(self.lstm, LSTMMemory):  # ML-Agents' order: body, LSTM, head
                assert memory is not None
                latent = policy.mlp_extractor.forward_actor(features).unsqueeze(1)
                latent, flat_memory = self.lstm(latent, memory[:, 0, :])
                out, new_memory = policy.action_net(latent[:, 0]), flat_memory.unsqueeze(1)
            else:
                if self.lstm is not None:  # sb3-contrib: LSTM, then body, then head
                    assert memory is not None
                    features, new_memory = self._lstm_step(features, memory)
                out = policy.action_net(policy.mlp_extractor.forward_actor(features))
            squash = bool(getattr(policy, "squash_output", False))
            if self.box and squash:  # gSDE with squash_output: the mode is tanh(mean)
                out = th.tanh(out)
        elif self.kind == "poca":
            latent = policy.actor_net(_features(policy, policy.features_extractor, obs))
            if self.memory_size:  # RecurrentPOCA: ML-Agents' order, body then LSTM then head
                assert memory is not None
                outputs, flat_memory = policy.memory(latent.unsqueeze(1), memory[:, 0, :])
                latent, new_memory = outputs[:, 0], flat_memory.unsqueeze(1)
            out, squash = policy.action_net(latent), False
        elif self.kind == "squashed":
            mean, _, _ = policy.actor.get_action_dist_params(obs)
            out, squash = th.tanh(mean), True
        elif self.kind == "branched":
            actor = policy.actor
            latent = actor.latent_pi(actor.extract_features(obs, actor.features_extractor))
            out, squash = actor.logits(latent), False
            if actor.continuous_size:  # hybrid: the squashed Gaussian's mode, then the logits
                out = th.cat([th.tanh(actor.mu(latent)), out], dim=1)
        elif self.kind == "deterministic":
            out, squash = policy.actor(obs), True
        else:  # "q": Q-values play the role of logits
            out, squash = policy.q_net(obs), False
        if sac_memory:
            new_memory = policy.actor.final_memories.unsqueeze(1)
        if self.box:
            assert self.bounds is not None
            out = self.bounds.unscale(out) if squash else self.bounds.clip(out)
        return out, new_memory


def head_kind(policy: BasePolicy) -> str:
    """Which :class:`ActorHead` path reads this policy."""
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
    if (
        actor is not None
        and hasattr(actor, "logits")
        and (not getattr(actor, "continuous_size", 1) or is_hybrid_space(policy.action_space))
    ):
        return "branched"
    if actor is not None and hasattr(actor, "mu"):
        return "deterministic"
    if hasattr(policy, "q_net") and not hasattr(policy, "quantile_net"):
        return "q"
    raise NotImplementedError(
        f"ONNX export does not know the policy class {type(policy).__name__}; supported: PPO, A2C, TRPO, "
        "MaskablePPO, RecurrentPPO, SAC, TQC, TD3, DDPG, DQN and POCA policies"
    )


class UnityPolicyGraph(nn.Module):
    """The exported module: Unity's inputs in, Unity's outputs out (see the module docstring)."""

    def __init__(
        self, adapter: ObservationAdapter, head: ActorHead, spec: BehaviorSpec, hybrid_box: bool
    ) -> None:
        """``hybrid_box``: the policy acts in UnityVecEnv's hybrid ``"box"`` layout. A hybrid
        ``Tuple(Box, MultiDiscrete)`` policy's head gives the ``c`` means, then every branch's logits."""
        super().__init__()
        self.adapter = adapter
        self.head = head
        self.n_obs = len(spec.observation_specs)
        self.continuous_size = int(spec.action_spec.continuous_size)
        self.branches = [int(b) for b in spec.action_spec.discrete_branches]
        self.hybrid_box = hybrid_box
        self.hybrid_tuple = is_hybrid_space(head.policy.action_space)
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
        return th.cat(choices, dim=1)  # int64, as ML-Agents' exporter writes (Sentis reads Tensor<int>)

    def _discrete_from_box(self, values: th.Tensor) -> th.Tensor:
        # unity_sb3.spaces.box_to_discrete: branch b splits [-1, 1] into b equal bins
        scaled = (th.clamp(values, -1.0, 1.0) + 1.0) / 2.0 * self.branch_sizes
        return th.min(th.floor(scaled), self.branch_sizes - 1.0).long()

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
        elif self.hybrid_tuple:
            assert masks is not None
            continuous = th.clamp(out[:, : self.continuous_size], -1.0, 1.0)
            discrete = self._discrete_from_logits(out[:, self.continuous_size :], masks)
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


def build_graph(
    model: BaseAlgorithm | BasePolicy, behavior_spec: BehaviorSpec | None, vec_normalize: Any
) -> tuple[UnityPolicyGraph, BehaviorSpec, list[ObsRoute], str]:
    """Check the model against the spec and assemble the module to trace.

    :return: the module, the spec used, the observation routes and their mode.
    """
    policy = policy_of(model)
    spec = behavior_spec or infer_behavior_spec(policy.observation_space, policy.action_space)
    routes, mode = plan_observations(spec, policy.observation_space)
    hybrid_box = check_actions(spec, policy.action_space)
    kind = head_kind(policy)
    if kind == "q" and int(spec.action_spec.continuous_size):
        raise ValueError("a Q-network policy (DQN) has no continuous actions to export")
    adapter = ObservationAdapter(routes, mode, load_vec_normalize(vec_normalize))
    head = ActorHead(policy, kind)
    return UnityPolicyGraph(adapter, head, spec, hybrid_box), spec, routes, mode


def dummy_inputs(graph: UnityPolicyGraph, routes: list[ObsRoute], batch: int = 1) -> tuple[th.Tensor, ...]:
    """Zero observations, all-allowed masks and zero memories in the exported inputs' order."""
    device = next((p.device for p in graph.head.policy.parameters()), th.device("cpu"))
    tensors = [th.zeros((batch, *r.onnx_shape), device=device) for r in routes]
    if graph.has_masks:
        tensors.append(th.ones((batch, sum(graph.branches)), device=device))
    if graph.memory:
        tensors.append(th.zeros((batch, 1, graph.memory), device=device))
    return tuple(tensors)
