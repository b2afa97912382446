"""The project's PPO with ML-Agents' memory (``network_settings.memory``).

:class:`RecurrentPPO` is :class:`unity_sb3.PPO` (reward signals, BC term, ``time_horizon``, inactive
slots, ``ent_coef`` schedules: see :mod:`unity_sb3.algorithms.ppo.ppo`) with a policy whose actor and
critic each carry an LSTM memory (:mod:`unity_sb3.algorithms.recurrent_ppo.policies`). As ML-Agents:

- **Acting** stores, at every step, each slot's actor and critic memories before the step, then
  advances them. A placeholder step of an inactive slot does not advance its memory; an episode
  start zeroes it.
- **Training** cuts each slot's active steps of the rollout into sequences of at most
  ``sequence_length`` steps that begin at every episode start and never cross one (ML-Agents cuts
  each trajectory, which ends with its episode), and unrolls each from the memory stored at its first
  step (truncated BPTT, ML-Agents' ``BufferKey.MEMORY``/``CRITIC_MEMORY``); padding stays out of
  every loss. A minibatch holds shuffled sequences of about ``batch_size`` real steps.
- **Values after a step** (terminal observations, the rollout's last observations) are read with the
  slot's current critic memory.

It always takes the reward-signal path (``reward_signals=None`` means ``{"extrinsic": {}}``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch as th

from unity_sb3.algorithms.ppo.buffers import SignalRolloutBufferSamples
from unity_sb3.algorithms.ppo.ppo import PPO
from unity_sb3.algorithms.recurrent_ppo.buffers import RecurrentSignalRolloutBuffer
from unity_sb3.algorithms.recurrent_ppo.policies import (
    Memories,
    RecurrentActorCriticCnnPolicy,
    RecurrentActorCriticPolicy,
    RecurrentMultiInputActorCriticPolicy,
)
from unity_sb3.networks.memory import DEFAULT_MEMORY_SIZE, DEFAULT_SEQUENCE_LENGTH, check_memory_settings


class RecurrentPPO(PPO):
    """:class:`unity_sb3.PPO` with ML-Agents' LSTM memory (see the module docstring).

    Takes every argument of :class:`unity_sb3.PPO`, plus:

    :param memory_size: floats of memory per agent, in the actor and again in the critic (hidden +
        cell state, even; ML-Agents' ``memory_size``).
    :param sequence_length: steps per training sequence (ML-Agents' ``sequence_length``).
    """

    policy_aliases: ClassVar[dict[str, type]] = {  # type: ignore[misc]
        "MlpLstmPolicy": RecurrentActorCriticPolicy,
        "CnnLstmPolicy": RecurrentActorCriticCnnPolicy,
        "MultiInputLstmPolicy": RecurrentMultiInputActorCriticPolicy,
    }
    policy: RecurrentActorCriticPolicy

    def __init__(
        self,
        policy: str | type,
        env: Any,
        *args: Any,
        memory_size: int = DEFAULT_MEMORY_SIZE,
        sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
        reward_signals: dict | None = None,
        **kwargs: Any,
    ) -> None:
        check_memory_settings(memory_size, sequence_length)
        self.memory_size, self.sequence_length = memory_size, sequence_length
        self._memories: Memories | None = None
        kwargs["policy_kwargs"] = {**(kwargs.get("policy_kwargs") or {}), "memory_size": memory_size}
        reward_signals = {"extrinsic": {}} if reward_signals is None else reward_signals
        super().__init__(policy, env, *args, reward_signals=reward_signals, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        if not isinstance(self.policy, RecurrentActorCriticPolicy):
            raise ValueError(
                f"RecurrentPPO needs a RecurrentActorCriticPolicy ('MlpLstmPolicy', 'CnnLstmPolicy', "
                f"'MultiInputLstmPolicy'), got {type(self.policy).__name__}."
            )
        plain = self.rollout_buffer
        self.rollout_buffer = RecurrentSignalRolloutBuffer(
            self.n_steps,
            self.observation_space,
            self.action_space,
            device=self.device,
            gae_lambda=self.gae_lambda,
            gammas=plain.gammas,
            ignore_done=plain.ignore_done,
            n_envs=self.n_envs,
            memory_size=self.memory_size,
            sequence_length=self.sequence_length,
        )

    def _hybrid_policy_class(self) -> type:
        """A recurrent policy takes hybrid actions itself (see :mod:`~unity_sb3.algorithms.recurrent_ppo.policies`)."""
        if not (
            isinstance(self.policy_class, type) and issubclass(self.policy_class, RecurrentActorCriticPolicy)
        ):
            raise ValueError(
                "RecurrentPPO with hybrid actions needs a RecurrentActorCriticPolicy ('MlpLstmPolicy', "
                f"'CnnLstmPolicy', 'MultiInputLstmPolicy'), got {getattr(self.policy_class, '__name__', self.policy_class)}."
            )
        return self.policy_class

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: np.ndarray | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[Any, np.ndarray]:
        """The policy's ``predict``: actions and the actor's memories after the step (see
        :meth:`RecurrentActorCriticPolicy.predict`); ``action_masks`` mask a hybrid policy's branches."""
        return self.policy.predict(
            observation, state, episode_start, deterministic, action_masks=action_masks
        )

    def _act(self, obs: Any, action_masks: np.ndarray | None) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        assert isinstance(self.rollout_buffer, RecurrentSignalRolloutBuffer)
        if self._memories is None or self._memories[0].shape[0] != self.n_envs:
            # any values do: SB3 starts every learn() that resets with episode starts, which zero them
            self._memories = self.policy.initial_memories(self.n_envs)
        starts = th.as_tensor(self._last_episode_starts, dtype=th.float32, device=self.device)
        self.rollout_buffer.store_memories(*self._memories)
        masks = None if action_masks is None else th.as_tensor(action_masks, device=self.device)
        actions, values, log_probs, after = self.policy(obs, self._memories, starts, action_masks=masks)
        active = th.as_tensor(self._last_active, device=self.device)[:, None]
        kept = 1.0 - starts[:, None]  # a waiting slot keeps its memory, zeroed if its episode starts
        self._memories = (
            th.where(active, after[0], self._memories[0] * kept),
            th.where(active, after[1], self._memories[1] * kept),
        )
        return actions, values, log_probs

    def _values_after_step(self, obs: Any, env_indices: list[int]) -> th.Tensor:
        assert self._memories is not None
        critic = self._memories[1][env_indices]
        return self.policy.predict_values(obs, critic, th.zeros(len(env_indices), device=self.device))

    def _evaluate_minibatch(
        self, data: SignalRolloutBufferSamples
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        seq = data.sequences
        shape = self.policy.flat_action_shape
        actions = seq.actions.long().flatten() if shape == () else seq.actions
        if len(shape) == 1 and actions.ndim == 1:
            actions = actions[:, None]
        values, log_prob, entropy = self.policy.evaluate_actions(
            seq.observations,
            actions,
            (seq.actor_memories, seq.critic_memories),
            seq.episode_starts,
            seq.action_masks,
        )
        return values[seq.mask], log_prob[seq.mask], None if entropy is None else entropy[seq.mask]

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_memories"]
