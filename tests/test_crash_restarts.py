"""Crashed or hung Unity players: reported by worker, exit code and log, or restarted within the limits."""

from __future__ import annotations

import os
import signal
import socket
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from players import faulty_factory, player_kwargs, random_actions
from ports import free_base_port
from stable_baselines3.common.callbacks import BaseCallback

from unity_sb3.scenes.scripted import ScriptedAgent, ScriptedEnv
from unity_sb3.unity.errors import UnityConfigurationError, UnityProcessError
from unity_sb3.wrappers.vec_env import UnityVecEnv


# ---------------------------------------------------------------------- faults during training
class KillPlayers(BaseCallback):
    """Kills the player process of a worker at given vector steps (SIGKILL, or SIGSTOP = hang)."""

    def __init__(self, plan: dict[int, tuple[int, signal.Signals]]) -> None:
        super().__init__()
        self.plan = dict(plan)
        self.killed: list[tuple[int, int, str]] = []
        self.restarted_slots = 0

    def _on_step(self) -> bool:
        self.restarted_slots += sum(bool(info.get("restarted")) for info in self.locals["infos"])
        if self.n_calls in self.plan:
            worker, sig = self.plan[self.n_calls]
            venv = self.training_env.unwrapped
            process = venv.unity_envs[worker].process
            os.kill(process.pid, sig)
            self.killed.append((self.n_calls, worker, sig.name))
        return True


def run_ppo_with_kills(tmp_path: Path, kills: int, signals: tuple, total: int, timeout_wait: float) -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    torch.set_num_threads(1)
    rng = np.random.default_rng(7)
    n_steps = 32
    kwargs = player_kwargs(tmp_path, timeout_wait=timeout_wait)
    venv = UnityVecEnv(
        ["Ball3D", "Ball3D"], open_kwargs=kwargs, restart_on_crash=True, max_restarts=-1, restart_backoff=0.0
    )
    vector_steps = total // venv.num_envs
    steps = sorted(rng.choice(np.arange(5, vector_steps - 5), size=kills, replace=False).tolist())
    plan = {int(s): (int(rng.integers(0, 2)), signals[i % len(signals)]) for i, s in enumerate(steps)}
    callback = KillPlayers(plan)
    model = PPO(
        "MlpPolicy", VecMonitor(venv), n_steps=n_steps, batch_size=64, n_epochs=1, seed=0, device="cpu"
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.learn(total, callback=callback)
        model.save(tmp_path / "model.zip")
        path = tmp_path / "model.zip"
        counts = venv.restart_counts
    finally:
        venv.close()
    crashed = [w for w in caught if "crashed" in str(w.message)]
    assert len(callback.killed) == kills
    assert sum(counts) == kills and len(crashed) == kills
    # every restart ends its instance's slots' episodes (truncated), seen by the callback
    assert callback.restarted_slots == kills * 3
    assert model.num_timesteps >= total
    assert PPO.load(path, device="cpu").num_timesteps == model.num_timesteps
    assert all(env.process.poll() is not None for env in venv.unity_envs)


@pytest.mark.player
def test_ppo_finishes_and_saves_while_players_are_killed_at_random_steps(tmp_path):
    run_ppo_with_kills(tmp_path, kills=3, signals=(signal.SIGKILL,), total=6 * 32 * 6, timeout_wait=30)


@pytest.mark.player
@pytest.mark.slow
def test_ppo_survives_many_kills_and_hangs(tmp_path):
    run_ppo_with_kills(
        tmp_path, kills=8, signals=(signal.SIGKILL, signal.SIGSTOP), total=6 * 32 * 40, timeout_wait=3
    )


@pytest.mark.player
def test_hung_player_is_killed_and_replaced(tmp_path, caplog):
    venv = UnityVecEnv("Ball3D", open_kwargs=player_kwargs(tmp_path, timeout_wait=2), restart_on_crash=True)
    try:
        venv.reset()
        venv.step(random_actions(venv, 0))
        hung = venv.unity_envs[0].process
        os.kill(hung.pid, signal.SIGSTOP)
        with pytest.warns(
            UserWarning, match=r"worker 0 crashed \(UnityTimeoutError.*did not answer within 2 s"
        ):
            _, _, done, infos = venv.step(random_actions(venv, 1))
        assert hung.wait(timeout=10) == -signal.SIGKILL, "the hung player is killed, not left stopped"
        assert "did not exit within" not in caplog.text, "killed at once, not after close()'s grace period"
        assert done.all() and all(info["restarted"] and info["TimeLimit.truncated"] for info in infos)
        assert venv.unity_envs[0].process is not hung
        for step in range(3):
            _, _, done, _ = venv.step(random_actions(venv, 2 + step))
        assert venv.restart_counts == [1]
    finally:
        venv.close()


@pytest.mark.player
@pytest.mark.parametrize("fault", ["sigkill", "scene_error", "sigterm", "hang"])
def test_fault_without_restart_names_worker_exit_code_and_log(tmp_path, fault):
    base_port = free_base_port()
    if fault == "scene_error":
        source = faulty_factory(tmp_path, base_port, fail_at=3, mode="raise")
        venv = UnityVecEnv(source)
    else:
        venv = UnityVecEnv("Ball3D", open_kwargs=player_kwargs(tmp_path, base_port=base_port, timeout_wait=2))
    process = venv.unity_envs[0].process
    try:
        venv.reset()
        venv.step(random_actions(venv, 0))
        if fault != "scene_error":
            sig = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "hang": signal.SIGSTOP}[fault]
            os.kill(process.pid, sig)
            if fault != "hang":
                process.wait(timeout=30)
        with pytest.raises(UnityProcessError) as info:
            for step in range(1, 6):
                venv.step(random_actions(venv, step))
        message = str(info.value)
        assert info.value.worker_id == 0 and message.startswith("Unity worker 0")
        expected_code = {"sigkill": -9, "scene_error": 1, "sigterm": 0, "hang": None}[fault]
        assert info.value.exit_code == expected_code
        if expected_code is not None:
            assert f"exit code {expected_code}" in message
        else:
            assert "did not answer within 2 s" in message
        assert info.value.log_path and Path(info.value.log_path).is_file()
        assert f"see its log at {info.value.log_path}" in message
        if fault == "scene_error":
            assert "scripted scene failure" in Path(info.value.log_path).read_text()
    finally:
        if fault == "hang":
            os.kill(process.pid, signal.SIGKILL)
        venv.close()
    assert process.poll() is not None


@pytest.mark.player
def test_restart_moves_to_a_free_port_when_the_old_one_was_taken(tmp_path):
    venv = UnityVecEnv(
        "Ball3D",
        open_kwargs=player_kwargs(tmp_path, find_free_port=False),
        restart_on_crash=True,
        restart_backoff=0,
    )
    squatter = socket.socket()
    try:
        venv.reset()
        old = venv.unity_envs[0]
        old_port = old.port
        old.process.kill()
        old.process.wait(timeout=30)
        old.close()  # frees its port, which another program takes before the restart
        squatter.bind(("127.0.0.1", old_port))
        squatter.listen()
        with pytest.warns(UserWarning, match="worker 0 crashed"):
            _, _, done, _ = venv.step(random_actions(venv, 0))
        assert done.all()
        assert venv.unity_envs[0].port != old_port
        venv.step(random_actions(venv, 1))
    finally:
        squatter.close()
        venv.close()


# ---------------------------------------------------------------------- restart rate limits
def crashing_factory(made: list, crash_every: int = 2):
    def factory() -> ScriptedEnv:
        env = ScriptedEnv([ScriptedAgent()], crash_at=crash_every)
        made.append(env)
        return env

    return factory


def step_until_error(venv: UnityVecEnv, steps: int) -> None:
    for step in range(steps):
        venv.step(np.full((venv.num_envs, 2), step / 100, np.float32))


def test_rate_limit_refuses_a_second_restart_within_the_period():
    made: list = []
    venv = UnityVecEnv(
        crashing_factory(made),
        restart_on_crash=True,
        restart_backoff=0.0,
        restarts_rate_limit_n=1,
        restarts_rate_limit_period_s=60,
    )
    venv.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(
            UnityProcessError, match=r"worker 0: crashed again after 1 restart\(s\) within 60 s"
        ):
            step_until_error(venv, 10)
    assert venv.restart_counts == [1] and len(made) == 2
    venv.close()


def test_rate_limit_allows_restarts_spread_over_time(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    made: list = []
    venv = UnityVecEnv(
        crashing_factory(made),
        restart_on_crash=True,
        restart_backoff=0.0,
        max_restarts=-1,
        restarts_rate_limit_n=2,
        restarts_rate_limit_period_s=10,
    )
    venv.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(12):  # a crash every 2 steps, 6 s apart: never 3 within 10 s
            clock[0] += 3.0
            step_until_error(venv, 1)
        assert venv.restart_counts == [6]
        with pytest.raises(UnityProcessError, match="restarts_rate_limit_n=2"):
            for _ in range(6):  # now crashes come 0.5 s apart
                clock[0] += 0.5
                step_until_error(venv, 1)
    venv.close()


def test_lifetime_limit_and_unlimited_restarts():
    made: list = []
    venv = UnityVecEnv(crashing_factory(made), restart_on_crash=True, restart_backoff=0.0, max_restarts=-1)
    venv.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step_until_error(venv, 40)
    assert venv.restart_counts == [20] and len(made) == 21
    assert "restarted it (20 of no limit)" in str(caught[-1].message)
    venv.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_restarts": -2}, "max_restarts must be >= 0, or -1"),
        ({"restarts_rate_limit_n": -5}, "restarts_rate_limit_n must be >= 0, or -1"),
        ({"restarts_rate_limit_period_s": 0}, "restarts_rate_limit_period_s must be a positive"),
    ],
)
def test_bad_restart_settings(kwargs, match):
    with pytest.raises(UnityConfigurationError, match=match):
        UnityVecEnv(lambda: ScriptedEnv([ScriptedAgent()]), restart_on_crash=True, **kwargs)
