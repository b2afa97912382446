"""The project's PPO with ML-Agents' LSTM memory (see :class:`RecurrentPPO`)."""

from __future__ import annotations

from unity_sb3.algorithms.recurrent_ppo.policies import (
    RecurrentActorCriticCnnPolicy,
    RecurrentActorCriticPolicy,
    RecurrentMultiInputActorCriticPolicy,
)
from unity_sb3.algorithms.recurrent_ppo.recurrent_ppo import RecurrentPPO

__all__ = [
    "RecurrentActorCriticCnnPolicy",
    "RecurrentActorCriticPolicy",
    "RecurrentMultiInputActorCriticPolicy",
    "RecurrentPPO",
]
