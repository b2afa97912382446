"""``GoalLineTeam``, the re-creation of Unity's ``MultiAgentEnvironment`` that
``benchmarks/poca_vs_mlagents.py`` trains POCA on (the benchmark's ``--check-env`` compares it with
Unity's own class step by step; here: its rules, and that the wrappers and POCA run on it)."""

from __future__ import annotations

import numpy as np
from goal_line import TEAM_BEHAVIOR, TIME_PENALTY, GoalLineTeam

import unity_sb3  # noqa: F401  (protobuf compat before mlagents_envs)

from mlagents_envs.base_env import ActionTuple  # isort: skip


def _move(env: GoalLineTeam, towards: list[bool]) -> None:
    """One step: every asking agent moves a full step towards (True) or away from its goal."""
    dec, _ = env.get_steps(TEAM_BEHAVIOR)
    sign = [env.goals[i] * (1 if towards[i] else -1) for i in dec.agent_id]
    env.set_actions(TEAM_BEHAVIOR, ActionTuple(continuous=np.array(sign, np.float32).reshape(-1, 1)))
    env.step()


def test_the_team_episode_ends_with_the_group_reward_on_the_last_agent_to_arrive() -> None:
    env = GoalLineTeam(seed=3)
    env.reset()
    for _ in range(4):
        _move(env, [True, True])
    goals = list(env.goals)
    _move(env, [True, True])  # both arrive in the same step: agent 1 is the last one
    dec, term = env.get_steps(TEAM_BEHAVIOR)
    success = env.success_reward
    assert list(term.agent_id) == [0, 1] and list(term.group_id) == [1, 1]
    np.testing.assert_allclose(term.reward, [-TIME_PENALTY, 0.0])
    np.testing.assert_allclose(term.group_reward, [0.0, success])
    np.testing.assert_allclose(term.obs[0][:, 0], goals)  # the ended episode's goals
    assert list(dec.agent_id) == [0, 1] and np.all(dec.reward == 0)  # both start again
    assert env.final_rewards == [success, success] and env.agent_steps == 10
    assert env.get_steps(TEAM_BEHAVIOR)[1].agent_id.size == 0  # an end is reported once


def test_an_agent_that_ends_first_waits_and_the_stragglers_end_the_team_episode() -> None:
    env = GoalLineTeam(seed=3)
    env.reset()
    for _ in range(5):
        _move(env, [False, True])  # agent 0 walks to the wrong end, agent 1 to its goal
    dec, term = env.get_steps(TEAM_BEHAVIOR)
    np.testing.assert_allclose(term.reward, [-env.success_reward, 0.0])  # a failure keeps its -1.06
    np.testing.assert_allclose(term.group_reward, [0.0, env.success_reward])
    assert env.final_rewards == [-env.success_reward, env.success_reward]
    env = GoalLineTeam(seed=3)
    env.reset()
    _move(env, [True, True])
    for _ in range(4):
        _move(env, [True, False])  # agent 0 arrives after 5 steps, agent 1 is back at 0
    dec, term = env.get_steps(TEAM_BEHAVIOR)
    assert list(term.agent_id) == [0] and list(dec.agent_id) == [1]  # 0 waits: no decision
    np.testing.assert_allclose(term.reward, [-TIME_PENALTY])  # min(-0.01, its +1.06)
    np.testing.assert_allclose(term.group_reward, [0.0])
    assert env.get_steps(TEAM_BEHAVIOR)[1].obs == []  # no ended agent: no observation array


def test_poca_trains_on_it_through_unity_vec_env() -> None:
    from unity_sb3 import POCA, UnityVecEnv

    scene = GoalLineTeam(discrete=True)
    env = UnityVecEnv(scene)
    model = POCA("MlpPolicy", env, n_steps=32, batch_size=16, seed=0)
    model.learn(256)
    assert scene.final_rewards and scene.agent_steps > 128  # 128 steps of 2 slots, one may wait
    env.close()
