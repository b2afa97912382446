"""SAC with ML-Agents reward signals (extrinsic, curiosity, RND, GAIL) and a behavioral-cloning hook.

``unity_sb3.SAC`` is SB3's SAC plus ``reward_signals`` and ``behavioral_cloning``. With both
``None`` it is SB3's SAC unchanged.

With ``reward_signals`` (ML-Agents' SAC keeps one Q stream per signal; so does this):

- **One Q output per signal** in each critic (and its target), in config order.
- **Rewards on sampled batches.** The replay buffer stores the environment reward only. At each
  gradient step the sampled batch gets ``strength * r`` per head: the stored reward for
  ``extrinsic``, each intrinsic signal's reward computed *now* with its current networks from
  ``(obs, action, next_obs)`` (SB3 stores the terminal observation as ``next_obs`` at episode
  ends). Without an ``extrinsic`` entry the environment reward is not used for learning.
- **Targets per head** with the head's own ``gamma``: ``r_k + gamma_k * (1 - done_k) * Q'_k``,
  where ``done_k`` is SB3's done (time-limit truncations already removed) except for curiosity,
  RND and GAIL, which never stop bootstrapping (ML-Agents' ``ignore_done``; for GAIL see
  :data:`BOOTSTRAP_THROUGH_ENDS`). The entropy bonus
  ``-alpha * log pi`` is added once, to the extrinsic head (the first head without extrinsic).
- **Clipped double Q on the total.** The target uses, per sample, the target critic whose *sum*
  over heads is smallest; the actor maximises the smallest (over critics) sum over heads.
- Each signal takes one update on the same sampled batch after each gradient step; mean
  rewards and losses are logged under ``reward_signals/<name>/``.
- Placeholder steps of inactive ``UnityVecEnv`` slots (``infos[i]["active"] == False``) are
  *not* filtered: SB3's replay buffer stores every slot each step. Use SAC with scenes where each
  agent decides every step (DecisionRequester period 1), or PPO, which excludes them. With memory
  (``"MlpLstmPolicy"``, :mod:`unity_sb3.algorithms.sac.recurrent`) an inactive slot's memory does not advance.
- n-step replay (``n_steps > 1``) is not supported together with ``reward_signals``.

``behavioral_cloning``: the BC module's ``update()`` runs after each gradient step (see
:func:`unity_sb3.algorithms.mixin.make_bc_module`); for discrete actions its loss is the
cross-entropy of the demo actions, as ML-Agents'.

**Action spaces.** A ``Box`` takes SB3's SAC path unchanged (so models saved before load as they
were). ``Discrete``, ``MultiDiscrete`` and hybrid ``Tuple(Box, MultiDiscrete)`` (a hybrid Unity
behavior with ``UnityVecEnv(..., hybrid="tuple")``) take ML-Agents' discrete SAC: a Q value per
discrete action, one entropy coefficient per branch with its own target entropy, action masks
from the env (``env_method("action_masks")``, sb3-contrib's convention) applied when acting, in
the targets and in the actor and entropy terms (:mod:`unity_sb3.algorithms.sac.discrete`,
:mod:`unity_sb3.algorithms.sac.policies`). ``"MlpPolicy"``, ``"CnnPolicy"`` and
``"MultiInputPolicy"`` name the discrete policies there.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import SAC as SB3SAC
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.utils import polyak_update
from stable_baselines3.sac.policies import CnnPolicy, MlpPolicy, MultiInputPolicy, SACPolicy
from torch import nn
from torch.nn import functional as F

from unity_sb3.algorithms.action_masks import MaskReader, mask_reader
from unity_sb3.algorithms.mixin import SignalsAndBCMixin, log_stats
from unity_sb3.algorithms.optimizers import with_foreach_adam
from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError
from unity_sb3.algorithms.sac.buffers import (
    MaskedDictReplayBuffer,
    MaskedReplayBuffer,
    MaskedSequenceDictReplayBuffer,
    MaskedSequenceReplayBuffer,
    SequenceDictReplayBuffer,
    SequenceReplayBuffer,
)
from unity_sb3.algorithms.sac.discrete import DISCRETE_TARGET_ENTROPY_SCALE, BranchedTrainingMixin
from unity_sb3.algorithms.sac.policies import (
    BranchedCnnPolicy,
    BranchedMultiInputPolicy,
    BranchedSACPolicy,
)
from unity_sb3.algorithms.sac.recurrent import (
    DEFAULT_MEMORY_SIZE,
    DEFAULT_SEQUENCE_LENGTH,
    RecurrentBranchedCnnPolicy,
    RecurrentBranchedMultiInputPolicy,
    RecurrentBranchedSACPolicy,
    RecurrentCnnPolicy,
    RecurrentMultiInputPolicy,
    RecurrentPolicyMixin,
    RecurrentSACPolicy,
    plain_observations,
)

#: SB3's SAC policies (what "MlpPolicy" etc. name) -> their discrete/hybrid counterparts
BRANCHED_POLICIES: dict[type, type] = {
    SACPolicy: BranchedSACPolicy,
    CnnPolicy: BranchedCnnPolicy,
    MultiInputPolicy: BranchedMultiInputPolicy,
    RecurrentSACPolicy: RecurrentBranchedSACPolicy,
    RecurrentCnnPolicy: RecurrentBranchedCnnPolicy,
    RecurrentMultiInputPolicy: RecurrentBranchedMultiInputPolicy,
}
SUPPORTED_ACTION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.Tuple)
#: Signals whose Q head bootstraps through episode ends in SAC, besides those with ``ignore_done``.
#: GAIL's reward ``-log(1 - D)`` is never negative, so a head that stops at episode ends pays the
#: agent for long episodes (the absorbing-state bias of Kostrikov et al., 2019): on Unity's GAIL
#: test the actor learned to put off the goal the demo walks to. ML-Agents' earlier torch GAIL
#: (``trainers/torch/components/reward_providers``) had ``ignore_done = True``; PPO keeps the signal's own.
BOOTSTRAP_THROUGH_ENDS = ("gail",)


def widen_q_networks(critic: Any, n_heads: int) -> None:
    """Repeat each Q network's outputs for ``n_heads`` heads (in place): an SB3 ``ContinuousCritic``
    gets ``n_heads`` outputs, a discrete critic ``n_heads * sum(branches)``."""
    for q_net in critic.q_networks:
        last = q_net[-1]
        if not isinstance(last, nn.Linear):
            raise RewardSignalConfigError(
                f"reward_signals need Q networks ending in a Linear layer, got {type(last).__name__}."
            )
        q_net[-1] = nn.Linear(last.in_features, n_heads * last.out_features).to(last.weight.device)


class _OpenActionSpaces(OffPolicyAlgorithm):
    """Sits between SB3's SAC and ``OffPolicyAlgorithm`` in the MRO: SB3's SAC declares ``Box``
    as its only action space; the project's SAC takes discrete and hybrid ones too."""

    def __init__(self, *args: Any, supported_action_spaces: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, supported_action_spaces=SUPPORTED_ACTION_SPACES, **kwargs)


class SAC(BranchedTrainingMixin, SignalsAndBCMixin, SB3SAC, _OpenActionSpaces):
    """SB3's SAC with ML-Agents reward signals, a BC hook and discrete/hybrid actions (see the module docstring).

    Takes every argument of :class:`stable_baselines3.SAC`, plus:

    :param reward_signals: ML-Agents style ``reward_signals`` dict, or ``None`` for plain SB3 SAC.
        A signal's ``gamma`` defaults to this algorithm's ``gamma``.
    :param behavioral_cloning: ML-Agents style BC settings, or ``None``.
    :param discrete_target_entropy_scale: discrete actions only: each branch's target entropy is
        this times ``log(branch size)`` (ML-Agents' 0.2). ``target_entropy`` (``"auto"``: ``-c``)
        is the continuous part's.

    ``"MlpLstmPolicy"``, ``"CnnLstmPolicy"`` and ``"MultiInputLstmPolicy"`` give the actor and
    the Q networks memory (:mod:`unity_sb3.algorithms.sac.recurrent`); ``policy_kwargs`` then
    take ML-Agents' ``memory_size`` and ``sequence_length``.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
        "MlpLstmPolicy": RecurrentSACPolicy,
        "CnnLstmPolicy": RecurrentCnnPolicy,
        "MultiInputLstmPolicy": RecurrentMultiInputPolicy,
    }

    def __init__(
        self,
        policy: str | type,
        env: Any,
        *args: Any,
        reward_signals: dict | None = None,
        behavioral_cloning: dict | None = None,
        discrete_target_entropy_scale: float = DISCRETE_TARGET_ENTROPY_SCALE,
        **kwargs: Any,
    ) -> None:
        self._init_signals_and_bc(reward_signals, behavioral_cloning)
        if reward_signals is not None and int(kwargs.get("n_steps", 1)) > 1:
            raise RewardSignalConfigError(
                "n-step replay (n_steps > 1) cannot be combined with reward_signals."
            )
        self.discrete_target_entropy_scale = float(discrete_target_entropy_scale)
        init_setup_model = kwargs.pop("_init_setup_model", True)
        kwargs["policy_kwargs"] = with_foreach_adam(kwargs.get("policy_kwargs"))
        super().__init__(policy, env, *args, _init_setup_model=False, **kwargs)
        if init_setup_model:
            self._setup_model()

    def _use_branched_classes(self) -> None:
        """The discrete policy and the masked replay buffer for a non-``Box`` action space."""
        policy_class = BRANCHED_POLICIES.get(self.policy_class, self.policy_class)
        if not (isinstance(policy_class, type) and issubclass(policy_class, BranchedSACPolicy)):
            raise ValueError(
                f"SAC with {self.action_space} actions needs a discrete policy ('MlpPolicy', 'CnnPolicy', "
                f"'MultiInputPolicy' or a BranchedSACPolicy subclass), got {self.policy_class.__name__}."
            )
        self.policy_class = policy_class
        if self.replay_buffer_class is None:
            dict_obs = isinstance(self.observation_space, spaces.Dict)
            if self._recurrent:
                self.replay_buffer_class = (
                    MaskedSequenceDictReplayBuffer if dict_obs else MaskedSequenceReplayBuffer
                )
            else:
                self.replay_buffer_class = MaskedDictReplayBuffer if dict_obs else MaskedReplayBuffer
        if not issubclass(self.replay_buffer_class, (MaskedReplayBuffer, MaskedDictReplayBuffer)):
            raise ValueError(
                f"SAC with discrete actions stores action masks: replay_buffer_class must be MaskedReplayBuffer "
                f"or MaskedDictReplayBuffer (unity_sb3.algorithms.sac.buffers), got {self.replay_buffer_class.__name__}."
            )
        if self.n_steps > 1:
            raise ValueError(
                "n-step replay (n_steps > 1) is not supported with discrete actions; use n_steps=1."
            )
        box = self.action_space.spaces[0] if isinstance(self.action_space, spaces.Tuple) else None
        if box is not None and not (np.all(box.low == -1.0) and np.all(box.high == 1.0)):
            raise ValueError(
                f"the continuous part of a hybrid action space must be Box(-1, 1) (Unity's; the actor's tanh "
                f"gives [-1, 1]), got {box}. Rescale the actions in the env."
            )

    def _use_memory(self) -> None:
        """Checks and the sequence replay buffer for a recurrent policy (``"MlpLstmPolicy"`` etc.)."""
        if self.behavioral_cloning is not None:
            raise ValueError(
                "behavioral_cloning is not supported by SAC with memory yet (the BC term would need demo "
                "sequences); drop behavioral_cloning or use a memoryless policy."
            )
        if self.n_steps > 1:
            raise ValueError(
                "n-step replay (n_steps > 1) is not supported by SAC with memory; use n_steps=1."
            )
        self.policy_kwargs = {
            "memory_size": DEFAULT_MEMORY_SIZE,
            "sequence_length": DEFAULT_SEQUENCE_LENGTH,
            **self.policy_kwargs,
        }
        self._memory_size = int(self.policy_kwargs["memory_size"])
        sequence_length = int(self.policy_kwargs["sequence_length"])
        if self.replay_buffer_class is None and not self._branched:
            dict_obs = isinstance(self.observation_space, spaces.Dict)
            self.replay_buffer_class = SequenceDictReplayBuffer if dict_obs else SequenceReplayBuffer
        self.replay_buffer_kwargs = {
            **self.replay_buffer_kwargs,
            "memory_size": self._memory_size,
            "sequence_length": sequence_length,
        }

    def _setup_model(self) -> None:
        self._branched = not isinstance(self.action_space, spaces.Box)
        self._recurrent = isinstance(self.policy_class, type) and issubclass(
            self.policy_class, RecurrentPolicyMixin
        )
        self._last_masks = self._next_masks = None
        self._read_masks: MaskReader | None = None
        self._memories = self._episode_starts = self._step_memories = None
        if self._recurrent:
            self._use_memory()
        if self._branched:
            self._use_branched_classes()
            OffPolicyAlgorithm._setup_model(self)
            self._create_aliases()
            self.batch_norm_stats, self.batch_norm_stats_target = [], []
            self._setup_branched_entropy()
        else:
            super()._setup_model()
        parsed = self._setup_signals(self.reward_signals)
        if parsed is not None:
            n_heads = len(self._heads)
            if n_heads > 1:
                widen_q_networks(self.critic, n_heads)
                widen_q_networks(self.critic_target, n_heads)
                self.critic_target.load_state_dict(self.critic.state_dict())
                params = [p for name, p in self.critic.named_parameters() if "features_extractor" not in name]
                if not self.policy.share_features_extractor:
                    params = list(self.critic.parameters())
                self.critic.optimizer = self.policy.optimizer_class(
                    params, lr=self.lr_schedule(1), **self.policy.optimizer_kwargs
                )
            self._gammas = th.tensor([parsed[n]["gamma"] for n in self._heads], device=self.device)
            self._episodic = th.tensor(
                [
                    not (n in BOOTSTRAP_THROUGH_ENDS or (n in self.signals and self.signals[n].ignore_done))
                    for n in self._heads
                ],
                dtype=th.float32,
                device=self.device,
            )
            self._entropy_head = self._heads.index("extrinsic") if "extrinsic" in self._heads else 0
        self._setup_bc()

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            "_gammas",
            "_episodic",
            "_last_masks",
            "_next_masks",
            "_read_masks",
            "_target_entropy_tensor",
            "_memories",
            "_episode_starts",
            "_step_memories",
        ]

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: Any = None,
        reset_num_timesteps: bool = True,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        self._next_masks = None  # the env may be reset: ask it again
        fresh = reset_num_timesteps or self._last_obs is None
        result = super()._setup_learn(total_timesteps, callback, reset_num_timesteps, *args, **kwargs)
        self._read_masks = mask_reader(self.env) if self._branched and self.env is not None else None
        if self._recurrent and (fresh or self._memories is None):  # episodes (re)start: zero memories
            self._memories = np.zeros((self.n_envs, self._memory_size), np.float32)
            self._episode_starts = np.ones(self.n_envs, np.float32)
        return result

    def _acting_actions(self, masks: np.ndarray | None) -> np.ndarray:
        """The policy's actions (buffer layout) at the last observations; with memory, the memories
        before and after the step are kept for :meth:`_store_transition`."""
        self.policy.set_training_mode(False)
        obs_tensor, _ = self.policy.obs_to_tensor(self._last_obs)
        with th.no_grad():
            if not self._recurrent:
                return self.actor(obs_tensor, False, masks).cpu().numpy()
            memories = self._memories * (1.0 - self._episode_starts.reshape(-1, 1))
            actions, new_memories = self.policy.act(obs_tensor, memories, masks)
        self._step_memories = (memories, new_memories.cpu().numpy())
        return actions.cpu().numpy()

    def _sample_action(
        self, learning_starts: int, action_noise: Any = None, n_envs: int = 1
    ) -> tuple[Any, Any]:
        if self._branched:
            return self._sample_branched_action(learning_starts, n_envs)
        if not self._recurrent:
            return super()._sample_action(learning_starts, action_noise, n_envs)
        buffer_actions = self._acting_actions(None)  # the memory advances during warm-up too
        if self.num_timesteps < learning_starts:
            buffer_actions = self.policy.scale_action(
                np.array([self.action_space.sample() for _ in range(n_envs)])
            )
        if action_noise is not None:
            buffer_actions = np.clip(buffer_actions + action_noise(), -1, 1)
        return self.policy.unscale_action(buffer_actions), buffer_actions

    def _record_memories(self, replay_buffer: Any, dones: np.ndarray, infos: list[dict[str, Any]]) -> None:
        """Store the step's memories and carry them on; an inactive slot's memory does not advance."""
        assert self._step_memories is not None and self._episode_starts is not None
        memories, new_memories = self._step_memories
        inactive = np.array([not info.get("active", True) for info in infos], dtype=bool)
        new_memories[inactive] = memories[inactive]
        replay_buffer.set_memories(memories, new_memories, self._episode_starts)
        self._memories, self._step_memories = new_memories, None
        self._episode_starts = np.asarray(dones, np.float32).reshape(-1)

    def _store_transition(
        self,
        replay_buffer: ReplayBuffer | DictReplayBuffer,
        buffer_action: np.ndarray,
        new_obs: Any,
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        if self._branched:
            self._record_masks(replay_buffer, dones)
        if self._recurrent:
            self._record_memories(replay_buffer, dones, infos)
        super()._store_transition(replay_buffer, buffer_action, new_obs, reward, dones, infos)

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[Any, tuple[np.ndarray, ...] | None]:
        """SB3's ``predict``; with discrete actions ``action_masks`` ``(n, sum(branches))`` (True =
        allowed) restrict the choice, as sb3-contrib's ``MaskablePPO.predict``. With memory,
        ``state`` is the ``(n, memory_size)`` memory the previous call returned (None: zeros) and
        ``episode_start`` ``(n,)`` resets it, as sb3-contrib's recurrent policies."""
        if not self._branched and action_masks is not None and not np.all(action_masks):
            raise ValueError(
                f"action_masks are for discrete actions; this model's action space is {self.action_space}."
            )
        if self._branched or self._recurrent:
            masks = action_masks if self._branched else None
            return self.policy.predict(observation, state, episode_start, deterministic, masks)
        return super().predict(observation, state, episode_start, deterministic)

    def train(self, gradient_steps: int, batch_size: int = 64) -> None:
        if self._branched:
            self._train_branched(gradient_steps, batch_size)
            return
        if self.signals is None:
            super().train(gradient_steps, batch_size)
            if self._bc is not None:  # plain SAC + BC: one BC update per gradient step
                for _ in range(gradient_steps):
                    self._update_bc()
            return
        self._train_with_signals(gradient_steps, batch_size)

    def _head_rewards(self, data: Any) -> th.Tensor:
        """``(batch, n_heads)`` strength-weighted rewards of a replay batch, with current networks."""
        assert self.signals is not None
        columns = []
        for name in self._heads:
            strength = self._signal_settings[name]["strength"]
            if name == "extrinsic":
                reward = data.rewards.reshape(-1)
            else:
                signal = self.signals[name]
                batch = signal.batch(
                    plain_observations(data.observations),
                    data.actions,
                    plain_observations(data.next_observations),
                    data.dones,
                )
                reward = th.as_tensor(signal.reward(batch, None, None), device=self.device)
            columns.append(strength * reward)
        return th.stack(columns, dim=1)

    def _train_with_signals(self, gradient_steps: int, batch_size: int) -> None:
        assert self.signals is not None
        self.policy.set_training_mode(True)
        optimizers = [self.actor.optimizer, self.critic.optimizer]
        if self.ent_coef_optimizer is not None:
            optimizers += [self.ent_coef_optimizer]
        self._update_learning_rate(optimizers)
        ent_coef_losses, ent_coefs, actor_losses, critic_losses = [], [], [], []
        reward_means: dict[str, list[float]] = defaultdict(list)
        signal_stats: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in self.signals}
        n_heads = len(self._heads)

        for gradient_step in range(gradient_steps):
            data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            if data.discounts is not None:
                raise RewardSignalConfigError("n-step replay cannot be combined with reward_signals.")
            if self.use_sde:
                self.actor.reset_noise()
            actions_pi, log_prob = self.actor.action_log_prob(data.observations)
            log_prob = log_prob.reshape(-1, 1)

            ent_coef_loss = None
            if self.ent_coef_optimizer is not None and self.log_ent_coef is not None:
                ent_coef = th.exp(self.log_ent_coef.detach())
                ent_coef_loss = -(self.log_ent_coef * (log_prob + self.target_entropy).detach()).mean()
                ent_coef_losses.append(ent_coef_loss.item())
            else:
                ent_coef = self.ent_coef_tensor
            ent_coefs.append(ent_coef.item())
            if ent_coef_loss is not None and self.ent_coef_optimizer is not None:
                self.ent_coef_optimizer.zero_grad()
                ent_coef_loss.backward()
                self.ent_coef_optimizer.step()

            rewards = self._head_rewards(data)  # (batch, n_heads)
            for k, name in enumerate(self._heads):
                reward_means[name].append(rewards[:, k].mean().item())
            with th.no_grad():
                next_actions, next_log_prob = self.actor.action_log_prob(data.next_observations)
                next_q = th.stack(self.critic_target(data.next_observations, next_actions), dim=0)
                next_q = next_q.reshape(next_q.shape[0], -1, n_heads)  # (critics, batch, heads)
                pick = next_q.sum(dim=2).argmin(dim=0)  # per sample: the pessimistic critic
                next_q = next_q[pick, th.arange(next_q.shape[1], device=self.device)]  # (batch, heads)
                next_q[:, self._entropy_head] -= ent_coef * next_log_prob.reshape(-1)
                not_done = 1.0 - data.dones.reshape(-1, 1) * self._episodic.reshape(1, -1)
                target_q = rewards + not_done * self._gammas.reshape(1, -1) * next_q

            current_q = self.critic(data.observations, data.actions)
            critic_loss = 0.5 * sum(F.mse_loss(q.reshape(-1, n_heads), target_q) for q in current_q)
            critic_losses.append(critic_loss.item())
            self.critic.optimizer.zero_grad()
            critic_loss.backward()
            self.critic.optimizer.step()

            q_pi = th.stack(
                [q.reshape(-1, n_heads).sum(dim=1) for q in self.critic(data.observations, actions_pi)], 1
            )
            min_q_pi, _ = th.min(q_pi, dim=1, keepdim=True)
            actor_loss = (ent_coef * log_prob - min_q_pi).mean()
            actor_losses.append(actor_loss.item())
            self.actor.optimizer.zero_grad()
            actor_loss.backward()
            self.actor.optimizer.step()

            for name, signal in self.signals.items():
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
                polyak_update(self.batch_norm_stats, self.batch_norm_stats_target, 1.0)

        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/ent_coef", np.mean(ent_coefs))
        self.logger.record("train/actor_loss", np.mean(actor_losses))
        self.logger.record("train/critic_loss", np.mean(critic_losses))
        if len(ent_coef_losses) > 0:
            self.logger.record("train/ent_coef_loss", np.mean(ent_coef_losses))
        for name in self._heads:
            log_stats(self.logger, f"reward_signals/{name}", {"reward": reward_means[name]})
        for name, stats in signal_stats.items():
            log_stats(self.logger, f"reward_signals/{name}", stats)
