"""Action layouts and the hybrid action distribution, shared by the project's PPO, POCA, SAC and BC.

A hybrid Unity behavior (``c`` continuous values and ``k`` discrete branches) reaches the
algorithms as gymnasium's ``Tuple((Box(c,), MultiDiscrete(branches)))`` (``UnityVecEnv(...,
hybrid="tuple")``). Buffers store one flat float row per action, ``(c + k,)``: the continuous
values, then the branch indices.

:class:`HybridDistribution` is ML-Agents' hybrid action model (``action_model.py``): a Gaussian
head for the continuous part (a state-independent log standard deviation, as ML-Agents' PPO and
SB3's) and one categorical per branch whose logits are masked (``distributions.py``'s
``MultiCategoricalDistribution``). Log-probabilities and entropies are summed over the continuous
dimensions and the branches.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import DiagGaussianDistribution
from stable_baselines3.common.preprocessing import get_action_dim
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv
from torch import nn
from torch.distributions import Categorical

#: the logit of a masked action (ML-Agents uses a large negative number too; -inf would turn
#: ``p * log p`` into NaN)
MASKED_LOGIT = -1e8


def is_hybrid_space(action_space: spaces.Space) -> bool:
    """Whether ``action_space`` is the hybrid ``Tuple((Box, Discrete | MultiDiscrete))``."""
    return (
        isinstance(action_space, spaces.Tuple)
        and len(action_space.spaces) == 2
        and isinstance(action_space.spaces[0], spaces.Box)
        and isinstance(action_space.spaces[1], (spaces.Discrete, spaces.MultiDiscrete))
    )


def action_layout(action_space: spaces.Space) -> tuple[int, list[int]]:
    """``(continuous size c, discrete branch sizes)`` of a ``Discrete``, ``MultiDiscrete`` or hybrid space.

    :raises ValueError: any other space (a ``Box`` has no branches).
    """
    if isinstance(action_space, spaces.Discrete):
        return 0, [int(action_space.n)]
    if isinstance(action_space, spaces.MultiDiscrete):
        return 0, [int(n) for n in np.asarray(action_space.nvec).ravel()]
    if is_hybrid_space(action_space):
        return get_action_dim(action_space.spaces[0]), action_layout(action_space.spaces[1])[1]
    raise ValueError(
        f"expected a Discrete, MultiDiscrete or hybrid Tuple(Box, MultiDiscrete) action space, got {action_space}. "
        "A hybrid Unity behavior gives the Tuple with UnityVecEnv(..., hybrid='tuple')."
    )


def flat_action_space(action_space: spaces.Space) -> spaces.Space:
    """The space a buffer stores: a hybrid ``Tuple(Box, MultiDiscrete)`` becomes ``Box((c + k,))``; others unchanged."""
    if not is_hybrid_space(action_space):
        return action_space
    c, branches = action_layout(action_space)
    return spaces.Box(-np.inf, np.inf, shape=(c + len(branches),), dtype=np.float32)


def hybrid_policy_layout(action_space: spaces.Tuple, use_sde: bool) -> tuple[int, list[int]]:
    """``(c, branches)`` of a hybrid action space, for an actor-critic policy built on its flat ``Box``.

    :raises ValueError: for ``use_sde=True`` (gSDE is for ``Box`` actions).
    """
    if use_sde:
        raise ValueError("use_sde=True is for Box actions; a hybrid policy explores with its Gaussian noise.")
    return action_layout(action_space)


def split_hybrid_actions(actions: np.ndarray, action_space: spaces.Tuple) -> tuple[np.ndarray, np.ndarray]:
    """Flat hybrid actions ``(n, c + k)`` -> the Tuple space's batch ``((n, c) float32 in the Box, (n, k) int64)``.

    The continuous part is clipped to the ``Box``'s bounds (a Gaussian sample may leave them).
    """
    c, branches = action_layout(action_space)
    actions = np.asarray(actions).reshape(-1, c + len(branches))
    box = action_space.spaces[0]
    continuous = np.clip(actions[:, :c], box.low.reshape(-1), box.high.reshape(-1)).astype(np.float32)
    discrete = np.rint(actions[:, c:]).astype(np.int64)
    return continuous.reshape(-1, *box.shape), discrete


def hybrid_predict_actions(
    actions: np.ndarray, action_space: spaces.Tuple, vectorized: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Flat hybrid actions ``(n, c + k)`` as ``predict`` returns them: :func:`split_hybrid_actions`,
    without the batch axis for a single (not vectorized) observation."""
    continuous, discrete = split_hybrid_actions(actions, action_space)
    return (continuous, discrete) if vectorized else (continuous[0], discrete[0])


def hybrid_env_actions(actions: np.ndarray, action_space: spaces.Tuple, env: Any) -> Any:
    """Flat hybrid actions ``(n, c + k)`` in the batch format ``env.step`` takes.

    A Unity env (``UnityVecEnv``) takes the Tuple space's batch ``((n, c), (n, k))``; SB3's
    ``DummyVecEnv`` / ``SubprocVecEnv`` hand ``actions[i]`` to env ``i``, so they get a list of
    ``n`` per-env tuples ``((c,), (k,))``.
    """
    continuous, discrete = split_hybrid_actions(actions, action_space)
    if isinstance(getattr(env, "unwrapped", env), (DummyVecEnv, SubprocVecEnv)):
        return [(continuous[i], discrete[i]) for i in range(len(continuous))]
    return continuous, discrete


def join_hybrid_actions(actions: Any) -> np.ndarray:
    """The Tuple space's batch ``((n, c), (n, k))`` (or one action ``((c,), (k,))``) -> flat ``(n, c + k)`` float32."""
    continuous, discrete = actions
    continuous = np.asarray(continuous, dtype=np.float32)
    discrete = np.asarray(discrete, dtype=np.float32)
    n = continuous.shape[0] if continuous.ndim > 1 else 1
    return np.concatenate([continuous.reshape(n, -1), discrete.reshape(n, -1)], axis=1)


def mask_logits(logits: th.Tensor, masks: th.Tensor | np.ndarray | None, branches: list[int]) -> th.Tensor:
    """Logits with the actions a mask forbids set to :data:`MASKED_LOGIT`.

    :param logits: ``(B, sum(branches))``.
    :param masks: ``(B, sum(branches))`` bool, True = allowed, or None. A branch whose mask
        allows nothing is left unmasked (an inactive slot's placeholder may send one).
    """
    if masks is None:
        return logits
    allowed = th.as_tensor(masks, dtype=th.bool, device=logits.device).reshape(logits.shape)
    parts = th.split(allowed, branches, dim=1)
    allowed = th.cat([p | ~p.any(dim=1, keepdim=True) for p in parts], dim=1)
    return logits.masked_fill(~allowed, MASKED_LOGIT)


class HybridDistribution(DiagGaussianDistribution):
    """A diagonal Gaussian over ``c`` continuous values and a masked categorical per discrete branch.

    It is a ``DiagGaussianDistribution`` so that SB3's ``ActorCriticPolicy`` builds it
    (``proba_distribution_net`` returns one ``Linear`` with ``c + sum(branches)`` outputs, means then
    logits, and the ``(c,)`` log standard deviation) and feeds it (``proba_distribution(out, log_std)``).

    :param continuous_dim: ``c``, the number of continuous values.
    :param branches: the discrete branch sizes.
    """

    def __init__(self, continuous_dim: int, branches: list[int]) -> None:
        if continuous_dim < 1 or not branches:
            raise ValueError(
                f"a hybrid distribution needs continuous values and discrete branches, got {continuous_dim} "
                f"continuous and branches {branches}"
            )
        super().__init__(continuous_dim)
        self.continuous_dim = int(continuous_dim)
        self.branches = [int(b) for b in branches]
        self.logits: th.Tensor | None = None
        self.categoricals: list[Categorical] = []

    @property
    def flat_dim(self) -> int:
        """``c + k``: the size of one stored action."""
        return self.continuous_dim + len(self.branches)

    def proba_distribution_net(  # type: ignore[override]
        self, latent_dim: int, log_std_init: float = 0.0
    ) -> tuple[nn.Module, nn.Parameter]:
        """One ``Linear`` (latent -> ``c`` means then ``sum(branches)`` logits) and the ``(c,)`` log std."""
        action_net = nn.Linear(latent_dim, self.continuous_dim + sum(self.branches))
        log_std = nn.Parameter(th.ones(self.continuous_dim) * log_std_init, requires_grad=True)
        return action_net, log_std

    def proba_distribution(  # type: ignore[override]
        self, mean_actions: th.Tensor, log_std: th.Tensor, action_masks: th.Tensor | np.ndarray | None = None
    ) -> HybridDistribution:
        """Set the parameters.

        :param mean_actions: ``(B, c + sum(branches))``: the Gaussian means, then the logits.
        :param log_std: ``(c,)``.
        :param action_masks: ``(B, sum(branches))`` bool, True = allowed, or None.
        """
        mean, logits = th.split(mean_actions, [self.continuous_dim, sum(self.branches)], dim=1)
        super().proba_distribution(mean, log_std)
        self.logits = logits
        self.apply_masking(action_masks)
        return self

    def apply_masking(self, masks: th.Tensor | np.ndarray | None) -> None:
        """Mask the discrete logits (sb3-contrib's name): ``(B, sum(branches))`` True = allowed, or None."""
        assert self.logits is not None, "call proba_distribution first"
        masked = mask_logits(self.logits, masks, self.branches)
        self.categoricals = [Categorical(logits=part) for part in th.split(masked, self.branches, dim=1)]

    def _split(self, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        actions = actions.reshape(actions.shape[0], self.flat_dim)
        return actions[:, : self.continuous_dim].float(), actions[:, self.continuous_dim :].round().long()

    def log_prob(self, actions: th.Tensor) -> th.Tensor:
        """``(B,)``: the Gaussian's log-density of the continuous part plus each branch's log-probability.

        :param actions: ``(B, c + k)`` in the buffer's layout.
        """
        continuous, discrete = self._split(actions)
        total = super().log_prob(continuous)
        for i, categorical in enumerate(self.categoricals):
            total = total + categorical.log_prob(discrete[:, i])
        return total

    def log_prob_parts(self, actions: th.Tensor) -> th.Tensor:
        """``(B, c + k)``: each continuous dimension's log-density, then each branch's log-probability.

        Their sum over the last axis is :meth:`log_prob`. ML-Agents' PPO takes one ratio per part.

        :param actions: ``(B, c + k)`` in the buffer's layout.
        """
        continuous, discrete = self._split(actions)
        return th.cat([self.distribution.log_prob(continuous), self.discrete_log_probs(discrete)], dim=1)

    def discrete_log_probs(self, discrete: th.Tensor) -> th.Tensor:
        """``(B, k)``: each branch's log-probability of the given branch indices ``(B, k)``."""
        return th.stack(
            [cat.log_prob(discrete[:, i].long()) for i, cat in enumerate(self.categoricals)], dim=1
        )

    def entropy(self) -> th.Tensor:
        """``(B,)``: the Gaussian's entropy plus every branch's."""
        total = super().entropy()
        assert total is not None
        for categorical in self.categoricals:
            total = total + categorical.entropy()
        return total

    def sample(self) -> th.Tensor:
        discrete = th.stack([cat.sample() for cat in self.categoricals], dim=1)
        return th.cat([super().sample(), discrete.float()], dim=1)

    def mode(self) -> th.Tensor:
        discrete = th.stack([th.argmax(cat.probs, dim=1) for cat in self.categoricals], dim=1)
        return th.cat([super().mode(), discrete.float()], dim=1)

    def actions_from_params(  # type: ignore[override]
        self, mean_actions: th.Tensor, log_std: th.Tensor, deterministic: bool = False
    ) -> th.Tensor:
        self.proba_distribution(mean_actions, log_std)
        return self.get_actions(deterministic=deterministic)

    def log_prob_from_params(  # type: ignore[override]
        self, mean_actions: th.Tensor, log_std: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        actions = self.actions_from_params(mean_actions, log_std)
        return actions, self.log_prob(actions)
