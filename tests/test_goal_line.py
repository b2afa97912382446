"""``GoalLine``, the re-creation of Unity's ``SimpleEnvironment`` / ``MemoryEnvironment`` for its learning tests."""

from __future__ import annotations

import numpy as np
import pytest
from goal_line import BEHAVIOR, SUCCESS_REWARD, TIME_PENALTY, VAR_LEN_SIZE, VIS_OBS_SIZE, GoalLine
from mlagents_envs.base_env import ActionTuple, DimensionProperty, ObservationType


def _step(env: GoalLine, continuous: list[float] = (), discrete: list[int] = ()) -> None:
    env.set_actions(
        BEHAVIOR,
        ActionTuple(
            continuous=np.array([continuous], np.float32).reshape(1, -1),
            discrete=np.array([discrete], np.int32).reshape(1, -1),
        ),
    )
    env.step()


def _shown(env: GoalLine) -> float:
    return float(env.get_steps(BEHAVIOR)[0].obs[0][0, 0])


@pytest.mark.parametrize(("action_sizes", "shown_steps"), [((1, 0), 3), ((1, 1), 2)])
def test_memory_environment_shows_the_goal_while_the_episode_has_made_at_most_two_moves(
    action_sizes: tuple[int, int], shown_steps: int
) -> None:
    """Unity counts every action of a step as a move: one action shows 3 observations, two show 2."""
    env = GoalLine(seed=3, show_steps=2, action_sizes=action_sizes, step_size=0.1)
    env.reset()
    goal = env.goal
    seen = [_shown(env)]
    for _ in range(4):
        _step(env, [0.1] * action_sizes[0], [1] * action_sizes[1])
        seen.append(_shown(env))
    assert seen == [goal] * shown_steps + [0.0] * (5 - shown_steps)


def test_hybrid_episode_ends_when_every_position_is_at_an_end_with_the_mean_reward() -> None:
    env = GoalLine(seed=0, action_sizes=(1, 1), step_size=0.8)
    env.reset()
    goal = env.goal
    _step(env, [goal * 1.0], [1 if goal > 0 else 0])  # both move 0.8 towards the goal
    _step(env, [0.0], [1 if goal > 0 else 0])  # only the discrete one reaches its end
    decision, terminal = env.get_steps(BEHAVIOR)
    assert len(terminal) == 0 and decision.reward[0] == np.float32(-TIME_PENALTY)
    _step(env, [goal * 1.0], [0 if goal > 0 else 1])  # the continuous end; the discrete one steps back
    assert len(env.get_steps(BEHAVIOR)[1]) == 0  # the discrete position left its end
    _step(env, [0.0], [1 if goal > 0 else 0])
    terminal = env.get_steps(BEHAVIOR)[1]
    assert len(terminal) == 1
    assert terminal.reward[0] == pytest.approx(SUCCESS_REWARD, rel=1e-6)
    assert env.final_rewards == [pytest.approx(SUCCESS_REWARD - 3 * TIME_PENALTY)]


def test_observation_grid_is_unitys_with_every_observation_showing_the_goal() -> None:
    env = GoalLine(seed=0, num_vector=1, num_visual=1, num_var_len=2, goal_indices=(1,))
    specs = env.spec.observation_specs
    assert [s.shape for s in specs] == [(1,), VIS_OBS_SIZE, VAR_LEN_SIZE, VAR_LEN_SIZE]
    assert specs[2].dimension_property == (DimensionProperty.VARIABLE_SIZE, DimensionProperty.NONE)
    assert [s.observation_type for s in specs] == [
        ObservationType.DEFAULT,
        ObservationType.GOAL_SIGNAL,
        ObservationType.DEFAULT,
        ObservationType.DEFAULT,
    ]
    env.reset()
    for obs, spec in zip(env.get_steps(BEHAVIOR)[0].obs, specs):
        assert obs.shape == (1, *spec.shape) and np.all(obs == env.goal)


def test_success_reward_is_unitys_constant_whatever_the_step_size() -> None:
    env = GoalLine(seed=0, step_size=0.5)
    env.reset()
    goal = env.goal
    _step(env, [goal * 1.0])
    _step(env, [goal * 1.0])
    assert env.final_rewards == [pytest.approx(1.06 - TIME_PENALTY)]
