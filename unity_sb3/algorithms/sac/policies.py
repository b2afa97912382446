"""SAC policies for discrete and hybrid actions, built as ML-Agents builds them.

- **Actor**: one categorical head per discrete branch (logits ``(B, sum(branches))``, masked
  before the softmax) and, for hybrid actions, a tanh-squashed Gaussian for the ``c`` continuous
  values, as SB3's SAC actor.
- **Critic**: each Q network takes the features (and the continuous action, for hybrid actions)
  and outputs a Q value for *every* discrete action of every branch, per reward-signal head:
  ``(B, n_heads, sum(branches))``. The Q of a taken action is the mean over branches of the
  chosen action's value (ML-Agents' ``_condense_q_streams``).

Actions in the replay buffer are ``(B, k)`` branch indices, or ``(B, c + k)`` floats for hybrid
actions (continuous values, then branch indices). The env gets ``Discrete``: ``(n,)``,
``MultiDiscrete``: ``(n, k)``, hybrid ``Tuple(Box, MultiDiscrete)``: ``((n, c), (n, k))``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import SquashedDiagGaussianDistribution
from stable_baselines3.common.policies import BaseModel, BasePolicy
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    FlattenExtractor,
    NatureCNN,
    create_mlp,
)
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import nn

from unity_sb3.algorithms.distributions import MASKED_LOGIT, action_layout, mask_logits

__all__ = [
    "MASKED_LOGIT",
    "BranchedActor",
    "BranchedCnnPolicy",
    "BranchedCritic",
    "BranchedDistribution",
    "BranchedMultiInputPolicy",
    "BranchedSACPolicy",
    "action_layout",
    "condense",
    "expected_over_branches",
    "mask_logits",
]

LOG_STD_MIN, LOG_STD_MAX = -20, 2


def condense(q_values: th.Tensor, discrete: th.Tensor, branches: list[int]) -> th.Tensor:
    """The Q of taken discrete actions: the chosen action's value, averaged over branches.

    :param q_values: ``(B, H, sum(branches))``.
    :param discrete: ``(B, k)`` branch indices (any dtype).
    :return: ``(B, H)``.
    """
    offsets = th.as_tensor(np.cumsum([0, *branches[:-1]]), device=q_values.device)
    index = (
        (discrete.long().reshape(len(q_values), -1) + offsets).unsqueeze(1).expand(-1, q_values.shape[1], -1)
    )
    return q_values.gather(2, index).mean(dim=2)


def expected_over_branches(probs: list[th.Tensor], q_values: th.Tensor, branches: list[int]) -> th.Tensor:
    """``E_pi[Q]``: per branch ``sum_a pi(a) Q(a)``, averaged over branches (the expectation of :func:`condense`).

    :param probs: one ``(B, n_i)`` tensor per branch.
    :param q_values: ``(B, H, sum(branches))`` or ``(B, sum(branches))``.
    :return: ``(B, H)`` or ``(B,)``.
    """
    parts = th.split(q_values, branches, dim=-1)
    if q_values.dim() == 3:
        return th.stack([(q * p.unsqueeze(1)).sum(-1) for q, p in zip(parts, probs)]).mean(0)
    return th.stack([(q * p).sum(-1) for q, p in zip(parts, probs)]).mean(0)


class BranchedDistribution:
    """The actor's distribution: a categorical per branch (masked) and, when hybrid, a squashed Gaussian.

    :param logits: ``(B, sum(branches))`` masked logits.
    :param branches: the branch sizes.
    :param gaussian: the continuous part's distribution (parameters set), or None.
    """

    def __init__(
        self, logits: th.Tensor, branches: list[int], gaussian: SquashedDiagGaussianDistribution | None = None
    ) -> None:
        self.branches = branches
        self.log_probs = [th.log_softmax(part, dim=1) for part in th.split(logits, branches, dim=1)]
        self.probs = [lp.exp() for lp in self.log_probs]
        self.gaussian = gaussian
        self.c = 0 if gaussian is None else int(gaussian.action_dim)

    def neg_entropies(self) -> th.Tensor:
        """``(B, k)``: ``sum_a pi(a) log pi(a)`` of each branch (minus its entropy)."""
        return th.stack([(p * lp).sum(dim=1) for p, lp in zip(self.probs, self.log_probs)], dim=1)

    def _discrete(self, deterministic: bool) -> th.Tensor:
        if deterministic:
            return th.stack([p.argmax(dim=1) for p in self.probs], dim=1)
        return th.stack([th.multinomial(p, 1).squeeze(1) for p in self.probs], dim=1)

    def sample(self, deterministic: bool = False) -> th.Tensor:
        """Actions in the buffer's layout: ``(B, k)`` long, or ``(B, c + k)`` float for hybrid."""
        discrete = self._discrete(deterministic)
        if self.gaussian is None:
            return discrete
        continuous = self.gaussian.mode() if deterministic else self.gaussian.sample()
        return th.cat([continuous, discrete.float()], dim=1)

    def mode(self) -> th.Tensor:
        return self.sample(deterministic=True)

    @property
    def continuous_dim(self) -> int:
        """``c``: the continuous actions leading each buffer-layout row (0 without them)."""
        return self.c

    def discrete_log_probs(self, discrete: th.Tensor) -> th.Tensor:
        """``(B, k)``: each branch's log-probability of its index in ``discrete`` (``(B, k)``, any dtype)."""
        discrete = discrete.reshape(discrete.shape[0], -1).long()
        return th.cat([lp.gather(1, discrete[:, i : i + 1]) for i, lp in enumerate(self.log_probs)], dim=1)

    def log_prob(self, actions: th.Tensor) -> th.Tensor:
        """``(B,)`` log-likelihood of actions in the buffer's layout (``(B,)`` for one branch works too)."""
        actions = actions.reshape(actions.shape[0], -1)
        total = self.discrete_log_probs(actions[:, self.c :]).sum(dim=1)
        if self.gaussian is not None:
            total = total + self.gaussian.log_prob(actions[:, : self.c].float())
        return total

    def entropy(self) -> th.Tensor:
        """``(B,)`` entropy of the discrete branches (the squashed Gaussian has no closed form)."""
        return -self.neg_entropies().sum(dim=1)


class BranchedActor(BasePolicy):
    """Categorical heads per branch, plus a squashed Gaussian for hybrid actions.

    :param observation_space: the observation space.
    :param action_space: ``Discrete``, ``MultiDiscrete`` or ``Tuple(Box, MultiDiscrete)``.
    :param net_arch: hidden layer sizes.
    :param features_extractor: the (built) features extractor.
    :param features_dim: its output size.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        net_arch: list[int],
        features_extractor: BaseFeaturesExtractor,
        features_dim: int,
        activation_fn: type[nn.Module] = nn.ReLU,
        normalize_images: bool = True,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            features_extractor=features_extractor,
            normalize_images=normalize_images,
        )
        self.net_arch = net_arch
        self.features_dim = features_dim
        self.activation_fn = activation_fn
        self.continuous_size, self.branches = action_layout(action_space)
        self.latent_pi = nn.Sequential(*create_mlp(features_dim, -1, net_arch, activation_fn))
        last = net_arch[-1] if len(net_arch) > 0 else features_dim
        self.logits = nn.Linear(last, sum(self.branches))
        if self.continuous_size:
            self.mu = nn.Linear(last, self.continuous_size)
            self.log_std = nn.Linear(last, self.continuous_size)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            net_arch=self.net_arch,
            features_dim=self.features_dim,
            activation_fn=self.activation_fn,
            features_extractor=self.features_extractor,
        )
        return data

    def distribution(
        self, obs: PyTorchObs, action_masks: th.Tensor | np.ndarray | None = None
    ) -> BranchedDistribution:
        """The action distribution at ``obs`` under ``action_masks`` (``(B, sum(branches))``, True = allowed)."""
        latent = self.latent_pi(self.extract_features(obs, self.features_extractor))
        gaussian = None
        if self.continuous_size:
            log_std = th.clamp(self.log_std(latent), LOG_STD_MIN, LOG_STD_MAX)
            gaussian = SquashedDiagGaussianDistribution(self.continuous_size)
            gaussian.proba_distribution(self.mu(latent), log_std)
        logits = mask_logits(self.logits(latent), action_masks, self.branches)
        return BranchedDistribution(logits, self.branches, gaussian)

    def get_distribution(self, obs: PyTorchObs, action_masks: Any = None) -> BranchedDistribution:
        """Alias of :meth:`distribution` (the name behavioral cloning looks for)."""
        return self.distribution(obs, action_masks)

    def forward(  # type: ignore[override]
        self, obs: PyTorchObs, deterministic: bool = False, action_masks: Any = None
    ) -> th.Tensor:
        return self.distribution(obs, action_masks).sample(deterministic)

    def _predict(self, observation: PyTorchObs, deterministic: bool = False) -> th.Tensor:
        return self(observation, deterministic)


class BranchedCritic(BaseModel):
    """Twin (``n_critics``) Q networks with one output per discrete action (per reward-signal head).

    The last layer of each network is a ``Linear`` with ``n_heads * sum(branches)`` outputs
    (``n_heads`` is 1 until the algorithm widens it for its reward signals).
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        net_arch: list[int],
        features_extractor: BaseFeaturesExtractor,
        features_dim: int,
        activation_fn: type[nn.Module] = nn.ReLU,
        normalize_images: bool = True,
        n_critics: int = 2,
        share_features_extractor: bool = True,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            features_extractor=features_extractor,
            normalize_images=normalize_images,
        )
        self.continuous_size, self.branches = action_layout(action_space)
        self.share_features_extractor = share_features_extractor
        self.n_critics = n_critics
        self.q_networks: list[nn.Module] = []
        for idx in range(n_critics):
            q_net = nn.Sequential(
                *create_mlp(features_dim + self.continuous_size, sum(self.branches), net_arch, activation_fn)
            )
            self.add_module(f"qf{idx}", q_net)
            self.q_networks.append(q_net)

    def q_values(
        self, obs: PyTorchObs, continuous: th.Tensor | None = None, n_critics: int | None = None
    ) -> tuple[th.Tensor, ...]:
        """Q of every discrete action: one ``(B, n_heads, sum(branches))`` tensor per critic.

        :param continuous: ``(B, c)`` continuous actions (hybrid only).
        :param n_critics: evaluate only the first ``n_critics`` critics (default: all).
        """
        with th.set_grad_enabled(not self.share_features_extractor):
            features = self.extract_features(obs, self.features_extractor)
        inputs = features if not self.continuous_size else th.cat([features, continuous], dim=1)  # type: ignore[list-item]
        size = sum(self.branches)
        return tuple(q(inputs).reshape(len(inputs), -1, size) for q in self.q_networks[:n_critics])

    def forward(self, obs: PyTorchObs, actions: th.Tensor) -> tuple[th.Tensor, ...]:
        """Q of taken actions (buffer layout): one ``(B, n_heads)`` tensor per critic."""
        actions = actions.reshape(actions.shape[0], -1)
        c = self.continuous_size
        continuous = actions[:, :c].float() if c else None
        return tuple(condense(q, actions[:, c:], self.branches) for q in self.q_values(obs, continuous))


class BranchedSACPolicy(BasePolicy):
    """SAC's policy for discrete and hybrid actions: :class:`BranchedActor`, :class:`BranchedCritic` and its target.

    Takes the arguments of SB3's ``SACPolicy`` that mean something here.

    :param net_arch: hidden layers, a list (both networks) or ``dict(pi=[...], qf=[...])``; default [256, 256].
    :param use_sde: must be False (gSDE is for continuous actions only).
    :param n_critics: number of Q networks (2: clipped double Q).
    :param share_features_extractor: whether the critic uses the actor's features extractor.
    """

    actor: BranchedActor
    critic: BranchedCritic
    critic_target: BranchedCritic
    #: the classes :meth:`_build` instantiates (the recurrent policy swaps them)
    actor_class: type[BranchedActor] = BranchedActor
    critic_class: type[BranchedCritic] = BranchedCritic

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.ReLU,
        use_sde: bool = False,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
        n_critics: int = 2,
        share_features_extractor: bool = False,
    ) -> None:
        if use_sde:
            raise ValueError(
                "use_sde=True is for continuous actions; SAC with discrete actions explores by sampling."
            )
        action_layout(action_space)  # a clear error for any other space
        super().__init__(
            observation_space,
            action_space,
            features_extractor_class,
            features_extractor_kwargs,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=normalize_images,
        )
        if net_arch is None:
            net_arch = [256, 256]
        pi_arch, qf_arch = (
            (net_arch["pi"], net_arch["qf"]) if isinstance(net_arch, dict) else (net_arch, net_arch)
        )
        self.net_arch = net_arch
        self.activation_fn = activation_fn
        self.n_critics = n_critics
        self.share_features_extractor = share_features_extractor
        self._pi_arch, self._qf_arch = list(pi_arch), list(qf_arch)
        self._build(lr_schedule)

    def _build(self, lr_schedule: Schedule) -> None:
        actor_extractor = self.make_features_extractor()
        self.actor = self.actor_class(
            self.observation_space,
            self.action_space,
            self._pi_arch,
            actor_extractor,
            actor_extractor.features_dim,
            self.activation_fn,
            self.normalize_images,
        )
        self.actor.optimizer = self.optimizer_class(
            self.actor.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )
        self.critic = self._make_critic(actor_extractor if self.share_features_extractor else None)
        critic_params = [p for n, p in self.critic.named_parameters() if "features_extractor" not in n]
        if not self.share_features_extractor:
            critic_params = list(self.critic.parameters())
        self.critic.optimizer = self.optimizer_class(
            critic_params, lr=lr_schedule(1), **self.optimizer_kwargs
        )
        self.critic_target = self._make_critic(None)
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.set_training_mode(False)

    def _make_critic(self, features_extractor: BaseFeaturesExtractor | None) -> BranchedCritic:
        extractor = self.make_features_extractor() if features_extractor is None else features_extractor
        return self.critic_class(
            self.observation_space,
            self.action_space,
            self._qf_arch,
            extractor,
            extractor.features_dim,
            self.activation_fn,
            self.normalize_images,
            self.n_critics,
            self.share_features_extractor,
        ).to(self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            net_arch=self.net_arch,
            activation_fn=self.activation_fn,
            n_critics=self.n_critics,
            share_features_extractor=self.share_features_extractor,
            features_extractor_class=self.features_extractor_class,
            features_extractor_kwargs=self.features_extractor_kwargs,
            optimizer_class=self.optimizer_class,
            optimizer_kwargs=self.optimizer_kwargs,
        )
        return data

    def set_training_mode(self, mode: bool) -> None:
        self.actor.set_training_mode(mode)
        self.critic.set_training_mode(mode)
        self.training = mode

    def forward(self, obs: PyTorchObs, deterministic: bool = False) -> th.Tensor:  # type: ignore[override]
        return self._predict(obs, deterministic=deterministic)

    def _predict(
        self, observation: PyTorchObs, deterministic: bool = False, action_masks: Any = None
    ) -> th.Tensor:
        return self.actor(observation, deterministic, action_masks)

    def to_env_actions(self, actions: np.ndarray) -> Any:
        """Buffer-layout actions ``(n, k)`` / ``(n, c + k)`` -> the action space's batch (see the module docstring)."""
        c, branches = self.actor.continuous_size, self.actor.branches
        if c:
            return (actions[:, :c].astype(np.float32), actions[:, c:].round().astype(np.int64))
        if isinstance(self.action_space, spaces.Discrete):
            return actions.reshape(-1).astype(np.int64)
        return actions.reshape(-1, len(branches)).astype(np.int64)

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[Any, tuple[np.ndarray, ...] | None]:
        """SB3's ``predict`` with ``action_masks`` (``(n, sum(branches))``, True = allowed), as sb3-contrib's.

        :return: ``Discrete``: ``(n,)``; ``MultiDiscrete``: ``(n, k)``; hybrid: ``((n, c), (n, k))``
            (without the leading ``n`` for a single observation).
        """
        self.set_training_mode(False)
        obs_tensor, vectorized_env = self.obs_to_tensor(observation)
        with th.no_grad():
            actions = self._predict(obs_tensor, deterministic, action_masks).cpu().numpy()
        env_actions = self.to_env_actions(actions)
        if not vectorized_env:
            if isinstance(env_actions, tuple):
                return tuple(a[0] for a in env_actions), state
            return env_actions[0], state
        return env_actions, state


class BranchedCnnPolicy(BranchedSACPolicy):
    """:class:`BranchedSACPolicy` with SB3's NatureCNN (image observations)."""

    def __init__(
        self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN, **kwargs: Any
    ):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


class BranchedMultiInputPolicy(BranchedSACPolicy):
    """:class:`BranchedSACPolicy` with SB3's CombinedExtractor (``Dict`` observations)."""

    def __init__(
        self,
        *args: Any,
        features_extractor_class: type[BaseFeaturesExtractor] = CombinedExtractor,
        **kwargs: Any,
    ):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)
