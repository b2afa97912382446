"""MA-POCA with memory: an LSTM in the shared actor and one in the centralised critic, as
ML-Agents' POCA builds them with ``network_settings.memory``.

ML-Agents (``trainers/poca/optimizer_torch.py``, ``torch_entities/networks.py``) puts the actor's LSTM
after its body (encoders and hidden layers) and feeds its output to the action model; the critic
(``POCAValueNetwork`` on a ``MultiAgentNetworkBody``) has its own LSTM after the attention over the
group, through which V and the baseline each run from their own memory per agent (``critic_memory``
and ``baseline_memory``). Each agent's memories are stored with every step it decides; training
cuts each agent's trajectory into chunks of ``sequence_length`` steps, each unrolled from the
memories stored at its first step. Here:

- the actor's memory advances only at steps where the slot holds a deciding agent (an inactive
  slot, a dead groupmate or an agent between decisions keeps its memory), and is zeroed where an
  episode starts;
- the critic's memories follow the same rule, stepped through each slot's decisions once the
  rollout is in (:mod:`.recurrent_buffers`), carried across rollouts;
- training sequences are cut from each slot's *active* rows, in time order (inactive rows are not
  part of the agent's trajectory), each with the flag "an episode started since the previous
  decision" so the actor's and the critic's unrolls reset where acting and the critic pass did.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import DiagGaussianDistribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import CombinedExtractor, NatureCNN
from stable_baselines3.common.type_aliases import MaybeCallback, PyTorchObs
from stable_baselines3.common.vec_env import VecEnv

from unity_sb3.algorithms.distributions import HybridDistribution
from unity_sb3.algorithms.poca.networks import RecurrentGroupCriticBody
from unity_sb3.algorithms.poca.poca import POCA
from unity_sb3.algorithms.poca.policies import GroupObs, POCAPolicy
from unity_sb3.algorithms.poca.recurrent_buffers import RecurrentPOCARolloutBuffer, RecurrentPOCASamples
from unity_sb3.networks.memory import (
    DEFAULT_MEMORY_SIZE,
    DEFAULT_SEQUENCE_LENGTH,
    LSTMMemory,
    check_memory_settings,
    unroll_sequences,
)


class RecurrentPOCAPolicy(POCAPolicy):
    """:class:`POCAPolicy` with ML-Agents' LSTM memory in the actor (between its hidden layers and the
    action distribution) and in the centralised critic (between the attention pooling and the head).

    :param memory_size: floats of memory per agent (hidden + cell state), even; ML-Agents' default 128.
        The actor and each of the critic's two streams (V, baseline) have that much.
    :param sequence_length: steps per training sequence (BPTT length); ML-Agents' default 64.
    :param kwargs: :class:`POCAPolicy`'s arguments (``net_arch`` must have at least one layer, unless
        the features extractor ends in the body: ``hidden_layers`` in ``features_extractor_kwargs``,
        as the ML-Agents config mapping puts a goal-conditioned body; the LSTM then reads it).
    """

    critic: RecurrentGroupCriticBody

    def __init__(
        self,
        *args: Any,
        memory_size: int = DEFAULT_MEMORY_SIZE,
        sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
        **kwargs: Any,
    ) -> None:
        check_memory_settings(memory_size, sequence_length)
        if kwargs.get("net_arch") == [] and not (kwargs.get("features_extractor_kwargs") or {}).get(
            "hidden_layers"
        ):
            raise ValueError(
                "a POCA memory policy needs at least one actor layer (net_arch=[]) before its LSTM "
                "(in net_arch, or the features extractor's hidden_layers)."
            )
        self.memory_size = memory_size
        self.sequence_length = sequence_length
        super().__init__(*args, **kwargs)
        self.memory = LSTMMemory(self.net_arch[-1] if self.net_arch else self.features_dim, memory_size)
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

    def _make_critic(self) -> RecurrentGroupCriticBody:
        return RecurrentGroupCriticBody(
            self.critic_features_extractor.features_dim,
            self.encoded_action_dim,
            memory_size=self.memory_size,
            embed_dim=self.critic_embed_dim,
            n_heads=self.critic_n_heads,
            net_arch=self.critic_net_arch,
        )

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
        """The actor up to its LSTM over sequences given as their real steps (see
        :func:`unroll_sequences`; ``obs`` has shape (n_steps, *obs_shape))."""
        latent = self.actor_net(self.extract_features(obs, self.features_extractor))
        return unroll_sequences(self.memory, latent, memories, episode_starts, sequence_mask)

    # ------------------------------------------------------------------ critic with memory

    def critic_encodings(
        self, own_obs: PyTorchObs, mate_obs: GroupObs, mate_actions: th.Tensor, mate_mask: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        """The critic up to its LSTM for V's and the baseline's entity sets of each row.

        :param own_obs: shape (batch, *obs_shape) or a dict of those.
        :param mate_obs: shape (batch, n_mates, *obs_shape) or a dict; n_mates may be 0.
        :param mate_actions: raw actions as stored in the buffer, shape (batch, n_mates, action_dim).
        :param mate_mask: True for present groupmates, shape (batch, n_mates).
        :return: encodings (2, batch, embed_dim) and member counts (2, batch, 1), V's then the baseline's.
        """
        members, member_mask = self._group_of(own_obs, mate_obs, mate_mask)
        entities, mask = self.critic.value_and_baseline_entities(
            self._member_features(members), self.encode_actions(mate_actions), member_mask
        )
        encoding, count = self.critic.embed(entities, mask)
        batch = member_mask.shape[0]
        if encoding.shape[0] == batch:  # no groupmates: the baseline's entities are V's
            encoding, count = th.cat([encoding, encoding]), th.cat([count, count])
        return encoding.reshape(2, batch, -1), count.reshape(2, batch, 1)

    def values_and_baselines_by_sequence(self, batch: RecurrentPOCASamples) -> tuple[th.Tensor, th.Tensor]:
        """V and baselines (n_steps,) of a minibatch of sequences, each stream unrolled through the
        critic's LSTM from its stored memory (ML-Agents' update with ``critic_memory`` /
        ``baseline_memory``)."""
        encoding, count = self.critic_encodings(
            batch.observations, batch.mate_observations, batch.mate_actions, batch.mate_mask
        )
        n_steps = encoding.shape[1]
        outputs, _ = unroll_sequences(  # both streams in one pass: V's sequences, then the baseline's
            self.critic.memory,
            encoding.flatten(0, 1),
            th.cat([batch.value_memories, batch.baseline_memories]),
            batch.episode_starts.repeat(2),
            th.cat([batch.sequence_mask, batch.sequence_mask]),
        )
        scalars = self.critic.read_out(outputs, count.flatten(0, 1))
        return scalars[:n_steps], scalars[n_steps:]

    def step_group_values(
        self, member_obs: GroupObs, member_mask: th.Tensor, memories: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        """V of each row's group one step on from given V memories (bootstrap values).

        :param member_obs: the present members' observations, (batch, n_members, *obs_shape) or a dict.
        :param member_mask: True for present members, (batch, n_members); >= 1 per row.
        :param memories: (batch, memory_size) V memories before this step.
        :return: values (batch,) and the memories after the step (batch, memory_size).
        """
        encoding, count = self.critic.embed(
            self.critic.obs_encoder(self._member_features(member_obs)), member_mask
        )
        output, memories = self.critic.memory(encoding.unsqueeze(1), memories)
        return self.critic.read_out(output[:, 0], count), memories

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
    """:class:`POCA` whose shared actor and centralised critic (V and baseline) have ML-Agents' LSTM memory.

    Takes :class:`POCA`'s arguments; the policy is ``"MlpLstmPolicy"``, ``"CnnLstmPolicy"``,
    ``"MultiInputLstmPolicy"`` or a :class:`RecurrentPOCAPolicy` subclass, with ``policy_kwargs``
    ``memory_size`` and ``sequence_length``. ``batch_size`` counts real steps: each minibatch holds
    shuffled sequences (never crossing an episode start) of about that many steps. ``predict(obs, state,
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

    def _acting_mode(self) -> Any:
        return th.no_grad()  # the memories acting produces are kept across steps and rollouts

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

    def _values_and_baselines(self, batch: Any) -> tuple[th.Tensor, th.Tensor]:
        return self.policy.values_and_baselines_by_sequence(batch)

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
