"""Who is in each row's group at its step, and which rows of a POCA rollout share one value V.

:func:`group_mates` finds every decision's living groupmates (deciding now or not). At a step
where every member of a group decides, each member's row holds the same entity set for V (its own
observation and its groupmates', all from that step), so V is the same number for all of them. A *unit* is such a set of rows; a row whose groupmates' observations come from other
steps (they did not decide now, or were carried from the previous rollout) is a unit of its own.

Minibatches made of whole units let the critic compute V once per unit instead of once per row
(:meth:`~unity_sb3.algorithms.poca.networks.GroupCriticBody.value_and_baseline`'s
``shared_values``): with groups of three that is a third of V's entity sets. The loss is unchanged
for the rows of a minibatch (each row still has its own V term); only which rows share a minibatch
changes.
"""

from __future__ import annotations

import numpy as np

#: :func:`~unity_sb3.algorithms.poca.returns.transition_owners`' value of a live agent whose last decision was before the rollout
BEFORE_ROLLOUT = -2


def group_mates(
    active: np.ndarray,
    group_keys: np.ndarray,
    last_rows: np.ndarray | None = None,
    keys_before: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Groupmates of every active row at the same step, deciding or not.

    :param active: (n_steps, n_envs) bool.
    :param group_keys: (n_steps, n_envs) int group codes.
    :param last_rows: (n_steps, n_envs) row of each slot's live agent's last decision at or
        before t (:func:`~unity_sb3.algorithms.poca.returns.transition_owners`); None: only the agents deciding at t are present.
    :param keys_before: (n_envs,) group codes of the decisions made before the rollout (rows
        ``BEFORE_ROLLOUT`` of ``last_rows``).
    :return: ``(mates, mate_rows)``, both (n_steps, n_envs, max_mates) int (max_mates >= 0):
        slot indices of the other living members of the row's group at that step, padded with
        -1, and the row of each one's last decision (``BEFORE_ROLLOUT``: before the rollout).
    """
    n_steps, n_envs = active.shape
    if last_rows is None:
        last_rows = np.where(active, np.arange(n_steps)[:, None], -1)
    slots = np.arange(n_envs)
    present = last_rows != -1
    member_keys = group_keys[np.maximum(last_rows, 0), slots]
    if keys_before is not None:
        member_keys = np.where(last_rows == BEFORE_ROLLOUT, np.asarray(keys_before)[None, :], member_keys)
    # same[t, i, j]: slot j is a living member of deciding row (t, i)'s group, j != i (in chunks of steps)
    chunk = max(1, (1 << 22) // max(1, n_envs * n_envs))
    parts = []
    for start in range(0, n_steps, chunk):
        rows = slice(start, start + chunk)
        same = (member_keys[rows, None, :] == group_keys[rows, :, None]) & present[rows, None, :]
        same &= active[rows, :, None]
        same[:, slots, slots] = False
        parts.append(same)
    counts = [part.sum(axis=2) for part in parts]
    max_mates = max((int(c.max()) for c in counts if c.size), default=0)
    mates = np.full((n_steps, n_envs, max_mates), -1, dtype=np.int64)
    mate_rows = np.full((n_steps, n_envs, max_mates), -1, dtype=np.int64)
    for k, (same, count) in enumerate(zip(parts, counts)):
        rows = slice(k * chunk, k * chunk + len(same))
        order = np.argsort(~same, axis=2, kind="stable")[:, :, :max_mates]  # members first, in slot order
        filled = np.arange(max_mates)[None, None, :] < count[:, :, None]
        steps = np.arange(len(same))[:, None, None]
        mates[rows] = np.where(filled, order, -1)
        mate_rows[rows] = np.where(filled, last_rows[rows][steps, order], -1)
    return mates, mate_rows


def group_step_units(mates: np.ndarray, mate_rows: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Unit number of every active row (-1 at inactive rows).

    :param mates: each row's groupmate slots, shape (n_steps, n_envs, width), -1 = none.
    :param mate_rows: the step each groupmate's observation comes from, same shape
        (``BEFORE_ROLLOUT`` for groupmates carried from the previous rollout).
    :param active: shape (n_steps, n_envs), True where an agent decided.
    :return: shape (n_steps, n_envs), int64; rows with the same number have the same V.
    """
    n_envs = active.shape[1]
    steps, slots = np.nonzero(active)
    units = np.full(active.shape, -1, dtype=np.int64)
    if steps.size == 0:
        return units
    present = mates[steps, slots] >= 0
    same_step = np.all(~present | (mate_rows[steps, slots] == steps[:, None]), axis=1)
    members = np.where(present, mates[steps, slots], n_envs)  # padding sorts last
    members = np.sort(np.concatenate([slots[:, None], members], axis=1), axis=1)
    # a row whose V set is not all from its own step keeps to itself: no other row has -1 - slot
    members[~same_step, 0] = -1 - slots[~same_step]
    _, inverse = np.unique(np.concatenate([steps[:, None], members], axis=1), axis=0, return_inverse=True)
    units[steps, slots] = inverse.reshape(-1)  # numpy 2.0.0 gave this inverse an extra axis
    return units


def unit_order(units: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Shuffled minibatches of whole units: positions into ``units``, each cut at the first unit
    boundary at or after a multiple of ``batch_size`` rows (so within a unit of it).

    :param units: the unit number of each row to sample, shape (n_rows,).
    :param batch_size: rows per minibatch before rounding up to the end of a unit.
    :return: one array of positions per minibatch.
    """
    rank = np.random.permutation(int(units.max()) + 1)  # a random rank per unit
    order = np.argsort(rank[units], kind="stable")
    return np.split(order, runs_cut_near(units[order], batch_size))


def runs_cut_near(keys: np.ndarray, batch_size: int) -> np.ndarray:
    """Where to cut a sequence into chunks of about ``batch_size`` without splitting a run of equal
    keys: at the first run start at or after each multiple of ``batch_size``.

    :param keys: shape (n,), equal keys next to each other (a unit's rows, a step's rows).
    :param batch_size: positions per chunk before rounding up to the end of a run.
    :return: the cut positions for ``np.split``, increasing, each in (0, n).
    """
    n = keys.size
    starts = np.r_[np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]), n]
    cuts = np.unique(starts[np.searchsorted(starts, np.arange(batch_size, n, batch_size))])
    return cuts[cuts < n]


def shared_values(units: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Which rows of a minibatch compute V and which V each row takes.

    :param units: the unit number of each row of the minibatch, shape (batch,).
    :return: ``(value_rows, value_index)``: the first row of each unit in the minibatch, in
        increasing order (U,), and per row the position of its unit's row in ``value_rows``
        (batch,); ``None`` when every row is its own unit.
    """
    _, first, unit_index = np.unique(units, return_index=True, return_inverse=True)
    if first.size == units.size:
        return None
    order = np.argsort(first)
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    return first[order], position[unit_index.reshape(-1)]


def rows_in_batch(flat: np.ndarray, wanted: np.ndarray, present: np.ndarray) -> np.ndarray | None:
    """Where the rows ``wanted`` are in a minibatch (the groupmates' own rows, to take their
    observations and actions from).

    :param flat: the minibatch's rows as flat indices ``t * n_envs + i``, shape (batch,), distinct.
    :param wanted: flat indices to find, shape (batch, width).
    :param present: which entries of ``wanted`` to find, same shape.
    :return: the position in ``flat`` of each present entry, -1 elsewhere, shape (batch, width);
        None when some present entry is not a row of the minibatch.
    """
    if flat.size == 0:
        return None
    order = np.argsort(flat)
    at = np.minimum(np.searchsorted(flat[order], wanted), flat.size - 1)
    found = flat[order][at] == wanted
    if not np.all(found | ~present):
        return None
    return np.where(present, order[at], -1)
