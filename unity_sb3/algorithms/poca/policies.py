"""POCA policies: a shared actor in SB3 style plus the attention critic of :mod:`.networks`.

The actor is what every agent runs (features extractor -> MLP -> action distribution; discrete
distributions are sb3-contrib's maskable ones, so action masks are honoured as in
``MaskablePPO``; a hybrid ``Tuple(Box, MultiDiscrete)`` action space takes
:class:`~unity_sb3.algorithms.distributions.HybridDistribution`, masks on its branches, and its
actions are flat ``(c + k,)`` rows inside the policy and the buffer). The critic has its own
features extractor (with its own settings where given), applied to each group member's observation
separately, feeding :class:`~unity_sb3.algorithms.poca.networks.GroupCriticBody`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import (
    MaskableCategoricalDistribution,
    MaskableDistribution,
    MaskableMultiCategoricalDistribution,
    make_masked_proba_distribution,
)
from stable_baselines3.common.distributions import DiagGaussianDistribution, Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    FlattenExtractor,
    NatureCNN,
    create_mlp,
)
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import nn

from unity_sb3.algorithms.distributions import (
    HybridDistribution,
    action_layout,
    flat_action_space,
    hybrid_predict_actions,
    is_hybrid_space,
)
from unity_sb3.algorithms.optimizers import adam_kernel_kwargs
from unity_sb3.algorithms.poca.networks import GroupCriticBody
from unity_sb3.algorithms.poca.sampling import (
    diag_gaussian_log_prob_entropy,
    masked_categorical_log_prob_entropy,
    sample_diag_gaussian,
    sample_masked_categorical,
)

# Observations with a leading (batch, n_members) shape, as a tensor or a dict of tensors.
GroupObs = th.Tensor | dict[str, th.Tensor]


class POCAPolicy(BasePolicy):
    """Shared actor and centralised attention critic for :class:`~unity_sb3.algorithms.poca.POCA`.

    :param observation_space: one agent's observation space.
    :param action_space: one agent's action space (``Box``, ``Discrete``, ``MultiDiscrete`` or the
        hybrid ``Tuple(Box, MultiDiscrete)``).
    :param lr_schedule: learning rate schedule (progress remaining -> learning rate).
    :param net_arch: hidden layer sizes of the actor MLP (default ``[128, 128]``, ML-Agents' default).
    :param activation_fn: activation of the actor MLP.
    :param ortho_init: orthogonal initialisation of the actor, as SB3's ``ActorCriticPolicy``.
    :param log_std_init: initial log standard deviation for continuous actions.
    :param features_extractor_class: features extractor class, used once for the actor and once
        for the critic (the critic applies it to every group member's observation).
    :param features_extractor_kwargs: its keyword arguments (the actor's).
    :param critic_features_extractor_kwargs: the critic's extractor's keyword arguments; None: the
        actor's. ML-Agents' POCA conditions only the actor on goal signals (its centralised critic
        encodes them as ordinary observations), so the ML-Agents config mapping gives the critic
        the plain settings.
    :param normalize_images: divide image observations by 255.
    :param critic_embed_dim: entity embedding size of the critic.
    :param critic_n_heads: attention heads of the critic.
    :param critic_net_arch: hidden layer sizes of the critic head after attention pooling.
    :param optimizer_class: optimizer class (one optimizer over actor and critic, as ML-Agents).
    :param optimizer_kwargs: its keyword arguments.
    :param use_sde: not supported; present for SB3 signature compatibility.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | None = None,
        activation_fn: type[nn.Module] = nn.Tanh,
        ortho_init: bool = True,
        log_std_init: float = 0.0,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        critic_features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        critic_embed_dim: int = 128,
        critic_n_heads: int = 4,
        critic_net_arch: list[int] | None = None,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
        use_sde: bool = False,
    ) -> None:
        if use_sde:
            raise ValueError("POCA does not support gSDE (use_sde=True); use the default Gaussian noise.")
        if not isinstance(action_space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete)) and not (
            is_hybrid_space(action_space)
        ):
            raise ValueError(
                f"POCA supports Box, Discrete, MultiDiscrete and hybrid Tuple(Box, MultiDiscrete) action spaces, "
                f"got {action_space}. For hybrid Unity actions, build the UnityVecEnv with hybrid='tuple'."
            )
        if optimizer_kwargs is None:
            optimizer_kwargs = {}
            if optimizer_class == th.optim.Adam:
                optimizer_kwargs.update(eps=1e-5, **adam_kernel_kwargs())
        super().__init__(
            observation_space,
            action_space,
            features_extractor_class,
            features_extractor_kwargs,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=normalize_images,
        )
        self.net_arch = [128, 128] if net_arch is None else list(net_arch)
        self.activation_fn = activation_fn
        self.ortho_init = ortho_init
        self.log_std_init = log_std_init
        self.critic_embed_dim = critic_embed_dim
        self.critic_n_heads = critic_n_heads
        self.critic_net_arch = critic_net_arch
        self.critic_features_extractor_kwargs = critic_features_extractor_kwargs

        self.features_extractor = self.make_features_extractor()
        self.features_dim = self.features_extractor.features_dim
        self.critic_features_extractor = (
            self.make_features_extractor()
            if critic_features_extractor_kwargs is None
            else self.features_extractor_class(self.observation_space, **critic_features_extractor_kwargs)
        )

        actor_layers = create_mlp(self.features_dim, -1, self.net_arch, activation_fn)
        self.actor_net = nn.Sequential(*actor_layers)
        latent_dim = self.net_arch[-1] if self.net_arch else self.features_dim

        self.action_dist: Distribution
        if is_hybrid_space(action_space):
            self.action_dist = HybridDistribution(*action_layout(action_space))
            self.action_net, self.log_std = self.action_dist.proba_distribution_net(latent_dim, log_std_init)
        elif isinstance(action_space, spaces.Box):
            self.action_dist = DiagGaussianDistribution(int(np.prod(action_space.shape)))
            self.action_net, self.log_std = self.action_dist.proba_distribution_net(latent_dim, log_std_init)
        else:
            self.action_dist = make_masked_proba_distribution(action_space)
            self.action_net = self.action_dist.proba_distribution_net(latent_dim)

        self.critic = self._make_critic()

        if ortho_init:
            gains = {self.features_extractor: np.sqrt(2), self.actor_net: np.sqrt(2), self.action_net: 0.01}
            for module, gain in gains.items():
                module.apply(partial(self.init_weights, gain=gain))

        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _make_critic(self) -> GroupCriticBody:
        """The centralised critic's body (a memory policy gives it an LSTM)."""
        return GroupCriticBody(
            self.critic_features_extractor.features_dim,
            self.encoded_action_dim,
            embed_dim=self.critic_embed_dim,
            n_heads=self.critic_n_heads,
            net_arch=self.critic_net_arch,
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            dict(
                net_arch=self.net_arch,
                activation_fn=self.activation_fn,
                ortho_init=self.ortho_init,
                log_std_init=self.log_std_init,
                critic_embed_dim=self.critic_embed_dim,
                critic_n_heads=self.critic_n_heads,
                critic_net_arch=self.critic_net_arch,
                critic_features_extractor_kwargs=self.critic_features_extractor_kwargs,
                lr_schedule=self._dummy_schedule,
            )
        )
        return data

    # ------------------------------------------------------------------ actor

    @property
    def encoded_action_dim(self) -> int:
        """Size of one action as the critic's baseline sees it (one-hot per discrete branch)."""
        if isinstance(self.action_space, spaces.Discrete):
            return int(self.action_space.n)
        if isinstance(self.action_space, spaces.MultiDiscrete):
            return int(np.sum(self.action_space.nvec))
        if is_hybrid_space(self.action_space):
            c, branches = action_layout(self.action_space)
            return c + sum(branches)
        return int(np.prod(self.action_space.shape))

    @property
    def flat_action_shape(self) -> tuple[int, ...]:
        """Shape of one action inside the policy and the buffer (``(c + k,)`` for hybrid actions)."""
        return tuple(flat_action_space(self.action_space).shape)  # type: ignore[arg-type]

    def get_distribution(
        self, obs: PyTorchObs, action_masks: np.ndarray | th.Tensor | None = None
    ) -> Distribution:
        """The action distribution for a batch of observations.

        :param obs: observations, shape (batch, *obs_shape) or a dict of those.
        :param action_masks: True = allowed, shape (batch, sum of branch sizes); None = no mask.
            Ignored for continuous actions.
        """
        return self.distribution_from_latent(
            self.actor_net(self.extract_features(obs, self.features_extractor)), action_masks
        )

    def distribution_from_latent(
        self, latent: th.Tensor, action_masks: np.ndarray | th.Tensor | None = None
    ) -> Distribution:
        """The action distribution of the actor's last hidden layer (what a memory policy feeds it).

        :param latent: shape (batch, latent_dim).
        :param action_masks: as in :meth:`get_distribution`.
        """
        logits = self.action_net(latent)
        if isinstance(self.action_dist, HybridDistribution):
            return self.action_dist.proba_distribution(logits, self.log_std, action_masks)
        if isinstance(self.action_dist, DiagGaussianDistribution):
            return self.action_dist.proba_distribution(logits, self.log_std)
        assert isinstance(self.action_dist, MaskableDistribution)
        distribution = self.action_dist.proba_distribution(action_logits=logits)
        if action_masks is not None:
            distribution.apply_masking(action_masks)
        return distribution

    def forward(
        self, obs: PyTorchObs, deterministic: bool = False, action_masks: np.ndarray | th.Tensor | None = None
    ) -> tuple[th.Tensor, th.Tensor]:
        """Sample actions.

        :return: actions (batch, *action_shape) and their log-probabilities (batch,).
        """
        branches = self._categorical_branches()
        if branches is not None:  # the step's hot path: no distribution objects
            latent = self.actor_net(self.extract_features(obs, self.features_extractor))
            actions, log_prob = sample_masked_categorical(
                self.action_net(latent), branches, action_masks, deterministic
            )
            return actions.reshape((-1, *self.flat_action_shape)), log_prob
        if self._plain_gaussian():  # likewise: no torch Normal, whose argument checks cost more
            latent = self.actor_net(self.extract_features(obs, self.features_extractor))
            actions, log_prob = sample_diag_gaussian(self.action_net(latent), self.log_std, deterministic)
            return actions.reshape((-1, *self.flat_action_shape)), log_prob
        distribution = self.get_distribution(obs, action_masks)
        actions = distribution.get_actions(deterministic=deterministic)
        log_prob = distribution.log_prob(actions)
        return actions.reshape((-1, *self.flat_action_shape)), log_prob

    def _plain_gaussian(self) -> bool:
        """The actor's distribution is SB3's ``DiagGaussianDistribution`` (``Box`` actions)."""
        return type(self.action_dist) is DiagGaussianDistribution

    def _categorical_branches(self) -> list[int] | None:
        """Branch sizes when the actor's distribution is sb3-contrib's maskable (multi-)categorical."""
        if isinstance(self.action_dist, MaskableMultiCategoricalDistribution):
            return [int(n) for n in self.action_dist.action_dims]
        if isinstance(self.action_dist, MaskableCategoricalDistribution):
            return [int(self.action_dist.action_dim)]
        return None

    def _predict(
        self, observation: PyTorchObs, deterministic: bool = False, action_masks: np.ndarray | None = None
    ) -> th.Tensor:
        return self.get_distribution(observation, action_masks).get_actions(deterministic=deterministic)

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """SB3's ``predict`` with an optional ``action_masks`` (True = allowed), as sb3-contrib's."""
        self.set_training_mode(False)
        obs_tensor, vectorized_env = self.obs_to_tensor(observation)
        with th.no_grad():
            actions = self._predict(obs_tensor, deterministic=deterministic, action_masks=action_masks)
            actions = actions.cpu().numpy().reshape((-1, *self.flat_action_shape))
        return self.env_actions(actions, vectorized_env), state

    def env_actions(self, actions: np.ndarray, vectorized_env: bool) -> Any:
        """Sampled actions ``(n, *flat_action_shape)`` as ``predict`` returns them: the hybrid
        ``(continuous, discrete)`` pair, clipped boxes, the batch axis dropped for one observation."""
        if is_hybrid_space(self.action_space):
            return hybrid_predict_actions(actions, self.action_space, vectorized_env)  # type: ignore[arg-type]
        if isinstance(self.action_space, spaces.Box):
            actions = np.clip(actions, self.action_space.low, self.action_space.high)
        return actions if vectorized_env else actions.squeeze(axis=0)

    def evaluate_actions(
        self, obs: PyTorchObs, actions: th.Tensor, action_masks: th.Tensor | None = None
    ) -> tuple[th.Tensor, th.Tensor]:
        """Log-probabilities and entropies of given actions, shape (batch,) each."""
        branches = self._categorical_branches()
        if branches is not None:  # the update's path: no distribution objects
            latent = self.actor_net(self.extract_features(obs, self.features_extractor))
            return masked_categorical_log_prob_entropy(
                self.action_net(latent), branches, actions, action_masks
            )
        if self._plain_gaussian():
            latent = self.actor_net(self.extract_features(obs, self.features_extractor))
            return diag_gaussian_log_prob_entropy(self.action_net(latent), self.log_std, actions)
        distribution = self.get_distribution(obs, action_masks)
        return distribution.log_prob(actions), distribution.entropy()

    # ------------------------------------------------------------------ critic

    def encode_actions(self, actions: th.Tensor) -> th.Tensor:
        """Encode actions for the baseline: one-hot per discrete branch, raw continuous values.

        :param actions: shape (*batch_dims, action_dim) as stored in the rollout buffer
            (discrete actions as floats holding integers).
        :return: shape (*batch_dims, encoded_action_dim).
        """
        if isinstance(self.action_space, spaces.Box):
            return actions.float()
        c = 0
        if isinstance(self.action_space, spaces.Discrete):
            nvec = [int(self.action_space.n)]
        elif isinstance(self.action_space, spaces.MultiDiscrete):
            nvec = [int(n) for n in self.action_space.nvec]
        else:  # hybrid: raw continuous values, then one-hot branches
            c, nvec = action_layout(self.action_space)
        branches = actions[..., c:].round().long().clamp(min=0)
        return th.cat(
            [actions[..., :c].float()]
            + [
                nn.functional.one_hot(branches[..., k].clamp(max=n - 1), n).float()
                for k, n in enumerate(nvec)
            ],
            dim=-1,
        )

    def _member_features(self, obs: GroupObs) -> th.Tensor:
        """Critic features of observations with leading (batch, n_members) dims -> (batch, n_members, F)."""
        if isinstance(obs, dict):
            first = next(iter(obs.values()))
            batch, members = first.shape[:2]
            flat: PyTorchObs = {
                key: value.reshape(batch * members, *value.shape[2:]) for key, value in obs.items()
            }
        else:
            batch, members = obs.shape[:2]
            flat = obs.reshape(batch * members, *obs.shape[2:])
        if batch * members == 0:
            return th.zeros((batch, members, self.critic_features_extractor.features_dim), device=self.device)
        features = self.extract_features(flat, self.critic_features_extractor)
        return features.reshape(batch, members, -1)

    def predict_group_values(self, member_obs: GroupObs, member_mask: th.Tensor) -> th.Tensor:
        """Centralised value V of each row's group.

        :param member_obs: the present members' observations, shape (batch, n_members, *obs_shape)
            (or a dict of those), padded rows anywhere.
        :param member_mask: True for present members, shape (batch, n_members); >= 1 per row.
        :return: shape (batch,).
        """
        return self.critic.value(self._member_features(member_obs), member_mask)

    def predict_baselines(
        self, own_obs: PyTorchObs, mate_obs: GroupObs, mate_actions: th.Tensor, mate_mask: th.Tensor
    ) -> th.Tensor:
        """Counterfactual baseline b(own observation, groupmates' observations and actions).

        :param own_obs: shape (batch, *obs_shape) or a dict of those.
        :param mate_obs: shape (batch, n_mates, *obs_shape) or a dict; n_mates may be 0.
        :param mate_actions: raw actions as stored in the buffer, shape (batch, n_mates, action_dim).
        :param mate_mask: True for present groupmates, shape (batch, n_mates).
        :return: shape (batch,).
        """
        own = self.extract_features(own_obs, self.critic_features_extractor)
        return self.critic.baseline(
            own, self._member_features(mate_obs), self.encode_actions(mate_actions), mate_mask
        )

    def predict_values_and_baselines(
        self,
        own_obs: PyTorchObs,
        mate_obs: GroupObs,
        mate_actions: th.Tensor,
        mate_mask: th.Tensor,
        shared_values: tuple[th.Tensor, th.Tensor] | None = None,
        own_actions: th.Tensor | None = None,
        mate_positions: th.Tensor | None = None,
    ) -> tuple[th.Tensor, th.Tensor]:
        """V of each row's group and its agent's baseline, in one critic pass (training's hot path).

        Equal to ``predict_group_values`` over (own, mates) and ``predict_baselines``, with each
        observation's features and embedding computed once.

        :param own_obs: shape (batch, *obs_shape) or a dict of those.
        :param mate_obs: shape (batch, n_mates, *obs_shape) or a dict; n_mates may be 0.
        :param mate_actions: raw actions as stored in the buffer, shape (batch, n_mates, action_dim).
        :param mate_mask: True for present groupmates, shape (batch, n_mates).
        :param shared_values: rows that share V, as the critic body's ``value_and_baseline`` takes.
        :param own_actions: each row's own raw action, shape (batch, action_dim); with
            ``mate_positions`` and ``shared_values``, the critic takes each groupmate's observation
            and action from its own row (``value_and_baseline_of_rows``: each computed once).
        :param mate_positions: the row of each groupmate in this batch (-1 = none), shape
            (batch, n_mates); only when every present groupmate's observation and action are those
            of that row.
        :return: ``(values, baselines)``, shape (batch,) each.
        """
        if shared_values is not None and own_actions is not None and mate_positions is not None:
            return self.critic.value_and_baseline_of_rows(
                self.extract_features(own_obs, self.critic_features_extractor),
                self.encode_actions(own_actions),
                mate_positions,
                shared_values,
            )
        members, member_mask = self._group_of(own_obs, mate_obs, mate_mask)
        return self.critic.value_and_baseline(
            self._member_features(members), self.encode_actions(mate_actions), member_mask, shared_values
        )

    @staticmethod
    def _group_of(
        own_obs: PyTorchObs, mate_obs: GroupObs, mate_mask: th.Tensor
    ) -> tuple[GroupObs, th.Tensor]:
        """Each row's agent first, then its groupmates: observations (batch, 1 + n_mates, ...) and
        the presence mask (batch, 1 + n_mates), column 0 True."""
        if isinstance(own_obs, dict):
            assert isinstance(mate_obs, dict)
            members: GroupObs = {
                key: th.cat([value.unsqueeze(1), mate_obs[key]], dim=1) for key, value in own_obs.items()
            }
        else:
            assert isinstance(mate_obs, th.Tensor)
            members = th.cat([own_obs.unsqueeze(1), mate_obs], dim=1)
        own_mask = th.ones((mate_mask.shape[0], 1), dtype=th.bool, device=mate_mask.device)
        return members, th.cat([own_mask, mate_mask.bool()], dim=1)


class POCACnnPolicy(POCAPolicy):
    """:class:`POCAPolicy` with SB3's ``NatureCNN`` features extractor (image observations)."""

    def __init__(
        self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN, **kwargs: Any
    ):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


class POCAMultiInputPolicy(POCAPolicy):
    """:class:`POCAPolicy` with SB3's ``CombinedExtractor`` (``Dict`` observations)."""

    def __init__(
        self,
        *args: Any,
        features_extractor_class: type[BaseFeaturesExtractor] = CombinedExtractor,
        **kwargs: Any,
    ):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


MlpPolicy = POCAPolicy
CnnPolicy = POCACnnPolicy
MultiInputPolicy = POCAMultiInputPolicy
