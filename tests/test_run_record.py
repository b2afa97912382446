"""``unity-sb3 record``: a scripted expert, random play, an ONNX model or a trained model written as a ``.demo``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_onnx_policy import unity_3dball

from unity_sb3 import load_demo
from unity_sb3.cli import main
from unity_sb3.export import run_onnx


def record(tmp_path: Path, player: str, env: str, *extra: str) -> tuple[int, Path]:
    output = tmp_path / "out.demo"
    return main(["record", player, "--env", env, "--output", str(output), *extra]), output


def test_the_scripted_expert_records_whole_episodes(tmp_path: Path, capsys) -> None:
    code, output = record(tmp_path, "expert", "Basic", "--episodes", "6", "--name", "BasicExpert")
    assert code == 0
    demo = load_demo(output)
    assert demo.meta.demonstration_name == "BasicExpert" and demo.meta.number_episodes == 6
    assert demo.dones.sum() == 6 and demo.has_action.any()
    assert "agent episodes: 6 (6 terminal" in capsys.readouterr().out
    assert demo.rewards[demo.dones].min() > 0.5  # the expert reaches a goal in every episode (+1 there)


def test_an_onnx_model_is_recorded_as_unitys_inference_acts(tmp_path: Path) -> None:
    model = str(unity_3dball())
    code, output = record(tmp_path, model, "Ball3D", "--steps", "120")
    assert code == 0
    demo = load_demo(output)
    assert len(demo.rewards) == 120 and demo.has_action.all()
    expected = run_onnx(model, [demo.observations[0]])["deterministic_continuous_actions"]
    np.testing.assert_allclose(demo.continuous_actions, expected, atol=1e-6)


def test_a_trained_model_and_random_play_are_recorded(tmp_path: Path) -> None:
    config = tmp_path / "tiny.yml"
    config.write_text("n_steps: 16\nbatch_size: 16\nn_epochs: 1\n")
    train = [
        "train",
        "--env",
        "Basic",
        "--config",
        str(config),
        "--results-dir",
        str(tmp_path),
        "--run-id",
        "r",
    ]
    assert main([*train, "--n-timesteps", "64", "--no-progress", "--transport", "inprocess"]) == 0
    for player in (str(tmp_path / "r"), "random"):
        code, output = record(tmp_path, player, "Basic", "--steps", "40", "--stochastic")
        assert code == 0
        demo = load_demo(output)
        assert len(demo.rewards) == 40 and set(np.unique(demo.discrete_actions)) <= {0, 1, 2}


def test_a_scene_without_a_scripted_expert_says_so(tmp_path: Path, monkeypatch, capsys) -> None:
    from unity_sb3.scenes.base import EmbeddedScene
    from unity_sb3.scenes.basic import Basic

    monkeypatch.setattr(Basic, "expert_actions", EmbeddedScene.expert_actions)  # the placeholder
    code, _ = record(tmp_path, "expert", "Basic", "--episodes", "1")
    assert (
        code == 2
        and "Basic has no scripted player (expert_actions); play 'random', an ONNX" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("player", "extra", "message"),
    [
        ("expert", ["--episodes", "2", "--steps", "5"], "give exactly one of --episodes or --steps"),
        ("expert", ["--episodes", "2", "--behavior", "Nobody"], "unknown behavior 'Nobody' not found"),
        ("missing.onnx", ["--episodes", "2"], "no ONNX model at missing.onnx"),
    ],
)
def test_bad_requests_are_clear_errors_and_leave_the_old_file(
    tmp_path: Path, player: str, extra: list[str], message: str, capsys
) -> None:
    (tmp_path / "out.demo").write_bytes(b"an older recording")
    code, output = record(tmp_path, player, "Basic", *extra)
    assert code == 2 and message in capsys.readouterr().err
    assert output.read_bytes() == b"an older recording"
