"""How behavioral cloning reads an SB3 model: its action distribution, its critic, its targets.

One adapter per family of models:

- :class:`ActorCriticAdapter`: ``ActorCriticPolicy`` (PPO, A2C, the project's PPO) and
  sb3-contrib's ``MaskableActorCriticPolicy`` (action masks from the demo are applied).
- :class:`RecurrentAdapter`: sb3-contrib's ``RecurrentActorCriticPolicy`` (RecurrentPPO) and
  ``unity_sb3.RecurrentPPO``'s policy; the batch is made of fixed-length sequences, each started
  from a zero LSTM state (zero memories), as ML-Agents' BC module does.
- :class:`SACAdapter`: SAC-style actors (``get_action_dist_params``: SAC, TQC, CrossQ...; or
  ``get_distribution(obs, masks)``: the project's SAC with discrete actions).
- :class:`TD3Adapter`: deterministic actors (TD3, DDPG).

Loss per sample (``loss="auto"`` picks the first):

- discrete, multi-discrete and multi-binary actions: negative log-likelihood of the demo action
  (cross-entropy, summed over branches);
- continuous actions: ``"mse"``, the squared error of the policy's deterministic action (the
  Gaussian mean, squashed for SAC) against the demo action, averaged over action dimensions;
  it leaves the exploration noise (``log_std``) alone, so RL fine-tuning still explores.
  ``"nll"`` maximises the Gaussian (or squashed Gaussian) log-likelihood instead, which also
  shrinks ``log_std`` towards the expert's own spread (close to zero for a scripted expert).
- hybrid actions (``Tuple(Box, MultiDiscrete)``, stored flat as continuous values then branch
  indices): ``"mse"`` (the default for PPO's hybrid policy) is ML-Agents' hybrid BC loss, the
  squared error of the Gaussian mean plus the cross-entropy of every branch; ``"nll"`` the whole
  log-likelihood (the default for the project's SAC, whose squashed Gaussian has no closed mode loss here).
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.utils import obs_as_tensor

from unity_sb3.algorithms.distributions import HybridDistribution, is_hybrid_space

LossKind = Literal["auto", "nll", "mse"]
LOSS_KINDS = ("auto", "nll", "mse")


class Batch:
    """One minibatch on the model's device.

    :param obs: observation tensor ``(B, ...)`` (dict of tensors for ``Dict`` spaces).
    :param actions: ``(B, ...)`` demo actions as the policy's ``log_prob`` wants them.
    :param masks: ``(B, sum(branches))`` bool numpy array (True = allowed), or None.
    :param valid: ``(B,)`` float weights (0 for padding of recurrent sequences).
    :param episode_starts: ``(B,)`` float, recurrent policies only.
    :param n_seq: number of sequences, recurrent policies only.
    """

    def __init__(
        self,
        obs: Any,
        actions: th.Tensor,
        masks: np.ndarray | None,
        valid: th.Tensor,
        episode_starts: th.Tensor | None = None,
        n_seq: int = 0,
    ) -> None:
        self.obs = obs
        self.actions = actions
        self.masks = masks
        self.valid = valid
        self.episode_starts = episode_starts
        self.n_seq = n_seq


class PolicyAdapter:
    """Base adapter: actor loss and critic values of a model, per sample."""

    recurrent = False
    #: hybrid actions: whether ``"mse"`` (mean squared error + branches' cross-entropy) is the default
    hybrid_mse = True

    def __init__(self, model: Any, loss: LossKind = "auto") -> None:
        if loss not in LOSS_KINDS:
            raise ValueError(f"loss must be one of {LOSS_KINDS}, got {loss!r}")
        self.model = model
        self.policy = model.policy
        self.device = model.device
        self.action_space: spaces.Space = model.action_space
        self.continuous = isinstance(self.action_space, spaces.Box)
        self.hybrid = is_hybrid_space(self.action_space) and self.hybrid_mse
        self.loss = ("mse" if self.continuous or self.hybrid else "nll") if loss == "auto" else loss
        if self.loss == "mse" and not (self.continuous or self.hybrid):
            raise ValueError(
                f"loss='mse' is for continuous (Box) actions; the model's action space is {self.action_space}. "
                "Use loss='nll' (cross-entropy) or 'auto'."
            )
        self.value_column = _value_column(model)

    # --- data
    def target_actions(self, actions: np.ndarray) -> np.ndarray:
        """Demo actions (model's action space) -> what the policy outputs (scaled to [-1, 1] when squashed)."""
        if self.continuous and getattr(self.policy, "squash_output", False):
            return self.policy.scale_action(np.clip(actions, self.action_space.low, self.action_space.high))
        return actions

    def batch(
        self,
        obs: Any,
        actions: np.ndarray,
        masks: np.ndarray | None = None,
        valid: np.ndarray | None = None,
        episode_starts: np.ndarray | None = None,
        n_seq: int = 0,
    ) -> Batch:
        acts = th.as_tensor(actions, device=self.device)
        if isinstance(self.action_space, spaces.Discrete):
            acts = acts.long().flatten()
        elif not self.continuous:
            acts = acts.long() if isinstance(self.action_space, spaces.MultiDiscrete) else acts.float()
        else:
            acts = acts.float()
        n = len(acts)
        return Batch(
            obs=obs_as_tensor(obs, self.device),
            actions=acts,
            masks=masks,
            valid=th.ones(n, device=self.device)
            if valid is None
            else th.as_tensor(valid, dtype=th.float32, device=self.device),
            episode_starts=None
            if episode_starts is None
            else th.as_tensor(episode_starts, dtype=th.float32, device=self.device),
            n_seq=n_seq,
        )

    # --- parameters
    def actor_modules(self) -> list[th.nn.Module]:
        return [self.policy]

    def critic_modules(self) -> list[th.nn.Module]:
        return [self.policy]

    # --- losses
    def actor_loss(self, batch: Batch) -> th.Tensor:
        """``(B,)`` behavioral-cloning loss of each sample."""
        raise NotImplementedError

    def values(self, batch: Batch) -> th.Tensor:
        """``(..., B)`` critic estimates of each sample (several rows for twin critics)."""
        raise NotImplementedError

    def end_values(self, obs: Any) -> th.Tensor:
        """``(B,)`` state values of bootstrap observations (no gradient)."""
        raise NotImplementedError

    def sync_targets(self) -> None:
        """Copy trained networks into their target networks (off-policy algorithms)."""

    def _distribution_loss(self, distribution: Any, actions: th.Tensor) -> th.Tensor:
        if self.loss == "mse" and isinstance(distribution, HybridDistribution):
            c = distribution.continuous_dim
            squared = ((distribution.mode()[:, :c] - actions[:, :c]) ** 2).mean(dim=1)
            return squared - distribution.discrete_log_probs(actions[:, c:]).sum(dim=1)
        if self.loss == "nll":
            return -distribution.log_prob(actions).reshape(len(actions), -1).sum(dim=1)
        mode = distribution.mode()
        return ((mode - actions) ** 2).reshape(len(actions), -1).mean(dim=1)

    def _pick(self, values: th.Tensor) -> th.Tensor:
        if self.value_column is None:
            raise ValueError(
                "the critic warm-up fits the environment reward's value head, but this model's reward_signals "
                f"have no 'extrinsic' head ({getattr(self.model, '_heads', None)}); use critic_warmup=False"
            )
        values = values.reshape(values.shape[0], -1)
        return values[:, self.value_column]


def _value_column(model: Any) -> int | None:
    """Which value/Q output holds the environment reward (the project's multi-head PPO/SAC);
    None when no head learns from it."""
    heads = list(getattr(model, "_heads", []) or [])
    if not heads:
        return 0
    return heads.index("extrinsic") if "extrinsic" in heads else None


class ActorCriticAdapter(PolicyAdapter):
    """``ActorCriticPolicy`` and ``MaskableActorCriticPolicy``."""

    def __init__(self, model: Any, loss: LossKind = "auto") -> None:
        super().__init__(model, loss)
        self.maskable = "action_masks" in inspect.signature(self.policy.get_distribution).parameters

    def actor_loss(self, batch: Batch) -> th.Tensor:
        if self.maskable:
            distribution = self.policy.get_distribution(batch.obs, action_masks=batch.masks)
        else:
            distribution = self.policy.get_distribution(batch.obs)
        return self._distribution_loss(distribution, batch.actions)

    def values(self, batch: Batch) -> th.Tensor:
        return self._pick(self.policy.predict_values(batch.obs))

    def end_values(self, obs: Any) -> th.Tensor:
        with th.no_grad():
            return self._pick(self.policy.predict_values(obs_as_tensor(obs, self.device)))


class RecurrentAdapter(PolicyAdapter):
    """sb3-contrib ``RecurrentActorCriticPolicy``: sequences of equal length, zero initial LSTM state."""

    recurrent = True

    def _states(self, n_seq: int) -> Any:
        if hasattr(self.policy, "memory_size"):  # unity_sb3.RecurrentPPO: flat ML-Agents memories
            return th.zeros(n_seq, self.policy.memory_size, device=self.device)
        layers, _, hidden = self.policy.lstm_hidden_state_shape
        zeros = th.zeros(layers, n_seq, hidden, device=self.device)
        return zeros, zeros.clone()

    def actor_loss(self, batch: Batch) -> th.Tensor:
        masked = (
            batch.masks is not None
            and "action_masks" in inspect.signature(self.policy.get_distribution).parameters
        )
        distribution, _ = self.policy.get_distribution(
            batch.obs,
            self._states(batch.n_seq),
            batch.episode_starts,
            **({"action_masks": batch.masks} if masked else {}),
        )
        return self._distribution_loss(distribution, batch.actions)

    def values(self, batch: Batch) -> th.Tensor:
        return self._pick(
            self.policy.predict_values(batch.obs, self._states(batch.n_seq), batch.episode_starts)
        )

    def end_values(self, obs: Any) -> th.Tensor:
        # one step from a zero state: the bootstrap state's value without its history
        tensor = obs_as_tensor(obs, self.device)
        n = len(next(iter(tensor.values()))) if isinstance(tensor, dict) else len(tensor)
        with th.no_grad():
            return self._pick(
                self.policy.predict_values(tensor, self._states(n), th.ones(n, device=self.device))
            )


class SACAdapter(PolicyAdapter):
    """Stochastic squashed-Gaussian actors with twin critics (SAC and relatives)."""

    hybrid_mse = False

    def actor_modules(self) -> list[th.nn.Module]:
        return [self.model.actor]

    def critic_modules(self) -> list[th.nn.Module]:
        return [self.model.critic]

    def actor_loss(self, batch: Batch) -> th.Tensor:
        actor = self.model.actor
        if hasattr(
            actor, "get_distribution"
        ):  # the project's SAC with discrete/hybrid actions (masks applied)
            return self._distribution_loss(actor.get_distribution(batch.obs, batch.masks), batch.actions)
        mean, log_std, kwargs = actor.get_action_dist_params(batch.obs)
        distribution = actor.action_dist.proba_distribution(mean, log_std, **kwargs)
        return self._distribution_loss(distribution, batch.actions)

    def values(self, batch: Batch) -> th.Tensor:
        return th.stack([self._pick(q) for q in self.model.critic(batch.obs, batch.actions)])

    def end_values(self, obs: Any) -> th.Tensor:
        tensor = obs_as_tensor(obs, self.device)
        with th.no_grad():
            actions = self.model.actor(tensor, deterministic=True)
            q = th.stack([self._pick(v) for v in self.model.critic(tensor, actions)])
            return q.min(dim=0).values

    def sync_targets(self) -> None:
        self.model.critic_target.load_state_dict(self.model.critic.state_dict())


class TD3Adapter(SACAdapter):
    """Deterministic actors (TD3, DDPG): squared error of the action only."""

    def __init__(self, model: Any, loss: LossKind = "auto") -> None:
        if loss == "nll":
            raise ValueError(f"{type(model).__name__}'s actor is deterministic: use loss='mse' (or 'auto')")
        super().__init__(model, loss)

    def actor_loss(self, batch: Batch) -> th.Tensor:
        actions = self.model.actor(batch.obs)
        return ((actions - batch.actions) ** 2).reshape(len(actions), -1).mean(dim=1)

    def end_values(self, obs: Any) -> th.Tensor:
        tensor = obs_as_tensor(obs, self.device)
        with th.no_grad():
            q = th.stack([self._pick(v) for v in self.model.critic(tensor, self.model.actor(tensor))])
            return q.min(dim=0).values

    def sync_targets(self) -> None:
        super().sync_targets()
        self.model.actor_target.load_state_dict(self.model.actor.state_dict())


def make_adapter(model: Any, loss: LossKind = "auto") -> PolicyAdapter:
    """The adapter for ``model``'s kind of policy.

    :raises TypeError: the model has neither an SB3 actor-critic policy nor an SAC/TD3 actor.
    """
    policy = getattr(model, "policy", None)
    actor = getattr(model, "actor", None)
    if actor is not None and (hasattr(actor, "get_action_dist_params") or hasattr(actor, "get_distribution")):
        return SACAdapter(model, loss)
    if actor is not None and getattr(model, "actor_target", None) is not None:
        return TD3Adapter(model, loss)
    if policy is not None and hasattr(policy, "lstm_actor"):
        return RecurrentAdapter(model, loss)
    if policy is not None and hasattr(policy, "get_distribution") and hasattr(policy, "predict_values"):
        return ActorCriticAdapter(model, loss)
    raise TypeError(
        f"behavioral cloning supports SB3 actor-critic policies (PPO, A2C, MaskablePPO, RecurrentPPO) and "
        f"SAC/TD3-style actors; {type(model).__name__} with policy {type(policy).__name__} is neither"
    )


def reached_parameters(loss: th.Tensor, modules: list[th.nn.Module]) -> list[th.nn.Parameter]:
    """The trainable parameters of ``modules`` that ``loss`` depends on (in module order, no duplicates)."""
    params, seen = [], set()
    for module in modules:
        for p in module.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    grads = th.autograd.grad(loss, params, allow_unused=True, retain_graph=True)
    return [p for p, g in zip(params, grads) if g is not None]
