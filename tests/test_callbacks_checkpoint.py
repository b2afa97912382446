"""Atomic checkpoints, keep-last-N, resume selection, and the live progress bar."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from stable_baselines3 import PPO, SAC

from unity_sb3.callbacks.checkpoint import (
    AtomicCheckpointCallback,
    SummaryCallback,
    is_loadable_zip,
    latest_checkpoint,
    list_checkpoints,
    read_model_timesteps,
    save_atomic,
    save_replay_buffer_atomic,
    write_json_atomic,
)
from unity_sb3.callbacks.progress import LiveProgressCallback


@pytest.fixture
def ppo() -> PPO:
    return PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")


def test_save_atomic_replaces_only_complete_files(tmp_path: Path, ppo: PPO, monkeypatch) -> None:
    target = save_atomic(ppo, tmp_path / "model")
    assert target.name == "model.zip" and is_loadable_zip(target)
    good = target.read_bytes()

    def crash(path, *args, **kwargs):
        Path(path).write_bytes(b"half a zip")
        raise RuntimeError("disk full")

    monkeypatch.setattr(ppo, "save", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        save_atomic(ppo, target)
    assert target.read_bytes() == good, "a failed save must not replace the good model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zip"], "no temp file left behind"


def test_checkpoints_keep_last_and_resume_from_newest_loadable(tmp_path: Path, ppo: PPO) -> None:
    callback = AtomicCheckpointCallback(save_freq=64, directory=tmp_path, keep_last=2)
    ppo.learn(64 * 4, callback=callback)
    steps = [s for s, _ in list_checkpoints(tmp_path)]
    assert steps == [192, 256]
    newest = latest_checkpoint(tmp_path)
    assert newest is not None and newest.name == "checkpoint_256_steps.zip"
    # a truncated newest checkpoint (crash mid-copy by another tool) is skipped
    newest.write_bytes(newest.read_bytes()[:100])
    assert latest_checkpoint(tmp_path).name == "checkpoint_192_steps.zip"
    loaded = PPO.load(latest_checkpoint(tmp_path))
    assert loaded.num_timesteps == 192


def test_checkpoint_calls_on_save_after_each_checkpoint(tmp_path: Path, ppo: PPO) -> None:
    saved: list[tuple[str, bool]] = []
    callback = AtomicCheckpointCallback(
        save_freq=64, directory=tmp_path, on_save=lambda path: saved.append((path.name, path.is_file()))
    )
    ppo.learn(64 * 2, callback=callback)
    callback.save_now()  # an interrupt's checkpoint
    assert saved == [
        ("checkpoint_64_steps.zip", True),
        ("checkpoint_128_steps.zip", True),
        ("checkpoint_128_steps.zip", True),
    ]


def test_json_and_replay_buffer_writes_are_atomic(tmp_path: Path, monkeypatch) -> None:
    target = write_json_atomic({"lesson": 1}, tmp_path / "state.json")
    assert json.loads(target.read_text()) == {"lesson": 1}
    monkeypatch.setattr(json, "dumps", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("disk full")))
    with pytest.raises(RuntimeError, match="disk full"):
        write_json_atomic({"lesson": 2}, target)
    assert json.loads(target.read_text()) == {"lesson": 1}, "a failed write must not replace the good file"
    sac = SAC("MlpPolicy", "Pendulum-v1", learning_starts=10, buffer_size=50, seed=0, device="cpu")
    sac.learn(20)
    buffer_file = save_replay_buffer_atomic(sac, tmp_path / "buffers" / "replay_buffer.pkl")
    assert buffer_file.is_file()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["buffers", "replay_buffer.pkl", "state.json"]


def test_checkpoint_saves_replay_buffer(tmp_path: Path) -> None:
    sac = SAC("MlpPolicy", "Pendulum-v1", learning_starts=10, buffer_size=500, seed=0, device="cpu")
    callback = AtomicCheckpointCallback(save_freq=50, directory=tmp_path, save_replay_buffer=True)
    sac.learn(100, callback=callback)
    buffer_file = tmp_path / "replay_buffer.pkl"
    assert buffer_file.exists()
    fresh = SAC("MlpPolicy", "Pendulum-v1", buffer_size=500, device="cpu")
    fresh.load_replay_buffer(buffer_file)
    # SB3 calls callbacks before it stores the step's transition: the last one is not in yet
    assert fresh.replay_buffer.size() == 99


@pytest.mark.parametrize(
    "bad", [{"save_freq": 0}, {"save_freq": 10, "keep_last": -1}, {"save_freq": 10, "keep_last": 1.5}]
)
def test_checkpoint_rejects_bad_settings(tmp_path: Path, bad: dict) -> None:
    with pytest.raises(ValueError):
        AtomicCheckpointCallback(directory=tmp_path, **bad)


def test_progress_bar_reports_mean_reward(ppo: PPO, capsys) -> None:
    callback = LiveProgressCallback(total_timesteps=256, refresh_every=1)
    ppo.learn(256, callback=callback)
    err = capsys.readouterr().err
    assert "mean reward" in err and "256/256" in err
    assert callback.bar is None, "the bar is closed at the end of training"


def test_list_checkpoints_ignores_other_files(tmp_path: Path) -> None:
    for name in ("checkpoint_10_steps.zip", "checkpoint_x_steps.zip", "notes.txt", "checkpoint_2_steps.zip"):
        (tmp_path / name).write_bytes(b"")
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 10]
    assert latest_checkpoint(tmp_path) is None, "empty files are not loadable"
    assert not os.path.exists(tmp_path / "missing") and list_checkpoints(tmp_path / "missing") == []


def test_keep_last_zero_keeps_every_checkpoint(tmp_path: Path, ppo: PPO) -> None:
    # ML-Agents' keep_checkpoints: 0 (or less) removes none
    ppo.learn(64 * 4, callback=AtomicCheckpointCallback(save_freq=64, directory=tmp_path, keep_last=0))
    assert [s for s, _ in list_checkpoints(tmp_path)] == [64, 128, 192, 256]


def test_pruning_removes_a_checkpoints_state_files_with_it(tmp_path: Path, ppo: PPO) -> None:
    def write_state(path: Path) -> None:
        path.with_name(path.stem + ".curriculum.json").write_text("{}")

    callback = AtomicCheckpointCallback(save_freq=64, directory=tmp_path, keep_last=2, on_save=write_state)
    (tmp_path / "replay_buffer.pkl").write_bytes(b"kept")
    ppo.learn(64 * 3, callback=callback)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint_128_steps.curriculum.json",
        "checkpoint_128_steps.zip",
        "checkpoint_192_steps.curriculum.json",
        "checkpoint_192_steps.zip",
        "replay_buffer.pkl",
    ]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # a partial copy
        lambda data: b"",  # a full disk
        lambda data: data.replace(b"num_timesteps", b"num_timestepz"),  # not a model anymore
    ],
    ids=["truncated", "empty", "garbled"],
)
def test_read_model_timesteps_rejects_damaged_models(tmp_path: Path, ppo: PPO, damage) -> None:
    path = save_atomic(ppo, tmp_path / "model.zip")
    assert read_model_timesteps(path) == 0
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError):
        read_model_timesteps(path)
    with pytest.raises(ValueError):
        read_model_timesteps(tmp_path / "missing.zip")


def test_saved_replay_buffer_records_its_step(tmp_path: Path) -> None:
    import pickle

    from unity_sb3.callbacks.checkpoint import REPLAY_BUFFER_STEP

    sac = SAC("MlpPolicy", "Pendulum-v1", buffer_size=100, learning_starts=10, device="cpu")
    sac.learn(20)
    path = save_replay_buffer_atomic(sac, tmp_path / "buffer.pkl")
    with path.open("rb") as handle:
        assert getattr(pickle.load(handle), REPLAY_BUFFER_STEP) == sac.num_timesteps == 20


def test_summary_every_summary_freq_steps_as_mlagents_prints_it(tmp_path: Path, capsys) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ppo = PPO(
        "MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu",
        tensorboard_log=str(tmp_path),
    )  # fmt: skip
    ppo.learn(320, callback=SummaryCallback(100, name="CartPole"), tb_log_name="run")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("CartPole. Step:")]
    assert [line.split(". ")[1] for line in lines] == ["Step: 100", "Step: 200", "Step: 300"]
    for line in lines:  # CartPole episodes last 8 to 60 steps at first: every window has some
        assert re.fullmatch(
            r"CartPole\. Step: \d+\. Time Elapsed: \d+\.\d{3} s\. Mean Reward: \d+\.\d{3}\. "
            r"Std of Reward: \d+\.\d{3}\. Training\.",
            line,
        ), line
    events = EventAccumulator(str(next(tmp_path.iterdir()))).Reload()
    rewards = events.Scalars("Environment/Cumulative Reward")
    assert [e.step for e in rewards] == [100, 200, 300]
    assert [e.step for e in events.Scalars("Environment/Episode Length")] == [100, 200, 300]


def test_summary_without_finished_episodes_says_so(ppo: PPO) -> None:
    callback = SummaryCallback(10, name="Ball")
    callback.init_callback(ppo)
    assert callback.summary_line(10).startswith("Ball. Step: 10. Time Elapsed: ")
    assert callback.summary_line(10).endswith("No episode was completed since last summary. Training.")
    callback.rewards += [1.0, 3.0]
    assert "Mean Reward: 2.000. Std of Reward: 1.000. Training." in callback.summary_line(20)


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_summary_rejects_bad_frequencies(bad) -> None:
    with pytest.raises(ValueError, match="summary_freq"):
        SummaryCallback(bad)
