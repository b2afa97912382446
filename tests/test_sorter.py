"""The Sorter scene (``unity_sb3.scenes.sorter``): SorterAgent's layout, its rules, the player, learning."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple, DimensionProperty
from mlagents_envs.side_channel.environment_parameters_channel import EnvironmentParametersChannel
from players import player_kwargs

from unity_sb3.open import open_unity
from unity_sb3.scenes import make_scene
from unity_sb3.scenes.sorter import ARENA_RADIUS, ENTITY_SIZE, HIGHEST_TILE_VALUE, MOVE_STEP
from unity_sb3.unity.errors import UnityConfigurationError

SORTER = "Sorter?team=0"
FORWARD, NOTHING = (1, 0, 0), (0, 0, 0)


def act(scene, rows) -> None:
    scene.set_actions(SORTER, ActionTuple(discrete=np.asarray(rows, dtype=np.int32)))
    scene.step()


def aim_at(scene, agent: int, tile: int, distance: float = MOVE_STEP / 2) -> None:
    """Put ``agent`` ``distance`` from the wall in front of its ``tile``-th visible tile (in number order), facing it."""
    slot = scene._slot[agent, tile]
    angle = slot * 360.0 / HIGHEST_TILE_VALUE
    direction = np.array([np.sin(np.radians(angle)), np.cos(np.radians(angle))])
    scene._pos[agent] = (ARENA_RADIUS - 0.5 - distance) * direction
    scene._yaw[agent] = angle


def test_layout_is_sorter_agents():
    scene = make_scene("Sorter", num_agents=2)
    spec = scene.behavior_specs[SORTER]
    vector, buffer = spec.observation_specs
    assert vector.shape == (4,) and buffer.shape == (HIGHEST_TILE_VALUE, ENTITY_SIZE) == (20, 22)
    assert buffer.name == "BufferSensor"
    assert tuple(buffer.dimension_property) == (DimensionProperty.VARIABLE_SIZE, DimensionProperty.NONE)
    assert tuple(spec.action_spec.discrete_branches) == (3, 3, 3) and spec.action_spec.continuous_size == 0


def test_buffer_rows_are_the_visible_tiles_in_increasing_order_then_zeros():
    scene = make_scene("Sorter", seed=3, num_agents=64, num_tiles=6)
    scene.reset()
    vector, buffer = scene.get_steps(SORTER)[0].obs
    np.testing.assert_allclose(vector[:, :2], 0.0)  # every agent starts at the centre
    np.testing.assert_allclose(np.linalg.norm(vector[:, 2:], axis=1), 1.0, rtol=1e-6)
    present = np.abs(buffer).sum(axis=2) > 0
    counts = present.sum(axis=1)
    assert counts.min() >= 1 and counts.max() <= 6 and len(set(counts.tolist())) > 3
    assert all(present[i, : counts[i]].all() for i in range(64))  # padding only after the tiles
    one_hot = buffer[:, :, :HIGHEST_TILE_VALUE]
    assert np.all(one_hot.sum(axis=2)[present] == 1.0)
    numbers = one_hot.argmax(axis=2)
    for i in range(64):
        row = numbers[i, : counts[i]]
        assert np.all(np.diff(row) > 0)  # distinct numbers, increasing
    angles = buffer[:, :, HIGHEST_TILE_VALUE][present] * HIGHEST_TILE_VALUE
    np.testing.assert_allclose(angles, np.round(angles), atol=1e-5)  # a slot k on the wall: k / 20
    assert np.all(buffer[:, :, HIGHEST_TILE_VALUE + 1] == 0.0)  # nothing touched yet


def test_touching_tiles_in_order_scores_and_ends_the_episode():
    scene = make_scene("Sorter", seed=1, num_agents=1, num_tiles=20, max_steps=0)
    scene.reset()
    while scene._count[0] < 2:  # draw an episode with at least two tiles
        scene._on_episode_begin(np.array([0]))
    count = int(scene._count[0])
    first_id = scene.get_steps(SORTER)[0].agent_id[0]
    for tile in range(count):
        aim_at(scene, 0, tile)
        act(scene, [FORWARD])
        decision, terminal = scene.get_steps(SORTER)
        if tile < count - 1:
            assert len(terminal) == 0 and decision.reward[0] == pytest.approx(1.0)
            assert decision.obs[1][0, tile, HIGHEST_TILE_VALUE + 1] == 1.0  # marked touched
            aim_at(scene, 0, tile)  # touching a touched tile again does nothing
            act(scene, [NOTHING])
            assert scene.get_steps(SORTER)[0].reward[0] == 0.0
    assert len(terminal) == 1 and terminal.agent_id[0] == first_id
    assert terminal.reward[0] == pytest.approx(1.0) and not terminal.interrupted[0]


def test_touching_a_tile_out_of_order_costs_one_and_ends_the_episode():
    scene = make_scene("Sorter", seed=2, num_agents=1, num_tiles=20, max_steps=0)
    scene.reset()
    while scene._count[0] < 2:
        scene._on_episode_begin(np.array([0]))
    aim_at(scene, 0, 1)  # the second tile first
    act(scene, [FORWARD])
    decision, terminal = scene.get_steps(SORTER)
    assert len(terminal) == 1 and terminal.reward[0] == pytest.approx(-1.0)
    assert len(decision) == 1 and decision.agent_id[0] != terminal.agent_id[0]  # a new episode


def test_every_decision_costs_one_over_max_steps_and_the_limit_interrupts():
    scene = make_scene("Sorter", seed=0, num_agents=2, max_steps=5)
    scene.reset()
    for _ in range(4):
        act(scene, [NOTHING, NOTHING])
        np.testing.assert_allclose(scene.get_steps(SORTER)[0].reward, -0.2)
    act(scene, [NOTHING, NOTHING])
    terminal = scene.get_steps(SORTER)[1]
    assert len(terminal) == 2 and terminal.interrupted.all()


def test_agents_stay_inside_the_arena():
    scene = make_scene("Sorter", seed=0, num_agents=4, num_tiles=1)
    scene.reset()
    for _ in range(30):
        act(scene, [(2, 0, 0)] * 4)  # walk backwards into the wall
        vector = scene.get_steps(SORTER)[0].obs[0]
        assert np.all(np.linalg.norm(vector[:, :2] * 20.0, axis=1) <= ARENA_RADIUS + 1e-6)


@pytest.mark.parametrize("turn_degrees", [18.0, 9.0, 4.0])
def test_a_turn_action_turns_by_turn_degrees_and_touches_keep_the_slot_sectors(turn_degrees):
    scene = make_scene("Sorter", seed=5, num_agents=1, num_tiles=20, max_steps=0, turn_degrees=turn_degrees)
    scene.reset()
    for rotate, sign in ((2, 1.0), (1, -1.0)):
        before = float(scene._yaw[0])
        act(scene, [(0, 0, rotate)])
        assert (float(scene._yaw[0]) - before) % 360.0 == pytest.approx((sign * turn_degrees) % 360.0)
    while scene._count[0] < 2:
        scene._on_episode_begin(np.array([0]))
    # 8 degrees off the first tile's slot centre is still its sector (slots are 18 degrees apart)
    aim_at(scene, 0, 0)
    scene._yaw[0] += 8.0
    slot_angle = np.radians(scene._slot[0, 0] * 18.0 + 8.0)
    scene._pos[0] = (ARENA_RADIUS - 1.0) * np.array([np.sin(slot_angle), np.cos(slot_angle)])
    act(scene, [FORWARD])
    assert scene.get_steps(SORTER)[0].reward[0] == pytest.approx(1.0)
    with pytest.raises(UnityConfigurationError, match=r"'turn_degrees' must be in \(0, 180\]"):
        make_scene("Sorter", turn_degrees=0)


def test_num_tiles_is_an_environment_parameter():
    channel = EnvironmentParametersChannel()
    scene = make_scene("Sorter", seed=0, num_agents=64, num_tiles=20, side_channels=[channel])
    channel.set_float_parameter("num_tiles", 2.0)
    scene.reset()
    counts = (np.abs(scene.get_steps(SORTER)[0].obs[1]).sum(axis=2) > 0).sum(axis=1)
    assert set(counts.tolist()) == {1, 2}
    with pytest.raises(UnityConfigurationError, match=r"'num_tiles' must be in \[1, 20\]"):
        make_scene("Sorter", num_tiles=0)


def test_the_player_serves_the_rank2_observation_over_the_protocol(tmp_path):
    env = open_unity("Sorter", seed=4, **player_kwargs(tmp_path, num_agents=3, num_tiles=5))
    local = make_scene("Sorter", seed=4, num_agents=3, num_tiles=5)
    try:
        env.reset()
        local.reset()
        spec = env.behavior_specs[SORTER]
        assert spec.observation_specs[1].shape == (20, 22)
        assert spec.observation_specs[1].dimension_property[0] == DimensionProperty.VARIABLE_SIZE
        for step in range(6):
            remote, here = env.get_steps(SORTER)[0], local.get_steps(SORTER)[0]
            assert remote.obs[1].shape == (3, 20, 22) and remote.obs[1].dtype == np.float32
            for got, expected in zip(remote.obs, here.obs):
                np.testing.assert_array_equal(got, expected)
            actions = ActionTuple(discrete=np.full((3, 3), step % 3, dtype=np.int32))
            env.set_actions(SORTER, actions)
            local.set_actions(SORTER, actions)
            env.step()
            local.step()
    finally:
        env.close()


def test_shipped_hyperparameters_use_the_attention_extractor():
    from unity_sb3.config.hyperparams import load_hyperparams

    params = load_hyperparams("ppo", "Sorter")
    assert params["policy"] == "MultiInputPolicy"
    assert "UnityMultiInputExtractor" in params["policy_kwargs"]


def monitor_returns(path) -> np.ndarray:
    """Episode returns of an SB3 ``monitor.csv`` (a JSON comment line, then ``r,l,t``)."""
    lines = path.read_text().splitlines()[2:]
    return np.array([float(line.split(",")[0]) for line in lines if line])


@pytest.mark.slow
def test_shipped_ppo_settings_learn_to_sort_with_attention(tmp_path):
    """`unity-sb3 train --env Sorter` (attention, 1 tile, 150k steps): from random (-0.46) to >= 0.3 (measured 0.64)."""
    from unity_sb3.cli import main

    args = ["train", "--env", "Sorter", "--seed", "0", "--results-dir", str(tmp_path), "--no-progress"]
    assert main([*args, "--transport", "inprocess"]) == 0
    returns = monitor_returns(tmp_path / "Sorter_ppo" / "monitor.csv")
    assert len(returns) > 300
    assert np.mean(returns[:100]) < 0.0, "the untrained policy should not sort"
    assert np.mean(returns[-200:]) >= 0.3, f"PPO reached {np.mean(returns[-200:]):.2f} (expert 0.93)"


def test_twenty_tile_config_enters_unity_lessons_at_unity_steps():
    """examples/configs/sorter_20_tiles.yml: Unity's lessons at the steps of Unity's 5M run, then 20 tiles from 4.75M to 10M."""
    from pathlib import Path

    from unity_sb3.config.hyperparams import load_hyperparams
    from unity_sb3.unity.parameters import EnvironmentParameters

    path = Path(__file__).resolve().parents[1] / "examples" / "configs" / "sorter_20_tiles.yml"
    params = load_hyperparams("ppo", "Sorter", path)
    assert params["n_timesteps"] == 10_000_000 and "num_tiles" not in params["open_kwargs"]
    assert "share_features_extractor=False" in params["policy_kwargs"] and params["n_steps"] == 5120
    curriculum = EnvironmentParameters(params["open_kwargs"]["environment_parameters"])
    lessons = curriculum.parameters["num_tiles"].lessons
    assert [lesson.value.value for lesson in lessons] == [2.0 * k for k in range(1, 11)]
    enter = [round(lesson.completion_criteria.threshold * params["n_timesteps"]) for lesson in lessons[:-1]]
    assert enter == [
        2_500_000,
        *range(3_000_000, 4_750_001, 250_000),
    ]  # Unity: 0.5, 0.6, 0.65, ... 0.95 of 5M
