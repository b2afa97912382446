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

``behavioral_cloning``: see :func:`unity_sb3.algorithms.common.make_bc_module`; PPO calls the BC
module's ``update()`` once after each policy update (as ML-Agents) and logs under
``behavioral_cloning/``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO as SB3PPO
from stable_baselines3.common.buffers import BaseBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import explained_variance, obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from torch import nn

from unity_sb3.algorithms.common import (
    RewardSignalConfigError,
    SavedComponentsMixin,
    log_stats,
    make_bc_module,
    parse_reward_signals,
)
from unity_sb3.algorithms.reward_signals import make_reward_signals
from unity_sb3.wrappers.vec_env import is_unity_vec_env, mark_inactive_aware

REWARD_CHUNK = 4096  # transitions per forward pass when computing intrinsic rewards


class SignalRolloutBufferSamples(NamedTuple):
    observations: th.Tensor | dict[str, th.Tensor]
    actions: th.Tensor
    next_observations: th.Tensor | dict[str, th.Tensor]
    old_values: th.Tensor  # (batch, n_heads)
    old_log_prob: th.Tensor
    advantages: th.Tensor  # (batch,) combined
    returns: th.Tensor  # (batch, n_heads)
    dones: th.Tensor


class SignalRolloutBuffer(BaseBuffer):
    """Rollout buffer with one value/return per reward-signal head, next observations and activity.

    :param buffer_size: steps per environment slot.
    :param observation_space: observation space (``Box``, ``Discrete``... or ``Dict``).
    :param action_space: action space.
    :param device: torch device of the samples.
    :param gae_lambda: GAE lambda, common to all heads.
    :param gammas: discount of each head, ``(n_heads,)``.
    :param ignore_done: per head, whether it bootstraps through episode ends.
    :param n_envs: number of environment slots.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        gae_lambda: float = 0.95,
        gammas: Sequence[float] = (0.99,),
        ignore_done: Sequence[bool] = (False,),
        n_envs: int = 1,
    ) -> None:
        super().__init__(buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.gae_lambda = gae_lambda
        self.gammas = np.asarray(gammas, dtype=np.float32)
        self.ignore_done = np.asarray(ignore_done, dtype=bool)
        self.n_heads = len(self.gammas)
        self.reset()

    def _obs_storage(self) -> np.ndarray | dict[str, np.ndarray]:
        def array(shape: tuple[int, ...], space: spaces.Space) -> np.ndarray:
            # uint8 images stay uint8 (4x less memory); everything else float32 like SB3
            dtype = np.uint8 if space.dtype == np.uint8 else np.float32
            return np.zeros((self.buffer_size, self.n_envs, *shape), dtype=dtype)

        if isinstance(self.obs_shape, dict):
            return {k: array(shape, self.observation_space[k]) for k, shape in self.obs_shape.items()}
        return array(self.obs_shape, self.observation_space)

    def reset(self) -> None:
        t, n, k = self.buffer_size, self.n_envs, self.n_heads
        self.observations = self._obs_storage()
        self.next_observations = self._obs_storage()
        self.actions = np.zeros((t, n, self.action_dim), dtype=np.float32)
        self.env_rewards = np.zeros((t, n), dtype=np.float32)
        self.head_rewards = np.zeros((t, n, k), dtype=np.float32)
        self.episode_starts = np.zeros((t, n), dtype=np.float32)
        self.dones = np.zeros((t, n), dtype=bool)
        self.truncated = np.zeros((t, n), dtype=bool)
        self.active = np.ones((t, n), dtype=bool)
        self.terminal_values = np.zeros((t, n, k), dtype=np.float32)
        self.values = np.zeros((t, n, k), dtype=np.float32)
        self.log_probs = np.zeros((t, n), dtype=np.float32)
        self.head_advantages = np.zeros((t, n, k), dtype=np.float32)
        self.advantages = np.zeros((t, n), dtype=np.float32)
        self.returns = np.zeros((t, n, k), dtype=np.float32)
        super().reset()

    def _set_obs(self, storage: Any, index: Any, obs: Any) -> None:
        if isinstance(storage, dict):
            for key in storage:
                storage[key][index] = np.asarray(obs[key]).reshape(storage[key][index].shape)
        else:
            storage[index] = np.asarray(obs).reshape(storage[index].shape)

    def add(
        self,
        obs: Any,
        action: np.ndarray,
        reward: np.ndarray,
        episode_start: np.ndarray,
        value: th.Tensor,
        log_prob: th.Tensor,
        next_obs: Any,
        done: np.ndarray,
        truncated: np.ndarray,
        active: np.ndarray,
        terminal_values: np.ndarray,
    ) -> None:
        """Store one step of every slot. ``value``/``terminal_values`` are ``(n_envs, n_heads)``."""
        p = self.pos
        self._set_obs(self.observations, p, obs)
        self._set_obs(self.next_observations, p, next_obs)
        self.actions[p] = np.asarray(action).reshape(self.n_envs, self.action_dim)
        self.env_rewards[p] = reward
        self.episode_starts[p] = episode_start
        self.dones[p] = done
        self.truncated[p] = truncated
        self.active[p] = active
        self.terminal_values[p] = terminal_values
        self.values[p] = value.detach().cpu().numpy().reshape(self.n_envs, self.n_heads)
        self.log_probs[p] = log_prob.detach().cpu().numpy().reshape(self.n_envs)
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True

    def set_next_obs(self, step: int, env: int, obs: Any) -> None:
        """Replace the next observation of ``(step, env)`` (fixing up steps followed by placeholders)."""
        if isinstance(self.next_observations, dict):
            for key in self.next_observations:
                self.next_observations[key][step, env] = obs[key]
        else:
            self.next_observations[step, env] = obs

    def flat_obs(self, next_obs: bool = False) -> Any:
        """Observations (or next observations) as ``(buffer_size * n_envs, ...)``, time-major."""
        storage = self.next_observations if next_obs else self.observations
        if isinstance(storage, dict):
            return {k: v.reshape(-1, *v.shape[2:]) for k, v in storage.items()}
        return storage.reshape(-1, *storage.shape[2:])

    def compute_returns_and_advantage(self, last_values: th.Tensor, last_active: np.ndarray) -> None:
        """GAE per head over active steps only, then the combined advantage (mean over heads).

        :param last_values: ``(n_envs, n_heads)`` values of the observations after the last step.
        :param last_active: ``(n_envs,)`` whether those observations are real (not placeholders).
        """
        gammas, lam = self.gammas[None, :], self.gae_lambda
        # bootstrap through truncations (all heads) and, for ignore_done heads, through every end
        boot = self.dones[..., None] & (self.truncated[..., None] | self.ignore_done[None, None, :])
        rewards = self.head_rewards + boot * gammas * self.terminal_values
        next_value = last_values.detach().cpu().numpy().reshape(self.n_envs, self.n_heads).astype(np.float32)
        next_known = np.asarray(last_active, dtype=bool).copy()
        acc_reward = np.zeros((self.n_envs, self.n_heads), dtype=np.float32)
        acc_done = np.zeros(self.n_envs, dtype=bool)
        last_gae = np.zeros((self.n_envs, self.n_heads), dtype=np.float32)
        for t in reversed(range(self.buffer_size)):
            act = self.active[t]
            reward = rewards[t] + acc_reward
            done = self.dones[t] | acc_done
            non_terminal = (1.0 - done.astype(np.float32))[:, None]
            values = self.values[t]
            bootstrap = np.where(next_known[:, None], next_value, values)
            delta = reward + gammas * bootstrap * non_terminal - values
            gae = delta + gammas * lam * non_terminal * last_gae
            self.head_advantages[t] = np.where(act[:, None], gae, 0.0)
            last_gae = np.where(act[:, None], gae, last_gae)
            next_value = np.where(act[:, None], values, next_value)
            next_known |= act
            acc_reward = np.where(act[:, None], 0.0, reward)
            acc_done = np.where(act, False, done)
        self.returns = self.head_advantages + self.values
        self.advantages = self.head_advantages.mean(axis=2)

    def get(self, batch_size: int | None = None) -> Generator[SignalRolloutBufferSamples, None, None]:
        """Minibatches over the *active* steps, in random order."""
        assert self.full, "the rollout buffer is not full"
        active = np.flatnonzero(self.active.reshape(-1))
        indices = np.random.permutation(active)
        if batch_size is None:
            batch_size = max(len(indices), 1)
        for start in range(0, len(indices), batch_size):
            yield self._get_samples(indices[start : start + batch_size])

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> SignalRolloutBufferSamples:
        def take(array: np.ndarray) -> th.Tensor:
            return self.to_torch(array.reshape(-1, *array.shape[2:])[batch_inds])

        def take_obs(storage: Any) -> Any:
            if isinstance(storage, dict):
                return {k: take(v) for k, v in storage.items()}
            return take(storage)

        return SignalRolloutBufferSamples(
            observations=take_obs(self.observations),
            actions=take(self.actions),
            next_observations=take_obs(self.next_observations),
            old_values=take(self.values),
            old_log_prob=take(self.log_probs),
            advantages=take(self.advantages),
            returns=take(self.returns),
            dones=take(self.dones.astype(np.float32)),
        )


def reset_infos_of(env: VecEnv) -> list[dict[str, Any]] | None:
    """The ``reset_infos`` of the last ``reset()``, read through ``VecEnvWrapper`` layers.

    SB3's wrappers (``VecMonitor``, ``VecNormalize``, ...) keep a ``reset_infos`` of empty dicts
    of their own and do not pass the wrapped env's on, so ``env.reset_infos`` on a wrapped
    ``UnityVecEnv`` says nothing about which slots are active or grouped after a reset. This
    takes the outermost layer whose ``reset_infos`` hold something, else the innermost env's.

    :param env: a VecEnv, possibly wrapped.
    :return: one dict per slot (copies), or ``None`` when no layer has ``num_envs`` of them.
    """
    found: list[dict[str, Any]] | None = None
    while True:
        infos = vars(env).get("reset_infos")
        if isinstance(infos, list) and len(infos) == env.num_envs:
            found = [dict(info) if isinstance(info, dict) else {} for info in infos]
            if any(found):
                return found
        if not isinstance(env, VecEnvWrapper):
            return found
        env = env.venv


def active_from_infos(infos: Sequence[dict] | None, n_envs: int) -> np.ndarray:
    """``(n_envs,)`` bool: ``infos[i].get("active", True)`` (all True when ``infos`` is missing)."""
    if not infos or len(infos) != n_envs:
        return np.ones(n_envs, dtype=bool)
    return np.array([bool(info.get("active", True)) for info in infos], dtype=bool)


def stack_obs(observations: Sequence[Any]) -> Any:
    """Stack single observations (arrays or dicts of arrays) into a batch."""
    if isinstance(observations[0], dict):
        return {k: np.stack([np.asarray(o[k]) for o in observations]) for k in observations[0]}
    return np.stack([np.asarray(o) for o in observations])


def copy_obs(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: np.array(v, copy=True) for k, v in obs.items()}
    return np.array(obs, copy=True)


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
        "gail": {...}}`` (see :mod:`unity_sb3.algorithms.common` for keys and defaults), or ``None``:
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


def _slice_obs(obs: Any, sl: slice) -> Any:
    if isinstance(obs, dict):
        return {k: v[sl] for k, v in obs.items()}
    return obs[sl]
