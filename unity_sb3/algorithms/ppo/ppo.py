"""PPO with ML-Agents reward signals (extrinsic, curiosity, RND, GAIL) and a behavioral-cloning hook.

``unity_sb3.PPO`` is SB3's PPO plus two arguments. With ``reward_signals=None`` and
``behavioral_cloning=None`` it *is* SB3's PPO (same code path, same results for the same seed).

With ``reward_signals`` it does what ML-Agents' PPO does:

- **One value head per signal.** The policy's ``value_net`` gets one output per configured signal
  (in config order), sharing the critic body. ``predict_values`` then returns ``(batch, n_signals)``.
- **Rewards per signal.** After each rollout every transition gets ``strength * r_signal`` per head:
  the environment reward for ``extrinsic``, the signal's reward for the others, computed with the
  signal's current networks from ``(obs, action, true next obs)`` (the terminal observation at
  episode ends). Without an ``extrinsic`` entry the environment reward is not used for learning
  (pure imitation with GAIL, as in ML-Agents); it is still logged by ``Monitor``.
- **Returns and advantages per head** with the head's own ``gamma`` and the common ``gae_lambda``.
  Episode ends stop bootstrapping, except for time-limit truncations (bootstrap from the terminal
  observation, as SB3) and, for curiosity and RND, which ML-Agents treats as non-episodic
  (``ignore_done``), every episode end.
- **Combination.** The policy gradient uses the mean of the heads' advantages (ML-Agents'
  ``global_advantages``; strengths already weight the rewards), normalised as SB3 does (per
  minibatch) when ``normalize_advantage`` is true, or once per update over all the rollout's
  active transitions, as ML-Agents' trainers do, when it is ``"buffer"``; the value loss is the
  mean of the heads' squared errors, each head against its own returns.
- **Signal updates** happen on each PPO minibatch (same epochs, same minibatches), after the
  policy step, and their losses and mean rewards are logged under ``reward_signals/<name>/``.
- **Inactive slots** (``infos[i]["active"] == False``: placeholder steps of a ``UnityVecEnv`` slot
  whose agent is not asking for a decision) are excluded from every loss and from the signals'
  updates. Their rewards (the wrapper delivers rewards accumulated while a slot waited) are
  credited to the slot's previous active step, and GAE runs over active steps only (the next
  value of an active step is that of the slot's next active step). The true next observation of
  an active step followed by placeholders is the observation at the next active step (or the
  terminal one). When a rollout ends while a slot waits, that step's next value is unknown and its
  own value stands in for it.

``time_horizon`` (ML-Agents' setting of that name): every ``time_horizon`` active steps of a slot's
episode end a trajectory chunk; GAE does not look past a chunk's end and bootstraps from the value
of the next observation there, as ML-Agents computes advantages per trajectory it cuts. ``None``
(default): chunks end only at episode ends and at the rollout's end, as SB3. Giving it (or
``normalize_advantage="buffer"``) uses the signal path (an ``extrinsic``-only ``reward_signals``)
also on environments that are not Unity's.

``ent_coef`` may be a schedule of the progress remaining (1 -> 0), as ``learning_rate`` and
``clip_range`` are in SB3: ML-Agents' ``beta_schedule: linear`` decays the entropy coefficient
that way. It is evaluated once per update, before the epochs, and logged as ``train/ent_coef``.

Hybrid actions (a ``Tuple((Box(c,), MultiDiscrete(branches)))`` action space, what
``UnityVecEnv(..., hybrid="tuple")`` offers for a behavior with continuous and discrete actions)
take :class:`~unity_sb3.algorithms.ppo.hybrid.HybridActorCriticPolicy` (``"MlpPolicy"``,
``"CnnPolicy"`` and ``"MultiInputPolicy"`` name its variants then): ML-Agents' hybrid action model,
a Gaussian head and one categorical per branch, with the env's action masks on the branches
(``env_method("action_masks")``, sb3-contrib's convention). The rollout buffer stores each action
flat, ``(c + k,)``, with its masks; hybrid actions always take the signal path. As ML-Agents' PPO,
the clipped objective then takes one ratio per continuous dimension and branch and averages them
(SB3 takes one joint ratio per action, which Box and MultiDiscrete actions keep).

``behavioral_cloning``: see :func:`unity_sb3.algorithms.mixin.make_bc_module`; PPO calls the BC
module's ``update()`` once after each policy update (as ML-Agents) and logs under
``behavioral_cloning/``.

The signals and the BC term are built, saved and loaded by
:class:`~unity_sb3.algorithms.mixin.SignalsAndBCMixin` (shared with SAC); the rollout collection
is in :mod:`unity_sb3.algorithms.ppo.rollouts`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO as SB3PPO
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import (
    ActorCriticCnnPolicy,
    ActorCriticPolicy,
    MultiInputActorCriticPolicy,
)
from stable_baselines3.common.type_aliases import Schedule
from stable_baselines3.common.utils import explained_variance
from torch import nn

from unity_sb3.algorithms.advantages import check_time_horizon
from unity_sb3.algorithms.distributions import HybridDistribution, flat_action_space, is_hybrid_space
from unity_sb3.algorithms.mixin import SignalsAndBCMixin, log_stats
from unity_sb3.algorithms.optimizers import with_foreach_adam
from unity_sb3.algorithms.ppo.buffers import SignalRolloutBuffer, SignalRolloutBufferSamples
from unity_sb3.algorithms.ppo.hybrid import (
    HybridActorCriticPolicy,
    HybridCnnPolicy,
    HybridMultiInputPolicy,
)
from unity_sb3.algorithms.ppo.rollouts import SignalRolloutsMixin
from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError
from unity_sb3.slots import is_unity_vec_env


def widen_value_head(policy: Any, n_heads: int) -> None:
    """Give an SB3 ``ActorCriticPolicy`` ``n_heads`` value outputs and rebuild its optimizer."""
    old = policy.value_net
    if not isinstance(old, nn.Linear):
        raise RewardSignalConfigError(
            f"reward_signals need a policy whose value_net is a Linear layer; {type(policy).__name__} has "
            f"{type(old).__name__}."
        )
    head = nn.Linear(old.in_features, n_heads).to(old.weight.device)
    if getattr(policy, "ortho_init", False):
        nn.init.orthogonal_(head.weight, gain=1.0)
        nn.init.zeros_(head.bias)
    policy.value_net = head
    policy.optimizer = policy.optimizer_class(
        policy.parameters(), lr=policy.optimizer.param_groups[0]["lr"], **policy.optimizer_kwargs
    )


#: SB3's actor-critic policies (what "MlpPolicy" etc. name) -> their hybrid-action counterparts
HYBRID_POLICIES: dict[type, type] = {
    ActorCriticPolicy: HybridActorCriticPolicy,
    ActorCriticCnnPolicy: HybridCnnPolicy,
    MultiInputActorCriticPolicy: HybridMultiInputPolicy,
}
SUPPORTED_ACTION_SPACES = (
    spaces.Box,
    spaces.Discrete,
    spaces.MultiDiscrete,
    spaces.MultiBinary,
    spaces.Tuple,
)


class _FlatActionsRolloutBuffer(RolloutBuffer):
    """SB3's rollout buffer storing a hybrid action flat (only built, never filled: hybrid PPO uses the signal path)."""

    def __init__(
        self, buffer_size: int, observation_space: Any, action_space: Any, *args: Any, **kwargs: Any
    ):
        super().__init__(buffer_size, observation_space, flat_action_space(action_space), *args, **kwargs)


class _FlatActionsDictRolloutBuffer(DictRolloutBuffer):
    """:class:`_FlatActionsRolloutBuffer` for ``Dict`` observations."""

    def __init__(
        self, buffer_size: int, observation_space: Any, action_space: Any, *args: Any, **kwargs: Any
    ):
        super().__init__(buffer_size, observation_space, flat_action_space(action_space), *args, **kwargs)


class _OpenActionSpaces(OnPolicyAlgorithm):
    """Sits between SB3's PPO and ``OnPolicyAlgorithm`` in the MRO: SB3's PPO declares its action
    spaces; the project's PPO takes the hybrid ``Tuple`` too."""

    def __init__(self, *args: Any, supported_action_spaces: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, supported_action_spaces=SUPPORTED_ACTION_SPACES, **kwargs)


class PPO(SignalsAndBCMixin, SignalRolloutsMixin, SB3PPO, _OpenActionSpaces):
    """SB3's PPO with ML-Agents reward signals and a behavioral-cloning hook (see the module docstring).

    Takes every argument of :class:`stable_baselines3.PPO`, plus:

    :param reward_signals: ML-Agents style ``{"extrinsic": {...}, "curiosity": {...}, "rnd": {...},
        "gail": {...}}`` (see :mod:`unity_sb3.algorithms.mixin` for keys and defaults), or ``None``:
        plain SB3 behaviour, except on a :class:`~unity_sb3.UnityVecEnv`, where ``None`` means
        ``{"extrinsic": {}}`` so that its inactive placeholder steps stay out of the losses.
        A signal's ``gamma`` defaults to this algorithm's ``gamma``.
    :param behavioral_cloning: ML-Agents style BC settings for a BC term during training, or ``None``.
    :param time_horizon: agent steps after which a trajectory chunk ends (see the module docstring),
        or ``None``.
    :param ent_coef: (keyword) the entropy coefficient, or a schedule of the progress remaining
        (1 at the start, 0 at the end) giving it, e.g. ML-Agents' linear ``beta`` decay.
    :param normalize_advantage: (keyword) ``True`` (SB3's default): advantages normalised within
        each minibatch; ``"buffer"``: once per update over the rollout's active transitions
        (ML-Agents' trainers); ``False``: not normalised.
    """

    ent_coef_schedule: Schedule | None = None  # class defaults: models saved before they existed load
    time_horizon: int | None = None

    def __init__(
        self,
        policy: str | type,
        env: Any,
        *args: Any,
        reward_signals: dict | None = None,
        behavioral_cloning: dict | None = None,
        time_horizon: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.time_horizon = check_time_horizon(time_horizon, RewardSignalConfigError)
        if kwargs.get("normalize_advantage", True) not in (True, False, "buffer"):
            raise RewardSignalConfigError(
                "normalize_advantage must be True (per minibatch, SB3), 'buffer' (once per update over the "
                f"rollout, ML-Agents) or False, got {kwargs['normalize_advantage']!r}."
            )
        self._init_signals_and_bc(reward_signals, behavioral_cloning)
        if callable(kwargs.get("ent_coef")):
            self.ent_coef_schedule = kwargs["ent_coef"]
            kwargs["ent_coef"] = float(self.ent_coef_schedule(1.0))
        self._last_active = None
        if reward_signals is not None and kwargs.get("rollout_buffer_class") is not None:
            raise RewardSignalConfigError(
                "rollout_buffer_class cannot be combined with reward_signals: PPO with reward signals uses "
                "its own multi-head rollout buffer."
            )
        kwargs["policy_kwargs"] = with_foreach_adam(kwargs.get("policy_kwargs"), eps=1e-5)
        super().__init__(policy, env, *args, **kwargs)

    def _use_hybrid_classes(self) -> None:
        """The hybrid policy, and a rollout buffer SB3 can build, for a hybrid ``Tuple`` action space."""
        if not is_hybrid_space(self.action_space):
            raise ValueError(
                f"PPO takes a Tuple action space only as the hybrid Tuple(Box, MultiDiscrete), got {self.action_space}."
            )
        self.policy_class = self._hybrid_policy_class()
        if self.rollout_buffer_class is None:
            dict_obs = isinstance(self.observation_space, spaces.Dict)
            self.rollout_buffer_class = (
                _FlatActionsDictRolloutBuffer if dict_obs else _FlatActionsRolloutBuffer
            )

    def _hybrid_policy_class(self) -> type:
        """The policy class to use for a hybrid action space (the hybrid counterpart of SB3's)."""
        policy_class = HYBRID_POLICIES.get(self.policy_class, self.policy_class)
        if not (isinstance(policy_class, type) and issubclass(policy_class, HybridActorCriticPolicy)):
            raise ValueError(
                f"PPO with hybrid actions needs a hybrid policy ('MlpPolicy', 'CnnPolicy', 'MultiInputPolicy' or a "
                f"HybridActorCriticPolicy subclass), got {getattr(policy_class, '__name__', policy_class)}."
            )
        return policy_class

    def _setup_model(self) -> None:
        hybrid = isinstance(self.action_space, spaces.Tuple)
        if hybrid:
            self._use_hybrid_classes()
        super()._setup_model()
        config = self.reward_signals
        if config is None and (
            is_unity_vec_env(self.env)
            or self.time_horizon is not None
            or hybrid
            or self.normalize_advantage == "buffer"
        ):
            config = {"extrinsic": {}}  # the signal path skips inactive slots and cuts chunks
        parsed = self._setup_signals(config)
        if parsed is not None:
            if len(self._heads) > 1:
                widen_value_head(self.policy, len(self._heads))
            self.rollout_buffer = SignalRolloutBuffer(
                self.n_steps,
                self.observation_space,
                self.action_space,
                device=self.device,
                gae_lambda=self.gae_lambda,
                gammas=[parsed[name]["gamma"] for name in self._heads],
                ignore_done=[name in self.signals and self.signals[name].ignore_done for name in self._heads],
                n_envs=self.n_envs,
                log_prob_parts=hybrid,
            )
        self._setup_bc()

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[Any, tuple[np.ndarray, ...] | None]:
        """SB3's ``predict``; ``action_masks`` (``(n, sum(branches))``, True = allowed) mask a hybrid
        policy's branches (a policy without branches takes only None or all-allowed masks)."""
        if isinstance(self.policy, HybridActorCriticPolicy):
            return self.policy.predict(
                observation, state, episode_start, deterministic, action_masks=action_masks
            )
        if action_masks is not None and not np.all(action_masks):
            raise ValueError(
                f"{type(self.policy).__name__} has no discrete branches to mask; pass action_masks=None "
                "(MaskablePPO takes masks for Discrete and MultiDiscrete actions)."
            )
        return super().predict(observation, state, episode_start, deterministic)

    def train(self) -> None:
        if self.ent_coef_schedule is not None:
            self.ent_coef = float(self.ent_coef_schedule(self._current_progress_remaining))
            self.logger.record("train/ent_coef", self.ent_coef)
        if self.signals is None:
            super().train()
        else:
            self._train_with_signals()
        self._update_bc()

    def _evaluate_minibatch(
        self, data: SignalRolloutBufferSamples
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """Values, log-probabilities and entropies of a minibatch's actions under the current policy."""
        actions = data.actions
        if isinstance(self.action_space, spaces.Discrete):
            actions = data.actions.long().flatten()
        if data.action_masks is not None:
            return self.policy.evaluate_actions(data.observations, actions, action_masks=data.action_masks)
        return self.policy.evaluate_actions(data.observations, actions)

    def _act(self, obs: Any, action_masks: np.ndarray | None) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """:meth:`SignalRolloutsMixin._act`; a hybrid policy's log-probabilities per dimension and branch
        ``(n_envs, c + k)`` (the buffer keeps them and their sum)."""
        actions, values, log_probs = super()._act(obs, action_masks)
        if isinstance(self.policy, HybridActorCriticPolicy):
            distribution = self.policy.action_dist
            assert isinstance(distribution, HybridDistribution)
            log_probs = distribution.log_prob_parts(actions)
        return actions, values, log_probs

    def _train_with_signals(self) -> None:
        assert self.signals is not None
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)
        clip_range_vf = None
        if self.clip_range_vf is not None:
            clip_range_vf = self.clip_range_vf(self._current_progress_remaining)

        entropy_losses, pg_losses, value_losses, clip_fractions = [], [], [], []
        head_value_losses: dict[str, list[float]] = defaultdict(list)
        signal_stats: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in self.signals}
        approx_kl_divs: list[float] = []
        loss = th.zeros(())
        continue_training = True
        if self.normalize_advantage == "buffer":
            self.rollout_buffer.normalize_advantages()
        for epoch in range(self.n_epochs):
            approx_kl_divs = []
            for data in self.rollout_buffer.get(self.batch_size):
                values, log_prob, entropy = self._evaluate_minibatch(data)
                values = values.reshape(-1, len(self._heads))
                advantages = data.advantages
                if self.normalize_advantage != "buffer" and self.normalize_advantage and len(advantages) > 1:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
                if data.old_log_prob_parts is None:
                    ratio = th.exp(log_prob - data.old_log_prob)
                else:  # one ratio per action dimension and branch (B, c + k), as ML-Agents' PPO
                    distribution = self.policy.action_dist  # set by _evaluate_minibatch
                    assert isinstance(distribution, HybridDistribution)
                    ratio = th.exp(distribution.log_prob_parts(data.actions) - data.old_log_prob_parts)
                    advantages = advantages.reshape(-1, 1)
                policy_loss_1 = advantages * ratio
                policy_loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
                policy_loss = -th.min(policy_loss_1, policy_loss_2).mean()
                pg_losses.append(policy_loss.item())
                clip_fractions.append(th.mean((th.abs(ratio - 1) > clip_range).float()).item())

                if clip_range_vf is None:
                    values_pred = values
                else:
                    values_pred = data.old_values + th.clamp(
                        values - data.old_values, -clip_range_vf, clip_range_vf
                    )
                per_head = ((data.returns - values_pred) ** 2).mean(dim=0)
                value_loss = per_head.mean()
                value_losses.append(value_loss.item())
                for k, name in enumerate(self._heads):
                    head_value_losses[name].append(per_head[k].item())

                if entropy is None:
                    entropy_loss = -th.mean(-log_prob)
                else:
                    entropy_loss = -th.mean(entropy)
                entropy_losses.append(entropy_loss.item())
                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

                with th.no_grad():
                    log_ratio = log_prob - data.old_log_prob
                    approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio).cpu().numpy()
                    approx_kl_divs.append(approx_kl_div)
                if self.target_kl is not None and approx_kl_div > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
                    break

                self.policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()

                for name, signal in self.signals.items():
                    batch = signal.batch(data.observations, data.actions, data.next_observations, data.dones)
                    for key, value in signal.update(batch).items():
                        signal_stats[name][key].append(float(value))
            self._n_updates += 1
            if not continue_training:
                break

        buffer = self.rollout_buffer
        active = buffer.active
        explained_var = explained_variance(
            buffer.values[active].reshape(-1), buffer.returns[active].reshape(-1)
        )
        self.logger.record("train/entropy_loss", np.mean(entropy_losses) if entropy_losses else np.nan)
        self.logger.record("train/policy_gradient_loss", np.mean(pg_losses) if pg_losses else np.nan)
        self.logger.record("train/value_loss", np.mean(value_losses) if value_losses else np.nan)
        self.logger.record("train/approx_kl", np.mean(approx_kl_divs) if approx_kl_divs else np.nan)
        self.logger.record("train/clip_fraction", np.mean(clip_fractions) if clip_fractions else np.nan)
        self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", explained_var)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        if clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)
        for name in self._heads:
            log_stats(self.logger, f"reward_signals/{name}", {"value_loss": head_value_losses[name]})
        for name, stats in signal_stats.items():
            log_stats(self.logger, f"reward_signals/{name}", stats)
