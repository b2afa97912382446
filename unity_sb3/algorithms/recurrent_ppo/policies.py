"""Actor-critic policies with ML-Agents' memory: network body, then an LSTM, then the heads.

As ML-Agents' PPO builds them (``mlagents/trainers/torch_entities/networks.py``): the actor and the
critic each have their own network body (encoders and hidden layers: SB3's features extractor and
``mlp_extractor``) followed by their own :class:`~unity_sb3.networks.memory.LSTMMemory`; the action
and value heads read the LSTM's output (``memory_size // 2`` features; ``post_memory_arch`` puts
dense layers in between, a departure from ML-Agents' layout, off by default). Each slot carries two flat
memories, ``(n, memory_size)`` each: the actor's (what the exported model carries in Unity) and the
critic's. ``predict`` takes and returns the actor's memory only.

Observations of sequences come flat, sequence-major: ``(n_seq * L, ...)`` with memories ``(n_seq,
memory_size)`` before each sequence's first step and ``episode_starts`` ``(n_seq * L,)`` (the
memory is zeroed before a step that starts an episode). Acting is ``L = 1``.

A hybrid ``Tuple(Box, MultiDiscrete)`` action space takes
:class:`~unity_sb3.algorithms.distributions.HybridDistribution` (as
:class:`~unity_sb3.algorithms.ppo.hybrid.HybridActorCriticPolicy`): actions are flat rows ``(c + k,)``
inside, discrete logits are masked with ``action_masks`` (``(N, sum(branches))``, True = allowed),
and ``predict`` returns the Tuple's batch ``((n, c), (n, k))``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy, BaseModel
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, CombinedExtractor, NatureCNN
from stable_baselines3.common.type_aliases import PyTorchObs

from unity_sb3.algorithms.distributions import (
    HybridDistribution,
    flat_action_space,
    hybrid_policy_layout,
    hybrid_predict_actions,
    is_hybrid_space,
)
from unity_sb3.networks.memory import (
    DEFAULT_MEMORY_SIZE,
    LSTMMemory,
    check_memory_settings,
    predict_memories,
)

#: the actor's and the critic's memories, ``(n, memory_size)`` each
Memories = tuple[th.Tensor, th.Tensor]


class RecurrentActorCriticPolicy(ActorCriticPolicy):
    """SB3's actor-critic policy with an LSTM after each network body (see the module docstring).

    Takes every argument of :class:`~stable_baselines3.common.policies.ActorCriticPolicy`, plus:

    :param memory_size: floats of memory per agent and network (hidden + cell state; even).
        ``share_features_extractor`` defaults to False: ML-Agents' critic has its own encoders.
    :param post_memory_arch: units of dense layers (``activation_fn``) between each LSTM and its head;
        empty (the default) is ML-Agents' layout, where the heads read the LSTM directly (see
        :class:`~unity_sb3.networks.memory.LSTMMemory`; the exported model carries them).
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        *args: Any,
        memory_size: int = DEFAULT_MEMORY_SIZE,
        post_memory_arch: list[int] | None = None,
        **kwargs: Any,
    ) -> None:
        check_memory_settings(memory_size, 1)
        self.memory_size = memory_size
        self.post_memory_arch = list(post_memory_arch or [])
        kwargs.setdefault("share_features_extractor", False)
        self.hybrid = is_hybrid_space(action_space)
        if self.hybrid:
            self.continuous_size, self.branches = hybrid_policy_layout(
                action_space, kwargs.get("use_sde", False)
            )
            # SB3 builds its distribution from the flat Box; _build replaces it with the hybrid one
            super().__init__(observation_space, flat_action_space(action_space), *args, **kwargs)
            self.action_space = action_space
        else:
            super().__init__(observation_space, action_space, *args, **kwargs)
        self.flat_action_shape: tuple[int, ...] = (
            (self.continuous_size + len(self.branches),) if self.hybrid else tuple(action_space.shape or ())
        )

    def _build(self, lr_schedule: Any) -> None:
        if self.hybrid:
            self.action_dist = HybridDistribution(self.continuous_size, self.branches)
        super()._build(lr_schedule)

    def _distribution(
        self, latent_pi: th.Tensor, action_masks: th.Tensor | np.ndarray | None
    ) -> Distribution:
        """The action distribution from the LSTM's output; ``action_masks`` mask a hybrid policy's branches."""
        if self.hybrid:
            assert isinstance(self.action_dist, HybridDistribution)
            return self.action_dist.proba_distribution(self.action_net(latent_pi), self.log_std, action_masks)
        if action_masks is not None and not np.all(np.asarray(action_masks)):
            raise ValueError("action masks need discrete branches: this policy has none to mask.")
        return self._get_action_dist_from_latent(latent_pi)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {
            **super()._get_constructor_parameters(),
            "memory_size": self.memory_size,
            "post_memory_arch": self.post_memory_arch,
        }

    def _build_mlp_extractor(self) -> None:
        super()._build_mlp_extractor()
        post = (self.post_memory_arch, self.activation_fn)
        self.lstm_actor = LSTMMemory(self.mlp_extractor.latent_dim_pi, self.memory_size, *post)
        self.lstm_critic = LSTMMemory(self.mlp_extractor.latent_dim_vf, self.memory_size, *post)
        # SB3's _build sizes the action and value heads from these: they read the LSTMs' outputs
        self.mlp_extractor.latent_dim_pi = self.mlp_extractor.latent_dim_vf = self.lstm_actor.output_size

    def initial_memories(self, n: int) -> Memories:
        """Zero actor and critic memories for ``n`` slots."""
        zeros = th.zeros(n, self.memory_size, device=self.device)
        return zeros, zeros.clone()

    def _body(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor]:
        features = self.extract_features(obs)
        pi_features, vf_features = features if isinstance(features, tuple) else (features, features)
        return self.mlp_extractor.forward_actor(pi_features), self.mlp_extractor.forward_critic(vf_features)

    @staticmethod
    def _unroll(
        lstm: LSTMMemory, latent: th.Tensor, memories: th.Tensor, episode_starts: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        n_seq = memories.shape[0]
        outputs, final = lstm(
            latent.reshape(n_seq, -1, latent.shape[-1]), memories, episode_starts.reshape(n_seq, -1)
        )
        return outputs.reshape(-1, outputs.shape[-1]), final

    def forward(  # type: ignore[override]
        self,
        obs: PyTorchObs,
        memories: Memories,
        episode_starts: th.Tensor,
        deterministic: bool = False,
        action_masks: th.Tensor | np.ndarray | None = None,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, Memories]:
        """One step (or sequences): actions, values ``(N, n_heads)``, log-probabilities and the memories after."""
        latent_pi, latent_vf = self._body(obs)
        latent_pi, actor_memories = self._unroll(self.lstm_actor, latent_pi, memories[0], episode_starts)
        latent_vf, critic_memories = self._unroll(self.lstm_critic, latent_vf, memories[1], episode_starts)
        distribution = self._distribution(latent_pi, action_masks)
        actions = distribution.get_actions(deterministic=deterministic)
        log_prob = distribution.log_prob(actions)
        actions = actions.reshape((-1, *self.flat_action_shape))
        return actions, self.value_net(latent_vf), log_prob, (actor_memories, critic_memories)

    def get_distribution(  # type: ignore[override]
        self,
        obs: PyTorchObs,
        actor_memories: th.Tensor,
        episode_starts: th.Tensor,
        action_masks: th.Tensor | np.ndarray | None = None,
    ) -> tuple[Distribution, th.Tensor]:
        """The action distribution over sequences and the actor's memories after them."""
        latent_pi = self.mlp_extractor.forward_actor(self._pi_features(obs))
        latent_pi, memories = self._unroll(self.lstm_actor, latent_pi, actor_memories, episode_starts)
        return self._distribution(latent_pi, action_masks), memories

    def predict_values(  # type: ignore[override]
        self, obs: PyTorchObs, critic_memories: th.Tensor, episode_starts: th.Tensor
    ) -> th.Tensor:
        """Values ``(N, n_heads)`` over sequences started from ``critic_memories``."""
        features = self._features(obs, self.vf_features_extractor)
        latent_vf = self.mlp_extractor.forward_critic(features)
        latent_vf, _ = self._unroll(self.lstm_critic, latent_vf, critic_memories, episode_starts)
        return self.value_net(latent_vf)

    def evaluate_actions(  # type: ignore[override]
        self,
        obs: PyTorchObs,
        actions: th.Tensor,
        memories: Memories,
        episode_starts: th.Tensor,
        action_masks: th.Tensor | None = None,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """Values, log-probabilities and entropies of ``actions`` over sequences."""
        latent_pi, latent_vf = self._body(obs)
        latent_pi, _ = self._unroll(self.lstm_actor, latent_pi, memories[0], episode_starts)
        latent_vf, _ = self._unroll(self.lstm_critic, latent_vf, memories[1], episode_starts)
        distribution = self._distribution(latent_pi, action_masks)
        return self.value_net(latent_vf), distribution.log_prob(actions), distribution.entropy()

    def _pi_features(self, obs: PyTorchObs) -> th.Tensor:
        return self._features(obs, self.pi_features_extractor)

    def _features(self, obs: PyTorchObs, extractor: BaseFeaturesExtractor) -> th.Tensor:
        # BaseModel's single-extractor version: ActorCriticPolicy's returns both when not shared
        return BaseModel.extract_features(self, obs, extractor)

    def _predict(  # type: ignore[override]
        self,
        observation: PyTorchObs,
        actor_memories: th.Tensor,
        episode_starts: th.Tensor,
        deterministic: bool = False,
        action_masks: th.Tensor | np.ndarray | None = None,
    ) -> tuple[th.Tensor, th.Tensor]:
        distribution, memories = self.get_distribution(
            observation, actor_memories, episode_starts, action_masks
        )
        return distribution.get_actions(deterministic=deterministic), memories

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: np.ndarray | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[Any, np.ndarray]:
        """sb3-contrib's ``predict(obs, state, episode_start)`` with ML-Agents' memory as the state.

        :param state: the actor's memories ``(n_envs, memory_size)`` float32; None: zeros.
        :param episode_start: ``(n_envs,)``, 1 where an episode starts (the memory is zeroed); None: no start.
        :param action_masks: ``(n_envs, sum(branches))``, True = allowed (hybrid actions only).
        :return: the actions (a hybrid policy's as ``((n, c), (n, k))``) and the memories after this
            step, ``(n_envs, memory_size)``.
        """
        self.set_training_mode(False)
        obs_tensor, vectorized = self.obs_to_tensor(observation)
        n = len(next(iter(obs_tensor.values()))) if isinstance(obs_tensor, dict) else len(obs_tensor)
        memories, starts = predict_memories(state, episode_start, n, self.memory_size, self.device)
        with th.no_grad():
            actions, memories = self._predict(obs_tensor, memories, starts, deterministic, action_masks)
        actions_np = actions.cpu().numpy().reshape((-1, *self.flat_action_shape))
        if self.hybrid:
            return hybrid_predict_actions(actions_np, self.action_space, vectorized), memories.cpu().numpy()  # type: ignore[arg-type]
        if isinstance(self.action_space, spaces.Box):
            if self.squash_output:
                actions_np = self.unscale_action(actions_np)
            else:
                actions_np = np.clip(actions_np, self.action_space.low, self.action_space.high)
        if not vectorized:
            actions_np = actions_np.squeeze(axis=0)
        return actions_np, memories.cpu().numpy()


class RecurrentActorCriticCnnPolicy(RecurrentActorCriticPolicy):
    """:class:`RecurrentActorCriticPolicy` with SB3's NatureCNN encoder (image observations)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("features_extractor_class", NatureCNN)
        super().__init__(*args, **kwargs)


class RecurrentMultiInputActorCriticPolicy(RecurrentActorCriticPolicy):
    """:class:`RecurrentActorCriticPolicy` for ``Dict`` observations (SB3's CombinedExtractor by default;
    the project's configs pass ``UnityMultiInputExtractor``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("features_extractor_class", CombinedExtractor)
        super().__init__(*args, **kwargs)
