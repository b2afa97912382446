"""PPO's actor-critic policy for hybrid actions (continuous values and discrete branches in one behavior).

SB3's ``ActorCriticPolicy`` with :class:`~unity_sb3.algorithms.distributions.HybridDistribution`
as its action distribution: the action network outputs ``c`` Gaussian means then the logits of
every branch, and the discrete logits are masked with the env's action masks (True = allowed,
``(B, sum(branches))``, sb3-contrib's format) as ML-Agents masks its discrete heads.

The action space is the hybrid ``Tuple((Box(c,), MultiDiscrete(branches)))``. Inside the policy
and the rollout buffer an action is one flat float row ``(c + k,)`` (continuous then branch
indices); :meth:`HybridActorCriticPolicy.predict` returns the Tuple's batch ``((n, c), (n, k))``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, CombinedExtractor, NatureCNN
from stable_baselines3.common.type_aliases import PyTorchObs

from unity_sb3.algorithms.distributions import (
    HybridDistribution,
    flat_action_space,
    hybrid_policy_layout,
    hybrid_predict_actions,
    is_hybrid_space,
)

Masks = th.Tensor | np.ndarray | None


class HybridActorCriticPolicy(ActorCriticPolicy):
    """SB3's ``ActorCriticPolicy`` for a hybrid ``Tuple(Box, MultiDiscrete)`` action space, with action masks.

    Takes every argument of ``ActorCriticPolicy`` (``log_std_init`` is the Gaussian's initial log
    standard deviation); ``use_sde`` must be False.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        if not is_hybrid_space(action_space):
            raise ValueError(
                f"HybridActorCriticPolicy takes a hybrid Tuple(Box, MultiDiscrete) action space, got {action_space}; "
                "use 'MlpPolicy' for Box, Discrete or MultiDiscrete actions."
            )
        self.continuous_size, self.branches = hybrid_policy_layout(action_space, kwargs.get("use_sde", False))
        # SB3 builds its distribution from the action space; it gets the flat Box here and
        # _build replaces the distribution with the hybrid one
        super().__init__(observation_space, flat_action_space(action_space), *args, **kwargs)
        self.action_space = action_space

    def _build(self, lr_schedule: Any) -> None:
        self.action_dist = HybridDistribution(self.continuous_size, self.branches)
        super()._build(lr_schedule)

    def _get_action_dist_from_latent(self, latent_pi: th.Tensor, action_masks: Masks = None) -> Distribution:
        assert isinstance(self.action_dist, HybridDistribution)
        return self.action_dist.proba_distribution(self.action_net(latent_pi), self.log_std, action_masks)

    def forward(  # type: ignore[override]
        self, obs: th.Tensor, deterministic: bool = False, action_masks: Masks = None
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Actions ``(B, c + k)``, values ``(B, 1)`` and log-probabilities ``(B,)``."""
        features = self.extract_features(obs)
        if self.share_features_extractor:
            latent_pi, latent_vf = self.mlp_extractor(features)
        else:
            pi_features, vf_features = features
            latent_pi = self.mlp_extractor.forward_actor(pi_features)
            latent_vf = self.mlp_extractor.forward_critic(vf_features)
        values = self.value_net(latent_vf)
        distribution = self._get_action_dist_from_latent(latent_pi, action_masks)
        actions = distribution.get_actions(deterministic=deterministic)
        return actions, values, distribution.log_prob(actions)

    def get_distribution(self, obs: PyTorchObs, action_masks: Masks = None) -> Distribution:  # type: ignore[override]
        """The action distribution at ``obs`` under ``action_masks`` (``(B, sum(branches))``, True = allowed)."""
        features = super(ActorCriticPolicy, self).extract_features(obs, self.pi_features_extractor)
        return self._get_action_dist_from_latent(self.mlp_extractor.forward_actor(features), action_masks)

    def evaluate_actions(  # type: ignore[override]
        self, obs: PyTorchObs, actions: th.Tensor, action_masks: Masks = None
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """Values ``(B, 1)``, log-probabilities ``(B,)`` and entropies ``(B,)`` of flat actions ``(B, c + k)``."""
        features = self.extract_features(obs)
        if self.share_features_extractor:
            latent_pi, latent_vf = self.mlp_extractor(features)
        else:
            pi_features, vf_features = features
            latent_pi = self.mlp_extractor.forward_actor(pi_features)
            latent_vf = self.mlp_extractor.forward_critic(vf_features)
        distribution = self._get_action_dist_from_latent(latent_pi, action_masks)
        return self.value_net(latent_vf), distribution.log_prob(actions), distribution.entropy()

    def _predict(  # type: ignore[override]
        self, observation: PyTorchObs, deterministic: bool = False, action_masks: Masks = None
    ) -> th.Tensor:
        return self.get_distribution(observation, action_masks).get_actions(deterministic=deterministic)

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, ...] | None]:
        """SB3's ``predict`` with ``action_masks`` (``(n, sum(branches))``, True = allowed).

        :return: ``((n, c) float32 clipped to the Box, (n, k) int64)``, without the leading ``n``
            for a single observation.
        """
        self.set_training_mode(False)
        obs_tensor, vectorized_env = self.obs_to_tensor(observation)
        with th.no_grad():
            actions = self._predict(obs_tensor, deterministic, action_masks).cpu().numpy()
        return hybrid_predict_actions(actions, self.action_space, vectorized_env), state  # type: ignore[arg-type]


class HybridCnnPolicy(HybridActorCriticPolicy):
    """:class:`HybridActorCriticPolicy` with SB3's NatureCNN (image observations)."""

    def __init__(
        self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN, **kwargs: Any
    ) -> None:
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


class HybridMultiInputPolicy(HybridActorCriticPolicy):
    """:class:`HybridActorCriticPolicy` with SB3's CombinedExtractor (``Dict`` observations)."""

    def __init__(
        self,
        *args: Any,
        features_extractor_class: type[BaseFeaturesExtractor] = CombinedExtractor,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)
