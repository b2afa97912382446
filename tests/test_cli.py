"""The ``unity-sb3`` command: train (results folder, resume, run ids), eval, scenes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from unity_sb3.callbacks import list_checkpoints
from unity_sb3.cli import build_parser, main

TINY = ["--n-timesteps", "600", "--checkpoint-every", "300", "--no-progress", "--transport", "inprocess"]
TINY_CONFIG = "n_steps: 25\nbatch_size: 100\nn_epochs: 1\n"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yml"
    path.write_text(TINY_CONFIG)
    return path


def test_train_writes_the_run_folder(tmp_path: Path, config: Path) -> None:
    results = tmp_path / "results"
    code = main(["train", "--results-dir", str(results), "--config", str(config), *TINY])
    assert code == 0
    run = results / "Ball3D_ppo"
    for name in ("model.zip", "config.yaml", "monitor.csv", "learning_curve.png"):
        assert (run / name).is_file(), name
    assert list_checkpoints(run / "checkpoints"), "periodic checkpoints were written"
    assert any((run / "tb").iterdir()), "TensorBoard logs were written"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["algo"] == "ppo" and saved["env"] == "Ball3D" and saved["hyperparams"]["n_steps"] == 25

    # a second run without --run-id goes to a new folder instead of overwriting the first
    assert main(["train", "--results-dir", str(results), "--config", str(config), *TINY]) == 0
    assert (results / "Ball3D_ppo-2" / "model.zip").is_file()
    # an explicit run id that exists is refused unless --resume or --force
    assert main(["train", "--results-dir", str(results), "--run-id", "Ball3D_ppo", *TINY]) == 2


def test_resume_continues_to_the_requested_total(tmp_path: Path, config: Path) -> None:
    from stable_baselines3 import PPO

    args = ["train", "--results-dir", str(tmp_path), "--run-id", "r", "--config", str(config), *TINY]
    assert main(args) == 0
    first = PPO.load(tmp_path / "r" / "model.zip").num_timesteps
    resumed = [*args[: -len(TINY)], *TINY[2:], "--n-timesteps", "1800", "--resume"]
    assert main(resumed) == 0
    model = PPO.load(tmp_path / "r" / "model.zip")
    assert model.num_timesteps >= 1800 > first
    assert (tmp_path / "r" / "resume-1.monitor.csv").is_file(), "a resumed segment gets its own monitor file"


def test_resume_without_a_run_fails_clearly(tmp_path: Path, config: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match="no checkpoint or model"):
        main(["train", "--results-dir", str(tmp_path), "--run-id", "empty", "--resume", *TINY])


def test_eval_reports_mean_reward(tmp_path: Path, config: Path, capsys) -> None:
    assert (
        main(["train", "--results-dir", str(tmp_path), "--run-id", "e", "--config", str(config), *TINY]) == 0
    )
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "e"), "--episodes", "3"]) == 0
    assert "mean reward" in capsys.readouterr().out


@pytest.mark.player
def test_train_through_the_player(tmp_path: Path, config: Path) -> None:
    args = [
        "train",
        "--results-dir",
        str(tmp_path),
        "--config",
        str(config),
        *TINY[:-2],
        "--transport",
        "player",
    ]
    assert main(args) == 0
    assert (tmp_path / "Ball3D_ppo" / "model.zip").is_file()


def test_scenes_lists_every_scene(capsys) -> None:
    from unity_sb3.envs import list_scenes

    assert main(["scenes"]) == 0
    out = capsys.readouterr().out
    for name in list_scenes():
        assert name in out


def test_no_arguments_means_train() -> None:
    args = build_parser().parse_args(["train"])
    assert args.env == "Ball3D" and args.algo == "ppo" and args.transport == "player"


def test_unknown_algorithm_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Unknown algorithm"):
        main(["train", "--results-dir", str(tmp_path), "--algo", "ppp", *TINY])
