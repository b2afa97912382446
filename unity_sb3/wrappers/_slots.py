"""Vectorised bookkeeping that binds Unity agents to ``UnityVecEnv`` slots."""

from __future__ import annotations

import numpy as np


def match_ids(slot_ids: np.ndarray, bound: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Where each bound slot's agent sits in a batch of agent ids.

    :param slot_ids: ``(n_slots,)`` int64, the agent id bound to each slot (ignored where not bound).
    :param bound: ``(n_slots,)`` bool, whether a slot has an agent.
    :param ids: ``(n_agents,)`` agent ids of a ``DecisionSteps`` or ``TerminalSteps`` batch.
    :return: ``(n_slots,)`` int64 row index into ``ids``, -1 where the slot's agent is absent.
    """
    n_slots, n = len(slot_ids), len(ids)
    if n == 0:
        return np.full(n_slots, -1, dtype=np.int64)
    # fast path: Unity keeps its agents in a stable order, so the bound agents usually lead the batch
    if n >= n_slots and bound.all() and np.array_equal(ids[:n_slots], slot_ids):
        return np.arange(n_slots, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    pos = np.minimum(np.searchsorted(sorted_ids, slot_ids), n - 1)
    found = bound & (sorted_ids[pos] == slot_ids)
    return np.where(found, order[pos], -1).astype(np.int64)


def unassigned_rows(rows_of_slots: np.ndarray, n_agents: int) -> np.ndarray:
    """Rows of an ``n_agents`` batch that no slot points at, in batch order.

    :param rows_of_slots: ``(n_slots,)`` output of :func:`match_ids`.
    :param n_agents: size of the batch.
    :return: int64 row indices.
    """
    taken = np.zeros(n_agents, dtype=bool)
    taken[rows_of_slots[rows_of_slots >= 0]] = True
    return np.flatnonzero(~taken)


def assign_free_slots(
    free_slots: np.ndarray, previous_ids: np.ndarray, had_agent: np.ndarray, candidate_ids: np.ndarray
) -> list[tuple[int, int]]:
    """Pair free slots with unassigned requesting agents.

    A slot first takes back the agent it had before (the same agent starting a new episode,
    or reappearing after a while); the remaining free slots then take the remaining agents in
    the order Unity listed them.

    :param free_slots: ascending local slot indices without an agent.
    :param previous_ids: ``(n_slots,)`` the last agent id each slot had.
    :param had_agent: ``(n_slots,)`` whether ``previous_ids`` is meaningful.
    :param candidate_ids: ids of unassigned requesting agents, in batch order.
    :return: ``(slot, position in candidate_ids)`` pairs.
    """
    pairs: list[tuple[int, int]] = []
    if len(free_slots) == 0 or len(candidate_ids) == 0:
        return pairs
    used = np.zeros(len(candidate_ids), dtype=bool)
    position = {int(a): i for i, a in enumerate(candidate_ids.tolist())}
    remaining: list[int] = []
    for slot in free_slots.tolist():
        i = position.get(int(previous_ids[slot]), -1) if had_agent[slot] else -1
        if i >= 0 and not used[i]:
            used[i] = True
            pairs.append((slot, i))
        else:
            remaining.append(slot)
    rest = np.flatnonzero(~used).tolist()
    pairs.extend(zip(remaining, rest))
    return pairs
