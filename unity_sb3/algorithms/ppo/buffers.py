"""PPO's rollout buffer with one value and return per reward signal."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer

from unity_sb3.algorithms.advantages import normalize_active_advantages
from unity_sb3.algorithms.distributions import action_layout, flat_action_space, is_hybrid_space

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
    action_masks: th.Tensor | None = None  # (batch, sum(branches)) True = allowed, hybrid actions only
    sequences: Any = None  # the minibatch as padded sequences, recurrent PPO only
    old_log_prob_parts: th.Tensor | None = None  # (batch, c + k) per dimension and branch, hybrid PPO only


class SignalRolloutBuffer(BaseBuffer):
    """Rollout buffer with one value/return per reward-signal head, next observations and activity.

    :param buffer_size: steps per environment slot.
    :param observation_space: observation space (``Box``, ``Discrete``... or ``Dict``).
    :param action_space: action space; a hybrid ``Tuple(Box, MultiDiscrete)`` is stored flat,
        ``(c + k,)`` per step, with the step's action masks ``(sum(branches),)`` (True = allowed).
    :param device: torch device of the samples.
    :param gae_lambda: GAE lambda, common to all heads.
    :param gammas: discount of each head, ``(n_heads,)``.
    :param ignore_done: per head, whether it bootstraps through episode ends.
    :param n_envs: number of environment slots.
    :param log_prob_parts: also keep each action's log-probability per continuous dimension and branch,
        ``(c + k,)`` (hybrid actions only: what ML-Agents' per-dimension PPO ratio needs); ``add`` then
        takes them instead of the joint log-probability, which is their sum.
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
        log_prob_parts: bool = False,
    ) -> None:
        hybrid = is_hybrid_space(action_space)
        if log_prob_parts and not hybrid:
            raise ValueError(f"log_prob_parts needs a hybrid action space, got {action_space}")
        self.mask_dim = int(sum(action_layout(action_space)[1])) if hybrid else 0
        super().__init__(
            buffer_size, observation_space, flat_action_space(action_space), device, n_envs=n_envs
        )
        self.parts_dim = self.action_dim if log_prob_parts else 0
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
        self.action_masks = np.ones((t, n, self.mask_dim), dtype=bool)
        self.env_rewards = np.zeros((t, n), dtype=np.float32)
        self.head_rewards = np.zeros((t, n, k), dtype=np.float32)
        self.episode_starts = np.zeros((t, n), dtype=np.float32)
        self.dones = np.zeros((t, n), dtype=bool)
        self.truncated = np.zeros((t, n), dtype=bool)
        self.active = np.ones((t, n), dtype=bool)
        self.terminal_values = np.zeros((t, n, k), dtype=np.float32)
        self.chunk_ends = np.zeros((t, n), dtype=bool)
        self.values = np.zeros((t, n, k), dtype=np.float32)
        self.log_probs = np.zeros((t, n), dtype=np.float32)
        self.log_prob_parts = np.zeros((t, n, self.parts_dim), dtype=np.float32)
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
        chunk_end: np.ndarray | None = None,
        action_masks: np.ndarray | None = None,
    ) -> None:
        """Store one step of every slot. ``value``/``terminal_values`` are ``(n_envs, n_heads)``;
        ``chunk_end`` ``(n_envs,)`` marks steps that end a trajectory chunk (ML-Agents' ``time_horizon``):
        GAE does not look past them and bootstraps from the next value. ``action_masks``
        ``(n_envs, sum(branches))`` (hybrid actions; None = all allowed) are the masks the actions were drawn under.
        ``log_prob`` is ``(n_envs,)``, or ``(n_envs, c + k)`` per dimension and branch with ``log_prob_parts``."""
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
        self.chunk_ends[p] = False if chunk_end is None else chunk_end
        if self.mask_dim:
            self.action_masks[p] = (
                True if action_masks is None else np.reshape(action_masks, (self.n_envs, -1))
            )
        self.values[p] = value.detach().cpu().numpy().reshape(self.n_envs, self.n_heads)
        log_prob_array = log_prob.detach().cpu().numpy()
        if self.parts_dim:
            self.log_prob_parts[p] = log_prob_array.reshape(self.n_envs, self.parts_dim)
            log_prob_array = self.log_prob_parts[p].sum(axis=1)
        self.log_probs[p] = log_prob_array.reshape(self.n_envs)
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
            carry = non_terminal * (1.0 - self.chunk_ends[t].astype(np.float32))[:, None]
            gae = delta + gammas * lam * carry * last_gae
            self.head_advantages[t] = np.where(act[:, None], gae, 0.0)
            last_gae = np.where(act[:, None], gae, last_gae)
            next_value = np.where(act[:, None], values, next_value)
            next_known |= act
            acc_reward = np.where(act[:, None], 0.0, reward)
            acc_done = np.where(act, False, done)
        self.returns = self.head_advantages + self.values
        self.advantages = self.head_advantages.mean(axis=2)

    def normalize_advantages(self) -> None:
        """Normalise the advantages of the active transitions over the whole rollout (mean 0, std 1),
        as ML-Agents' trainers do once per update; placeholder steps keep theirs (never trained on)."""
        normalize_active_advantages(self.advantages, self.active)

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
            action_masks=take(self.action_masks) if self.mask_dim else None,
            old_log_prob_parts=take(self.log_prob_parts) if self.parts_dim else None,
        )


def stack_obs(observations: Sequence[Any]) -> Any:
    """Stack single observations (arrays or dicts of arrays) into a batch."""
    if isinstance(observations[0], dict):
        return {k: np.stack([np.asarray(o[k]) for o in observations]) for k in observations[0]}
    return np.stack([np.asarray(o) for o in observations])


def copy_obs(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: np.array(v, copy=True) for k, v in obs.items()}
    return np.array(obs, copy=True)


def slice_obs(obs: Any, sl: slice) -> Any:
    """Rows ``sl`` of observations ``obs`` (an array or a dict of arrays).

    :param obs: an array or a dict of arrays, one row per sample
    :param sl: the rows to take
    """
    if isinstance(obs, dict):
        return {k: v[sl] for k, v in obs.items()}
    return obs[sl]
