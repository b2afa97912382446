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
  ``global_advantages``; strengths already weight the rewards), normalised as SB3 does when
  ``normalize_advantage``; the value loss is the mean of the heads' squared errors, each head
  against its own returns.
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

``behavioral_cloning``: see :func:`unity_sb3.algorithms.mixin.make_bc_module`; PPO calls the BC
module's ``update()`` once after each policy update (as ML-Agents) and logs under
``behavioral_cloning/``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO as SB3PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import explained_variance, obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv
from torch import nn

from unity_sb3.algorithms.mixin import SavedComponentsMixin, log_stats, make_bc_module
from unity_sb3.algorithms.ppo.buffers import (
    REWARD_CHUNK,
    SignalRolloutBuffer,
    _slice_obs,
    copy_obs,
    stack_obs,
)
from unity_sb3.algorithms.reward_signals import make_reward_signals
from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError, parse_reward_signals
from unity_sb3.slots import active_from_infos, is_unity_vec_env, mark_inactive_aware, reset_infos_of


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


class PPO(SavedComponentsMixin, SB3PPO):
    """SB3's PPO with ML-Agents reward signals and a behavioral-cloning hook (see the module docstring).

    Takes every argument of :class:`stable_baselines3.PPO`, plus:

    :param reward_signals: ML-Agents style ``{"extrinsic": {...}, "curiosity": {...}, "rnd": {...},
        "gail": {...}}`` (see :mod:`unity_sb3.algorithms.mixin` for keys and defaults), or ``None``:
        plain SB3 behaviour, except on a :class:`~unity_sb3.UnityVecEnv`, where ``None`` means
        ``{"extrinsic": {}}`` so that its inactive placeholder steps stay out of the losses.
        A signal's ``gamma`` defaults to this algorithm's ``gamma``.
    :param behavioral_cloning: ML-Agents style BC settings for a BC term during training, or ``None``.
    """

    def __init__(
        self,
        policy: str | type,
        env: Any,
        *args: Any,
        reward_signals: dict | None = None,
        behavioral_cloning: dict | None = None,
        **kwargs: Any,
    ) -> None:
        self.reward_signals = reward_signals
        self.behavioral_cloning = behavioral_cloning
        self.signals: nn.ModuleDict | None = None
        self._bc: Any = None
        self._heads: list[str] = []
        self._last_active: np.ndarray | None = None
        if reward_signals is not None and kwargs.get("rollout_buffer_class") is not None:
            raise RewardSignalConfigError(
                "rollout_buffer_class cannot be combined with reward_signals: PPO with reward signals uses "
                "its own multi-head rollout buffer."
            )
        super().__init__(policy, env, *args, **kwargs)

    # ------------------------------------------------------------------ set-up
    def _setup_model(self) -> None:
        super()._setup_model()
        config = self.reward_signals
        if config is None and is_unity_vec_env(self.env):
            config = {"extrinsic": {}}  # the signal path is the one that skips inactive slots
        parsed = parse_reward_signals(config, default_gamma=self.gamma)
        if parsed is not None:
            self._heads = list(parsed)
            self.signals = make_reward_signals(
                parsed, self.observation_space, self.action_space, self.device, model=self
            )
            if len(self._heads) > 1:
                widen_value_head(self.policy, len(self._heads))
            self._signal_settings = parsed
            self.rollout_buffer = SignalRolloutBuffer(
                self.n_steps,
                self.observation_space,
                self.action_space,
                device=self.device,
                gae_lambda=self.gae_lambda,
                gammas=[parsed[name]["gamma"] for name in self._heads],
                ignore_done=[name in self.signals and self.signals[name].ignore_done for name in self._heads],
                n_envs=self.n_envs,
            )
        self._bc = make_bc_module(self, self.behavioral_cloning)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "signals", "_bc", "_signal_settings"]

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        reset_num_timesteps: bool = True,
        *args: Any,
        **kwargs: Any,
    ):
        will_reset = reset_num_timesteps or self._last_obs is None
        result = super()._setup_learn(total_timesteps, callback, reset_num_timesteps, *args, **kwargs)
        if will_reset or self._last_active is None or len(self._last_active) != self.n_envs:
            self._last_active = active_from_infos(reset_infos_of(self.env), self.n_envs)
        if self.signals is not None:
            mark_inactive_aware(self.env)  # this path never trains on placeholder steps
        return result

    # ------------------------------------------------------------------ rollouts
    def collect_rollouts(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: Any, n_rollout_steps: int
    ) -> bool:
        if self.signals is None:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        assert self._last_obs is not None, "No previous observation was provided"
        assert isinstance(rollout_buffer, SignalRolloutBuffer)
        self.policy.set_training_mode(False)
        n_steps = 0
        rollout_buffer.reset()
        if self.use_sde:
            self.policy.reset_noise(env.num_envs)
        if self._last_active is None or len(self._last_active) != env.num_envs:
            self._last_active = np.ones(env.num_envs, dtype=bool)
        n_heads = len(self._heads)
        need_terminal_values = any(rollout_buffer.ignore_done)
        # step index of an active step whose next observation is still a placeholder, per slot
        pending = np.full(env.num_envs, -1, dtype=np.int64)
        callback.on_rollout_start()

        while n_steps < n_rollout_steps:
            if self.use_sde and self.sde_sample_freq > 0 and n_steps % self.sde_sample_freq == 0:
                self.policy.reset_noise(env.num_envs)
            with th.no_grad():
                obs_tensor = obs_as_tensor(self._last_obs, self.device)
                actions, values, log_probs = self.policy(obs_tensor)
            actions = actions.cpu().numpy()
            clipped_actions = actions
            if isinstance(self.action_space, spaces.Box):
                if self.policy.squash_output:
                    clipped_actions = self.policy.unscale_action(clipped_actions)
                else:
                    clipped_actions = np.clip(actions, self.action_space.low, self.action_space.high)

            new_obs, rewards, dones, infos = env.step(clipped_actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            n_steps += 1
            if isinstance(self.action_space, spaces.Discrete):
                actions = actions.reshape(-1, 1)

            next_obs = copy_obs(new_obs)
            truncated = np.zeros(env.num_envs, dtype=bool)
            terminal_values = np.zeros((env.num_envs, n_heads), dtype=np.float32)
            ended = []
            for idx, done in enumerate(dones):
                terminal = infos[idx].get("terminal_observation") if done else None
                if terminal is None:
                    continue
                if isinstance(next_obs, dict):
                    for key in next_obs:
                        next_obs[key][idx] = terminal[key]
                else:
                    next_obs[idx] = terminal
                truncated[idx] = bool(infos[idx].get("TimeLimit.truncated", False))
                if truncated[idx] or need_terminal_values:
                    ended.append(idx)
            if ended:
                terminal_batch = stack_obs([infos[i]["terminal_observation"] for i in ended])
                with th.no_grad():
                    v = self.policy.predict_values(obs_as_tensor(terminal_batch, self.device))
                terminal_values[ended] = v.cpu().numpy().reshape(len(ended), n_heads)

            active_next = active_from_infos(infos, env.num_envs)
            step = rollout_buffer.pos
            rollout_buffer.add(
                self._last_obs,
                actions,
                rewards,
                self._last_episode_starts,
                values,
                log_probs,
                next_obs,
                dones,
                truncated,
                self._last_active,
                terminal_values,
            )
            self._fix_pending_next_obs(rollout_buffer, step, pending, next_obs, dones, active_next)
            self._last_obs = new_obs
            self._last_episode_starts = dones
            self._last_active = active_next

        with th.no_grad():
            values = self.policy.predict_values(obs_as_tensor(new_obs, self.device))
        self._fill_head_rewards(rollout_buffer)
        rollout_buffer.compute_returns_and_advantage(last_values=values, last_active=self._last_active)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _fix_pending_next_obs(
        self,
        buffer: SignalRolloutBuffer,
        step: int,
        pending: np.ndarray,
        next_obs: Any,
        dones: np.ndarray,
        active_next: np.ndarray,
    ) -> None:
        """Point an active step's next observation past the placeholder steps that followed it."""
        was_active = self._last_active
        for env_idx in range(len(dones)):
            if was_active[env_idx]:
                pending[env_idx] = step if (not dones[env_idx] and not active_next[env_idx]) else -1
            elif pending[env_idx] >= 0 and (dones[env_idx] or active_next[env_idx]):
                obs_i = (
                    {k: v[env_idx] for k, v in next_obs.items()}
                    if isinstance(next_obs, dict)
                    else next_obs[env_idx]
                )
                buffer.set_next_obs(int(pending[env_idx]), env_idx, obs_i)
                pending[env_idx] = -1

    def _fill_head_rewards(self, buffer: SignalRolloutBuffer) -> None:
        """``strength * reward`` per head for every stored step (0 for signals on inactive steps)."""
        assert self.signals is not None
        active = buffer.active
        obs, next_obs = buffer.flat_obs(), buffer.flat_obs(next_obs=True)
        actions = buffer.actions.reshape(-1, buffer.action_dim)
        dones = buffer.dones.reshape(-1).astype(np.float32)
        total = actions.shape[0]
        for k, name in enumerate(self._heads):
            strength = self._signal_settings[name]["strength"]
            if name == "extrinsic":
                buffer.head_rewards[..., k] = strength * buffer.env_rewards
                mean = float(strength * buffer.env_rewards[active].mean()) if active.any() else 0.0
            else:
                signal = self.signals[name]
                rewards = np.empty(total, dtype=np.float32)
                for start in range(0, total, REWARD_CHUNK):
                    sl = slice(start, start + REWARD_CHUNK)
                    rewards[sl] = signal.reward(
                        _slice_obs(obs, sl), actions[sl], _slice_obs(next_obs, sl), dones[sl]
                    )
                rewards = strength * rewards.reshape(buffer.buffer_size, buffer.n_envs) * active
                buffer.head_rewards[..., k] = rewards
                mean = float(rewards[active].mean()) if active.any() else 0.0
            self.logger.record(f"reward_signals/{name}/reward", mean)

    # ------------------------------------------------------------------ training
    def train(self) -> None:
        if self.signals is None:
            super().train()
        else:
            self._train_with_signals()
        self._update_bc()

    def _update_bc(self) -> None:
        if self._bc is None:
            return
        stats = self._bc.update()
        for key, value in (stats or {}).items():
            self.logger.record(f"behavioral_cloning/{key}", float(value))

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
        for epoch in range(self.n_epochs):
            approx_kl_divs = []
            for data in self.rollout_buffer.get(self.batch_size):
                actions = data.actions
                if isinstance(self.action_space, spaces.Discrete):
                    actions = data.actions.long().flatten()
                values, log_prob, entropy = self.policy.evaluate_actions(data.observations, actions)
                values = values.reshape(-1, len(self._heads))
                advantages = data.advantages
                if self.normalize_advantage and len(advantages) > 1:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
                ratio = th.exp(log_prob - data.old_log_prob)
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

    # ------------------------------------------------------------------ helpers
    def intrinsic_rewards(
        self, obs: Any, actions: Any, next_obs: Any, dones: Any = None
    ) -> dict[str, np.ndarray]:
        """``{signal: strength * reward}`` of each intrinsic signal for a batch of transitions.

        :param obs: ``(batch, *obs_shape)`` (dict for ``Dict`` spaces).
        :param actions: ``(batch, ...)`` actions.
        :param next_obs: ``(batch, *obs_shape)`` true next observations.
        :param dones: ``(batch,)`` episode ends (GAIL with ``use_actions``), optional.
        """
        if self.signals is None:
            return {}
        return {
            name: self._signal_settings[name]["strength"] * signal.reward(obs, actions, next_obs, dones)
            for name, signal in self.signals.items()
        }
