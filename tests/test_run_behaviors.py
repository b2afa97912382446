"""``unity-sb3 train`` with several behaviors and self-play: planning, the results layout, resume, Ctrl-C."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
import yaml

from unity_sb3.callbacks.checkpoint import list_checkpoints
from unity_sb3.cli import build_parser, main
from unity_sb3.run_behaviors import SELF_PLAY_FILE, plan_behaviors, self_play_for
from unity_sb3.selfplay.settings import SelfPlayConfigError

UNITY_CONFIGS = Path(__file__).parent / "data" / "unity_configs"
TINY = ["--n-timesteps", "200", "--no-progress", "--transport", "inprocess", "--seed", "1"]


def shrunk(source: Path, target: Path, self_play: bool = True, trainer_type: dict | None = None) -> Path:
    """Unity's YAML with a tiny buffer, network and self-play cadence (every other setting kept)."""
    data = yaml.safe_load(source.read_text())
    for name, behavior in data["behaviors"].items():
        behavior["hyperparameters"].update(batch_size=32, buffer_size=64)
        behavior["network_settings"]["hidden_units"] = 16
        behavior["checkpoint_interval"] = 100
        if (trainer_type or {}).get(name):
            behavior["trainer_type"] = trainer_type[name]
            if trainer_type[name] == "ppo":
                behavior["hyperparameters"]["buffer_size"] = 96
        if self_play:
            behavior["self_play"].update(save_steps=40, team_change=100, swap_steps=20)
        else:
            behavior.pop("self_play")
    target.write_text(yaml.safe_dump(data))
    return target


def strikers_vs_goalie_two_trainers(tmp_path: Path) -> Path:
    """Unity's StrikersVsGoalie.yaml shrunk, without self-play, the goalie trained by PPO (strikers: POCA)."""
    return shrunk(
        UNITY_CONFIGS / "poca" / "StrikersVsGoalie.yaml",
        tmp_path / "svg.yaml",
        self_play=False,
        trainer_type={"Goalie": "ppo"},
    )


def train_args(tmp_path: Path, config: Path, env: str, *extra: str) -> list[str]:
    return [
        "train",
        "--config",
        str(config),
        "--env",
        env,
        "--results-dir",
        str(tmp_path / "results"),
        "--run-id",
        "run",
        *TINY,
        *extra,
    ]


def load_state(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_a_yaml_with_two_behaviors_trains_both_with_their_own_trainer(tmp_path: Path) -> None:
    config = strikers_vs_goalie_two_trainers(tmp_path)
    assert main(train_args(tmp_path, config, "StrikersVsGoalie")) == 0
    run = tmp_path / "results" / "run"
    whole = yaml.safe_load((run / "config.yaml").read_text())
    assert whole["env"] == "StrikersVsGoalie" and set(whole["behaviors"]) == {"Goalie", "Striker"}
    algos = {"Striker": "poca", "Goalie": "ppo"}
    for behavior, algo in algos.items():
        folder = run / behavior
        for name in ("model.zip", "model.onnx", "monitor.csv", "config.yaml", "learning_curve.png"):
            assert (folder / name).is_file(), f"{behavior}/{name}"
        assert list_checkpoints(folder / "checkpoints") and any((folder / "tb").iterdir())
        saved = yaml.safe_load((folder / "config.yaml").read_text())
        assert saved["algo"] == algo and saved["behavior"] == behavior and saved["self_play"] is None
        assert not (folder / SELF_PLAY_FILE).exists()
    from unity_sb3 import POCA, PPO

    goalie, striker = PPO.load(run / "Goalie" / "model.zip"), POCA.load(run / "Striker" / "model.zip")
    # each behavior's buffer_size over its own slots: 8 goalies (96 steps), 16 strikers (64 steps)
    assert (goalie.n_steps, goalie.n_envs) == (12, 8) and (striker.n_steps, striker.n_envs) == (4, 16)
    assert goalie.num_timesteps >= 200 and striker.num_timesteps >= 200


def test_eval_of_a_run_of_several_behaviors_plays_each_with_its_model(tmp_path: Path, capsys) -> None:
    config = strikers_vs_goalie_two_trainers(tmp_path)
    assert main(train_args(tmp_path, config, "StrikersVsGoalie")) == 0
    capsys.readouterr()
    run = tmp_path / "results" / "run"
    assert main(["eval", str(run), "--episodes", "3", "--transport", "inprocess"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()[-2:]
    assert [line.split(" on ")[0] for line in sorted(lines)] == ["Goalie (ppo)", "Striker (poca)"]
    assert all(line.endswith("over 3 episodes") for line in lines)
    with pytest.raises(
        SystemExit, match="is a run of several behaviors \\(Goalie, Striker\\); each behavior's folder"
    ):
        main(["export", str(run)])


def test_curriculum_of_several_behaviors_is_saved_and_resumed(tmp_path: Path, monkeypatch) -> None:
    import json

    from unity_sb3.scenes.base import EmbeddedScene

    config = strikers_vs_goalie_two_trainers(tmp_path)
    data = yaml.safe_load(config.read_text())
    criteria = {"measure": "progress", "behavior": "Striker", "threshold": 0.1, "min_lesson_length": 0}
    lessons = [{"name": "a", "value": 0.0, "completion_criteria": criteria}, {"name": "b", "value": 0.5}]
    data["environment_parameters"] = {"ball_touch": {"curriculum": lessons}}
    config.write_text(yaml.safe_dump(data))
    assert main(train_args(tmp_path, config, "StrikersVsGoalie")) == 0
    run = tmp_path / "results" / "run"
    for behavior in ("Striker", "Goalie"):
        state = json.loads((run / behavior / "curriculum.json").read_text())
        assert state["parameters"]["lesson_numbers"] == {"ball_touch": 1}, behavior
        [*_, (_, newest)] = list_checkpoints(run / behavior / "checkpoints")
        assert newest.with_name(newest.stem + ".curriculum.json").is_file(), "a copy beside each checkpoint"

    real_param, began = EmbeddedScene._param, []

    def param(self, key: str, n: int):
        values = real_param(self, key, n)
        if key == "ball_touch":
            began.extend(values.tolist())
        return values

    monkeypatch.setattr(EmbeddedScene, "_param", param)
    resumed = train_args(tmp_path, config, "StrikersVsGoalie", "--resume")
    resumed[resumed.index("200")] = "400"
    assert main(resumed) == 0
    assert began and set(began) == {0.5}, "every episode of the resumed run at lesson b"


@pytest.mark.parametrize(
    ("folder", "scene", "behaviors"),
    [
        ("ppo", "Tennis", ["Tennis"]),
        ("poca", "SoccerTwos", ["SoccerTwos"]),
        ("poca", "StrikersVsGoalie", ["Goalie", "Striker"]),
    ],
)
def test_unitys_competitive_configs_run_self_play_through_the_command(
    tmp_path: Path, folder: str, scene: str, behaviors: list[str], capsys
) -> None:
    config = shrunk(UNITY_CONFIGS / folder / f"{scene}.yaml", tmp_path / f"{scene}.yaml")
    args = [arg for arg in train_args(tmp_path, config, scene) if arg != "--no-progress"]
    assert main(args) == 0
    if scene == "Tennis":  # (the bar refreshes its text every 20 vector steps: Tennis' 1 court takes 200)
        assert "Tennis ELO 1" in capsys.readouterr().err, "the progress bar shows the ELO"
    run = tmp_path / "results" / "run"
    for behavior in behaviors:
        state = load_state(run / behavior / SELF_PLAY_FILE)
        assert set(state["behaviors"]) == set(behaviors)  # asymmetric: one controller for both
        pool = state["behaviors"][behavior]["pool"]
        assert pool["snapshots"], "snapshots of the learner were taken"
        checkpoints = list_checkpoints(run / behavior / "checkpoints")
        assert checkpoints
        for _, path in checkpoints:  # the self-play state beside each checkpoint
            assert path.with_name(path.stem + ".selfplay.pt").is_file()
        saved = yaml.safe_load((run / behavior / "config.yaml").read_text())
        assert saved["self_play"]["save_steps"] == 40 and saved["self_play"]["window"] == 10


def test_resume_restores_every_model_and_the_elo(tmp_path: Path, capsys) -> None:
    from unity_sb3 import PPO

    config = shrunk(UNITY_CONFIGS / "ppo" / "Tennis.yaml", tmp_path / "tennis.yaml")
    assert main(train_args(tmp_path, config, "Tennis")) == 0
    folder = tmp_path / "results" / "run" / "Tennis"
    first = PPO.load(folder / "model.zip").num_timesteps
    state = load_state(folder / SELF_PLAY_FILE)
    state["behaviors"]["Tennis"]["pool"]["elos"][-1] = 1500.0  # the learner's rating (the pool's last slot)
    torch.save(state, folder / SELF_PLAY_FILE)
    capsys.readouterr()
    resumed = train_args(tmp_path, config, "Tennis", "--resume")
    resumed[resumed.index("200")] = "400"
    assert main(resumed) == 0
    out = capsys.readouterr().out
    assert "self-play resumes at ELO 1500.0" in out
    assert f"resuming from {folder / 'model.zip'} at {first} steps" in out
    assert PPO.load(folder / "model.zip").num_timesteps >= 400 > first
    assert (folder / "resume-1.monitor.csv").is_file()
    final = load_state(folder / SELF_PLAY_FILE)["behaviors"]["Tennis"]
    assert abs(final["pool"]["elos"][-1] - 1500.0) < 100.0  # it went on from 1500, not from 1200
    assert len(final["pool"]["snapshots"]) > len(state["behaviors"]["Tennis"]["pool"]["snapshots"])


def test_ctrl_c_checkpoints_every_behavior(tmp_path: Path, monkeypatch) -> None:
    from unity_sb3.callbacks.checkpoint import SummaryCallback

    config = shrunk(UNITY_CONFIGS / "poca" / "StrikersVsGoalie.yaml", tmp_path / "svg.yaml")
    calls = {"n": 0}

    def interrupt(self) -> bool:
        calls["n"] += 1
        if calls["n"] == 10:
            raise KeyboardInterrupt
        return True

    monkeypatch.setattr(SummaryCallback, "_on_step", interrupt)
    args = train_args(
        tmp_path, config, "StrikersVsGoalie", "--summary-freq", "1000", "--checkpoint-every", "5000"
    )
    args[args.index("200")] = "2000"
    assert main(args) == 0
    run = tmp_path / "results" / "run"
    for behavior in ("Striker", "Goalie"):
        assert (run / behavior / "model.zip").is_file() and (run / behavior / SELF_PLAY_FILE).is_file()
        [(steps, path)] = list_checkpoints(run / behavior / "checkpoints")  # the interrupt's only
        assert 0 < steps < 2000 and path.with_name(path.stem + ".selfplay.pt").is_file()


def args_for(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["train", *argv])


def test_shipped_competitive_entries_run_self_play_by_default() -> None:
    tennis = plan_behaviors(args_for("--env", "Tennis"))
    assert list(tennis) == ["Tennis"] and tennis["Tennis"].algo == "ppo"
    assert tennis["Tennis"].self_play["team_change"] == 100000
    assert "self_play" not in tennis["Tennis"].hyperparams
    soccer = plan_behaviors(args_for("--env", "SoccerTwos"))  # POCA without --algo: its shipped file
    assert soccer["SoccerTwos"].algo == "poca" and soccer["SoccerTwos"].self_play["team_change"] == 200000
    svg = plan_behaviors(args_for("--env", "StrikersVsGoalie"))
    assert {name: c.self_play["swap_steps"] for name, c in svg.items()} == {"Striker": 4000, "Goalie": 1000}
    assert all(c.behavior == name for name, c in svg.items())


def test_resume_plans_every_behavior_with_the_runs_own_settings(tmp_path: Path) -> None:
    from dataclasses import asdict

    from unity_sb3.run import plain

    planned = plan_behaviors(args_for("--env", "StrikersVsGoalie", "--seed", "5", "--transport", "inprocess"))
    planned["Goalie"].hyperparams["n_steps"] = 77  # a setting no shipped file has
    run = tmp_path / "svg"
    run.mkdir()
    whole = {
        "env": "StrikersVsGoalie",
        "algo": "poca",
        "behaviors": {n: asdict(c) for n, c in planned.items()},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(plain(whole), sort_keys=False))
    resumed = plan_behaviors(args_for("--results-dir", str(tmp_path), "--run-id", "svg", "--resume"))
    assert resumed == planned, "no --config: the settings the run was started with"
    again = plan_behaviors(
        args_for("--results-dir", str(tmp_path), "--run-id", "svg", "--resume", "--n-timesteps", "123")
    )
    assert {c.n_timesteps for c in again.values()} == {123} and again["Goalie"].seed == 5


def test_single_behavior_runs_keep_the_single_path(tmp_path: Path) -> None:
    assert plan_behaviors(args_for("--env", "Ball3D")) is None
    config = shrunk(UNITY_CONFIGS / "ppo" / "Tennis.yaml", tmp_path / "tennis.yaml", self_play=False)
    assert plan_behaviors(args_for("--env", "Tennis", "--config", str(config))) is None
    assert (
        plan_behaviors(args_for("--env", "Basic", "--config", str(UNITY_CONFIGS / "ppo" / "Basic.yaml")))
        is None
    )


def test_self_play_sections_resolve_per_behavior() -> None:
    common = {"save_steps": 10, "team_change": 30}
    assert self_play_for(common, "Tennis?team=1").team_change == 30
    assert self_play_for(None, "Tennis") is None
    per_behavior = {"Striker": {"swap_steps": 4}, "Goalie": {"swap_steps": 2}}
    assert self_play_for(per_behavior, "Goalie?team=1").swap_steps == 2
    assert self_play_for(per_behavior, "Keeper") is None  # a behavior left out plays without self-play
    assert self_play_for({}, "Tennis").save_steps == 20000  # an empty section: ML-Agents' defaults
    with pytest.raises(SelfPlayConfigError, match=r"self_play.Striker"):
        self_play_for({"Striker": {"swap_step": 4}}, "Striker")


def test_a_crash_in_one_learner_stops_every_behavior_and_names_it(tmp_path: Path, monkeypatch) -> None:
    from unity_sb3 import POCA

    config = strikers_vs_goalie_two_trainers(tmp_path)

    def boom(self) -> None:
        raise RuntimeError("boom in the update")

    monkeypatch.setattr(POCA, "train", boom)  # the strikers' learner crashes at its first update
    with pytest.raises(RuntimeError, match="boom in the update") as error:
        main(train_args(tmp_path, config, "StrikersVsGoalie"))
    assert any("'Striker'" in note for note in getattr(error.value, "__notes__", []))


def test_resume_falls_back_to_a_checkpoint_with_its_own_self_play_state(tmp_path: Path, capsys) -> None:
    config = shrunk(UNITY_CONFIGS / "ppo" / "Tennis.yaml", tmp_path / "tennis.yaml")
    assert main(train_args(tmp_path, config, "Tennis")) == 0
    folder = tmp_path / "results" / "run" / "Tennis"
    (folder / "model.zip").write_bytes(b"a partial copy")
    steps, checkpoint = list_checkpoints(folder / "checkpoints")[-1]
    capsys.readouterr()
    resumed = train_args(tmp_path, config, "Tennis", "--resume")
    resumed[resumed.index("200")] = "300"
    with pytest.warns(UserWarning, match="skipping"):
        assert main(resumed) == 0
    out = capsys.readouterr().out
    assert f"resuming from {checkpoint} at {steps} steps" in out
    assert f"(from {checkpoint.with_name(checkpoint.stem + '.selfplay.pt')})" in out
