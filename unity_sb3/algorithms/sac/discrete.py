"""SAC's losses and data collection for discrete and hybrid actions, as ML-Agents' SAC computes them.

With ``k`` branches of sizes ``n_i``, ``c`` continuous actions and ``H`` reward-signal heads:

- **Entropy coefficients**: one per branch and one for the continuous part (ML-Agents'
  ``LogEntCoef``), learned towards their own targets: ``discrete_target_entropy_scale * log(n_i)``
  per branch (ML-Agents' 0.2, "roughly e-greedy 0.05") and ``-c`` for the continuous part.
- **Critic**: ``Q(s, a)`` is the mean over branches of the chosen action's Q (:func:`condense`).
  The soft target is ``r + gamma * (1 - done) * V(s')`` with
  ``V(s') = E_pi[Q'(s', a')] - sum_i alpha_i H_i(pi(.|s')) + alpha_c log pi_c(a'_c|s')`` (the
  entropy term on the entropy head only); the expectation over each branch is exact
  (``sum_a pi(a) Q(a)``, averaged over branches), with the next state's masks. ML-Agents bootstraps
  from a separate value network ``V(s')`` trained towards the same quantity; here the target Q
  networks give it directly (SB3's SAC), so saved models keep SB3's layout.
- **Actor**: minimises ``sum_i alpha_i sum_a pi log pi + alpha_c log pi_c - w sum_i E_pi_i[Q_1]``
  (the continuous action reparameterised), with the current state's masks: ML-Agents'
  ``sac_policy_loss``, which takes the first critic's Q (not the smaller of the two), sums each
  branch's expectation over the branches and, with hybrid actions, counts that sum once for the
  discrete heads and once more for the continuous action (``w = 2``; ``w = 1`` without a continuous
  part). See :func:`actor_q_term`.

``H`` heads, their gammas and which ones stop at episode ends come from the reward signals as in
the continuous SAC (:mod:`unity_sb3.algorithms.sac.sac`); without signals ``H = 1``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.utils import polyak_update
from torch.nn import functional as F

from unity_sb3.algorithms.distributions import action_layout, hybrid_env_actions
from unity_sb3.algorithms.mixin import log_stats
from unity_sb3.algorithms.sac.policies import expected_over_branches
from unity_sb3.algorithms.sac.recurrent import plain_observations

#: ML-Agents' ``discrete_target_entropy_scale`` (not exposed in its settings either)
DISCRETE_TARGET_ENTROPY_SCALE = 0.2


def target_entropies(
    branches: list[int], continuous_size: int, scale: float, continuous_target: float | None = None
) -> list[float]:
    """Target entropy per coefficient: ``scale * log(n_i)`` per branch, then ``-c`` (or ``continuous_target``) when hybrid."""
    targets = [float(scale * np.log(n)) for n in branches]
    if continuous_size:
        targets.append(float(-continuous_size if continuous_target is None else continuous_target))
    return targets


def entropy_terms(distribution: Any, continuous_log_prob: th.Tensor | None) -> th.Tensor:
    """``(B, k [+ 1])``: ``sum_a pi log pi`` per branch, then ``log pi_c`` when hybrid (each ``-entropy``)."""
    terms = distribution.neg_entropies()
    if continuous_log_prob is not None:
        terms = th.cat([terms, continuous_log_prob.reshape(-1, 1)], dim=1)
    return terms


def sample_continuous(distribution: Any) -> tuple[th.Tensor | None, th.Tensor | None]:
    """A reparameterised continuous action ``(B, c)`` and its log-probability ``(B,)`` (None, None when not hybrid)."""
    if distribution.gaussian is None:
        return None, None
    action = distribution.gaussian.sample()
    return action, distribution.gaussian.log_prob(action)


def actor_q_term(probs: list[th.Tensor], q_values: th.Tensor, branches: list[int], hybrid: bool) -> th.Tensor:
    """``(B,)``: the Q term of ML-Agents' SAC actor loss (``sac_policy_loss``) for branched actions.

    Each branch's ``sum_a pi(a) Q(a)``, summed over the branches; with hybrid actions ML-Agents
    subtracts that sum once in the discrete heads' loss and once more in the continuous action's, so
    it counts twice. Measured on Unity's ``test_hybrid_sac`` with 2 continuous actions and 2 branches:
    10 of 12 seeds pass with it, 7 of 12 with the mean over branches of the smaller critic's Q
    (RESULTS.md).

    :param probs: one ``(B, n_i)`` tensor of action probabilities per branch.
    :param q_values: ``(B, sum(branches))``: one critic's Q of every discrete action, heads summed.
    :param branches: the branch sizes.
    :param hybrid: whether the actions have a continuous part.
    """
    total = expected_over_branches(probs, q_values, branches) * len(branches)
    return 2.0 * total if hybrid else total


class BranchedTrainingMixin:
    """The discrete/hybrid half of the project's SAC: data collection with masks and the training step.

    Used by :class:`unity_sb3.algorithms.sac.sac.SAC` when the action space is not a ``Box``.
    """

    def _setup_branched_entropy(self) -> None:
        """One entropy coefficient per branch (and one for the continuous part), learned or fixed."""
        c, branches = action_layout(self.action_space)
        self._branches, self._continuous_size = branches, c
        target = self.target_entropy
        if isinstance(target, (list, tuple)):  # a reloaded model: the targets it trained with
            targets = [float(t) for t in target]
        else:
            continuous_target = None if target == "auto" else float(target)
            targets = target_entropies(branches, c, self.discrete_target_entropy_scale, continuous_target)
        self.target_entropy = targets
        self._target_entropy_tensor = th.tensor(targets, device=self.device)
        size = len(targets)
        if isinstance(self.ent_coef, str) and self.ent_coef.startswith("auto"):
            init_value = float(self.ent_coef.split("_")[1]) if "_" in self.ent_coef else 1.0
            if init_value <= 0.0:
                raise ValueError(f"the initial value of ent_coef must be > 0, got {self.ent_coef!r}")
            self.log_ent_coef = th.log(th.full((size,), init_value, device=self.device)).requires_grad_(True)
            self.ent_coef_optimizer = th.optim.Adam([self.log_ent_coef], lr=self.lr_schedule(1))
        else:
            self.ent_coef_tensor = th.full((size,), float(self.ent_coef), device=self.device)

    # ------------------------------------------------------------------ collecting
    def _env_masks(self) -> np.ndarray | None:
        """``(n_envs, sum(branches))`` masks of the env's current observations (True = allowed), or None
        (the reader is looked up once per ``learn``, in ``_setup_learn``)."""
        return None if self._read_masks is None else self._read_masks()

    def _random_actions(self, masks: np.ndarray | None, n_envs: int) -> np.ndarray:
        """Warm-up actions in the buffer's layout: uniform over each branch's allowed actions."""
        columns = []
        if self._continuous_size:
            columns.append(np.random.uniform(-1.0, 1.0, (n_envs, self._continuous_size)))
        offset = 0
        for n in self._branches:
            allowed = np.ones((n_envs, n), bool) if masks is None else masks[:, offset : offset + n].copy()
            allowed[~allowed.any(axis=1)] = True
            scores = np.random.random((n_envs, n)) * allowed
            columns.append(scores.argmax(axis=1).reshape(-1, 1))
            offset += n
        actions = np.concatenate(columns, axis=1)
        return actions.astype(np.float32 if self._continuous_size else np.int64)

    def _sample_branched_action(self, learning_starts: int, n_envs: int) -> tuple[Any, np.ndarray]:
        """``(env actions, buffer actions)`` under the current masks: uniform while warming up, else the policy's."""
        masks = self._next_masks if self._next_masks is not None else self._env_masks()
        self._last_masks, self._next_masks = masks, None
        warming_up = self.num_timesteps < learning_starts
        if not warming_up or self._recurrent:  # with memory the memory advances during warm-up too
            buffer_actions = self._acting_actions(masks)
        if warming_up:
            buffer_actions = self._random_actions(masks, n_envs)
        if self._continuous_size:  # a Unity env takes ((n, c), (n, k)), SB3's VecEnvs one tuple per env
            return hybrid_env_actions(buffer_actions, self.action_space, self.env), buffer_actions
        return self.policy.to_env_actions(buffer_actions), buffer_actions

    def _record_masks(self, replay_buffer: ReplayBuffer, dones: np.ndarray) -> None:
        """Hand the buffer the masks of the step just taken: those acted under, and those of the new observations."""
        self._next_masks = self._env_masks()  # the next step acts under them
        stored_next = None
        if self._next_masks is not None:
            stored_next = self._next_masks.copy()
            stored_next[np.asarray(dones, dtype=bool)] = True  # a terminal observation's mask is unknown
        replay_buffer.set_masks(self._last_masks, stored_next)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ training
    def _branched_rewards(self, data: Any) -> th.Tensor:
        """``(B, H)`` rewards: the reward signals' heads, or the env reward alone."""
        if self.signals is None:
            return data.rewards.reshape(-1, 1)
        return self._head_rewards(data)

    def _branched_head_settings(self) -> tuple[th.Tensor, th.Tensor, int]:
        """Per-head gammas ``(H,)``, per-head "episode ends stop bootstrapping" ``(H,)`` and the entropy head."""
        if self.signals is None:
            one = th.ones(1, device=self.device)
            return one * self.gamma, one, 0
        return self._gammas, self._episodic, self._entropy_head

    def _train_branched(self, gradient_steps: int, batch_size: int) -> None:
        """SAC's update for discrete and hybrid actions (see the module docstring)."""
        self.policy.set_training_mode(True)
        optimizers = [self.actor.optimizer, self.critic.optimizer]
        if self.ent_coef_optimizer is not None:
            optimizers.append(self.ent_coef_optimizer)
        self._update_learning_rate(optimizers)
        gammas, episodic, entropy_head = self._branched_head_settings()
        stats: dict[str, list[float]] = defaultdict(list)
        reward_means: dict[str, list[float]] = defaultdict(list)
        signal_stats: dict[str, dict[str, list[float]]] = {n: defaultdict(list) for n in (self.signals or {})}
        branches = self._branches

        for gradient_step in range(gradient_steps):
            data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            dist = self.actor.distribution(data.observations, data.action_masks)
            continuous, continuous_log_prob = sample_continuous(dist)
            terms = entropy_terms(dist, continuous_log_prob)  # (B, k [+1])

            if self.ent_coef_optimizer is not None and self.log_ent_coef is not None:
                ent_coef = th.exp(self.log_ent_coef.detach())
                gap = (terms + self._target_entropy_tensor).detach().mean(dim=0)
                ent_coef_loss = -(self.log_ent_coef * gap).sum()
                self.ent_coef_optimizer.zero_grad()
                ent_coef_loss.backward()
                self.ent_coef_optimizer.step()
                stats["ent_coef_loss"].append(ent_coef_loss.item())
            else:
                ent_coef = self.ent_coef_tensor
            stats["ent_coef"].append(ent_coef.mean().item())
            stats["entropy"].append(-terms[:, : len(branches)].sum(dim=1).mean().item())

            rewards = self._branched_rewards(data)  # (B, H)
            for k, name in enumerate(self._heads or ["extrinsic"]):
                reward_means[name].append(rewards[:, k].mean().item())
            with th.no_grad():
                next_dist = self.actor.distribution(data.next_observations, data.next_action_masks)
                next_continuous, next_log_prob = sample_continuous(next_dist)
                next_v = th.stack(
                    [
                        expected_over_branches(next_dist.probs, q, branches)
                        for q in self.critic_target.q_values(data.next_observations, next_continuous)
                    ]
                )  # (critics, B, H)
                pick = next_v.sum(dim=2).argmin(dim=0)  # per sample: the pessimistic critic
                next_v = next_v[pick, th.arange(next_v.shape[1], device=self.device)]
                next_v[:, entropy_head] -= (entropy_terms(next_dist, next_log_prob) * ent_coef).sum(dim=1)
                not_done = 1.0 - data.dones.reshape(-1, 1) * episodic.reshape(1, -1)
                target_q = rewards + not_done * gammas.reshape(1, -1) * next_v

            current_q = self.critic(data.observations, data.actions)
            critic_loss = 0.5 * sum(F.mse_loss(q, target_q) for q in current_q)
            stats["critic_loss"].append(critic_loss.item())
            self.critic.optimizer.zero_grad()
            critic_loss.backward()
            self.critic.optimizer.step()

            (q_pi,) = self.critic.q_values(data.observations, continuous, n_critics=1)
            q_term = actor_q_term(dist.probs, q_pi.sum(dim=1), branches, bool(self._continuous_size))
            actor_loss = ((terms * ent_coef).sum(dim=1) - q_term).mean()
            stats["actor_loss"].append(actor_loss.item())
            self.actor.optimizer.zero_grad()
            actor_loss.backward()
            self.actor.optimizer.step()

            for name, signal in (self.signals or {}).items():
                batch = signal.batch(
                    plain_observations(data.observations),
                    data.actions,
                    plain_observations(data.next_observations),
                    data.dones,
                )
                for key, value in signal.update(batch).items():
                    signal_stats[name][key].append(float(value))
            self._update_bc()

            if gradient_step % self.target_update_interval == 0:
                polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)

        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        log_stats(self.logger, "train", stats)
        if self.signals is not None:
            for name in self._heads:
                log_stats(self.logger, f"reward_signals/{name}", {"reward": reward_means[name]})
            for name, values in signal_stats.items():
                log_stats(self.logger, f"reward_signals/{name}", values)
