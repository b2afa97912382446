"""SAC with ML-Agents' reward signals and BC term, on SB3's SAC (see :class:`SAC`)."""

from __future__ import annotations

from unity_sb3.algorithms.sac.sac import (
    SAC,
    widen_q_networks,
)

__all__ = [
    "SAC",
    "widen_q_networks",
]
