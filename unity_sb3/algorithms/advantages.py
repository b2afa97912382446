"""Advantage normalisation as ML-Agents' on-policy trainers do it: once per update, over the buffer.

``OnPolicyTrainer._update_policy`` normalises the whole update buffer's advantages to mean 0 and
std 1 (numpy's population std) before cutting minibatches; SB3 normalises each minibatch instead.
POCA always does ML-Agents'; PPO when ``normalize_advantage="buffer"``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["normalize_active_advantages"]


def normalize_active_advantages(advantages: np.ndarray, active: np.ndarray) -> None:
    """Normalise, in place, the advantages of the active transitions over all of them.

    :param advantages: advantages, any shape (e.g. ``(n_steps, n_envs)``), float.
    :param active: bool mask of the same shape; inactive (placeholder) entries are left as they are
        (they never reach a loss). Fewer than two active entries: nothing changes.
    """
    if active.sum() > 1:
        kept = advantages[active]
        advantages[active] = (kept - kept.mean()) / (kept.std() + 1e-8)
