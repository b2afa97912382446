"""The Hallway scene (``unity_sb3.scenes.hallway``): HallwayAgent's layout and rules, the expert, the memory it needs."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple
from players import player_kwargs

from unity_sb3.demos.reader import load_demo
from unity_sb3.demos.writer import record_demo
from unity_sb3.open import open_unity
from unity_sb3.scenes import make_scene
from unity_sb3.scenes.hallway import (
    BACKWARD,
    FORWARD,
    GOAL_X,
    GOAL_Z,
    NOTHING,
    O_GOAL,
    RAY_FEATURES,
    RAY_TAGS,
    SYMBOL_O,
    SYMBOL_X,
    TURN_DEGREES,
    TURN_LEFT,
    TURN_RIGHT,
    WALL,
    X_GOAL,
)
from unity_sb3.unity.errors import UnityConfigurationError

HALLWAY = "Hallway?team=0"


def act(scene, actions) -> None:
    scene.set_actions(HALLWAY, ActionTuple(discrete=np.asarray(actions, dtype=np.int32)[:, None]))
    scene.step()


def test_layout_is_hallway_agents():
    scene = make_scene("Hallway", num_agents=2)
    spec = scene.behavior_specs[HALLWAY]
    rays, vector = spec.observation_specs
    assert (rays.name, rays.shape) == ("RayPerceptionSensor", (5 * 7,))
    assert (vector.name, vector.shape) == ("VectorSensor_size1", (1,))
    assert tuple(spec.action_spec.discrete_branches) == (5,) and spec.action_spec.continuous_size == 0
    assert scene.max_steps == 3000 and scene.decision_period == 6


def test_episode_start_follows_on_episode_begin():
    scene = make_scene("Hallway", seed=0, num_agents=500)
    scene.reset()
    x, z = scene._pos.T
    assert np.all(np.abs(x) <= 3) and np.all((z >= -20) & (z <= -10))
    shown_o = scene._selection == 0
    assert 0.4 < shown_o.mean() < 0.6
    assert np.all(np.abs(scene._symbol[shown_o, 0]) <= 3) and np.all(scene._symbol[~shown_o, 0] == 0.0)
    assert np.all(np.abs(scene._symbol[:, 1]) <= 5)
    assert set(np.unique(scene._o_goal_x)) == {-GOAL_X, GOAL_X}


def test_step_fraction_and_step_cost_follow_max_step():
    scene = make_scene("Hallway", seed=0, num_agents=2, max_steps=60)
    scene.reset()
    for decision in range(1, 10):
        act(scene, [NOTHING, NOTHING])
        steps = scene.get_steps(HALLWAY)[0]
        np.testing.assert_allclose(steps.obs[1][:, 0], 6 * decision / 60)
        np.testing.assert_allclose(steps.reward, -6 / 60, rtol=1e-6)
    act(scene, [NOTHING, NOTHING])
    terminal = scene.get_steps(HALLWAY)[1]
    assert len(terminal) == 2 and terminal.interrupted.all()


@pytest.mark.parametrize(
    ("action", "turn"), [(TURN_RIGHT, TURN_DEGREES), (TURN_LEFT, -TURN_DEGREES), (NOTHING, 0.0)]
)
def test_turn_actions_rotate_clockwise_and_back(action, turn):
    scene = make_scene("Hallway", seed=0, num_agents=1)
    scene.reset()
    yaw, pos = scene._yaw.copy(), scene._pos.copy()
    act(scene, [action])
    assert (scene._yaw[0] - yaw[0] - turn) % 360.0 == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(scene._pos, pos)


@pytest.mark.parametrize(("action", "sign"), [(FORWARD, 1.0), (BACKWARD, -1.0)])
def test_moves_follow_the_heading(action, sign):
    scene = make_scene("Hallway", seed=0, num_agents=1, move_step=0.5)
    scene.reset()
    scene._pos[0], scene._yaw[0] = (0.0, -10.0), 90.0  # facing +x
    act(scene, [action])
    np.testing.assert_allclose(scene._pos[0], (sign * 0.5, -10.0), atol=1e-9)


@pytest.mark.parametrize(("selection", "right"), [(0, True), (1, False)])
def test_touching_a_goal_ends_the_episode_with_one_or_minus_a_tenth(selection, right):
    scene = make_scene("Hallway", seed=0, num_agents=1)
    scene.reset()
    scene._selection[0], scene._o_goal_x[0] = selection, GOAL_X
    scene._pos[0], scene._yaw[0] = (GOAL_X, GOAL_Z - 3.0), 0.0  # in front of the O goal
    first = scene.get_steps(HALLWAY)[0].agent_id[0]
    act(scene, [FORWARD])
    terminal = scene.get_steps(HALLWAY)[1]
    assert len(terminal) == 1 and terminal.agent_id[0] == first and not terminal.interrupted[0]
    assert terminal.reward[0] == pytest.approx(1.0 if right else -0.1)  # SetReward: the step cost is replaced
    act(scene, np.zeros(0))
    assert scene.get_steps(HALLWAY)[0].agent_id[0] != first  # a new episode, at the next decision


@pytest.mark.parametrize(("selection", "tag"), [(0, SYMBOL_O), (1, SYMBOL_X)])
def test_rays_tag_the_shown_symbol_and_the_goals(selection, tag):
    scene = make_scene("Hallway", seed=0, num_agents=1)
    scene.reset()
    scene._selection[0], scene._symbol[0], scene._o_goal_x[0] = selection, (0.0, 0.0), -GOAL_X
    scene._pos[0], scene._yaw[0] = (0.0, -5.0), 0.0  # the symbol 5 ahead
    rays = scene._observe(np.array([0]))[0].reshape(5, RAY_FEATURES)
    assert rays[0, tag] == 1.0 and rays[0, RAY_TAGS] == 0.0
    # the sphere cast (radius 0.5) touches the box's near face (0.5 deep) 1 unit early: 4 / ray length 12
    assert rays[0, RAY_TAGS + 1] == pytest.approx((5.0 - 0.5 - 0.5) / 12.0)
    scene._pos[0] = (0.0, GOAL_Z - 8.0)
    scene._yaw[0] = 0.0  # the goals 8 ahead, at +-7 (41 degrees off): the 35 degree rays hit them
    rays = scene._observe(np.array([0]))[0].reshape(5, RAY_FEATURES)
    assert (
        rays[1, X_GOAL] == 1.0 and rays[2, O_GOAL] == 1.0
    )  # right ray: X goal at +7; left ray: O goal at -7


def test_rays_are_the_prefabs_sphere_casts():
    """HallwayArea.prefab: rayLength 12, sphereCastRadius 0.5, the symbol a box 4 wide and 1 deep."""
    scene = make_scene("Hallway", seed=0, num_agents=1)
    scene.reset()
    scene._selection[0], scene._symbol[0], scene._o_goal_x[0] = 0, (0.0, 0.0), GOAL_X

    def ahead(x: float, z: float, yaw: float = 0.0) -> np.ndarray:
        scene._pos[0], scene._yaw[0] = (x, z), yaw
        return scene._observe(np.array([0]))[0].reshape(5, RAY_FEATURES)[0]

    assert ahead(2.4, -6.0)[SYMBOL_O] == 1.0  # within the box's half width 2 + the sphere's 0.5
    assert ahead(2.6, -6.0)[SYMBOL_O] == 0.0
    assert ahead(0.0, -12.5)[SYMBOL_O] == 1.0  # near face at 0.5 + sphere 0.5: 11 away, within 12
    assert ahead(0.0, -13.5)[RAY_TAGS] == 1.0  # 12 away: nothing within reach
    wall = ahead(0.0, 0.0, yaw=90.0)  # facing +x: the wall at 10, touched by the sphere at 9.5
    assert wall[WALL] == 1.0 and wall[RAY_TAGS + 1] == pytest.approx(9.5 / 12.0)


def test_the_goal_end_shows_nothing_of_the_symbol():
    """Where the goals can be touched, the observation is the same whichever symbol was shown: no
    policy without memory can choose the right goal more often than half the time."""
    scene = make_scene("Hallway", seed=0, num_agents=400)
    scene.reset()
    rng = np.random.default_rng(0)
    # a goal (z 22.29, radius 2) is touched from within 2.5 of its centre: z >= 19.79
    scene._pos[:] = np.stack([rng.uniform(-9.5, 9.5, 400), rng.uniform(19.5, 24.5, 400)], axis=1)
    scene._yaw[:] = rng.uniform(0, 360, 400)
    idx = np.arange(400)
    scene._selection[:] = 0
    seen_o = scene._observe(idx)[0]
    scene._selection[:] = 1
    seen_x = scene._observe(idx)[0]
    np.testing.assert_array_equal(seen_o, seen_x)


def test_expert_solves_it():
    scene = make_scene("Hallway", seed=4, num_agents=8)
    scene.reset()
    rewards = []
    for _ in range(400):
        act(scene, scene.expert_actions(HALLWAY, scene.get_steps(HALLWAY)[0]).discrete[:, 0])
        terminal = scene.get_steps(HALLWAY)[1]
        rewards += terminal.reward.tolist()
        assert not terminal.interrupted.any()
    assert len(rewards) >= 30 and np.all(np.asarray(rewards) == 1.0)


def test_expert_refuses_unknown_agents():
    scene = make_scene("Hallway", seed=0, num_agents=2)
    scene.reset()
    steps = scene.get_steps(HALLWAY)[0]
    act(scene, [NOTHING, NOTHING])
    scene._finish(np.array([0]), True)
    scene._start(np.array([0]))
    with pytest.raises(ValueError, match="not live agents"):
        scene.expert_actions(HALLWAY, steps)


def test_move_step_is_checked():
    with pytest.raises(UnityConfigurationError, match="move_step"):
        make_scene("Hallway", move_step=0.0)


def test_expert_demo_records_successful_episodes(tmp_path):
    """A .demo of the expert for Unity's imitation/Hallway.yaml (GAIL + BC + memory)."""
    scene = make_scene("Hallway", seed=1, num_agents=4, move_step=2.0)
    path = tmp_path / "ExpertHallway.demo"
    meta = record_demo(scene, HALLWAY, lambda steps: scene.expert_actions(HALLWAY, steps), path, n_steps=300)
    assert meta.number_steps == 300 and meta.number_episodes >= 8 and meta.mean_reward > 0.5
    load_demo(path, expected_spec=scene.behavior_specs[HALLWAY])  # raises if the demo does not fit the scene


def test_the_player_serves_it_as_the_scene_steps(tmp_path):
    env = open_unity("Hallway", seed=4, **player_kwargs(tmp_path, num_agents=3))
    local = make_scene("Hallway", seed=4, num_agents=3)
    try:
        env.reset()
        local.reset()
        for step in range(8):
            remote, here = env.get_steps(HALLWAY)[0], local.get_steps(HALLWAY)[0]
            for got, expected in zip(remote.obs, here.obs):
                np.testing.assert_array_equal(got, expected)
            actions = ActionTuple(discrete=np.full((3, 1), step % 5, dtype=np.int32))
            env.set_actions(HALLWAY, actions)
            local.set_actions(HALLWAY, actions)
            env.step()
            local.step()
    finally:
        env.close()
