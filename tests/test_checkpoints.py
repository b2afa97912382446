"""Checkpoints: written on SIGINT or SIGTERM and resumed to the total; reward-signal, POCA and SAC state come back."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from players import PYTHON, ROOT, wait_for
from stable_baselines3.common.callbacks import BaseCallback

from unity_sb3.wrappers.vec_env import UnityVecEnv

BASE = [PYTHON, "-m", "unity_sb3.cli", "train", "--env", "Ball3D", "--transport", "inprocess"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _train_then_signal(results: Path, sig: signal.Signals) -> tuple[int, str]:
    """Start a long ``unity-sb3 train`` run, send ``sig`` after its first periodic checkpoint.

    :return: the exit code and the output.
    """
    from unity_sb3.callbacks.checkpoint import list_checkpoints

    common = ["--results-dir", str(results), "--run-id", "soak", "--no-progress"]
    process = subprocess.Popen(
        [*BASE, *common, "--n-timesteps", "1000000", "--checkpoint-every", "1000"],
        cwd=ROOT,
        env=ENV,
        # a shell running this suite in the background ignores SIGINT, and children inherit that;
        # restore the default so Python turns SIGINT into KeyboardInterrupt as in a terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(
            lambda: list_checkpoints(results / "soak" / "checkpoints"), 180, "the first periodic checkpoint"
        )
        process.send_signal(sig)
        out, _ = process.communicate(timeout=300)  # saving, closing and plotting; slow on a loaded machine
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, out


def _interrupt_checkpoint(run_dir: Path, code: int, out: str) -> int:
    """Check that the interrupted run wrote its own checkpoint and its model; return the checkpoint's steps."""
    from stable_baselines3 import PPO

    from unity_sb3.callbacks.checkpoint import list_checkpoints

    assert code == 0, out
    assert "Interrupted: saved checkpoint" in out and "continue with --resume" in out
    interrupted_at, newest = list_checkpoints(run_dir / "checkpoints")[-1]
    assert interrupted_at > 1000, "the interrupt wrote its own checkpoint after the periodic one"
    assert PPO.load(newest, device="cpu").num_timesteps == interrupted_at
    assert (run_dir / "model.zip").is_file()
    return interrupted_at


def test_cli_train_stopped_by_sigterm_checkpoints_as_ctrl_c_does(tmp_path):
    code, out = _train_then_signal(tmp_path / "results", signal.SIGTERM)
    _interrupt_checkpoint(tmp_path / "results" / "soak", code, out)


def test_cli_train_interrupted_by_sigint_checkpoints_and_resumes_to_the_total(tmp_path):
    from stable_baselines3 import PPO

    run_dir = tmp_path / "results" / "soak"
    common = ["--results-dir", str(tmp_path / "results"), "--run-id", "soak", "--no-progress"]
    interrupted_at = _interrupt_checkpoint(run_dir, *_train_then_signal(tmp_path / "results", signal.SIGINT))

    total = interrupted_at + 3000  # less than one more rollout (256 steps x 12 agents)
    result = subprocess.run(
        [*BASE, *common, "--n-timesteps", str(total), "--resume"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"at {interrupted_at} steps" in result.stdout
    final = PPO.load(run_dir / "model.zip", device="cpu")
    assert total <= final.num_timesteps < total + 256 * 12
    assert len(list(run_dir.glob("*monitor.csv"))) == 2, "the resumed segment has its own monitor file"


class ProbeAtCheckpoint(BaseCallback):
    """Wraps a checkpoint callback: records ``probe(model)`` right when each checkpoint is written."""

    def __init__(self, checkpoint, probe) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.probe = probe
        self.seen: dict[str, dict] = {}

    def _init_callback(self) -> None:
        self.checkpoint.init_callback(self.model)

    def _on_training_start(self) -> None:
        self.checkpoint.on_training_start(self.locals, self.globals)

    def _on_step(self) -> bool:
        before = set(map(str, self.checkpoint.directory.glob("checkpoint_*.zip")))
        self.checkpoint.on_step()
        for path in set(map(str, self.checkpoint.directory.glob("checkpoint_*.zip"))) - before:
            self.seen[Path(path).name] = self.probe(self.model)
        return True


def assert_same(expected: dict, actual: dict) -> None:
    assert expected.keys() == actual.keys()
    for key in expected:
        # exact up to float rounding (attention's fused eval path differs by an ulp or so)
        np.testing.assert_allclose(actual[key], expected[key], rtol=1e-5, atol=1e-7, err_msg=key)


def test_curiosity_state_is_part_of_every_checkpoint(tmp_path):
    from unity_sb3 import PPO
    from unity_sb3.callbacks.checkpoint import AtomicCheckpointCallback, list_checkpoints

    torch.set_num_threads(1)
    venv = UnityVecEnv("Ball3D", open_kwargs={"num_agents": 4})
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(8, *venv.observation_space.shape)).astype(np.float32)
    next_obs = rng.normal(size=(8, *venv.observation_space.shape)).astype(np.float32)
    actions = rng.uniform(-1, 1, (8, 2)).astype(np.float32)

    def probe(model) -> dict:
        rewards = model.intrinsic_rewards(obs, actions, next_obs)
        with torch.no_grad():
            values = model.policy.predict_values(torch.as_tensor(obs)).numpy()
        return {"curiosity": rewards["curiosity"], "values": values}

    signals = {"extrinsic": {}, "curiosity": {"strength": 0.1, "network_settings": {"hidden_units": 16}}}
    model = PPO(
        "MlpPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=0, reward_signals=signals, device="cpu"
    )
    callback = ProbeAtCheckpoint(AtomicCheckpointCallback(64, tmp_path, keep_last=2), probe)
    model.learn(64 * 5, callback=callback)
    venv.close()
    kept = list_checkpoints(tmp_path)
    assert len(kept) == 2
    for _, path in kept:
        loaded = PPO.load(path, device="cpu")
        assert_same(callback.seen[path.name], probe(loaded))
    assert not np.array_equal(
        callback.seen[kept[0][1].name]["curiosity"], callback.seen[kept[1][1].name]["curiosity"]
    )


def test_poca_critic_and_baseline_are_part_of_every_checkpoint(tmp_path):
    from unity_sb3 import POCA
    from unity_sb3.callbacks.checkpoint import AtomicCheckpointCallback, list_checkpoints

    torch.set_num_threads(1)
    venv = UnityVecEnv("Escape", add_group_reward=True)
    rng = np.random.default_rng(0)
    obs = torch.as_tensor(rng.normal(size=(4, 3, *venv.observation_space.shape)).astype(np.float32))
    mask = torch.tensor([[True, True, True], [True, False, True], [True, False, False], [True, True, False]])
    mate_actions = torch.as_tensor(rng.integers(0, 5, (4, 2, 1)).astype(np.float32))

    def probe(model) -> dict:
        with torch.no_grad():
            values = model.policy.predict_group_values(obs, mask).numpy()
            baselines = model.policy.predict_baselines(
                obs[:, 0], obs[:, 1:], mate_actions, mask[:, 1:]
            ).numpy()
        return {"values": values, "baselines": baselines}

    model = POCA(
        "MlpPolicy",
        venv,
        n_steps=16,
        batch_size=24,
        n_epochs=1,
        seed=0,
        policy_kwargs={"net_arch": [32], "critic_embed_dim": 16},
        device="cpu",
    )
    callback = ProbeAtCheckpoint(AtomicCheckpointCallback(48, tmp_path, keep_last=2), probe)
    model.learn(48 * 4, callback=callback)
    venv.close()
    kept = list_checkpoints(tmp_path)
    assert len(kept) == 2
    for _, path in kept:
        assert_same(callback.seen[path.name], probe(POCA.load(path, device="cpu")))
    first, second = (callback.seen[p.name] for _, p in kept)
    assert not np.array_equal(first["values"], second["values"]), "the critic trained between checkpoints"


def test_sac_checkpoint_with_replay_buffer_resumes_where_it_stopped(tmp_path):
    from unity_sb3 import SAC
    from unity_sb3.callbacks.checkpoint import AtomicCheckpointCallback, latest_checkpoint

    torch.set_num_threads(1)
    venv = UnityVecEnv("Ball3D", open_kwargs={"num_agents": 4})
    kwargs = {"learning_starts": 16, "buffer_size": 2000, "batch_size": 32, "seed": 0, "device": "cpu"}
    model = SAC("MlpPolicy", venv, policy_kwargs={"net_arch": [16]}, **kwargs)
    checkpoint = AtomicCheckpointCallback(100, tmp_path, keep_last=1, save_replay_buffer=True)
    model.learn(400, callback=checkpoint)
    newest = latest_checkpoint(tmp_path)
    assert newest is not None and (tmp_path / "replay_buffer.pkl").is_file()
    resumed = SAC.load(newest, env=venv, device="cpu")
    resumed.load_replay_buffer(tmp_path / "replay_buffer.pkl")
    # SB3 calls callbacks before it stores the step's transitions: the buffer is one vector step behind
    assert resumed.replay_buffer.size() == resumed.num_timesteps // venv.num_envs - 1
    np.testing.assert_array_equal(
        resumed.replay_buffer.observations[: resumed.replay_buffer.size()],
        model.replay_buffer.observations[: resumed.replay_buffer.size()],
    )
    resumed.learn(100, reset_num_timesteps=False)
    assert resumed.num_timesteps >= newest_steps(newest) + 100
    venv.close()


def newest_steps(path: Path) -> int:
    return int(path.name.split("_")[1])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_during_an_atomic_save_acts_once_the_file_is_whole(tmp_path, sig) -> None:
    """A Ctrl-C (or the command's SIGTERM) that lands inside a checkpoint write is held until the file
    is complete and in place, then raised for its handler: torch's zip writer would otherwise turn the
    interrupt into a RuntimeError and the run would end as a crash (a race seen in the SIGTERM test)."""
    from unity_sb3.callbacks.checkpoint import save_atomic

    class Model:
        def save(self, path: str) -> None:
            os.kill(os.getpid(), sig)  # delivered now, in the middle of the write
            Path(path).write_text("all of it")

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            save_atomic(Model(), tmp_path / "model.zip")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (tmp_path / "model.zip").read_text() == "all of it"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert [p.name for p in tmp_path.iterdir()] == ["model.zip"]  # no temporary file left
