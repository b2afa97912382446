"""PPO with ML-Agents' reward signals and BC term, on SB3's PPO (see :class:`PPO`)."""

from __future__ import annotations

from unity_sb3.algorithms.ppo.buffers import (
    REWARD_CHUNK,
    SignalRolloutBuffer,
    SignalRolloutBufferSamples,
    copy_obs,
    stack_obs,
)
from unity_sb3.algorithms.ppo.ppo import PPO, widen_value_head
from unity_sb3.slots import active_from_infos, reset_infos_of

__all__ = [
    "PPO",
    "REWARD_CHUNK",
    "SignalRolloutBuffer",
    "SignalRolloutBufferSamples",
    "active_from_infos",
    "copy_obs",
    "reset_infos_of",
    "stack_obs",
    "widen_value_head",
]
