"""Array helpers for lockstep views: one view's agents out of a behavior's batch, batches joined.

Every batch here is already in array form (:class:`~unity_sb3.wrappers._steps.StepReader`'s
output), so a subset is plain numpy indexing. ``rows`` are indices into the batch, shape ``(k,)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)

from mlagents_envs.base_env import ActionTuple, BehaviorSpec, DecisionSteps, TerminalSteps  # isort: skip


def take_decisions(dec: DecisionSteps, rows: np.ndarray) -> DecisionSteps:
    """The agents at ``rows`` of ``dec`` (``dec`` itself when ``rows`` is every row in order).

    :param dec: a batch in array form, ``n`` agents.
    :param rows: ``(k,)`` int indices into ``dec``.
    :return: a batch of ``k`` agents.
    """
    if len(rows) == len(dec) and (len(rows) == 0 or bool((rows == np.arange(len(dec))).all())):
        return dec
    mask = None if dec.action_mask is None else [m[rows] for m in dec.action_mask]
    return DecisionSteps(
        [o[rows] for o in dec.obs],
        dec.reward[rows],
        dec.agent_id[rows],
        mask,
        dec.group_id[rows],
        dec.group_reward[rows],
    )


def take_terminals(term: TerminalSteps, rows: np.ndarray) -> TerminalSteps:
    """The agents at ``rows`` of ``term`` (``term`` itself when ``rows`` is every row in order)."""
    if len(rows) == len(term) and (len(rows) == 0 or bool((rows == np.arange(len(term))).all())):
        return term
    return TerminalSteps(
        [o[rows] for o in term.obs],
        term.reward[rows],
        term.interrupted[rows],
        term.agent_id[rows],
        term.group_id[rows],
        term.group_reward[rows],
    )


def concat_decisions(parts: Sequence[DecisionSteps], spec: BehaviorSpec) -> DecisionSteps:
    """The agents of ``parts`` one after the other (the empty batch of ``spec`` for no agents)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return DecisionSteps.empty(spec)
    if len(parts) == 1:
        return parts[0]
    masks = [p.action_mask for p in parts]
    if any(m is None for m in masks):
        mask = None
        if spec.action_spec.discrete_branches:  # a part without masks allows everything
            mask = [
                np.concatenate(
                    [
                        np.zeros((len(p), b), bool) if p.action_mask is None else p.action_mask[i]
                        for p in parts
                    ]
                )
                for i, b in enumerate(spec.action_spec.discrete_branches)
            ]
    else:
        mask = [np.concatenate(branch) for branch in zip(*masks)]
    return DecisionSteps(
        [np.concatenate(obs) for obs in zip(*(p.obs for p in parts))],
        np.concatenate([p.reward for p in parts]),
        np.concatenate([p.agent_id for p in parts]),
        mask,
        np.concatenate([p.group_id for p in parts]),
        np.concatenate([p.group_reward for p in parts]),
    )


def concat_terminals(parts: Sequence[TerminalSteps], spec: BehaviorSpec) -> TerminalSteps:
    """The agents of ``parts`` one after the other (the empty batch of ``spec`` for no agents)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return TerminalSteps.empty(spec)
    if len(parts) == 1:
        return parts[0]
    return TerminalSteps(
        [np.concatenate(obs) for obs in zip(*(p.obs for p in parts))],
        np.concatenate([p.reward for p in parts]),
        np.concatenate([p.interrupted for p in parts]),
        np.concatenate([p.agent_id for p in parts]),
        np.concatenate([p.group_id for p in parts]),
        np.concatenate([p.group_reward for p in parts]),
    )


def interrupted_terminals(
    agent_ids: Sequence[int], last: Mapping[int, tuple[DecisionSteps, int]], spec: BehaviorSpec
) -> TerminalSteps:
    """Interrupted episode ends (reward 0) for agents that vanished without one (a reset, a detach).

    :param agent_ids: the agents whose episodes end.
    :param last: agent id -> (the latest batch it asked in, its row there): its observation and
        group come from there; an agent never seen asking gets a zero observation and group 0.
    :param spec: the behavior's spec (observation shapes).
    :return: a batch of ``len(agent_ids)`` agents, ``interrupted`` all True.
    """
    n = len(agent_ids)
    ids = np.asarray(list(agent_ids), dtype=np.int64)
    obs = [np.zeros((n, *s.shape), np.float32) for s in spec.observation_specs]
    group = np.zeros(n, np.int64)
    for i, a in enumerate(ids.tolist()):
        seen = last.get(a)
        if seen is not None:
            dec, j = seen
            for o, src in zip(obs, dec.obs):
                o[i] = src[j]
            group[i] = dec.group_id[j]
    return TerminalSteps(obs, np.zeros(n, np.float32), np.ones(n, bool), ids, group, np.zeros(n, np.float32))


def put_actions(full: ActionTuple, rows: np.ndarray, part: ActionTuple) -> None:
    """Write ``part`` (``len(rows)`` agents) into ``full`` at ``rows``, in place."""
    if full.continuous.shape[1]:
        full.continuous[rows] = part.continuous
    if full.discrete.shape[1]:
        full.discrete[rows] = part.discrete


def slice_actions(action: ActionTuple, start: int, stop: int) -> ActionTuple:
    """Agents ``start:stop`` of ``action`` (copies, so later writes to ``action`` do not leak)."""
    return ActionTuple(
        continuous=np.array(action.continuous[start:stop]), discrete=np.array(action.discrete[start:stop])
    )
