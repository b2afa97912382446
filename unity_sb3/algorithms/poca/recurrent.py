"""MA-POCA with memory: an LSTM in the shared actor, as ML-Agents' POCA builds it with
``network_settings.memory``.

ML-Agents (``trainers/poca/trainer.py``, ``torch_entities/networks.py``) puts the LSTM after the
actor's body (encoders and hidden layers) and feeds its output to the action model. Each agent's
memory is stored with every step it decides; training cuts each agent's trajectory into chunks of
``sequence_length`` steps, each unrolled from the memory stored at its first step. Here:

- a slot's memory advances only at steps where it holds a deciding agent (an inactive slot, a dead
  groupmate or an agent between decisions, keeps its memory), and is zeroed where an episode starts;
- training sequences are cut from each slot's *active* rows, in time order (inactive rows are not
  part of the agent's trajectory), each with the flag "an episode started since the previous
  decision" so the unroll resets where acting did;
- the centralised critic (value and baseline) has no memory: ML-Agents' critic memories are not
  re-created (see docs/DECISIONS.md, "POCA with memory").
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import DiagGaussianDistribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import CombinedExtractor, NatureCNN
from stable_baselines3.common.type_aliases import MaybeCallback, PyTorchObs
from stable_baselines3.common.vec_env import VecEnv

from unity_sb3.algorithms.distributions import HybridDistribution
from unity_sb3.algorithms.poca.buffers import POCARolloutBuffer
from unity_sb3.algorithms.poca.poca import POCA
from unity_sb3.algorithms.poca.policies import POCAPolicy
from unity_sb3.networks.memory import (
    DEFAULT_MEMORY_SIZE,
    DEFAULT_SEQUENCE_LENGTH,
    LSTMMemory,
    check_memory_settings,
)


class RecurrentPOCASamples(NamedTuple):
    """:class:`~unity_sb3.algorithms.poca.buffers.POCARolloutBufferSamples`' fields over the real
    steps of a minibatch of sequences (sequence after sequence, in time order), plus what the
    actor's LSTM needs to unroll them."""

    observations: th.Tensor | dict[str, th.Tensor]
    actions: th.Tensor
    old_values: th.Tensor
    old_baselines: th.Tensor
    old_log_prob: th.Tensor
    advantages: th.Tensor
    returns: th.Tensor
    action_masks: th.Tensor | None
    mate_observations: th.Tensor | dict[str, th.Tensor]
    mate_actions: th.Tensor
    mate_mask: th.Tensor
    memories: th.Tensor  # (n_sequences, memory_size): stored memory before each sequence
    episode_starts: th.Tensor  # (n_steps,) 1.0 where an episode started since the previous decision
    sequence_mask: th.Tensor  # (n_sequences, sequence_length) bool, True at real steps


class RecurrentPOCARolloutBuffer(POCARolloutBuffer):
    """:class:`POCARolloutBuffer` that also stores each slot's actor memory per step and yields
    minibatches of ``sequence_length``-step sequences of each slot's active rows.

    :param memory_size: floats of memory per agent.
    :param sequence_length: steps per training sequence.
    :param kwargs: :class:`POCARolloutBuffer`'s arguments.
    """

    def __init__(self, *args: Any, memory_size: int, sequence_length: int, **kwargs: Any) -> None:
        check_memory_settings(memory_size, sequence_length)
        self.memory_size = memory_size
        self.sequence_length = sequence_length
        super().__init__(*args, **kwargs)

    def reset(self) -> None:
        super().reset()
        self.memories = np.zeros((self.buffer_size, self.n_envs, self.memory_size), dtype=np.float32)

    def decision_episode_starts(self) -> np.ndarray:
        """(n_steps, n_envs) bool: at active rows, an episode started at this step or at one of the
        slot's inactive steps since its previous decision in the rollout (the memory was zeroed)."""
        counts = np.cumsum(self.episode_starts > 0, axis=0)
        flags = np.zeros_like(self.active)
        for slot in range(self.n_envs):
            rows = np.flatnonzero(self.active[:, slot])
            before = np.concatenate([[0], counts[rows[:-1], slot]]) if rows.size else rows
            flags[rows, slot] = counts[rows, slot] > before
        return flags

    def sequences(self) -> list[np.ndarray]:
        """Each slot's active rows cut into chunks of at most ``sequence_length`` steps, as flat
        indices ``t * n_envs + i`` in time order."""
        chunks = []
        for slot in range(self.n_envs):
            flat = np.flatnonzero(self.active[:, slot]) * self.n_envs + slot
            chunks += [
                flat[start : start + self.sequence_length]
                for start in range(0, flat.size, self.sequence_length)
            ]
        return chunks

    def get(self, batch_size: int | None = None) -> Generator[RecurrentPOCASamples, None, None]:  # type: ignore[override]
        """Shuffled minibatches of whole sequences, about ``batch_size`` steps each (at least one
        sequence), as ML-Agents' ``batch_size // sequence_length`` sequences per minibatch."""
        assert self.full, "the rollout buffer is not full yet"
        chunks = self.sequences()
        flags = self.decision_episode_starts().reshape(-1)
        memories = self.memories.reshape(-1, self.memory_size)
        per_batch = len(chunks) if batch_size is None else max(1, batch_size // self.sequence_length)
        order = np.random.permutation(len(chunks))
        for start in range(0, len(chunks), per_batch):
            batch = [chunks[k] for k in order[start : start + per_batch]]
            flat = np.concatenate(batch)
            lengths = np.array([chunk.size for chunk in batch])
            mask = np.arange(self.sequence_length)[None, :] < lengths[:, None]
            yield RecurrentPOCASamples(
                *self._gather(flat),
                memories=self.to_torch(memories[[chunk[0] for chunk in batch]]),
                episode_starts=self.to_torch(flags[flat].astype(np.float32)),
                sequence_mask=th.as_tensor(mask, device=self.device),
            )


class RecurrentPOCAPolicy(POCAPolicy):
    """:class:`POCAPolicy` whose actor has ML-Agents' LSTM memory between its hidden layers and the
    action distribution.

    :param memory_size: floats of memory per agent (hidden + cell state), even; ML-Agents' default 128.
    :param sequence_length: steps per training sequence (BPTT length); ML-Agents' default 64.
    :param kwargs: :class:`POCAPolicy`'s arguments (``net_arch`` must have at least one layer).
    """

    def __init__(
        self,
        *args: Any,
        memory_size: int = DEFAULT_MEMORY_SIZE,
        sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
        **kwargs: Any,
    ) -> None:
        check_memory_settings(memory_size, sequence_length)
        if kwargs.get("net_arch") == []:
            raise ValueError(
                "a POCA memory policy needs at least one actor layer (net_arch=[]) before its LSTM."
            )
        self.memory_size = memory_size
        self.sequence_length = sequence_length
        super().__init__(*args, **kwargs)
        self.memory = LSTMMemory(self.net_arch[-1], memory_size)
        # the action model reads the LSTM's output (memory_size // 2) instead of the last layer
        if isinstance(self.action_dist, (HybridDistribution, DiagGaussianDistribution)):
            self.action_net, self.log_std = self.action_dist.proba_distribution_net(  # type: ignore[call-arg]
                self.memory.hidden_size, self.log_std_init
            )
        else:
            self.action_net = self.action_dist.proba_distribution_net(self.memory.hidden_size)  # type: ignore[call-arg]
        if self.ortho_init:
            self.action_net.apply(lambda module: self.init_weights(module, gain=0.01))
        learning_rate = self.optimizer.param_groups[0]["lr"]
        self.optimizer = self.optimizer_class(self.parameters(), lr=learning_rate, **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(memory_size=self.memory_size, sequence_length=self.sequence_length)
        return data

    def initial_memories(self, n_agents: int) -> th.Tensor:
        """Zero memories (n_agents, memory_size), what an episode starts from."""
        return self.memory.initial_memories(n_agents, self.device)

    def unroll(
        self, obs: PyTorchObs, memories: th.Tensor, episode_starts: th.Tensor, sequence_mask: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        """The actor up to its LSTM over sequences given as their real steps.

        :param obs: the real steps' observations, sequence after sequence, shape (n_steps, *obs_shape).
        :param memories: (n_sequences, memory_size), the memory before each sequence.
        :param episode_starts: (n_steps,) nonzero where the memory is zeroed before the step.
        :param sequence_mask: (n_sequences, sequence_length) bool, True at real steps (a prefix).
        :return: LSTM outputs (n_steps, memory_size // 2) and memories (n_sequences, memory_size)
            after each sequence's last real step.
        """
        latent = self.actor_net(self.extract_features(obs, self.features_extractor))
        padded = latent.new_zeros((*sequence_mask.shape, latent.shape[-1]))
        padded[sequence_mask] = latent
        starts = latent.new_zeros(sequence_mask.shape)
        starts[sequence_mask] = episode_starts.to(latent.dtype)
        if sequence_mask.all():
            outputs, memories = self.memory(padded, memories, starts)
            return outputs[sequence_mask], memories
        # sequences of different lengths: unroll each length group so padding never enters a memory
        outputs = padded.new_zeros((*sequence_mask.shape, self.memory.hidden_size))
        final = memories.clone()
        lengths = sequence_mask.sum(dim=1)
        for length in lengths.unique().tolist():
            rows = lengths == length
            out, final[rows] = self.memory(padded[rows, :length], memories[rows], starts[rows, :length])
            outputs[rows, :length] = out
        return outputs[sequence_mask], final

    def act(
        self,
        obs: PyTorchObs,
        memories: th.Tensor,
        episode_starts: th.Tensor,
        deterministic: bool = False,
        action_masks: np.ndarray | th.Tensor | None = None,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """One step of every agent.

        :param obs: (n_agents, *obs_shape) or a dict of those.
        :param memories: (n_agents, memory_size) before this step.
        :param episode_starts: (n_agents,) nonzero where an episode starts at this step.
        :param deterministic: take the most likely actions.
        :param action_masks: (n_agents, sum of branches) True = allowed, or None.
        :return: actions (n_agents, *flat_action_shape), log-probabilities (n_agents,) and the
            memories after this step (n_agents, memory_size).
        """
        mask = th.ones((memories.shape[0], 1), dtype=th.bool, device=memories.device)
        latent, memories = self.unroll(obs, memories, episode_starts, mask)
        distribution = self.distribution_from_latent(latent, action_masks)
        actions = distribution.get_actions(deterministic=deterministic)
        return actions.reshape((-1, *self.flat_action_shape)), distribution.log_prob(actions), memories

    def evaluate_sequences(
        self, batch: RecurrentPOCASamples, actions: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor | None]:
        """Log-probabilities and entropies (n_steps,) of a minibatch of sequences' actions."""
        latent, _ = self.unroll(batch.observations, batch.memories, batch.episode_starts, batch.sequence_mask)
        distribution = self.distribution_from_latent(latent, batch.action_masks)
        return distribution.log_prob(actions), distribution.entropy()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "a POCA memory policy acts with act(obs, memories, episode_starts); use RecurrentPOCA."
        )

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: np.ndarray | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[Any, np.ndarray]:
        """SB3's recurrent ``predict``: actions and the memories to pass back at the next call.

        :param observation: (n_agents, *obs_shape), one observation, or a dict of those.
        :param state: (n_agents, memory_size) memories from the previous call; None = zeros.
        :param episode_start: (n_agents,) True where an episode starts (memory zeroed); None = none.
        :param deterministic: take the most likely actions.
        :param action_masks: (n_agents, sum of branches) True = allowed, or None.
        :return: actions and memories (n_agents, memory_size).
        """
        self.set_training_mode(False)
        obs_tensor, vectorized_env = self.obs_to_tensor(observation)
        n_agents = (next(iter(obs_tensor.values())) if isinstance(obs_tensor, dict) else obs_tensor).shape[0]
        memories = (
            self.initial_memories(n_agents) if state is None else th.as_tensor(state, device=self.device)
        )
        if memories.shape != (n_agents, self.memory_size):
            raise ValueError(
                f"state must be the memories (n_agents, memory_size) = ({n_agents}, {self.memory_size}) "
                f"returned by the previous predict call, got shape {tuple(memories.shape)}."
            )
        starts = np.zeros(n_agents) if episode_start is None else np.asarray(episode_start, dtype=np.float32)
        with th.no_grad():
            actions, _, memories = self.act(
                obs_tensor,
                memories.float(),
                th.as_tensor(starts, device=self.device).reshape(n_agents),
                deterministic,
                action_masks,
            )
        actions = actions.cpu().numpy().reshape((-1, *self.flat_action_shape))
        return self.env_actions(actions, vectorized_env), memories.cpu().numpy()


class RecurrentPOCACnnPolicy(RecurrentPOCAPolicy):
    """:class:`RecurrentPOCAPolicy` with SB3's ``NatureCNN`` (image observations)."""

    def __init__(self, *args: Any, features_extractor_class: type = NatureCNN, **kwargs: Any) -> None:
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


class RecurrentPOCAMultiInputPolicy(RecurrentPOCAPolicy):
    """:class:`RecurrentPOCAPolicy` with SB3's ``CombinedExtractor`` (``Dict`` observations)."""

    def __init__(self, *args: Any, features_extractor_class: type = CombinedExtractor, **kwargs: Any) -> None:
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


class RecurrentPOCA(POCA):
    """:class:`POCA` whose shared actor has ML-Agents' LSTM memory.

    Takes :class:`POCA`'s arguments; the policy is ``"MlpLstmPolicy"``, ``"CnnLstmPolicy"``,
    ``"MultiInputLstmPolicy"`` or a :class:`RecurrentPOCAPolicy` subclass, with ``policy_kwargs``
    ``memory_size`` and ``sequence_length``. ``batch_size`` counts steps: each minibatch holds
    ``batch_size // sequence_length`` sequences (at least one). ``predict(obs, state,
    episode_start)`` returns the memories as ``state``, as sb3-contrib's ``RecurrentPPO``.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpLstmPolicy": RecurrentPOCAPolicy,
        "CnnLstmPolicy": RecurrentPOCACnnPolicy,
        "MultiInputLstmPolicy": RecurrentPOCAMultiInputPolicy,
    }
    policy: RecurrentPOCAPolicy
    rollout_buffer: RecurrentPOCARolloutBuffer  # type: ignore[assignment]

    def _setup_model(self) -> None:
        super()._setup_model()
        if not isinstance(self.policy, RecurrentPOCAPolicy):
            raise ValueError(
                f"RecurrentPOCA needs a memory policy (MlpLstmPolicy, CnnLstmPolicy, MultiInputLstmPolicy), "
                f"got {type(self.policy).__name__}; use POCA for a policy without memory."
            )
        self.rollout_buffer = self._make_rollout_buffer(
            RecurrentPOCARolloutBuffer,
            memory_size=self.policy.memory_size,
            sequence_length=self.policy.sequence_length,
        )
        self._memories = self.policy.initial_memories(self.n_envs)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_memories"]

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        must_reset = reset_num_timesteps or self._last_obs is None or not hasattr(self, "_memories")
        result = super()._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        if must_reset:
            self._memories = self.policy.initial_memories(self.n_envs)
        return result

    def collect_rollouts(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: Any, n_rollout_steps: int
    ) -> bool:
        assert isinstance(rollout_buffer, RecurrentPOCARolloutBuffer), (
            "RecurrentPOCA needs its sequence buffer"
        )
        return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)

    def _act(
        self, obs: Any, action_masks: np.ndarray | None, active: np.ndarray
    ) -> tuple[th.Tensor, th.Tensor]:
        """Act from each slot's memory; only deciding slots' memories advance, episode starts zero them."""
        self.rollout_buffer.memories[self.rollout_buffer.pos] = self._memories.cpu().numpy()
        starts = th.as_tensor(np.asarray(self._last_episode_starts, dtype=np.float32), device=self.device)
        actions, log_probs, memories = self.policy.act(obs, self._memories, starts, action_masks=action_masks)
        held = self._memories * (1.0 - starts).unsqueeze(1)
        deciding = th.as_tensor(np.asarray(active, dtype=bool), device=self.device).unsqueeze(1)
        self._memories = th.where(deciding, memories, held)
        return actions, log_probs

    def _evaluate_actions(self, batch: Any, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor | None]:
        return self.policy.evaluate_sequences(batch, actions)

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: np.ndarray | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[Any, np.ndarray]:
        """Actions of the shared actor and the memories to pass back as ``state`` next call
        (see :meth:`RecurrentPOCAPolicy.predict`)."""
        return self.policy.predict(
            observation, state, episode_start, deterministic, action_masks=action_masks
        )
