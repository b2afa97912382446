"""Unity's own trainer configs (tests/data/unity_configs, copied unchanged) map onto unity-sb3.

Every file converts, every behavior of it, and the settings that stay unhonored are exactly the
ones in :data:`EXPECTED_UNHONORED`: a setting that starts being dropped, or one that starts being
honored, changes this table on purpose (and docs/DECISIONS.md's table with it).

``self_play`` (SoccerTwos, StrikersVsGoalie, Tennis) is honoured: it maps to the ghost trainer's
SelfPlaySettings (tests/test_config_self_play.py). The SAC configs of discrete scenes (Basic,
GridWorld, Hallway, PushBlock, Pyramids, FoodCollector) have no action-space row: the mapping
cannot see the scene, so SAC's support for the scene's actions decides when the model is built.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from unity_sb3.config.mlagents import convert_mlagents_config, load_mlagents_hyperparams
from unity_sb3.config.mlagents_schema import MLAgentsConfigError
from unity_sb3.networks.conditioning import HyperNetwork

CONFIGS = Path(__file__).resolve().parent / "data" / "unity_configs"


THREADED = "threaded"

# (file, behavior) -> the ML-Agents keys that stay unhonored
EXPECTED_UNHONORED: dict[tuple[str, str], set[str]] = {
    ("imitation/Crawler.yaml", "Crawler"): set(),
    ("imitation/FoodCollector.yaml", "FoodCollector"): {THREADED},
    ("imitation/Hallway.yaml", "Hallway"): set(),
    ("imitation/PushBlock.yaml", "PushBlock"): set(),
    ("imitation/Pyramids.yaml", "Pyramids"): set(),
    ("poca/DungeonEscape.yaml", "DungeonEscape"): set(),
    ("poca/PushBlockCollab.yaml", "PushBlockCollab"): set(),
    ("poca/SoccerTwos.yaml", "SoccerTwos"): set(),
    ("poca/StrikersVsGoalie.yaml", "Goalie"): set(),
    ("poca/StrikersVsGoalie.yaml", "Striker"): set(),
    ("ppo/3DBall.yaml", "3DBall"): set(),
    ("ppo/3DBallHard.yaml", "3DBallHard"): set(),
    ("ppo/3DBall_randomize.yaml", "3DBall"): set(),
    ("ppo/Basic.yaml", "Basic"): set(),
    ("ppo/Crawler.yaml", "Crawler"): set(),
    ("ppo/FoodCollector.yaml", "FoodCollector"): {THREADED},
    ("ppo/FoodCollector.yaml", "GridFoodCollector"): {THREADED},
    ("ppo/GridWorld.yaml", "GridWorld"): set(),
    ("ppo/Hallway.yaml", "Hallway"): {THREADED},
    ("ppo/Match3.yaml", "Match3VectorObs"): {THREADED},
    ("ppo/Match3.yaml", "Match3VisualObs"): {THREADED},
    ("ppo/Match3.yaml", "Match3SimpleHeuristic"): {THREADED},
    ("ppo/Match3.yaml", "Match3SmartHeuristic"): {THREADED},
    ("ppo/PushBlock.yaml", "PushBlock"): {THREADED},
    ("ppo/Pyramids.yaml", "Pyramids"): {THREADED},
    ("ppo/PyramidsRND.yaml", "Pyramids"): set(),
    ("ppo/Sorter_curriculum.yaml", "Sorter"): {THREADED},
    ("ppo/StrikersVsGoalie.yaml", "Goalie"): {THREADED},
    ("ppo/StrikersVsGoalie.yaml", "Striker"): {THREADED},
    ("ppo/Tennis.yaml", "Tennis"): {THREADED},
    ("ppo/Visual3DBall.yaml", "Visual3DBall"): {THREADED},
    ("ppo/VisualFoodCollector.yaml", "VisualFoodCollector"): {THREADED},
    ("ppo/Walker.yaml", "Walker"): set(),
    ("ppo/WallJump.yaml", "BigWallJump"): set(),
    ("ppo/WallJump.yaml", "SmallWallJump"): set(),
    ("ppo/WallJump_curriculum.yaml", "BigWallJump"): {THREADED},
    ("ppo/WallJump_curriculum.yaml", "SmallWallJump"): {THREADED},
    ("ppo/Worm.yaml", "Worm"): set(),
    ("sac/3DBall.yaml", "3DBall"): {THREADED},
    ("sac/3DBallHard.yaml", "3DBallHard"): {THREADED},
    ("sac/Basic.yaml", "Basic"): set(),
    ("sac/Crawler.yaml", "Crawler"): set(),
    ("sac/FoodCollector.yaml", "GridFoodCollector"): set(),
    ("sac/GridWorld.yaml", "GridWorld"): set(),
    ("sac/Hallway.yaml", "Hallway"): set(),
    ("sac/PushBlock.yaml", "PushBlock"): set(),
    ("sac/Pyramids.yaml", "Pyramids"): set(),
    ("sac/Walker.yaml", "Walker"): set(),
    ("sac/WallJump.yaml", "BigWallJump"): {THREADED},  # its output_path: default is honoured
    ("sac/WallJump.yaml", "SmallWallJump"): {THREADED},
    ("sac/Worm.yaml", "Worm"): set(),
}

FILES = sorted(str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*.yaml"))


def _behaviors(name: str) -> list[str]:
    return list(yaml.safe_load((CONFIGS / name).read_text())["behaviors"])


def test_every_vendored_behavior_is_in_the_table() -> None:
    found = {(name, behavior) for name in FILES for behavior in _behaviors(name)}
    assert found == set(EXPECTED_UNHONORED)
    assert {name.split("/")[0] for name in FILES} == {"ppo", "sac", "poca", "imitation"}


@pytest.mark.parametrize(("name", "behavior"), sorted(EXPECTED_UNHONORED))
def test_unhonored_rows_per_behavior(name: str, behavior: str) -> None:
    run = convert_mlagents_config(CONFIGS / name, behavior=behavior)
    assert {row.source for row in run.unhonored} == EXPECTED_UNHONORED[(name, behavior)]
    assert all(row.note for row in run.unhonored), "every unhonored row says why"
    expected_algo = {"poca": "poca", "sac": "sac"}.get(name.split("/")[0], "ppo")
    if "memory" in (
        yaml.safe_load((CONFIGS / name).read_text())["behaviors"][behavior].get("network_settings") or {}
    ):
        expected_algo = "ppo_memory" if expected_algo == "ppo" else expected_algo
    assert run.algo == expected_algo


def test_linear_beta_is_a_decaying_ent_coef_for_ppo() -> None:
    run = convert_mlagents_config(CONFIGS / "ppo/WallJump.yaml", behavior="BigWallJump")
    assert run.hyperparams["ent_coef"] == "lin_0.005_1e-05" and run.hyperparams["clip_range"] == "lin_0.2_0.1"
    constant = convert_mlagents_config(CONFIGS / "ppo/Tennis.yaml")  # learning_rate_schedule: constant
    assert constant.hyperparams["ent_coef"] == 0.005 and constant.hyperparams["clip_range"] == 0.2


def test_memory_config_picks_the_recurrent_ppo_with_its_memory_and_signals() -> None:
    run = convert_mlagents_config(CONFIGS / "ppo/Hallway.yaml")
    assert run.algo == "ppo_memory" and run.hyperparams["ent_coef"] == "lin_0.01_1e-05"
    assert run.hyperparams["memory_size"] == 128 and run.hyperparams["sequence_length"] == 64
    assert run.hyperparams["time_horizon"] == 64
    assert "net_arch=[128, 128]" in run.hyperparams["policy_kwargs"]  # ML-Agents' body, before the LSTM
    # with goal signals that body moves into the extractors, its last layer conditioned, the LSTMs after
    assert run.hyperparams["mlagents_network"]["body_layers"] == [128, 128]
    imitation = convert_mlagents_config(CONFIGS / "imitation/Hallway.yaml")
    assert imitation.algo == "ppo_memory" and "gail" in imitation.hyperparams["reward_signals"]


def test_goal_conditioning_type_reaches_the_run() -> None:
    walker = convert_mlagents_config(CONFIGS / "sac/Walker.yaml")  # goal_conditioning_type: none
    assert walker.hyperparams["mlagents_network"] == {"goal_conditioning_type": "none", "hidden_units": 512}
    grid = convert_mlagents_config(CONFIGS / "ppo/GridWorld.yaml")  # ML-Agents' default: hyper
    # PPO without memory: with goals, its body (1 x 128) may move into the extractor, conditioned last
    assert grid.hyperparams["mlagents_network"] == {
        "goal_conditioning_type": "hyper",
        "hidden_units": 128,
        "body_layers": [128],
    }
    sac_grid = convert_mlagents_config(CONFIGS / "sac/GridWorld.yaml")  # the Q networks take actions
    assert sac_grid.hyperparams["mlagents_network"] == {
        "goal_conditioning_type": "hyper",
        "hidden_units": 128,
    }
    push = convert_mlagents_config(CONFIGS / "poca/PushBlockCollab.yaml")  # only the actor is conditioned
    assert push.hyperparams["mlagents_network"] == {
        "goal_conditioning_type": "hyper",
        "hidden_units": 256,
        "body_layers": [256, 256],
        "actor_only": True,
    }


def test_missing_demo_is_refused_before_unity_opens(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        MLAgentsConfigError, match=r"demonstrations not found: reward_signals\.gail\.demo_path"
    ):
        load_mlagents_hyperparams(CONFIGS / "imitation/PushBlock.yaml", verbose=False)
    run = convert_mlagents_config(CONFIGS / "imitation/PushBlock.yaml")  # converting alone does not need them
    assert [source for source, _ in run.missing_demos()] == ["reward_signals.gail", "behavioral_cloning"]


def test_demo_path_override_replaces_every_demo(tmp_path: Path) -> None:
    demo = tmp_path / "Expert.demo"
    demo.write_bytes(b"")
    params = load_mlagents_hyperparams(CONFIGS / "imitation/PushBlock.yaml", verbose=False, demo_path=demo)
    assert params["reward_signals"]["gail"]["demo_path"] == str(demo)
    assert params["behavioral_cloning"]["demo_path"] == str(demo)
    run = convert_mlagents_config(CONFIGS / "imitation/PushBlock.yaml", demo_path=demo)
    assert run.missing_demos() == []
    assert {"reward_signals.gail.demo_path", "behavioral_cloning.demo_path"} <= {
        row.source for row in run.rows
    }


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::unity_sb3.config.mlagents_schema.MLAgentsConfigWarning")
@pytest.mark.parametrize(
    ("name", "scene", "algo"),
    [
        ("ppo/GridWorld.yaml", "GridWorld", "ppo"),  # goal conditioning on the GoalSensor
        ("ppo/Basic.yaml", "Basic", "ppo"),
        ("ppo/3DBall_randomize.yaml", "Ball3D", "ppo"),  # environment parameters (samplers)
        ("ppo/Pyramids.yaml", "PyramidsLite", "ppo"),  # curiosity
        ("sac/3DBall.yaml", "Ball3D", "sac"),
        # Unity's other SAC configs, each on an embedded scene with the same kind of actions
        ("sac/3DBallHard.yaml", "Ball3D", "sac"),
        ("sac/Crawler.yaml", "Ball3D", "sac"),
        ("sac/Walker.yaml", "Ball3D", "sac"),
        ("sac/Worm.yaml", "Ball3D", "sac"),
        ("sac/Basic.yaml", "Basic", "sac"),  # discrete
        ("sac/GridWorld.yaml", "GridWorld", "sac"),  # discrete, masks, goal signal
        ("sac/PushBlock.yaml", "Basic", "sac"),
        ("sac/FoodCollector.yaml", "GridWorld", "sac"),
        ("sac/Hallway.yaml", "Basic", "sac"),  # memory: SAC's MlpLstmPolicy
        ("sac/WallJump.yaml", "Basic", "sac"),  # BigWallJump, with ML-Agents' output_path key
        ("poca/DungeonEscape.yaml", "Escape", "poca"),  # groups; time_horizon cuts the returns
    ],
)
def test_unity_config_trains_unchanged_on_the_embedded_scene(
    tmp_path: Path, name: str, scene: str, algo: str, capsys
) -> None:
    """15-30 s each: one rollout of Unity's buffer_size, whatever --n-timesteps says."""
    from unity_sb3.algorithms.registry import algorithm_class
    from unity_sb3.cli import main

    args = ["train", "--env", scene, "--config", str(CONFIGS / name), "--results-dir", str(tmp_path)]
    args += [
        "--run-id",
        "run",
        "--n-timesteps",
        "300",
        "--num-envs",
        "1",
        "--no-progress",
        "--transport",
        "inprocess",
    ]
    data = yaml.safe_load((CONFIGS / name).read_text())
    if len(data["behaviors"]) > 1:  # none is the scene's: the first behavior's section, unchanged, alone
        first = next(iter(data["behaviors"]))
        data["behaviors"] = {first: data["behaviors"][first]}
        (tmp_path / "one.yaml").write_text(yaml.safe_dump(data))
        args[args.index(str(CONFIGS / name))] = str(tmp_path / "one.yaml")
    assert main(args) == 0
    model = algorithm_class(algo).load(tmp_path / "run" / "model.zip")
    if algo == "poca":
        assert model.time_horizon == data["behaviors"][next(iter(data["behaviors"]))]["time_horizon"]
    if scene == "GridWorld":
        assert "goal signals GoalSensor generate the weights of" in capsys.readouterr().out
        # SAC's actor and critics have extractors of their own
        extractor = model.policy.features_extractor or model.policy.actor.features_extractor
        assert extractor.goal_keys == ["GoalSensor"]
        assert isinstance(extractor.conditioning, HyperNetwork)  # ML-Agents' goal conditioning


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::unity_sb3.config.mlagents_schema.MLAgentsConfigWarning")
def test_pyramids_sac_config_trains_with_its_gail_demo_replaced(tmp_path: Path) -> None:
    """Unity's sac/Pyramids.yaml (extrinsic + GAIL) unchanged, its demo replaced with --demo-path."""
    from unity_sb3.algorithms.registry import algorithm_class
    from unity_sb3.cli import main
    from unity_sb3.demos.reader import record_demo
    from unity_sb3.scenes import make_scene

    demo = tmp_path / "ExpertPyramidsLite.demo"
    scene = make_scene("PyramidsLite", seed=7)
    name = next(iter(scene.behavior_specs))
    record_demo(scene, name, lambda s: scene.expert_actions(name, s), str(demo), n_episodes=5)
    scene.close()
    args = ["train", "--env", "PyramidsLite", "--config", str(CONFIGS / "sac/Pyramids.yaml")]
    args += ["--demo-path", str(demo), "--results-dir", str(tmp_path), "--run-id", "run"]
    args += ["--n-timesteps", "300", "--num-envs", "1", "--no-progress", "--transport", "inprocess"]
    assert main(args) == 0
    model = algorithm_class("sac").load(tmp_path / "run" / "model.zip")
    assert set(model.reward_signals) == {"extrinsic", "gail"}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::unity_sb3.config.mlagents_schema.MLAgentsConfigWarning")
@pytest.mark.parametrize("name", ["ppo/Hallway.yaml", "imitation/Hallway.yaml"])
def test_hallway_configs_train_unchanged_on_the_hallway_scene(tmp_path: Path, name: str) -> None:
    """Unity's Hallway configs (memory; the imitation one with GAIL + BC on an expert demo) on the Hallway scene."""
    from unity_sb3.algorithms.registry import algorithm_class
    from unity_sb3.cli import main
    from unity_sb3.demos.writer import record_demo
    from unity_sb3.scenes import make_scene

    demo = tmp_path / "ExpertHallway.demo"
    scene = make_scene("Hallway", seed=7)
    behavior = next(iter(scene.behavior_specs))
    record_demo(scene, behavior, lambda s: scene.expert_actions(behavior, s), str(demo), n_episodes=8)
    scene.close()
    args = ["train", "--env", "Hallway", "--config", str(CONFIGS / name), "--demo-path", str(demo)]
    args += ["--results-dir", str(tmp_path), "--run-id", "run", "--n-timesteps", "300", "--num-envs", "1"]
    args += ["--no-progress", "--transport", "inprocess"]
    assert main(args) == 0
    run = convert_mlagents_config(CONFIGS / name)
    model = algorithm_class(run.algo).load(tmp_path / "run" / "model.zip")
    assert model.num_timesteps >= 300
