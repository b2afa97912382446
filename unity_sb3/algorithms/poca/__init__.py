"""MA-POCA for cooperative groups of agents on SB3 (see :class:`POCA`)."""

from __future__ import annotations

from unity_sb3.algorithms.poca.buffers import POCARolloutBuffer
from unity_sb3.algorithms.poca.poca import POCA
from unity_sb3.algorithms.poca.policies import CnnPolicy, MlpPolicy, MultiInputPolicy, POCAPolicy
from unity_sb3.algorithms.poca.recurrent import RecurrentPOCA, RecurrentPOCAPolicy
from unity_sb3.algorithms.poca.returns import compute_poca_returns

__all__ = [
    "POCA",
    "CnnPolicy",
    "MlpPolicy",
    "MultiInputPolicy",
    "POCAPolicy",
    "POCARolloutBuffer",
    "RecurrentPOCA",
    "RecurrentPOCAPolicy",
    "compute_poca_returns",
]
