"""Ending slots' episodes: the terminal batches of one wrapper step absorbed into its results.

``UnityVecEnv`` steps Unity until some slot's agent asks for a decision (DESIGN 4.2). Agents end
their episodes in the Unity steps in between (Ball3D with random actions: ~4.6 terminal batches of
~3 agents per wrapper step at 256 agents). Nothing reads the slots between two such steps, so the
batches are collected and absorbed together, once, before the next decision batch is matched,
exactly as absorbing them one after the other would end the slots: a few ended slots in scalar
steps, more with one copy of the observation rows per batch and their rewards, group ids and flags
written in one go (as Python values: ``tolist`` of float32 gives each value exactly). Their
placeholder observations are written only for slots that end the wrapper step without a new agent.

Also the array helpers the wrapper's modules share (observations may be arrays or dicts of arrays).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)

from mlagents_envs.base_env import TerminalSteps  # isort: skip

if TYPE_CHECKING:
    from unity_sb3.spaces import BehaviorSpaces

#: Up to this many slots ending in one wrapper step are absorbed in scalar steps (measured: scalar
#: steps win up to 3, the row selections from 4 on).
_FEW_ENDED = 3
# ndarray.any() / .all() without their Python-level wrappers (1-d bool arrays)
any_true, all_true = np.logical_or.reduce, np.logical_and.reduce


def take_rows(obs: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` of observations ``obs`` (an array or a dict of arrays).

    :param obs: an array or a dict of arrays, one row per agent
    :param rows: the row indices to take
    """
    if isinstance(obs, dict):
        return {k: v[rows] for k, v in obs.items()}
    return obs[rows]


def take_row(obs: Any, index: int) -> Any:
    """Row ``index`` of observations ``obs`` (an array or a dict of arrays), as views.

    :param obs: an array or a dict of arrays, one row per agent
    :param index: the row to take
    """
    if isinstance(obs, dict):
        return {k: v[index] for k, v in obs.items()}
    return obs[index]


def copy_obs(obs: Any) -> Any:
    """A copy of observations ``obs`` (an array or a dict of arrays) that owns its memory.

    :param obs: an array or a dict of arrays
    """
    if isinstance(obs, dict):
        return {k: np.array(v) for k, v in obs.items()}
    return np.array(obs)


def put_rows(buf: Any, index: np.ndarray, values: Any) -> None:
    """Write ``values`` into the rows ``index`` of the observation buffer ``buf``.

    :param buf: an array or a dict of arrays, one row per slot
    :param index: the rows (slots) to write, an int or an index array
    :param values: observations of the same layout as ``buf``
    """
    if isinstance(buf, dict):
        for k, v in buf.items():
            v[index] = values[k]
    else:
        buf[index] = values


def put_slice(buf: Any, sl: slice, values: Any, n: int) -> None:
    """Write the first ``n`` rows of ``values`` into the rows ``sl`` of the observation buffer ``buf``.

    :param buf: an array or a dict of arrays, one row per slot
    :param sl: the rows (slots) to write, ``n`` of them
    :param values: observations of the same layout as ``buf``, at least ``n`` rows
    :param n: how many rows to write
    """
    if isinstance(buf, dict):
        for k, v in buf.items():
            v[sl] = values[k][:n]
    else:
        buf[sl] = values[:n]


#: A terminal batch, its rows whose agents end slots, and those slots.
_Part = tuple[TerminalSteps, list[int], list[int]]


def absorb_terminals(
    inst: Any,
    batches: list[TerminalSteps],
    spaces: BehaviorSpaces,
    reward: np.ndarray,
    group_reward: np.ndarray,
    done: np.ndarray,
    truncated: np.ndarray,
    terminal_obs: dict[int, Any],
) -> None:
    """End the episodes of the slots of ``inst`` whose agent is in ``batches`` (consecutive terminal batches,
    in Unity's order), exactly as absorbing them one after the other would: the first batch that
    names a slot's agent ends it (its agent leaves ``slot_of``), and each slot ends at most once.

    The ended slots' placeholders (their terminal observations) are the caller's to write, with
    :func:`put_placeholders`: most slots take a new agent in the same wrapper step, whose observation
    replaces the placeholder.
    """
    slot_of = inst.slot_of
    parts: list[_Part] = []
    for term in batches:
        rows, slots = [], []
        for j, agent in enumerate(term.agent_id.tolist()):
            slot = slot_of.pop(agent, None)  # few agents end per step: a dict lookup beats sorting ids
            if slot is not None:
                rows.append(j)
                slots.append(slot)
        if slots:
            parts.append((term, rows, slots))
    if not parts:
        return
    if sum(len(slots) for _, _, slots in parts) <= _FEW_ENDED:  # scalar steps beat a dozen row selections
        group_id, bound = inst.group_id, inst.bound
        for term, rows, slots in parts:
            converted = spaces.observations(term.obs)  # once per batch, as in _end_many
            for j, slot in zip(rows, slots):
                terminal_obs[slot] = copy_obs(take_row(converted, j))
                reward[slot] += term.reward[j]  # float32 sums, as with float32 arrays
                group_reward[slot] += term.group_reward[j]
                group_id[slot] = term.group_id[j]
                truncated[slot] = term.interrupted[j]
                done[slot] = True
                bound[slot] = False
    else:
        _end_many(inst, parts, spaces, reward, group_reward, done, truncated, terminal_obs)
    # ``inst.rows`` needs no update: the decision batch that follows sets them all (and when the
    # loop ends without one, or a crash ends it, the last Unity step left them all -1)
    inst.all_bound = False
    inst.identity = False


def _end_many(
    inst: Any,
    parts: list[_Part],
    spaces: BehaviorSpaces,
    reward: np.ndarray,
    group_reward: np.ndarray,
    done: np.ndarray,
    truncated: np.ndarray,
    terminal_obs: dict[int, Any],
) -> None:
    """End the slots of ``parts`` (``(batch, rows, slots)``): one copy of the rows' observations per
    batch, then every slot's reward, group reward, group id and flags written in one go."""
    slots: list[int] = []
    rewards: list[float] = []
    group_rewards: list[float] = []
    group_ids: list[int] = []
    interrupted: list[bool] = []
    for term, rows, part_slots in parts:
        every = len(rows) == len(term.agent_id)  # every agent had a slot (the usual case): no row selection
        _keep_terminal_obs(terminal_obs, spaces.observations(term.obs), None if every else rows, part_slots)
        slots += part_slots
        # (``tolist`` of float32 gives each value exactly)
        rewards += _column(term.reward, rows, every)
        group_rewards += _column(term.group_reward, rows, every)
        group_ids += _column(term.group_id, rows, every)
        interrupted += _column(term.interrupted, rows, every)
    index = np.array(slots, dtype=np.intp)
    reward[index] += np.array(rewards, dtype=np.float32)
    group_reward[index] += np.array(group_rewards, dtype=np.float32)
    inst.group_id[index] = group_ids
    truncated[index] = interrupted
    done[index] = True
    inst.bound[index] = False


def _column(values: np.ndarray, rows: list[int], every: bool) -> list[Any]:
    """``values[rows]`` as Python values (``every``: ``rows`` are all of them, in order)."""
    column = values.tolist()
    return column if every else [column[j] for j in rows]


def _keep_terminal_obs(
    terminal_obs: dict[int, Any], converted: Any, rows: list[int] | None, slots: list[int]
) -> None:
    """``terminal_obs[slot]``: a copy of row ``j`` of ``converted``, for each ``slot`` and ``j`` of ``slots``
    and ``rows`` (``None``: every row; one copy of the rows taken)."""
    last = copy_obs(converted) if rows is None else take_rows(converted, rows)
    if isinstance(last, dict):
        for i, slot in enumerate(slots):
            terminal_obs[slot] = take_row(last, i)
    else:  # a row view each, as last[i]
        terminal_obs.update(zip(slots, last))


def put_placeholders(inst: Any, obs_buf: Any, terminal_obs: dict[int, Any], slots: Any) -> None:
    """Write each of ``slots``' terminal observation as its placeholder in ``obs_buf`` (slots that
    ended and did not take a new agent in the same wrapper step)."""
    start = inst.start
    for slot in slots:
        put_rows(obs_buf, start + slot, terminal_obs[slot])
