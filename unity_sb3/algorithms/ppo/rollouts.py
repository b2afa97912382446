"""Rollout collection of PPO with reward signals: per-head rewards over the active steps of each slot.

SB3's ``OnPolicyAlgorithm.collect_rollouts`` with what reward signals and ``UnityVecEnv`` slots
add (see :mod:`unity_sb3.algorithms.ppo.ppo`): each step stores its true next observation (the
terminal one at episode ends, the one at the slot's next active step when placeholders follow)
and, for truncations and non-episodic signals, the value of the terminal observation; after the
rollout every step gets ``strength * reward`` per head and GAE runs per head over active steps.
Without reward signals it is SB3's collection unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from unity_sb3.algorithms.action_masks import mask_reader
from unity_sb3.algorithms.advantages import horizon_cuts
from unity_sb3.algorithms.distributions import hybrid_env_actions, is_hybrid_space
from unity_sb3.algorithms.ppo.buffers import (
    REWARD_CHUNK,
    SignalRolloutBuffer,
    copy_obs,
    slice_obs,
    stack_obs,
)
from unity_sb3.slots import TERMINAL_OBSERVATION, active_from_infos, mark_inactive_aware, reset_infos_of


class SignalRolloutsMixin:
    """PPO's rollouts with reward signals and inactive slots; put it before SB3's PPO.

    Uses the PPO's ``signals``, ``_heads``, ``_signal_settings`` (from
    :class:`~unity_sb3.algorithms.mixin.SignalsAndBCMixin`) and keeps ``_last_active``: which slots
    asked for a decision at the last observation, ``(n_envs,)`` bool.
    """

    _last_active: np.ndarray | None

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
        chunk_steps = getattr(self, "_chunk_steps", None)
        if will_reset or chunk_steps is None or len(chunk_steps) != self.n_envs:
            self._chunk_steps = np.zeros(self.n_envs, dtype=np.int64)
        if self.signals is not None:
            mark_inactive_aware(self.env)  # this path never trains on placeholder steps
        return result

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
        hybrid = is_hybrid_space(self.action_space)
        read_masks = mask_reader(env) if hybrid else None
        action_masks = None
        callback.on_rollout_start()

        while n_steps < n_rollout_steps:
            if self.use_sde and self.sde_sample_freq > 0 and n_steps % self.sde_sample_freq == 0:
                self.policy.reset_noise(env.num_envs)
            with th.no_grad():
                obs_tensor = obs_as_tensor(self._last_obs, self.device)
                if hybrid:
                    action_masks = read_masks() if read_masks is not None else None
                actions, values, log_probs = self._act(obs_tensor, action_masks)
            actions = actions.cpu().numpy()
            clipped_actions = actions
            if hybrid:
                clipped_actions = hybrid_env_actions(actions, self.action_space, env)
            elif isinstance(self.action_space, spaces.Box):
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
                terminal = infos[idx].get(TERMINAL_OBSERVATION) if done else None
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
                terminal_batch = stack_obs([infos[i][TERMINAL_OBSERVATION] for i in ended])
                with th.no_grad():
                    v = self._values_after_step(obs_as_tensor(terminal_batch, self.device), ended)
                terminal_values[ended] = v.cpu().numpy().reshape(len(ended), n_heads)

            active_next = active_from_infos(infos, env.num_envs)
            chunk_end = self._chunk_ends(dones)
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
                chunk_end,
                action_masks,
            )
            self._fix_pending_next_obs(rollout_buffer, step, pending, next_obs, dones, active_next)
            self._last_obs = new_obs
            self._last_episode_starts = dones
            self._last_active = active_next

        with th.no_grad():
            values = self._values_after_step(obs_as_tensor(new_obs, self.device), list(range(env.num_envs)))
        self._fill_head_rewards(rollout_buffer)
        rollout_buffer.compute_returns_and_advantage(last_values=values, last_active=self._last_active)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _act(self, obs: Any, action_masks: np.ndarray | None) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Actions, values ``(n_envs, n_heads)`` and log-probabilities for the current observations
        (a recurrent PPO also stores and advances its memories here)."""
        if action_masks is not None:
            return self.policy(obs, action_masks=action_masks)
        return self.policy(obs)

    def _values_after_step(self, obs: Any, env_indices: list[int]) -> th.Tensor:
        """Values ``(len(env_indices), n_heads)`` of observations reached by slots ``env_indices``
        in the step just taken (terminal observations, the rollout's last observations)."""
        return self.policy.predict_values(obs)

    def _chunk_ends(self, dones: np.ndarray) -> np.ndarray | None:
        """Which slots' active step ends a ``time_horizon`` chunk: every ``time_horizon`` active steps
        since the episode started (or since the last chunk ended), as ML-Agents cuts trajectories."""
        return horizon_cuts(self._chunk_steps, self._last_active, dones, getattr(self, "time_horizon", None))

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
                        slice_obs(obs, sl), actions[sl], slice_obs(next_obs, sl), dones[sl]
                    )
                rewards = strength * rewards.reshape(buffer.buffer_size, buffer.n_envs) * active
                buffer.head_rewards[..., k] = rewards
                mean = float(rewards[active].mean()) if active.any() else 0.0
            self.logger.record(f"reward_signals/{name}/reward", mean)
