"""num_areas copies a scene's training area: one rule for embedded scenes, honoured by the stand-in
player from the handshake as Unity's TrainingAreaReplicator honours it in a build."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.environment import UnityEnvironment
from players import player_kwargs
from ports import free_base_port

from unity_sb3.open import open_unity
from unity_sb3.scenes import SCENES, make_scene, replicate_areas, scene_class
from unity_sb3.scenes.player.launcher import write_launcher
from unity_sb3.scenes.protocol_test import make_protocol_test_scene
from unity_sb3.unity.errors import UnityConfigurationError

TEST_SCENE = "unity_sb3.scenes.protocol_test:make_protocol_test_scene"


@pytest.mark.parametrize(("scene", "default"), [("Ball3D", 12), ("Tennis", 1), ("Escape", 3)])
def test_replicate_areas_copies_the_scenes_own_areas(scene, default):
    assert scene_class(scene).PARAMS["num_agents"] == default
    assert replicate_areas(scene, {"max_steps": 5}, 3) == {"max_steps": 5, "num_agents": 3 * default}
    assert replicate_areas(scene, {"num_agents": 2 * default}, 2)["num_agents"] == 4 * default
    assert replicate_areas(scene, {"num_agents": 7}, 1) == {"num_agents": 7}
    assert make_scene(scene, **replicate_areas(scene, {}, 2)).num_agents == 2 * default


def test_replicate_areas_refuses_a_scene_without_num_agents(monkeypatch):
    monkeypatch.setitem(SCENES, "NoAreas", "unity_sb3.scenes.protocol_test:ProtocolTestScene")
    assert replicate_areas("NoAreas", {"max_steps": 3}, 1) == {"max_steps": 3}
    with pytest.raises(UnityConfigurationError, match=r"no 'num_agents' parameter.*num_areas=1"):
        replicate_areas("NoAreas", {}, 2)


def _agents_after_reset(
    tmp_path: Path, scene: str, num_areas: int, **scene_params
) -> tuple[dict[str, int], np.ndarray]:
    """Agents deciding per behavior after reset (through a launcher, as for a build, with seed 5),
    and the first behavior's first observation."""
    launcher = write_launcher(scene, tmp_path / "build", scene_params=scene_params)
    env = UnityEnvironment(
        file_name=str(launcher),
        base_port=free_base_port(4),
        seed=5,
        no_graphics=True,
        timeout_wait=30,
        log_folder=str(tmp_path),
        num_areas=num_areas,
    )
    try:
        env.reset()
        counts = {name: len(env.get_steps(name)[0]) for name in env.behavior_specs}
        first = env.get_steps(next(iter(env.behavior_specs)))[0].obs[0]
    finally:
        env.close()
    return counts, first


def test_player_copies_an_embedded_scenes_areas_as_a_build_does(tmp_path):
    one, _ = _agents_after_reset(tmp_path / "one", "Ball3D", 1, num_agents=2)
    three, obs = _agents_after_reset(tmp_path / "three", "Ball3D", 3, num_agents=2)
    assert one == {"3DBall?team=0": 2} and three == {"3DBall?team=0": 6}
    scene = make_scene("Ball3D", seed=5, num_agents=6)  # reseeded with the handshake's seed
    scene.reset()
    np.testing.assert_array_equal(obs, scene.get_steps("3DBall?team=0")[0].obs[0])
    assert "Training area copied 3 times" in (tmp_path / "three" / "Player-0.log").read_text()


def test_player_warns_that_a_factory_scene_cannot_be_copied(tmp_path):
    counts, _ = _agents_after_reset(tmp_path, TEST_SCENE, 3, num_agents=2)
    scene = make_protocol_test_scene(seed=5, num_agents=2)
    scene.reset()
    assert counts == {name: len(scene.get_steps(name)[0]) for name in scene.behavior_specs}
    log = (tmp_path / "Player-0.log").read_text()
    assert "num_areas=3 ignored" in log and "open it with num_areas=1" in log


def test_open_unity_copies_the_areas_once_through_the_player(tmp_path):
    env = open_unity("Ball3D", **player_kwargs(tmp_path, num_agents=2, num_areas=3))
    try:
        env.reset()
        assert len(env.get_steps("3DBall?team=0")[0]) == 6  # the player copied them, open_unity did not
    finally:
        env.close()


@pytest.mark.parametrize("num_agents", [2.5, "4", 0, True])
def test_the_rule_refuses_a_num_agents_it_cannot_multiply(num_agents) -> None:
    with pytest.raises(UnityConfigurationError, match="num_agents must be a whole number >= 1"):
        replicate_areas("Ball3D", {"num_agents": num_agents}, 3)
