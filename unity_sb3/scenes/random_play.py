"""Uniform random play for any behavior of a ``BaseEnv``: the baseline of the scenes' reference returns.

ML-Agents' ``ActionSpec.random_action`` ignores action masks; :func:`random_actions` draws
discrete actions among the allowed ones only, vectorised over agents, so that it works on any
scene, embedded or a real Unity build.
"""

from __future__ import annotations

import numpy as np
from mlagents_envs.base_env import ActionTuple, BehaviorSpec, DecisionSteps


def random_actions(
    spec: BehaviorSpec, steps: DecisionSteps, rng: np.random.Generator, high: float = 1.0
) -> ActionTuple:
    """Uniform continuous actions in [-high, high]; each discrete branch uniform over its allowed actions.

    :param spec: the behavior's spec.
    :param steps: the agents asking for a decision (their ``action_mask`` is respected).
    :param rng: the random generator (continuous draws first, then one score per branch entry).
    :param high: bound of the continuous draws (above 1 tests a scene's clipping).
    :return: ``continuous`` (n, continuous_size) float32 and ``discrete`` (n, n_branches) int32.
    """
    n = len(steps)
    continuous = rng.uniform(-high, high, (n, spec.action_spec.continuous_size)).astype(np.float32)
    discrete = np.zeros((n, spec.action_spec.discrete_size), dtype=np.int32)
    for b, size in enumerate(spec.action_spec.discrete_branches):
        allowed = np.ones((n, size), dtype=bool)
        if steps.action_mask is not None:
            allowed = ~np.asarray(steps.action_mask[b], dtype=bool)
        scores = rng.random((n, size)) * allowed  # a masked action scores 0, never an allowed one's maximum
        scores[~allowed.any(axis=1), 0] = 1.0  # every action masked: the first, as Unity would take it
        discrete[:, b] = scores.argmax(axis=1)
    return ActionTuple(continuous=continuous, discrete=discrete)
