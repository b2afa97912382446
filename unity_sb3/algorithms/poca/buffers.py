"""POCA's rollout buffer: transitions with their groupmates, targets, minibatches for the losses.

Layout: like SB3's ``RolloutBuffer``, arrays of shape ``(n_steps, n_envs, ...)``; row ``t`` of
slot ``i`` is the *transition* that starts from observation ``t``: ``active[t, i]`` says a real
agent acted from it (``False``: placeholder, excluded from every loss), ``group_keys[t, i]`` its
group, and ``rewards / group_rewards / dones / truncated[t, i]`` are what ``env.step`` returned
for that step.

Targets (TD(lambda) returns, posthumous credit): :mod:`unity_sb3.algorithms.poca.returns`.

Advantage = return - baseline, the baseline being b(own obs, groupmates' obs and actions).

Groupmates of a decision (in V and in the baseline) are the other *living* members of its group
at that step, deciding or not: a member between two decisions (decision periods out of phase)
takes part with the observation and action of its last decision, as ML-Agents' agent
processor keeps each groupmate's last status until it terminates. Its last decision may lie in
an earlier rollout: the buffer carries those across (:meth:`POCARolloutBuffer.waiting_mate_keys`).
A member whose episode ended leaves the group at its next step.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.preprocessing import get_action_dim, get_obs_shape

from unity_sb3.algorithms.advantages import normalize_active_advantages
from unity_sb3.algorithms.distributions import action_layout, flat_action_space, is_hybrid_space
from unity_sb3.algorithms.poca.group_steps import (
    BEFORE_ROLLOUT,
    group_mates,
    group_step_units,
    rows_in_batch,
    runs_cut_near,
    shared_values,
    unit_order,
)
from unity_sb3.algorithms.poca.returns import compute_poca_returns, transition_owners


class POCARolloutBufferSamples(NamedTuple):
    """One minibatch of active transitions with their groupmates at the same step.

    Shapes: B rows, M = largest number of groupmates in the minibatch (may be 0).
    """

    observations: th.Tensor | dict[str, th.Tensor]  # (B, *obs_shape)
    actions: th.Tensor  # (B, action_dim)
    old_values: th.Tensor  # (B,)
    old_baselines: th.Tensor  # (B,)
    old_log_prob: th.Tensor  # (B,)
    advantages: th.Tensor  # (B,)
    returns: th.Tensor  # (B,)
    action_masks: th.Tensor | None  # (B, sum of branches) True = allowed
    mate_observations: th.Tensor | dict[str, th.Tensor]  # (B, M, *obs_shape)
    mate_actions: th.Tensor  # (B, M, action_dim)
    mate_mask: th.Tensor  # (B, M) True = present
    shared_values: tuple[th.Tensor, th.Tensor] | None = None  # rows sharing V (group_steps.shared_values)
    # (B, M) the row in this minibatch holding each groupmate's observation and action (-1 = none);
    # None unless every present groupmate's is one of its rows
    mate_positions: th.Tensor | None = None


class POCARolloutBuffer(RolloutBuffer):
    """SB3 ``RolloutBuffer`` extended with what POCA needs: activity, groups, group rewards,
    truncation, terminal observations, baselines and action masks. Handles ``Box``, image and
    ``Dict`` observations.

    Use :meth:`add_step` while collecting and :meth:`finalize` after the rollout; then
    :meth:`get` yields :class:`POCARolloutBufferSamples` over active rows only.

    :param buffer_size: steps per rollout (``n_steps``).
    :param observation_space: one agent's observation space.
    :param action_space: one agent's action space.
    :param device: torch device.
    :param gae_lambda: lambda of TD(lambda).
    :param gamma: discount.
    :param n_envs: number of slots.
    :param share_rewards: add groupmates' individual rewards to each agent's reward.
    :param normalize_advantage: normalise advantages over the active rows of each update.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        gae_lambda: float = 1,
        gamma: float = 0.99,
        n_envs: int = 1,
        share_rewards: bool = True,
        normalize_advantage: bool = True,
    ):
        self.share_rewards = share_rewards
        self.normalize_advantage = normalize_advantage
        if is_hybrid_space(action_space):  # stored flat, (c + k,), with the branches' masks
            self.mask_dim = int(sum(action_layout(action_space)[1]))
            action_space = flat_action_space(action_space)
        else:
            self.mask_dim = (
                int(np.sum(action_space.nvec))
                if isinstance(action_space, spaces.MultiDiscrete)
                else int(action_space.n)
                if isinstance(action_space, spaces.Discrete)
                else 0
            )
        super().__init__(buffer_size, observation_space, action_space, device, gae_lambda, gamma, n_envs)

    def reset(self) -> None:
        n, m = self.buffer_size, self.n_envs
        if isinstance(self.observation_space, spaces.Dict):
            shapes = get_obs_shape(self.observation_space)
            self.observations = {  # type: ignore[assignment]
                key: np.zeros((n, m, *shape), dtype=self.observation_space[key].dtype)
                for key, shape in shapes.items()
            }
        else:
            self.observations = np.zeros((n, m, *self.obs_shape), dtype=self.observation_space.dtype)
        self.action_dim = get_action_dim(self.action_space)
        self.actions = np.zeros((n, m, self.action_dim), dtype=np.float32)
        for name in ("rewards", "returns", "episode_starts", "values", "log_probs", "advantages"):
            setattr(self, name, np.zeros((n, m), dtype=np.float32))
        self.group_rewards = np.zeros((n, m), dtype=np.float32)
        self.baselines = np.zeros((n, m), dtype=np.float32)
        self.team_rewards = np.zeros((n, m), dtype=np.float32)
        self.terminal_values = np.zeros((n, m), dtype=np.float32)
        self.dones = np.zeros((n, m), dtype=bool)
        self.truncated = np.zeros((n, m), dtype=bool)
        self.chunk_ends = np.zeros((n, m), dtype=bool)
        self.active = np.zeros((n, m), dtype=bool)
        self.group_keys = np.zeros((n, m), dtype=np.int64)
        self.action_masks = np.ones((n, m, self.mask_dim), dtype=bool)
        self.has_masks = False
        self.terminal_observations: dict[tuple[int, int], Any] = {}
        self.mates = np.full((n, m, 0), -1, dtype=np.int64)
        self.mate_rows = np.full((n, m, 0), -1, dtype=np.int64)
        self.units: np.ndarray | None = None  # group-step units (group_steps.py), set by finalize
        if not hasattr(self, "waiting_alive"):
            self.forget_waiting_mates()
        elif self._waiting_next is not None:  # the previous rollout's waiting agents join this one
            self.waiting_alive, self.waiting_keys, self.waiting_obs, self.waiting_actions = self._waiting_next
            self._waiting_next = None
        self.generator_ready = False
        self.pos = 0
        self.full = False

    def add(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("POCARolloutBuffer is filled with add_step(...), not add(...).")

    # ----------------------------------------------- groupmates waiting across rollouts

    def forget_waiting_mates(self) -> None:
        """Forget the agents carried over from the previous rollout (call after an env reset).

        An agent alive but not deciding when a rollout ends is a groupmate of the next rollout's
        decisions with the observation and action of its last decision, kept here:
        ``waiting_alive`` (n_envs,) bool, ``waiting_keys`` (n_envs,) group codes,
        ``waiting_obs`` (n_envs, *obs_shape) or a dict, ``waiting_actions`` (n_envs, action_dim).
        """
        m = self.n_envs
        if isinstance(self.observation_space, spaces.Dict):
            self.waiting_obs: np.ndarray | dict[str, np.ndarray] = {
                key: np.zeros((m, *shape), dtype=self.observation_space[key].dtype)
                for key, shape in get_obs_shape(self.observation_space).items()
            }
        else:
            self.waiting_obs = np.zeros((m, *self.obs_shape), dtype=self.observation_space.dtype)
        self.waiting_actions = np.zeros((m, get_action_dim(self.action_space)), dtype=np.float32)
        self.waiting_keys = np.zeros(m, dtype=np.int64)
        self.waiting_alive = np.zeros(m, dtype=bool)
        self._waiting_next: tuple[np.ndarray, np.ndarray, Any, np.ndarray] | None = None

    def waiting_mate_keys(self) -> np.ndarray:
        """Group codes of the agents carried over from the previous rollout (codes still in use)."""
        return self.waiting_keys[self.waiting_alive]

    def _carry_waiting_mates(self, last_rows: np.ndarray, last_active: np.ndarray) -> None:
        """Keep, for the next rollout (taken up by :meth:`reset`), the last decision of every
        agent alive but not deciding now; this rollout's samples still use the carried-in ones."""
        n = self.buffer_size
        alive = (last_rows[n - 1] != -1) & ~self.dones[n - 1] & ~last_active
        keys, actions = self.waiting_keys.copy(), self.waiting_actions.copy()
        if isinstance(self.waiting_obs, dict):
            obs: Any = {key: value.copy() for key, value in self.waiting_obs.items()}
        else:
            obs = self.waiting_obs.copy()
        for j in np.flatnonzero(alive & (last_rows[n - 1] >= 0)):  # BEFORE_ROLLOUT ones stay as they were
            row = last_rows[n - 1, j]
            if isinstance(obs, dict):
                for key, value in self.observations.items():  # type: ignore[union-attr]
                    obs[key][j] = value[row, j]
            else:
                obs[j] = self.observations[row, j]  # type: ignore[index]
            actions[j] = self.actions[row, j]
            keys[j] = self.group_keys[row, j]
        self._waiting_next = (alive, keys, obs, actions)

    def add_step(
        self,
        obs: np.ndarray | dict[str, np.ndarray],
        actions: np.ndarray,
        log_probs: np.ndarray,
        rewards: np.ndarray,
        group_rewards: np.ndarray,
        dones: np.ndarray,
        truncated: np.ndarray,
        active: np.ndarray,
        group_keys: np.ndarray,
        episode_starts: np.ndarray | None = None,
        action_masks: np.ndarray | None = None,
        terminal_observations: dict[int, Any] | None = None,
        chunk_ends: np.ndarray | None = None,
    ) -> None:
        """Store one step of all slots (see the module docstring for the row convention).

        :param obs: observations the actions were taken from, (n_envs, *obs_shape) or a dict.
        :param actions: (n_envs, *action_shape) as sampled (unclipped).
        :param log_probs: (n_envs,).
        :param rewards: (n_envs,) individual rewards from ``env.step``.
        :param group_rewards: (n_envs,) group rewards from ``env.step``.
        :param dones: (n_envs,) bool.
        :param truncated: (n_envs,) bool, ``TimeLimit.truncated``.
        :param active: (n_envs,) bool, a real agent acted from ``obs``.
        :param group_keys: (n_envs,) int group codes of the agents at ``obs``.
        :param episode_starts: (n_envs,) for SB3 compatibility.
        :param action_masks: (n_envs, sum of branches) True = allowed, or None.
        :param terminal_observations: slot -> terminal observation, for slots done this step.
        :param chunk_ends: (n_envs,) bool, the decision ends a ``time_horizon`` trajectory (None: none does).
        """
        pos = self.pos
        if isinstance(self.observations, dict):
            for key in self.observations:
                self.observations[key][pos] = np.asarray(obs[key]).reshape(self.observations[key][pos].shape)  # type: ignore[index]
        else:
            self.observations[pos] = np.asarray(obs).reshape(self.observations[pos].shape)
        self.actions[pos] = np.asarray(actions, dtype=np.float32).reshape((self.n_envs, self.action_dim))
        self.log_probs[pos] = np.asarray(log_probs).reshape(self.n_envs)
        self.rewards[pos] = rewards
        self.group_rewards[pos] = group_rewards
        self.dones[pos] = dones
        self.truncated[pos] = np.asarray(truncated, dtype=bool) & np.asarray(dones, dtype=bool)
        self.active[pos] = active
        self.group_keys[pos] = group_keys
        self.chunk_ends[pos] = False if chunk_ends is None else chunk_ends
        if episode_starts is not None:
            self.episode_starts[pos] = episode_starts
        if action_masks is not None and self.mask_dim:
            self.action_masks[pos] = np.asarray(action_masks, dtype=bool).reshape(self.n_envs, self.mask_dim)
            self.has_masks = True
        for slot, terminal in (terminal_observations or {}).items():
            self.terminal_observations[(pos, int(slot))] = terminal
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True

    # ---------------------------------------------------------------- targets

    def _obs_at(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray | dict[str, np.ndarray]:
        if isinstance(self.observations, dict):
            return {key: value[rows, cols] for key, value in self.observations.items()}
        return self.observations[rows, cols]

    def _to_group_obs(self, obs_list: list[Any], index: np.ndarray) -> Any:
        """Gather ``obs_list[index]`` (index (B, N), -1 = padding -> zeros) into (B, N, *shape) arrays."""
        safe = np.maximum(index, 0)
        if isinstance(self.observations, dict):
            return {
                key: self.to_torch(np.stack([np.asarray(o[key]) for o in obs_list])[safe])
                for key in self.observations
            }
        return self.to_torch(np.stack([np.asarray(o) for o in obs_list])[safe])

    @th.no_grad()
    def finalize(
        self,
        policy: Any,
        last_obs: np.ndarray | dict[str, np.ndarray],
        last_active: np.ndarray,
        last_group_keys: np.ndarray,
        batch_size: int = 1024,
    ) -> None:
        """Compute values, baselines, returns and advantages with the current ``policy``.

        :param policy: a :class:`~unity_sb3.algorithms.poca.policies.POCAPolicy`.
        :param last_obs: observations after the rollout, (n_envs, *obs_shape) or a dict.
        :param last_active: (n_envs,) bool.
        :param last_group_keys: (n_envs,) int.
        :param batch_size: rows per critic forward pass.
        """
        n = self.buffer_size
        last_rows = transition_owners(self.active, self.dones, self.waiting_alive)
        self.mates, self.mate_rows = group_mates(self.active, self.group_keys, last_rows, self.waiting_keys)
        self._compute_values_and_baselines(policy, batch_size)

        # V of each truncated group's terminal observations (falls back to the decision's V).
        owner = transition_owners(self.active, self.dones)
        for t in range(n):
            ended = np.flatnonzero(self.truncated[t] & (owner[t] >= 0))
            if ended.size == 0:
                continue
            keys = self.group_keys[owner[t, ended], ended]
            all_ended = np.flatnonzero(self.dones[t] & (owner[t] >= 0))
            all_keys = self.group_keys[owner[t, all_ended], all_ended]
            for key in np.unique(keys):
                members = all_ended[all_keys == key]
                obs_list = [self.terminal_observations.get((t, int(j))) for j in members]
                present = [o for o in obs_list if o is not None]
                if not present:
                    value = self.values[owner[t, members[0]], members[0]]
                else:
                    group_obs = self._to_group_obs(present, np.arange(len(present))[None, :])
                    mask = th.ones((1, len(present)), dtype=th.bool, device=self.device)
                    value = self._ended_group_values(policy, group_obs, mask, owner[t, members], members)
                self.terminal_values[t, members] = value

        last_active = np.asarray(last_active, dtype=bool)
        last_values = self._last_group_values(policy, last_obs, last_active, last_group_keys, last_rows)
        self._carry_waiting_mates(last_rows, last_active)

        self.returns, self.team_rewards = compute_poca_returns(
            self.rewards,
            self.group_rewards,
            self.dones,
            self.truncated,
            self.active,
            self.group_keys,
            self.values,
            self.terminal_values,
            last_values,
            last_active,
            np.asarray(last_group_keys),
            self.gamma,
            self.gae_lambda,
            self.share_rewards,
            self.chunk_ends,
        )
        self.advantages = np.where(self.active, self.returns - self.baselines, 0.0).astype(np.float32)
        if self.normalize_advantage:
            normalize_active_advantages(self.advantages, self.active)

    def _last_group_values(
        self,
        policy: Any,
        last_obs: np.ndarray | dict[str, np.ndarray],
        last_active: np.ndarray,
        last_group_keys: np.ndarray,
        last_rows: np.ndarray,
    ) -> np.ndarray:
        """(n_envs,) V of each deciding slot's group at the observation after the rollout.

        The group's members there: the slots deciding then, and the agents alive but between
        decisions with their last decision's observation.
        """
        m, n = self.n_envs, self.buffer_size
        last_values = np.zeros(m, dtype=np.float32)
        if not last_active.any():
            return last_values
        if isinstance(last_obs, dict):
            obs_list: list[Any] = [{key: value[i] for key, value in last_obs.items()} for i in range(m)]
        else:
            obs_list = list(np.asarray(last_obs))
        rows = np.where(last_active, -1, last_rows[n - 1])
        waiting = np.flatnonzero((rows != -1) & ~self.dones[n - 1])
        keys = np.asarray(last_group_keys, dtype=np.int64).copy()
        for j in waiting:  # their last decision's observation, appended after the m current ones
            row = rows[j]
            if row == BEFORE_ROLLOUT:
                keys[j] = self.waiting_keys[j]
                source: Any = self.waiting_obs
                index: Any = j
            else:
                keys[j] = self.group_keys[row, j]
                source, index = self.observations, (row, j)
            if isinstance(source, dict):
                obs_list.append({key: value[index] for key, value in source.items()})
            else:
                obs_list.append(source[index])
        present = last_active.copy()
        present[waiting] = True
        position = np.arange(m)
        position[waiting] = m + np.arange(waiting.size)
        members = [
            [i] + [int(position[j]) for j in np.flatnonzero(present & (keys == keys[i])) if j != i]
            for i in np.flatnonzero(last_active)
        ]
        width = max(len(row) for row in members)
        index_array = np.full((len(members), width), -1, dtype=np.int64)
        for r, row in enumerate(members):
            index_array[r, : len(row)] = row
        group_obs = self._to_group_obs(obs_list, index_array)
        mask = th.as_tensor(index_array >= 0, device=self.device)
        last_values[last_active] = self._next_group_values(
            policy, group_obs, mask, np.flatnonzero(last_active)
        )
        return last_values

    # ------------------------------------------------ critic passes (a memory variant's hooks)

    def _compute_values_and_baselines(self, policy: Any, batch_size: int) -> None:
        """Fill ``values`` and ``baselines`` at the active rows, about ``batch_size`` rows per critic
        pass (V once per group-step unit). A pass ends with a whole step, so that it holds every row's
        groupmates that decide with it and the critic projects each agent once."""
        m = self.n_envs
        self.units = group_step_units(self.mates, self.mate_rows, self.active)
        rows, cols = np.nonzero(self.active)  # in step order
        for part in np.split(np.arange(rows.size), runs_cut_near(rows, batch_size)):
            r, c = rows[part], cols[part]
            sample = self._gather(r * m + c)
            values, baselines = policy.predict_values_and_baselines(
                sample.observations,
                sample.mate_observations,
                sample.mate_actions,
                sample.mate_mask,
                sample.shared_values,
                sample.actions,
                sample.mate_positions,
            )
            self.values[r, c], self.baselines[r, c] = values.cpu().numpy(), baselines.cpu().numpy()

    def _ended_group_values(
        self, policy: Any, group_obs: Any, mask: th.Tensor, rows: np.ndarray, members: np.ndarray
    ) -> Any:
        """V of one ended group's terminal observations (batch 1), for its ``members``, whose last
        decisions were at ``rows``: one value for all of them."""
        return policy.predict_group_values(group_obs, mask).item()

    def _next_group_values(
        self, policy: Any, group_obs: Any, mask: th.Tensor, slots: np.ndarray
    ) -> np.ndarray:
        """V of the groups of the slots deciding at the observation after the rollout (one row each)."""
        return policy.predict_group_values(group_obs, mask).cpu().numpy()

    # --------------------------------------------------------------- sampling

    def _gather(self, flat: np.ndarray) -> POCARolloutBufferSamples:
        """Minibatch of rows given as flat indices ``t * n_envs + i``."""
        m = self.n_envs
        t, i = np.divmod(flat, m)
        shared = None if self.units is None else shared_values(self.units[t, i])
        # every array handed over below is a new one (fancy indexing copies), so no second copy
        fresh = partial(self.to_torch, copy=False)
        mates = self.mates[t, i]
        width = int((mates >= 0).sum(axis=1).max()) if mates.size else 0
        mates = mates[:, :width]
        present = mates >= 0
        mate_cols = np.maximum(mates, 0)
        source_rows = self.mate_rows[t, i][:, :width]
        mate_rows = np.maximum(source_rows, 0)
        before = present & (source_rows == BEFORE_ROLLOUT)  # carried from the previous rollout

        def mates_of(value: np.ndarray, waiting: np.ndarray) -> np.ndarray:
            gathered = value[mate_rows, mate_cols]
            if before.any():
                gathered[before] = waiting[mate_cols[before]]
            return gathered

        if isinstance(self.observations, dict):
            obs: Any = {key: fresh(value[t, i]) for key, value in self.observations.items()}
            mate_obs: Any = {
                key: fresh(mates_of(value, self.waiting_obs[key]))  # type: ignore[index]
                for key, value in self.observations.items()
            }
        else:
            obs = fresh(self.observations[t, i])
            mate_obs = fresh(mates_of(self.observations, self.waiting_obs))  # type: ignore[arg-type]
        positions = None
        if shared is not None and width > 0 and not before.any():
            positions = rows_in_batch(flat, mate_rows * m + mate_cols, present)
        return POCARolloutBufferSamples(
            observations=obs,
            actions=fresh(self.actions[t, i]),
            old_values=fresh(self.values[t, i]),
            old_baselines=fresh(self.baselines[t, i]),
            old_log_prob=fresh(self.log_probs[t, i]),
            advantages=fresh(self.advantages[t, i]),
            returns=fresh(self.returns[t, i]),
            action_masks=fresh(self.action_masks[t, i]) if self.has_masks else None,
            mate_observations=mate_obs,
            mate_actions=fresh(mates_of(self.actions, self.waiting_actions)),
            mate_mask=fresh(present),
            shared_values=None if shared is None else (fresh(shared[0]), fresh(shared[1])),
            mate_positions=None if positions is None else fresh(positions),
        )

    def get(self, batch_size: int | None = None) -> Generator[POCARolloutBufferSamples, None, None]:  # type: ignore[override]
        """Shuffled minibatches over the *active* rows only (inactive rows never enter a loss); the
        rows of a group-step unit (group_steps.py) stay in one minibatch, which then computes their V once."""
        assert self.full, "the rollout buffer is not full yet"
        rows, cols = np.nonzero(self.active)
        units = None if self.units is None else self.units[rows, cols]
        batch_size = max(rows.size, 1) if batch_size is None else batch_size
        if units is None or units.size == 0 or units.max() + 1 == units.size:  # no V to share
            flat = np.random.permutation(rows * self.n_envs + cols)
            batches = [flat[start : start + batch_size] for start in range(0, flat.size, batch_size)]
        else:
            batches = [rows[k] * self.n_envs + cols[k] for k in unit_order(units, batch_size)]
        for batch in batches:
            yield self._gather(batch)
