"""Ending slots' episodes: the terminal batches of one wrapper step absorbed into its results.

``UnityVecEnv`` steps Unity until some slot's agent asks for a decision (DESIGN 4.2). Agents end
their episodes in the Unity steps in between (Ball3D with random actions: ~4.6 terminal batches of
~3 agents per wrapper step at 256 agents). Nothing reads the slots between two such steps, so the
batches are collected and absorbed together, once, before the next decision batch is matched:
concatenated into one batch, whose slots then end in a few vectorised operations, exactly as
absorbing the batches one after the other would end them.

Also the array helpers the wrapper's modules share (observations may be arrays or dicts of arrays).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)

from mlagents_envs.base_env import TerminalSteps  # isort: skip

if TYPE_CHECKING:
    from unity_sb3.spaces import BehaviorSpaces

#: Up to this many slots ending in one terminal batch are absorbed in scalar steps (measured: scalar
#: steps win up to 3, the row selections from 4 on).
_FEW_ENDED = 3
# ndarray.any() / .all() without their Python-level wrappers (1-d bool arrays)
_any, _all = np.logical_or.reduce, np.logical_and.reduce


def _take(obs: Any, rows: np.ndarray) -> Any:
    if isinstance(obs, dict):
        return {k: v[rows] for k, v in obs.items()}
    return obs[rows]


def _row(obs: Any, index: int) -> Any:
    if isinstance(obs, dict):
        return {k: v[index] for k, v in obs.items()}
    return obs[index]


def _copy(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: np.array(v) for k, v in obs.items()}
    return np.array(obs)


def _merged(
    parts: list[tuple[TerminalSteps, list[tuple[int, int]]]],
) -> list[tuple[TerminalSteps, list[tuple[int, int]]]]:
    """Several terminal batches with their ``(slot, row)`` pairs as one batch (rows shifted), when
    their arrays concatenate without changing a type; else ``parts`` as they are. (Conservative:
    float observations of mixed widths would give the same float32 values, but group ids of mixed
    signedness, e.g. uint64 and int64, would concatenate to floats.)"""
    first = parts[0][0]
    for term, _ in parts[1:]:
        if term.group_id.dtype != first.group_id.dtype or any(
            a.dtype != b.dtype for a, b in zip(term.obs, first.obs)
        ):
            return parts
    terms = [term for term, _ in parts]
    pairs: list[tuple[int, int]] = []
    offset = 0
    for term, found in parts:
        pairs += [(slot, j + offset) for slot, j in found] if offset else found
        offset += len(term)
    cat = np.concatenate
    merged = TerminalSteps(
        [cat([t.obs[i] for t in terms]) for i in range(len(first.obs))],
        cat([t.reward for t in terms]),
        cat([t.interrupted for t in terms]),
        cat([t.agent_id for t in terms]),
        cat([t.group_id for t in terms]),
        cat([t.group_reward for t in terms]),
    )
    return [(merged, pairs)]


def _put(buf: Any, index: np.ndarray, values: Any) -> None:
    if isinstance(buf, dict):
        for k, v in buf.items():
            v[index] = values[k]
    else:
        buf[index] = values


def _put_slice(buf: Any, sl: slice, values: Any, n: int) -> None:
    if isinstance(buf, dict):
        for k, v in buf.items():
            v[sl] = values[k][:n]
    else:
        buf[sl] = values[:n]


def absorb_terminals(
    inst: Any,
    batches: list[TerminalSteps],
    spaces: BehaviorSpaces,
    obs_buf: Any,
    reward: np.ndarray,
    group_reward: np.ndarray,
    done: np.ndarray,
    truncated: np.ndarray,
    terminal_obs: dict[int, Any],
) -> None:
    """End the episodes of the slots of ``inst`` whose agent is in ``batches`` (consecutive terminal batches,
    in Unity's order), exactly as absorbing them one after the other would: the first batch that
    names a slot's agent ends it (its agent leaves ``slot_of``), and each slot ends at most once."""
    # few agents end per step: a dict lookup beats sorting every slot's id
    slot_of = inst.slot_of
    parts = []
    for term in batches:
        pairs = [(slot_of.pop(a), j) for j, a in enumerate(term.agent_id.tolist()) if a in slot_of]
        if pairs:
            parts.append((term, pairs))
    # one batch of many slots beats several of a few (few slots each end in scalar steps, which beat
    # concatenating the batches: measured with 12 and 256 Ball3D agents)
    if len(parts) > 1 and sum(len(pairs) for _, pairs in parts) > _FEW_ENDED:
        parts = _merged(parts)
    for term, pairs in parts:
        _absorb_pairs(inst, term, pairs, spaces, obs_buf, reward, group_reward, done, truncated, terminal_obs)


def _absorb_pairs(
    inst: Any,
    term: TerminalSteps,
    pairs: list[tuple[int, int]],
    spaces: BehaviorSpaces,
    obs_buf: Any,
    reward: np.ndarray,
    group_reward: np.ndarray,
    done: np.ndarray,
    truncated: np.ndarray,
    terminal_obs: dict[int, Any],
) -> None:
    """End slot ``s``'s episode with row ``j`` of ``term``, for each ``(s, j)`` of ``pairs``."""
    converted = spaces.observations(term.obs)
    if len(pairs) == 1:  # the usual case
        slot, j = pairs[0]
        ended: Any = slot
        last = _copy(_row(converted, j))
        terminal_obs[slot] = last
    else:
        slots = [p[0] for p in pairs]
        ended = np.array(slots, dtype=np.int64)
        every = len(pairs) == len(term)  # every ended agent had a slot (the usual case): no row selection
        term_rows: Any = slice(None) if every else np.array([p[1] for p in pairs], dtype=np.int64)
        last = _copy(converted) if every else _take(converted, term_rows)
        if isinstance(last, dict):
            for j, local in enumerate(slots):
                terminal_obs[local] = _row(last, j)
        else:  # a row view each, as last[j]
            terminal_obs.update(zip(slots, last))
    if len(pairs) <= _FEW_ENDED:  # scalar steps beat a dozen row selections
        rew, group_rew = term.reward.tolist(), term.group_reward.tolist()  # float32 values, exact
        groups, interrupted = term.group_id.tolist(), term.interrupted.tolist()
        group_id = inst.group_id
        for slot, j in pairs:
            reward[slot] += rew[j]  # a float32 sum, as with term.reward[j]
            group_reward[slot] += group_rew[j]
            group_id[slot] = groups[j]
            done[slot] = True
            truncated[slot] = interrupted[j]
    else:  # more than _FEW_ENDED pairs: ``term_rows`` is set above
        reward[ended] += term.reward[term_rows]
        group_reward[ended] += term.group_reward[term_rows]
        inst.group_id[ended] = term.group_id[term_rows]
        truncated[ended] = term.interrupted[term_rows]
        done[ended] = True
    # placeholder until a new agent takes the slot: the terminal observation
    _put(obs_buf, inst.start + ended, last)
    inst.bound[ended] = False
    # ``inst.rows`` needs no update: the decision batch that follows sets them all (and when the
    # loop ends without one, or a crash ends it, the last Unity step left them all -1)
    inst.all_bound = False
    inst.identity = False
