"""Advantages as ML-Agents' on-policy trainers compute them: trajectories cut every ``time_horizon``
decisions, and normalisation once per update over the buffer.

- ``time_horizon``: ML-Agents' agent processor hands an agent's experiences to the trainer as a
  trajectory every ``time_horizon`` decisions (and at the episode's end); returns and advantages
  are computed per trajectory, bootstrapping from the value of the observation after it
  (``get_gae`` / ``lambda_return`` with ``value_next``). :func:`horizon_cuts` marks the decisions
  that end such a trajectory; PPO and POCA stop their GAE / TD(lambda) recursion there.
- ``OnPolicyTrainer._update_policy`` normalises the whole update buffer's advantages to mean 0 and
  std 1 (numpy's population std) before cutting minibatches; SB3 normalises each minibatch instead.
  POCA always does ML-Agents'; PPO when ``normalize_advantage="buffer"``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_time_horizon", "horizon_cuts", "normalize_active_advantages"]


def check_time_horizon(time_horizon: object, error: type[Exception] = ValueError) -> int | None:
    """``time_horizon`` as given, if it is ``None`` or a whole number >= 1; else ``error`` saying so."""
    if time_horizon is not None and (
        isinstance(time_horizon, bool) or not isinstance(time_horizon, int) or time_horizon < 1
    ):
        raise error(
            f"time_horizon must be a whole number of agent steps >= 1 (or None), got {time_horizon!r}."
        )
    return time_horizon


def horizon_cuts(
    counts: np.ndarray, active: np.ndarray, dones: np.ndarray, time_horizon: int | None
) -> np.ndarray | None:
    """Which slots' decisions of the step just taken end a ``time_horizon`` trajectory.

    A trajectory ends every ``time_horizon`` decisions since the agent's episode started (or since
    its last trajectory ended); an episode's end ends one anyway, and restarts the count.

    :param counts: ``(n_envs,)`` int, decisions in each slot's current trajectory before this step;
        updated in place.
    :param active: ``(n_envs,)`` bool, the slot's agent decided at this step.
    :param dones: ``(n_envs,)`` bool, the slot's episode ended with this step.
    :param time_horizon: decisions per trajectory; ``None``: no cuts (``None`` is returned).
    :return: ``(n_envs,)`` bool, the decision at this step ends a trajectory that goes on after it.
    """
    if time_horizon is None:
        return None
    active, dones = np.asarray(active, dtype=bool), np.asarray(dones, dtype=bool)
    counts += active
    ends = active & (counts >= time_horizon) & ~dones
    counts[ends | dones] = 0
    return ends


def normalize_active_advantages(advantages: np.ndarray, active: np.ndarray) -> None:
    """Normalise, in place, the advantages of the active transitions over all of them.

    :param advantages: advantages, any shape (e.g. ``(n_steps, n_envs)``), float.
    :param active: bool mask of the same shape; inactive (placeholder) entries are left as they are
        (they never reach a loss). Fewer than two active entries: nothing changes.
    """
    if active.sum() > 1:
        kept = advantages[active]
        advantages[active] = (kept - kept.mean()) / (kept.std() + 1e-8)
