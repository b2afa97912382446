"""SAC policies with memory (an LSTM after the observation encoder), as ML-Agents' SAC builds them.

ML-Agents puts an LSTM between each network body's encoder and its heads; its memory is the
LSTM's hidden and cell state side by side, ``memory_size = 2 * hidden`` floats per agent. Here:

- **Actor**: encoder -> LSTM -> SAC's heads. While acting its memory is carried from step to step
  (reset to zeros at episode starts) and stored in the replay buffer with each step; a sampled
  sequence starts from the stored memory of its first step (ML-Agents' ``BufferKey.MEMORY``).
- **Q networks**: each critic (and target) has its own encoder and LSTM; a sampled sequence runs
  them from zero memory, as ML-Agents' SAC does for its Q networks (``q_memories`` are zeros in
  ``TorchSACOptimizer.update``).
- A replay batch is a set of training sequences cut as ML-Agents cuts them: a sequence begins at an
  episode start and every ``sequence_length`` steps within an episode, so it never crosses an
  episode, and one that begins an episode starts the Q networks from the zero memory the episode
  really starts with (at the other cuts zero memory is ML-Agents' approximation too; the replay
  buffer's :meth:`~unity_sb3.algorithms.sac.buffers.SequenceReplayBuffer.sample`).

A batch of sequences travels through SB3's and the project's SAC losses as a :class:`SequenceBatch`
in place of the observations: the actor and critics below unroll their LSTM over it and return
features ``(real steps, hidden)``, so the losses are the memoryless ones.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    NatureCNN,
)
from stable_baselines3.common.type_aliases import PyTorchObs
from stable_baselines3.sac.policies import Actor, ContinuousCritic, SACPolicy

from unity_sb3.algorithms.sac.policies import BranchedActor, BranchedCritic, BranchedSACPolicy
from unity_sb3.networks.memory import (
    DEFAULT_MEMORY_SIZE,
    DEFAULT_SEQUENCE_LENGTH,
    LSTMMemory,
    check_memory_settings,
    predict_memories,
    unroll_sequences,
)


class SequenceBatch(NamedTuple):
    """Observations of ``n`` sequences of at most ``L`` steps each, with what the LSTM needs to unroll them.

    :param observations: the real steps' observations, sequence after sequence (or a dict of them):
        ``(n * L, ...)`` without ``sequence_mask``.
    :param episode_starts: one float per real step, 1.0 where an episode starts (the memory is
        reset there); None: no episode starts (acting, where the memories are reset beforehand).
    :param memories: ``(n, memory_size)``: the actor's memory before each sequence's first step.
    :param sequence_mask: ``(n, L)`` bool, True at each sequence's real steps (a prefix of its
        row); None: every sequence has ``L`` real steps.
    """

    observations: PyTorchObs
    episode_starts: th.Tensor | None
    memories: th.Tensor
    sequence_mask: th.Tensor | None = None


def plain_observations(observations: PyTorchObs | SequenceBatch) -> PyTorchObs:
    """The observations of a replay batch, whether or not it is a :class:`SequenceBatch`."""
    return observations.observations if isinstance(observations, SequenceBatch) else observations


class MemoryExtractor(BaseFeaturesExtractor):
    """A features extractor followed by ML-Agents' LSTM memory block (:class:`~unity_sb3.networks.memory.LSTMMemory`).

    Called directly (SB3's way) it treats each row as one step from zero memory; the recurrent
    actor and critics unroll ``memory`` over sequences instead.

    :param body: the observation encoder.
    :param memory_size: floats of memory per agent (even; the LSTM has ``memory_size // 2`` units).
    """

    def __init__(self, body: BaseFeaturesExtractor, memory_size: int) -> None:
        check_memory_settings(memory_size, 1)
        super().__init__(body._observation_space, memory_size // 2)
        self.body = body
        self.memory_size = memory_size
        self.memory = LSTMMemory(body.features_dim, memory_size)

    def forward(self, observations: th.Tensor) -> th.Tensor:
        features = self.body(observations).unsqueeze(1)
        return self.memory(features, self.memory.initial_memories(len(features), features.device))[0][:, 0]


class _UnrollsSequences:
    """Actor/critic mix-in: features of a :class:`SequenceBatch` come from the LSTM unrolled over it.

    ``final_memories`` keeps the memory after the last step of the latest unroll (what acting carries on).
    """

    #: whether sequences start from their stored (actor's) memory, or from zeros (ML-Agents' Q networks)
    starts_from_stored_memory: bool = True
    final_memories: th.Tensor | None = None

    def extract_features(self, obs: Any, features_extractor: BaseFeaturesExtractor) -> th.Tensor:
        if not isinstance(obs, SequenceBatch):
            return super().extract_features(obs, features_extractor)  # type: ignore[misc]
        if not isinstance(features_extractor, MemoryExtractor):
            raise TypeError(
                f"a SequenceBatch needs a MemoryExtractor, got {type(features_extractor).__name__}."
            )
        body_features = super().extract_features(obs.observations, features_extractor.body)  # type: ignore[misc]
        n = obs.memories.shape[0]
        memories = obs.memories if self.starts_from_stored_memory else th.zeros_like(obs.memories)
        if obs.sequence_mask is not None:
            starts = obs.episode_starts
            if starts is None:
                starts = body_features.new_zeros(body_features.shape[0])
            outputs, self.final_memories = unroll_sequences(
                features_extractor.memory, body_features, memories, starts, obs.sequence_mask
            )
            return outputs
        outputs, self.final_memories = features_extractor.memory(
            body_features.reshape(n, -1, body_features.shape[-1]),
            memories,
            None if obs.episode_starts is None else obs.episode_starts.reshape(n, -1),
        )
        return outputs.reshape(-1, outputs.shape[-1])


class RecurrentActor(_UnrollsSequences, Actor):
    """SB3's SAC actor over :class:`SequenceBatch` observations (continuous actions)."""


class RecurrentContinuousCritic(_UnrollsSequences, ContinuousCritic):
    """SB3's twin Q networks over :class:`SequenceBatch` observations, unrolled from zero memory."""

    starts_from_stored_memory = False


class RecurrentBranchedActor(_UnrollsSequences, BranchedActor):
    """The discrete/hybrid actor over :class:`SequenceBatch` observations."""


class RecurrentBranchedCritic(_UnrollsSequences, BranchedCritic):
    """The discrete/hybrid Q networks over :class:`SequenceBatch` observations, unrolled from zero memory."""

    starts_from_stored_memory = False


class RecurrentPolicyMixin:
    """What the recurrent SAC policies add to their memoryless bases: memory settings, the memory
    extractor and acting with a carried memory (sb3-contrib's ``predict(obs, state, episode_start)``).

    The ``state`` of :meth:`predict` is ML-Agents' flat memory, ``(n_envs, memory_size)`` float32.

    :param memory_size: ML-Agents' ``memory_size``: LSTM hidden + cell floats (LSTM units = half).
    :param sequence_length: ML-Agents' ``sequence_length``: steps per sampled training sequence.
    """

    memory_size: int
    sequence_length: int
    actor: Any
    action_space: spaces.Space

    def __init__(
        self,
        *args: Any,
        memory_size: int = DEFAULT_MEMORY_SIZE,
        sequence_length: int = DEFAULT_SEQUENCE_LENGTH,
        **kwargs: Any,
    ) -> None:
        check_memory_settings(memory_size, sequence_length)
        self.memory_size, self.sequence_length = int(memory_size), int(sequence_length)
        super().__init__(*args, **kwargs)

    def make_features_extractor(self) -> MemoryExtractor:
        return MemoryExtractor(super().make_features_extractor(), self.memory_size)  # type: ignore[misc]

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()  # type: ignore[misc]
        data.update(memory_size=self.memory_size, sequence_length=self.sequence_length)
        return data

    def act(
        self,
        obs: PyTorchObs,
        memories: th.Tensor | np.ndarray,
        action_masks: np.ndarray | th.Tensor | None = None,
        deterministic: bool = False,
    ) -> tuple[th.Tensor, th.Tensor]:
        """One step of every agent: actions in the replay buffer's layout and the memories after it.

        :param obs: ``(n, ...)`` observations (tensors).
        :param memories: ``(n, memory_size)`` before the step (already reset at episode starts).
        :param action_masks: ``(n, sum(branches))`` (discrete actions only), True = allowed.
        """
        memories = th.as_tensor(memories, dtype=th.float32, device=self.actor.device)
        batch = SequenceBatch(obs, None, memories)
        if action_masks is None:
            actions = self.actor(batch, deterministic)
        else:
            actions = self.actor(batch, deterministic, action_masks)
        return actions, self.actor.final_memories

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: np.ndarray | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[Any, np.ndarray]:
        """Actions and the new memory, as sb3-contrib's recurrent policies.

        :param state: ``(n, memory_size)`` memory from the previous call; None = zeros (episodes starting).
        :param episode_start: ``(n,)``, True where an episode starts (its memory is reset first).
        :param action_masks: ``(n, sum(branches))`` (discrete actions only), True = allowed.
        :return: actions as the memoryless policy returns them, and the memory ``(n, memory_size)``.
        """
        self.set_training_mode(False)  # type: ignore[attr-defined]
        obs_tensor, vectorized_env = self.obs_to_tensor(observation)  # type: ignore[attr-defined]
        n = len(next(iter(obs_tensor.values())) if isinstance(obs_tensor, dict) else obs_tensor)
        memories, starts = predict_memories(state, episode_start, n, self.memory_size, self.actor.device)
        memories = memories * (1.0 - starts.reshape(n, 1))
        with th.no_grad():
            actions, new_memories = self.act(obs_tensor, memories, action_masks, deterministic)
        env_actions = self.to_env_actions(actions.cpu().numpy())  # type: ignore[attr-defined]
        if not vectorized_env:
            env_actions = (
                tuple(a[0] for a in env_actions) if isinstance(env_actions, tuple) else env_actions[0]
            )
        return env_actions, new_memories.cpu().numpy()


class RecurrentSACPolicy(RecurrentPolicyMixin, SACPolicy):
    """SB3's ``SACPolicy`` (continuous actions) with memory in the actor and Q networks.

    Takes ``SACPolicy``'s arguments and :class:`RecurrentPolicyMixin`'s ``memory_size`` and ``sequence_length``.
    """

    def make_actor(self, features_extractor: BaseFeaturesExtractor | None = None) -> RecurrentActor:
        return RecurrentActor(**self._update_features_extractor(self.actor_kwargs, features_extractor)).to(
            self.device
        )

    def make_critic(
        self, features_extractor: BaseFeaturesExtractor | None = None
    ) -> RecurrentContinuousCritic:
        kwargs = self._update_features_extractor(self.critic_kwargs, features_extractor)
        return RecurrentContinuousCritic(**kwargs).to(self.device)

    def to_env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Squashed actions ``(n, *shape)`` in [-1, 1] -> the action space's bounds."""
        return self.unscale_action(actions.reshape((-1, *self.action_space.shape)))  # type: ignore[misc]


class RecurrentCnnPolicy(RecurrentSACPolicy):
    """:class:`RecurrentSACPolicy` with SB3's NatureCNN (image observations)."""

    def __init__(
        self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN, **kwargs
    ):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


class RecurrentMultiInputPolicy(RecurrentSACPolicy):
    """:class:`RecurrentSACPolicy` with SB3's CombinedExtractor (``Dict`` observations)."""

    def __init__(
        self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = CombinedExtractor, **kwargs
    ):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


class RecurrentBranchedSACPolicy(RecurrentPolicyMixin, BranchedSACPolicy):
    """:class:`BranchedSACPolicy` (discrete and hybrid actions) with memory in the actor and Q networks.

    Takes ``BranchedSACPolicy``'s arguments and :class:`RecurrentPolicyMixin`'s ``memory_size`` and ``sequence_length``.
    """

    actor_class = RecurrentBranchedActor
    critic_class = RecurrentBranchedCritic


class RecurrentBranchedCnnPolicy(RecurrentBranchedSACPolicy):
    """:class:`RecurrentBranchedSACPolicy` with SB3's NatureCNN (image observations)."""

    def __init__(
        self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN, **kwargs
    ):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


class RecurrentBranchedMultiInputPolicy(RecurrentBranchedSACPolicy):
    """:class:`RecurrentBranchedSACPolicy` with SB3's CombinedExtractor (``Dict`` observations)."""

    def __init__(
        self, *args: Any, features_extractor_class: type[BaseFeaturesExtractor] = CombinedExtractor, **kwargs
    ):
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)
