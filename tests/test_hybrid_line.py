"""HybridLine: ML-Agents' hybrid-action learning-test scene, vectorised."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple

from unity_sb3.scenes import list_scenes, make_scene
from unity_sb3.unity.errors import UnityConfigurationError

NAME = "HybridLine?team=0"


def run_episodes(env, policy, n_steps: int = 40) -> list[float]:
    """Step every agent with ``policy(decision_steps) -> ActionTuple``; the rewards of finished episodes."""
    env.reset()
    returns, running = [], {}
    for _ in range(n_steps):
        dec, term = env.get_steps(NAME)
        for i, agent in enumerate(term.agent_id):
            returns.append(running.pop(agent, 0.0) + float(term.reward[i]))
        for i, agent in enumerate(dec.agent_id):
            running[agent] = running.get(agent, 0.0) + float(dec.reward[i])
        env.set_actions(NAME, policy(dec))
        env.step()
    return returns


def test_registered_with_a_hybrid_action_spec():
    assert "HybridLine" in list_scenes()
    env = make_scene("HybridLine", num_agents=3)
    spec = env.behavior_specs[NAME]
    assert spec.action_spec.continuous_size == 1 and spec.action_spec.discrete_branches == (2,)
    assert spec.observation_specs[0].shape == (1,)
    env.reset()
    dec, _ = env.get_steps(NAME)
    assert len(dec) == 3 and set(np.unique(dec.obs[0])) <= {-1.0, 1.0}


def test_the_expert_scores_unitys_best_return_in_two_steps():
    env = make_scene("HybridLine", num_agents=4, seed=1)
    returns = run_episodes(env, lambda dec: env.expert_actions(NAME, dec))
    assert len(returns) >= 4 * 15
    np.testing.assert_allclose(returns, 1.05, atol=1e-5)  # -0.01, then 1.06 at the goal's end


def test_wrong_direction_is_punished_and_both_actions_matter():
    env = make_scene("HybridLine", num_agents=4, seed=2)

    def discrete_wrong(dec):
        goal = dec.obs[0]
        return ActionTuple(continuous=goal.astype(np.float32), discrete=(goal < 0).astype(np.int32))

    # the continuous end matches the goal, the discrete one is opposite: mean(1, -1) * 1.06 = 0
    returns = run_episodes(env, discrete_wrong)
    np.testing.assert_allclose(returns, -0.01, atol=1e-5)

    def all_wrong(dec):
        goal = dec.obs[0]
        return ActionTuple(continuous=-goal.astype(np.float32), discrete=(goal < 0).astype(np.int32))

    np.testing.assert_allclose(run_episodes(env, all_wrong), -1.07, atol=1e-5)


def test_an_agent_that_never_reaches_an_end_is_interrupted_at_max_steps():
    env = make_scene("HybridLine", num_agents=2, max_steps=5)
    env.reset()
    interrupted = []
    for _ in range(6):
        dec, term = env.get_steps(NAME)
        interrupted += list(term.interrupted)
        env.set_actions(
            NAME,
            ActionTuple(
                continuous=np.zeros((len(dec), 1), np.float32), discrete=np.ones((len(dec), 1), np.int32)
            ),
        )
        env.step()
    dec, term = env.get_steps(NAME)
    interrupted += list(term.interrupted)
    assert interrupted and all(interrupted)


def test_sizes_and_step_are_parameters_and_bad_values_are_refused():
    env = make_scene("HybridLine", continuous_size=2, discrete_size=2, step_size=0.5)
    spec = env.behavior_specs[NAME]
    assert spec.action_spec.continuous_size == 2 and spec.action_spec.discrete_branches == (2, 2)
    with pytest.raises(UnityConfigurationError, match="at least one action"):
        make_scene("HybridLine", continuous_size=0, discrete_size=0)
    with pytest.raises(UnityConfigurationError, match="step_size"):
        make_scene("HybridLine", step_size=1.5)
