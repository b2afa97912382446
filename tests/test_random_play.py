"""Uniform random play (``unity_sb3.scenes.random_play``): bounds, shapes and action masks."""

from __future__ import annotations

import numpy as np
import pytest

import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)
from unity_sb3.scenes import make_scene
from unity_sb3.scenes.random_play import random_actions


@pytest.mark.parametrize(("scene", "high"), [("Ball3D", 1.0), ("Ball3D", 1.2), ("HybridLine", 1.0)])
def test_continuous_actions_are_uniform_within_the_bound(scene, high):
    env = make_scene(scene, seed=0, num_agents=64)
    env.reset()
    behavior = next(iter(env.behavior_specs))
    spec = env.behavior_specs[behavior]
    actions = random_actions(spec, env.get_steps(behavior)[0], np.random.default_rng(0), high=high)
    assert actions.continuous.dtype == np.float32
    assert actions.continuous.shape == (64, spec.action_spec.continuous_size)
    assert np.abs(actions.continuous).max() <= high
    assert np.abs(actions.continuous).max() > 0.8 * high  # spread over the range, not squeezed
    assert actions.discrete.shape == (64, spec.action_spec.discrete_size)


def test_discrete_actions_stay_among_the_allowed_ones():
    env = make_scene("GridWorld", seed=0, num_agents=16)  # GridWorld masks the moves into walls
    env.reset()
    behavior = next(iter(env.behavior_specs))
    spec = env.behavior_specs[behavior]
    rng = np.random.default_rng(1)
    seen = set()
    for _ in range(30):
        decision = env.get_steps(behavior)[0]
        actions = random_actions(spec, decision, rng)
        assert actions.discrete.dtype == np.int32
        for b, mask in enumerate(decision.action_mask):
            assert not mask[np.arange(len(decision)), actions.discrete[:, b]].any()
        seen.update(actions.discrete[:, 0].tolist())
        env.set_actions(behavior, actions)
        env.step()
    assert len(seen) == spec.action_spec.discrete_branches[0]  # every action is drawn at some point


def test_a_branch_with_every_action_masked_takes_the_first():
    from mlagents_envs.base_env import ActionSpec, BehaviorSpec, DecisionSteps

    spec = BehaviorSpec([], ActionSpec.create_discrete((3,)))
    mask = [np.array([[True, True, True], [False, True, False]])]
    steps = DecisionSteps(
        [], np.zeros(2, np.float32), np.arange(2), mask, np.zeros(2), np.zeros(2, np.float32)
    )
    actions = random_actions(spec, steps, np.random.default_rng(0))
    assert actions.discrete[0, 0] == 0
    assert actions.discrete[1, 0] in (0, 2)
