"""The ``unity-sb3`` command: train (results folder, resume, run ids), eval, scenes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from unity_sb3.callbacks.checkpoint import list_checkpoints
from unity_sb3.cli import build_parser, main
from unity_sb3.unity.errors import UnityConfigurationError

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
    for name in ("model.zip", "model.onnx", "config.yaml", "monitor.csv", "learning_curve.png"):
        assert (run / name).is_file(), name
    from unity_sb3.export import check_onnx
    from unity_sb3.scenes import make_scene

    assert check_onnx(run / "model.onnx", make_scene("Ball3D").behavior_specs["3DBall?team=0"]) == []
    assert list_checkpoints(run / "checkpoints"), "periodic checkpoints were written"
    assert any((run / "tb").iterdir()), "TensorBoard logs were written"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["algo"] == "ppo" and saved["env"] == "Ball3D" and saved["hyperparams"]["n_steps"] == 25

    # a second run without --run-id goes to a new folder instead of overwriting the first
    assert main(["train", "--results-dir", str(results), "--config", str(config), *TINY]) == 0
    assert (results / "Ball3D_ppo-2" / "model.zip").is_file()
    # an explicit run id that exists is refused unless --resume or --force
    assert main(["train", "--results-dir", str(results), "--run-id", "Ball3D_ppo", *TINY]) == 2


def test_a_failed_onnx_export_keeps_the_model_and_drops_a_stale_onnx(
    tmp_path: Path, config: Path, monkeypatch
) -> None:
    import unity_sb3.export.command as command

    args = ["train", "--results-dir", str(tmp_path), "--run-id", "r", "--config", str(config), *TINY]
    assert main(args) == 0 and (tmp_path / "r" / "model.onnx").is_file()

    def unsupported(*_, **__):
        raise TypeError("no exporter for this policy")

    monkeypatch.setattr(command, "to_onnx", unsupported)
    with pytest.warns(
        UserWarning, match="no ONNX export \\(TypeError: no exporter for this policy\\); model.zip is saved"
    ):
        assert main([*args[: -len(TINY)], *TINY[2:], "--n-timesteps", "900", "--resume"]) == 0
    assert (tmp_path / "r" / "model.zip").is_file() and not (tmp_path / "r" / "model.onnx").exists()


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


def test_resume_without_config_continues_with_the_runs_own_settings(tmp_path: Path, config: Path) -> None:
    from stable_baselines3 import PPO

    base = ["train", "--results-dir", str(tmp_path), "--run-id", "r"]
    assert main([*base, "--config", str(config), "--seed", "7", *TINY]) == 0
    first = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert first["seed"] == 7 and first["transport"] == "inprocess" and first["hyperparams"]["n_steps"] == 25
    # no --config, --seed or --transport: the run's own; only the budget given here changes
    assert main([*base, "--resume", "--n-timesteps", "1200", "--no-progress"]) == 0
    assert yaml.safe_load((tmp_path / "r" / "config.yaml").read_text()) == {**first, "n_timesteps": 1200}
    assert PPO.load(tmp_path / "r" / "model.zip").num_timesteps >= 1200
    with pytest.raises(ValueError, match="continues a run of env 'Ball3D', not 'Basic'"):
        main([*base, "--resume", "--env", "Basic", "--no-progress"])


def test_resume_without_a_run_fails_clearly(tmp_path: Path, config: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    assert main(["train", "--results-dir", str(tmp_path), "--run-id", "empty", "--resume", *TINY]) == 2
    err = capsys.readouterr().err
    assert "no model or checkpoint found" in err and "without --resume" in err


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
    from unity_sb3.scenes import list_scenes

    assert main(["scenes"]) == 0
    out = capsys.readouterr().out
    for name in list_scenes():
        assert name in out


def test_no_arguments_means_train() -> None:
    from unity_sb3.run import config_from_args

    args = build_parser().parse_args(["train"])
    config = config_from_args(args)
    assert config.env == "Ball3D" and config.algo == "ppo" and config.transport == "player"


def test_mlagents_learn_spelling_of_the_config_port_and_device(tmp_path: Path, config: Path, capsys) -> None:
    """``unity-sb3 train CONFIG --base-port N --torch-device D --env-args ...``, as mlagents-learn is called."""
    from unity_sb3.run import config_from_args

    args = build_parser().parse_args(
        [
            *("train", str(config), "--base-port", "6000", "--torch-device", "cpu", "--num-areas", "2"),
            *("--env-args", "-logFile", "-"),
        ]
    )
    main_args = ["train", str(config), "--results-dir", str(tmp_path), "--run-id", "r", *TINY]
    assert main(main_args) == 0
    assert yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["hyperparams"]["n_steps"] == 25
    args.config = args.trainer_config
    run = config_from_args(args)
    assert run.open_kwargs["base_port"] == 6000 and args.device == "cpu" and run.hyperparams["n_steps"] == 25
    assert run.open_kwargs["additional_args"] == ["-logFile", "-"] and run.open_kwargs["num_areas"] == 2
    engine = ["--width", "100", "--height", "60", "--quality-level", "1", "--target-frame-rate", "30"]
    engine += [
        "--capture-frame-rate",
        "0",
        "--time-scale",
        "5",
        "--no-graphics-monitor",
        "--timeout-wait",
        "90",
    ]
    run = config_from_args(build_parser().parse_args(["train", *engine]))
    assert run.open_kwargs["engine_settings"] == {
        **dict(time_scale=5.0, width=100, height=60, quality_level=1),
        **dict(target_frame_rate=30, capture_frame_rate=0),
    }
    assert run.open_kwargs["no_graphics_monitor"] is True and run.open_kwargs["timeout_wait"] == 90.0
    from unity_sb3.unity.channels import EngineSettings

    assert EngineSettings.coerce(run.open_kwargs["engine_settings"]).width == 100
    with pytest.raises(SystemExit):
        main(["train", str(config), "--config", "other.yml"])
    assert "two trainer configs" in capsys.readouterr().err


def test_unknown_algorithm_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Unknown algorithm"):
        main(["train", "--results-dir", str(tmp_path), "--algo", "ppp", *TINY])


# ------------------------------------------------------------------ crash restarts, replay buffer
TINY_SAC_CONFIG = (
    "buffer_size: 2000\nbatch_size: 32\nlearning_starts: 60\ngradient_steps: 1\n"
    'policy_kwargs: "dict(net_arch=[16, 16])"\n'
)
DEFAULT_RESTARTS = (False, 10, 1, 60.0)  # off; mlagents-learn's 10 lifetime, 1 per 60 s


def _restart_settings(config) -> tuple:
    return (
        config.restart_on_crash,
        config.max_restarts,
        config.restarts_rate_limit_n,
        config.restarts_rate_limit_period_s,
    )


def _train_config(tmp_path: Path, *extra: str):
    from unity_sb3.run import config_from_args

    return config_from_args(
        build_parser().parse_args(["train", "--results-dir", str(tmp_path), *TINY, *extra])
    )


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], DEFAULT_RESTARTS),
        (["--restart-on-crash"], (True, 10, 1, 60.0)),
        (
            [
                "--restart-on-crash",
                "--max-restarts",
                "-1",
                "--restarts-rate-limit-n",
                "-1",
                "--restarts-rate-limit-period-s",
                "2.5",
            ],
            (True, -1, -1, 2.5),
        ),
        (["--max-restarts", "3"], (True, 3, 1, 60.0)),  # a limit alone turns restarts on, as ML-Agents
        (["--restarts-rate-limit-n", "2"], (True, 10, 2, 60.0)),
        (["--max-restarts", "0"], (False, 0, 1, 60.0)),  # 0 lifetime restarts: ML-Agents never restarts
        (["--no-restart-on-crash", "--max-restarts", "3"], (False, 3, 1, 60.0)),
    ],
)
def test_restart_flags_build_the_run_config(tmp_path: Path, flags: list[str], expected: tuple) -> None:
    config = _train_config(tmp_path, *flags)
    assert _restart_settings(config) == expected
    assert config.save_replay_buffer is False


def test_restart_flags_reach_the_vec_env(tmp_path: Path) -> None:
    from unity_sb3.run import make_vec_env

    config = _train_config(
        tmp_path, "--restart-on-crash", "--max-restarts", "4", "--restarts-rate-limit-n", "-1"
    )
    env = make_vec_env(config)
    try:
        venv = env.unwrapped
        assert venv.restart_on_crash is True and venv.max_restarts == 4
        assert venv.restarts_rate_limit_n == -1 and venv.restarts_rate_limit_period_s == 60.0
    finally:
        env.close()
    config = _train_config(tmp_path)
    env = make_vec_env(config)
    try:
        assert env.unwrapped.restart_on_crash is False
    finally:
        env.close()


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-restarts", "-2", "or -1 for no limit"),
        ("--max-restarts", "ten", "expected a whole number"),
        ("--max-restarts", "1.5", "expected a whole number"),
        ("--restarts-rate-limit-n", "-3", "or -1 for no limit"),
        ("--restarts-rate-limit-period-s", "0", "positive number of seconds"),
        ("--restarts-rate-limit-period-s", "-60", "positive number of seconds"),
        ("--restarts-rate-limit-period-s", "nan", "positive number of seconds"),
        ("--restarts-rate-limit-period-s", "soon", "expected a number of seconds"),
    ],
)
def test_bad_restart_flags_are_refused(flag: str, value: str, message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["train", f"{flag}={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and message in err


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("max_restarts: -5\n", "max_restarts in .* must be a whole number >= 0, or -1"),
        ("max_restarts: three\n", "max_restarts in .* must be a whole number"),
        (
            "restarts_rate_limit_period_s: 0\n",
            "restarts_rate_limit_period_s in .* positive number of seconds",
        ),
        ("restart_on_crash: sometimes\n", "restart_on_crash in .* must be true or false"),
        ("save_replay_buffer: 1\n", "save_replay_buffer in .* must be true or false"),
    ],
)
def test_bad_run_settings_in_a_flat_config(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "flat.yml"
    path.write_text(TINY_CONFIG + text)
    with pytest.raises(ValueError, match=match):
        _train_config(tmp_path, "--config", str(path))


def test_flat_config_run_settings_and_cli_override(tmp_path: Path) -> None:
    path = tmp_path / "flat.yml"
    path.write_text(TINY_SAC_CONFIG + "restart_on_crash: true\nmax_restarts: 2\nsave_replay_buffer: true\n")
    config = _train_config(tmp_path, "--algo", "sac", "--config", str(path))
    assert _restart_settings(config) == (True, 2, 1, 60.0) and config.save_replay_buffer is True
    assert "max_restarts" not in config.hyperparams and "save_replay_buffer" not in config.hyperparams
    config = _train_config(
        tmp_path, "--algo", "sac", "--config", str(path), "--no-save-replay-buffer", "--max-restarts", "6"
    )
    assert _restart_settings(config) == (True, 6, 1, 60.0) and config.save_replay_buffer is False


@pytest.mark.filterwarnings("ignore::unity_sb3.config.mlagents_schema.MLAgentsConfigWarning")
def test_mlagents_num_envs_sets_the_instances_unless_given_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "sorter.yaml"
    behavior = {"trainer_type": "ppo", "hyperparameters": {"batch_size": 32, "buffer_size": 64}}
    path.write_text(yaml.safe_dump({"behaviors": {"3DBall": behavior}, "env_settings": {"num_envs": 3}}))
    config = _train_config(tmp_path, "--config", str(path))
    assert config.num_envs == 3 and "num_envs" not in config.hyperparams
    assert _train_config(tmp_path, "--config", str(path), "--num-envs", "2").num_envs == 2
    assert _train_config(tmp_path).num_envs == 1


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if how == "truncated" else b"")


@pytest.mark.parametrize("how", ["truncated", "empty"])
def test_resume_falls_back_to_the_newest_checkpoint_that_reads(
    tmp_path: Path, config: Path, capsys, how: str
) -> None:
    from stable_baselines3 import PPO

    args = ["train", "--results-dir", str(tmp_path), "--run-id", "r", "--config", str(config), *TINY]
    assert main(args) == 0
    run = tmp_path / "r"
    assert [steps for steps, _ in list_checkpoints(run / "checkpoints")] == [300, 600]
    _damage(run / "model.zip", how)  # a partial copy / a full disk
    _damage(run / "checkpoints" / "checkpoint_600_steps.zip", how)
    capsys.readouterr()
    with pytest.warns(UserWarning) as caught:
        assert main([*args, "--n-timesteps", "900", "--resume"]) == 0
    skipped = [str(w.message) for w in caught if "--resume: skipping" in str(w.message)]
    assert len(skipped) == 2, skipped
    assert str(run / "model.zip") in skipped[0] and "checkpoint_600_steps.zip" in skipped[1]
    out = capsys.readouterr().out
    assert f"Resuming from {run / 'checkpoints' / 'checkpoint_300_steps.zip'} at 300 steps" in out
    assert PPO.load(run / "model.zip").num_timesteps >= 900, "the resumed run saved a good model again"


def test_resume_with_no_readable_model_fails_clearly(tmp_path: Path, config: Path, capsys) -> None:
    args = ["train", "--results-dir", str(tmp_path), "--run-id", "r", "--config", str(config), *TINY]
    assert main(args) == 0
    run = tmp_path / "r"
    damaged = [run / "model.zip", *(path for _, path in list_checkpoints(run / "checkpoints"))]
    for path in damaged:
        _damage(path, "truncated")
    saved_config = (run / "config.yaml").read_text()
    capsys.readouterr()
    with pytest.warns(UserWarning, match="--resume: skipping"):
        assert main([*args, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "no model in" in err and "can be read" in err
    assert all(str(path) in err for path in damaged), err
    assert "start again without --resume" in err and "Copy a good model.zip" in err
    assert (run / "config.yaml").read_text() == saved_config and not (run / "resume-1.monitor.csv").exists()


def test_save_replay_buffer_with_an_on_policy_algorithm_is_an_error(tmp_path: Path, config: Path) -> None:
    args = ["train", "--results-dir", str(tmp_path), "--run-id", "p", "--config", str(config), *TINY]
    with pytest.raises(ValueError, match=r"needs an off-policy algorithm.*ppo is on-policy"):
        main([*args, "--save-replay-buffer"])
    assert not (tmp_path / "p").exists(), "refused before a run folder or Unity was opened"


def test_sac_replay_buffer_is_saved_and_loaded_on_resume(tmp_path: Path, monkeypatch) -> None:
    import pickle

    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

    from unity_sb3 import run as run_module

    sac_config = tmp_path / "sac.yml"
    sac_config.write_text(TINY_SAC_CONFIG)
    base = [
        "train",
        "--results-dir",
        str(tmp_path),
        "--run-id",
        "s",
        "--algo",
        "sac",
        "--config",
        str(sac_config),
    ]
    assert main([*base, *TINY, "--save-replay-buffer"]) == 0
    checkpoints = tmp_path / "s" / "checkpoints"
    buffer_file = checkpoints / "replay_buffer.pkl"
    assert buffer_file.is_file() and list_checkpoints(checkpoints)
    with buffer_file.open("rb") as handle:
        saved = pickle.load(handle)
    assert saved.size() * saved.n_envs >= 600, "the final save holds every transition (12 slots x 50 steps)"

    loaded_sizes: list[int] = []
    real_load = run_module.load_replay_buffer_if_present

    def spy(model: OffPolicyAlgorithm, path: Path) -> bool:
        assert model.replay_buffer.size() == 0, "a freshly loaded SAC starts with an empty buffer"
        result = real_load(model, path)
        loaded_sizes.append(model.replay_buffer.size())
        return result

    monkeypatch.setattr(run_module, "load_replay_buffer_if_present", spy)
    # without --algo: resuming takes the run's algorithm (sac) from its config.yaml;
    # without --save-replay-buffer: loads the buffer, writes no new one
    resumed = [arg for arg in base if arg not in ("--algo", "sac")] + [
        *TINY[2:],
        "--n-timesteps",
        "900",
        "--resume",
    ]
    assert main(resumed) == 0
    assert loaded_sizes == [saved.size()] and loaded_sizes[0] > 0
    with buffer_file.open("rb") as handle:
        assert pickle.load(handle).size() == saved.size()


def test_replay_buffer_from_a_different_slot_count_is_skipped(tmp_path: Path) -> None:
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env

    from unity_sb3.run_state import load_replay_buffer_if_present

    two = SAC("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=2), buffer_size=100, learning_starts=10)
    two.learn(20)
    two.save_replay_buffer(tmp_path / "buffer.pkl")
    one = SAC("MlpPolicy", "Pendulum-v1", buffer_size=100)
    with pytest.warns(UserWarning, match="saved with 2 environment slots but the run now has 1"):
        assert load_replay_buffer_if_present(one, tmp_path / "buffer.pkl") is False
    assert one.replay_buffer.size() == 0
    assert load_replay_buffer_if_present(one, tmp_path / "missing.pkl") is False
    other = SAC("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=2), buffer_size=100)
    assert load_replay_buffer_if_present(other, tmp_path / "buffer.pkl") is True
    assert other.replay_buffer.size() == two.replay_buffer.size() > 0


def test_replay_buffer_of_another_step_is_skipped(tmp_path: Path) -> None:
    # resuming from an older checkpoint (the newer model was unreadable): the buffer saved with
    # the newer model does not belong to it
    from stable_baselines3 import SAC

    from unity_sb3.callbacks.checkpoint import save_replay_buffer_atomic
    from unity_sb3.run_state import load_replay_buffer_if_present

    newer = SAC("MlpPolicy", "Pendulum-v1", buffer_size=100, learning_starts=10)
    newer.learn(30)
    save_replay_buffer_atomic(newer, tmp_path / "buffer.pkl")
    older = SAC("MlpPolicy", "Pendulum-v1", buffer_size=100)
    older.num_timesteps = 20
    with pytest.warns(UserWarning, match="saved at step 30 but the model resumes from step 20"):
        assert load_replay_buffer_if_present(older, tmp_path / "buffer.pkl") is False
    assert older.replay_buffer.size() == 0
    older.num_timesteps = 30
    assert load_replay_buffer_if_present(older, tmp_path / "buffer.pkl") is True
    assert older.replay_buffer.size() == 30


def _crash_once_at(monkeypatch, call: int) -> None:
    """Make every embedded scene's ``step`` raise a Unity communication error once, at ``call``."""
    from mlagents_envs.exception import UnityCommunicationException

    from unity_sb3.scenes.base import EmbeddedScene

    real_step, calls = EmbeddedScene.step, [0]

    def step(self) -> None:
        calls[0] += 1
        if calls[0] == call:
            raise UnityCommunicationException("simulated Unity crash")
        real_step(self)

    monkeypatch.setattr(EmbeddedScene, "step", step)


def test_restart_on_crash_through_the_command(tmp_path: Path, config: Path, monkeypatch) -> None:
    from unity_sb3.unity.errors import UnityProcessError

    args = ["train", "--results-dir", str(tmp_path), "--config", str(config), *TINY]
    _crash_once_at(monkeypatch, 20)
    with pytest.raises(UnityProcessError, match="restart_on_crash=True"):
        main([*args, "--run-id", "off"])
    _crash_once_at(monkeypatch, 20)
    with pytest.warns(UserWarning, match=r"worker 0 crashed .*simulated Unity crash.*1 of at most 3"):
        assert main([*args, "--run-id", "on", "--restart-on-crash", "--max-restarts", "3"]) == 0
    assert (tmp_path / "on" / "model.zip").is_file()


# ------------------------------------------------------------------ curriculum state and --resume
# the tiny ML-Agents config maps with warnings about settings SB3 cannot honour
QUIET_MLAGENTS_CONFIG = pytest.mark.filterwarnings(
    "ignore::unity_sb3.config.mlagents_schema.MLAgentsConfigWarning"
)


def _curriculum_yaml(path: Path, lessons: tuple[str, ...] = ("small", "medium", "large")) -> Path:
    """A tiny ML-Agents 3DBall config whose first lesson ends with the first finished episode."""
    easy = {"behavior": "3DBall", "threshold": -1000.0, "min_lesson_length": 1, "signal_smoothing": False}
    never = {"behavior": "3DBall", "threshold": 1e9, "min_lesson_length": 1}
    curriculum = [
        {"name": name, "value": 1.0 + 0.5 * i, "completion_criteria": easy if i == 0 else never}
        for i, name in enumerate(lessons)
    ]
    del curriculum[-1]["completion_criteria"]
    data = {
        "behaviors": {
            "3DBall": {
                "trainer_type": "ppo",
                "hyperparameters": {"batch_size": 100, "buffer_size": 300, "num_epoch": 1},
                "network_settings": {"hidden_units": 16, "num_layers": 1},
                "max_steps": 600,
            }
        },
        "environment_parameters": {"scale": {"curriculum": curriculum}},
    }
    path.write_text(yaml.safe_dump(data))
    return path


def _record_scene_resets(monkeypatch) -> list[object]:
    """The ``scale`` each embedded-scene reset ran with (what Unity received before it)."""
    from unity_sb3.scenes.base import EmbeddedScene

    real_reset, seen = EmbeddedScene.reset, []

    def reset(self) -> None:
        real_reset(self)
        seen.append(self.side_channels.environment_parameters.get("scale"))

    monkeypatch.setattr(EmbeddedScene, "reset", reset)
    return seen


@QUIET_MLAGENTS_CONFIG
def test_curriculum_lessons_survive_resume(tmp_path: Path, monkeypatch, capsys) -> None:
    import json

    from stable_baselines3 import PPO

    config = _curriculum_yaml(tmp_path / "curriculum.yaml")
    base = ["train", "--results-dir", str(tmp_path), "--run-id", "c", "--config", str(config), *TINY]
    assert main(base) == 0
    run = tmp_path / "c"
    state = json.loads((run / "curriculum.json").read_text())
    assert state["parameters"]["lesson_numbers"] == {"scale": 1}
    assert state["parameters"]["lesson_names"] == {"scale": "medium"}
    assert state["num_timesteps"] == PPO.load(run / "model.zip").num_timesteps

    resets = _record_scene_resets(monkeypatch)
    capsys.readouterr()
    assert main([*base, "--n-timesteps", "900", "--resume"]) == 0
    assert "Curricula resume at lessons {'scale': 1}" in capsys.readouterr().out
    assert resets and all(scale == 1.5 for scale in resets), f"every reset of the resumed run: {resets}"
    state = json.loads((run / "curriculum.json").read_text())
    assert state["parameters"]["lesson_numbers"] == {"scale": 1}
    assert state["num_timesteps"] == PPO.load(run / "model.zip").num_timesteps >= 900


@QUIET_MLAGENTS_CONFIG
def test_curriculum_survives_resume_without_the_config(tmp_path: Path, monkeypatch, capsys) -> None:
    config = _curriculum_yaml(tmp_path / "curriculum.yaml")
    base = ["train", "--results-dir", str(tmp_path), "--run-id", "c"]
    assert main([*base, "--config", str(config), *TINY]) == 0
    resets = _record_scene_resets(monkeypatch)
    capsys.readouterr()
    assert main([*base, "--n-timesteps", "900", "--resume", "--no-progress"]) == 0
    assert "Curricula resume at lessons {'scale': 1}" in capsys.readouterr().out
    assert resets and all(scale == 1.5 for scale in resets), f"every reset of the resumed run: {resets}"


@QUIET_MLAGENTS_CONFIG
def test_eval_runs_at_the_lessons_the_model_was_trained_at(tmp_path: Path, monkeypatch, capsys) -> None:
    import json

    config = _curriculum_yaml(tmp_path / "curriculum.yaml")
    assert (
        main(["train", "--results-dir", str(tmp_path), "--run-id", "c", "--config", str(config), *TINY]) == 0
    )
    run = tmp_path / "c"
    resets = _record_scene_resets(monkeypatch)
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert "trained at: {'scale': 1}" in capsys.readouterr().out
    assert resets and all(scale == 1.5 for scale in resets), f"lesson 1 is scale 1.5: {resets}"
    # a checkpoint: its run's curriculum, at the lesson saved with that checkpoint
    _, first = list_checkpoints(run / "checkpoints")[0]
    lesson = json.loads(first.with_name(first.stem + ".curriculum.json").read_text())["parameters"]
    resets.clear()
    assert main(["eval", str(first), "--episodes", "2"]) == 0
    scale = 1.0 + 0.5 * lesson["lesson_numbers"]["scale"]
    assert resets and all(value == scale for value in resets), f"lesson {lesson}: {resets}"


@QUIET_MLAGENTS_CONFIG
def test_ctrl_c_saves_the_curriculum_with_its_checkpoint(tmp_path: Path, monkeypatch) -> None:
    import json

    from unity_sb3.scenes.base import EmbeddedScene

    real_step, calls = EmbeddedScene.step, [0]

    def step(self) -> None:
        calls[0] += 1
        if calls[0] == 45:
            raise KeyboardInterrupt
        real_step(self)

    monkeypatch.setattr(EmbeddedScene, "step", step)
    config = _curriculum_yaml(tmp_path / "curriculum.yaml")
    args = ["train", "--results-dir", str(tmp_path), "--run-id", "i", "--config", str(config), *TINY]
    assert main([*args, "--n-timesteps", "6000"]) == 0
    run = tmp_path / "i"
    [*_, (steps, _)] = list_checkpoints(run / "checkpoints")
    assert steps % 300 != 0, "the newest checkpoint is the interrupt's"
    state = json.loads((run / "curriculum.json").read_text())
    assert state["num_timesteps"] == steps and state["parameters"]["lesson_numbers"] == {"scale": 1}


@QUIET_MLAGENTS_CONFIG
def test_resume_with_a_changed_curriculum_is_refused_before_unity_opens(tmp_path: Path) -> None:
    import json

    run = tmp_path / "x"
    three = _curriculum_yaml(tmp_path / "three.yaml")
    first = ["train", "--results-dir", str(tmp_path), "--run-id", "x", "--config", str(three), *TINY]
    assert main([*first, "--n-timesteps", "300"]) == 0
    saved = {
        "lesson_numbers": {"scale": 2},
        "lesson_names": {"scale": "large"},
        "smoothed_values": {"scale": 0.0},
    }
    (run / "curriculum.json").write_text(json.dumps({"format": 1, "num_timesteps": 300, "parameters": saved}))
    (run / "config.yaml").write_text("previous: run\n")
    config = _curriculum_yaml(tmp_path / "two.yaml", lessons=("small", "medium"))
    args = [
        "train",
        "--results-dir",
        str(tmp_path),
        "--run-id",
        "x",
        "--config",
        str(config),
        *TINY,
        "--resume",
    ]
    with pytest.raises(UnityConfigurationError) as error:
        main(args)
    message = str(error.value)
    assert "curriculum.json does not fit" in message and "'scale' was saved in lesson 2" in message
    assert "delete it to restart every curriculum at lesson 0" in message
    assert (run / "config.yaml").read_text() == "previous: run\n", "nothing written"
    assert len(list(run.glob("*monitor.csv"))) == 1, "Unity was not opened again"
    (run / "curriculum.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"curriculum\.json is not a readable"):
        main(args)


@QUIET_MLAGENTS_CONFIG
def test_resume_without_a_curriculum_file_starts_at_lesson_0(tmp_path: Path, monkeypatch) -> None:
    config = _curriculum_yaml(tmp_path / "curriculum.yaml")
    args = ["train", "--results-dir", str(tmp_path), "--run-id", "m", "--config", str(config), *TINY]
    assert main([*args, "--n-timesteps", "300"]) == 0
    (tmp_path / "m" / "curriculum.json").unlink()
    resets = _record_scene_resets(monkeypatch)
    with pytest.warns(UserWarning, match="curriculum.json is missing"):
        assert main([*args, "--n-timesteps", "400", "--resume"]) == 0
    assert resets[0] == 1.0


@QUIET_MLAGENTS_CONFIG
def test_resume_from_an_older_checkpoint_takes_that_checkpoints_curriculum(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    import json
    import warnings

    config = _curriculum_yaml(tmp_path / "curriculum.yaml")
    args = ["train", "--results-dir", str(tmp_path), "--run-id", "k", "--config", str(config), *TINY]
    assert main(args) == 0
    run, checkpoints = tmp_path / "k", tmp_path / "k" / "checkpoints"
    for steps in (300, 600):
        state = json.loads((checkpoints / f"checkpoint_{steps}_steps.curriculum.json").read_text())
        assert state["num_timesteps"] == steps, "each checkpoint keeps the curriculum state of its step"
    # mark the older checkpoint's state so the test can tell which one the resume used
    older = checkpoints / "checkpoint_300_steps.curriculum.json"
    state = json.loads(older.read_text())
    state["parameters"].update(lesson_numbers={"scale": 0}, lesson_names={"scale": "small"})
    older.write_text(json.dumps(state))
    _damage(run / "model.zip", "truncated")
    _damage(checkpoints / "checkpoint_600_steps.zip", "truncated")
    resets = _record_scene_resets(monkeypatch)
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main([*args, "--n-timesteps", "700", "--resume"]) == 0
    out = capsys.readouterr().out
    assert f"Curricula resume at lessons {{'scale': 0}} (from {older})" in out
    assert not [w for w in caught if "was saved at step" in str(w.message)], "state and checkpoint match"
    assert resets[0] == 1.0, "the first episodes use the checkpoint's lesson"


@QUIET_MLAGENTS_CONFIG
def test_mlagents_checkpoint_and_summary_settings_are_honoured(tmp_path: Path, capsys) -> None:
    data = yaml.safe_load(_curriculum_yaml(tmp_path / "c.yaml").read_text())
    del data["environment_parameters"]
    data["behaviors"]["3DBall"].update(keep_checkpoints=2, checkpoint_interval=200, summary_freq=300)
    config = tmp_path / "cadence.yaml"
    config.write_text(yaml.safe_dump(data))
    args = ["train", "--results-dir", str(tmp_path), "--config", str(config), "--no-progress"]
    assert main([*args, "--run-id", "a", "--transport", "inprocess"]) == 0
    out = capsys.readouterr().out
    assert [steps for steps, _ in list_checkpoints(tmp_path / "a" / "checkpoints")] == [408, 600]
    summaries = [line for line in out.splitlines() if line.startswith("3DBall. Step:")]
    assert [line.split(". ")[1] for line in summaries] == ["Step: 300", "Step: 600"], out
    assert all("Mean Reward:" in line or "No episode was completed" in line for line in summaries)
    # the command line overrides the file: keep every checkpoint, no other change
    assert main([*args, "--run-id", "b", "--transport", "inprocess", "--keep-checkpoints", "0"]) == 0
    assert [steps for steps, _ in list_checkpoints(tmp_path / "b" / "checkpoints")] == [204, 408, 600]


def test_cli_train_with_a_misspelt_config_key(tmp_path, capsys):
    config = tmp_path / "hyper.yml"
    config.write_text("unity_sb3/Ball3D-v0:\n  n_timesteps: 100\n  n_step: 32\n")
    with pytest.raises(ValueError, match=r"Unknown hyperparameter 'n_step' for ppo.*Did you mean 'n_steps'"):
        main(
            [
                "train",
                "--transport",
                "inprocess",
                "--config",
                str(config),
                "--results-dir",
                str(tmp_path),
                "--no-progress",
            ]
        )


def test_train_help_names_every_registered_algorithm() -> None:
    from unity_sb3.algorithms.registry import ALGORITHMS

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    algo_help = next(a.help for a in train._actions if "--algo" in a.option_strings)
    assert [name for name in ALGORITHMS if name not in algo_help] == []


def test_eval_pits_a_self_play_model_against_other_players(tmp_path: Path, capsys) -> None:
    """eval --opponent: the scripted player, a checkpoint and a self-play snapshot; win rates."""
    data = yaml.safe_load(
        (Path(__file__).parent / "data" / "unity_configs" / "ppo" / "Tennis.yaml").read_text()
    )
    tennis = data["behaviors"]["Tennis"]
    tennis["hyperparameters"].update(batch_size=32, buffer_size=64)
    tennis["network_settings"]["hidden_units"] = 16
    tennis["self_play"].update(save_steps=40, team_change=100, swap_steps=20)
    config = tmp_path / "Tennis.yaml"
    config.write_text(yaml.safe_dump(data))
    results = tmp_path / "results"
    train = [
        "train",
        "--config",
        str(config),
        "--env",
        "Tennis",
        "--results-dir",
        str(results),
        "--run-id",
        "t",
    ]
    assert main([*train, "--checkpoint-every", "100", *TINY[:2], *TINY[4:]]) == 0
    folder = results / "t" / "Tennis"
    [(_, checkpoint), *_] = list_checkpoints(folder / "checkpoints")
    for opponent in ("expert", str(checkpoint), f"{folder / 'selfplay.pt'}#0"):
        capsys.readouterr()
        assert main(["eval", str(folder), "--opponent", opponent, "--episodes", "4", "--team", "1"]) == 0
        line = capsys.readouterr().out.strip().splitlines()[-1]
        assert f"vs {opponent} on Tennis: team 1: " in line and "in 4 games (win rate " in line
    # what was given wrong is said without a traceback (exit 2)
    capsys.readouterr()
    for given, said in [
        ([str(results / "t"), "--opponent", "random"], "give one behavior's folder"),
        (
            [str(folder), "--opponent", "random", "--team", "2"],
            "plays teams [0, 1]; --team 2 is not one of them",
        ),
        ([str(folder), "--opponent", "random", "--env", "Ball3D"], "the scene has no behavior 'Tennis'"),
        ([str(folder), "--opponent", f"{folder / 'selfplay.pt'}#99"], "has no snapshot #99"),
    ]:
        assert main(["eval", *given, "--episodes", "1"]) == 2, given
        assert said in capsys.readouterr().err
