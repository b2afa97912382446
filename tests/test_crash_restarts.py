"""Reliability (issue 9): Unity process faults, restart limits, checkpoints across interrupts,
saved algorithm state, and cleanup at close and at interpreter exit.

Already proven elsewhere (not repeated here): a crashed scripted instance is reported by worker
id or restarted, ``max_restarts`` (tests/test_vec_env.py); a killed player is reported or
restarted (tests/test_vec_env.py, tests/test_player.py); atomic saves, keep-last-N and resume
from the newest loadable checkpoint, the SAC replay buffer file (tests/test_callbacks.py);
process exit code / log / timeout errors of ``LocalUnityEnvironment`` (tests/test_connect.py).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ports import free_base_port

from unity_sb3.scenes.scripted import ScriptedAgent, ScriptedEnv
from unity_sb3.unity.errors import UnityConfigurationError, UnityProcessError
from unity_sb3.wrappers.vec_env import UnityVecEnv

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def player_kwargs(tmp_path: Path, **extra) -> dict:
    kwargs = {
        "transport": "player",
        "base_port": free_base_port(),
        "find_free_port": True,
        "timeout_wait": 30,
        "num_agents": 3,
        "log_folder": str(tmp_path),
    }
    kwargs.update(extra)
    return kwargs


def random_actions(venv: UnityVecEnv, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (venv.num_envs, *venv.action_space.shape)).astype(np.float32)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


# A scene file the stand-in player serves: Ball3D that fails at Unity step ``fail_at`` by
# raising (the player exits with code 1) or by sending a NaN observation for one agent.
FAULTY_SCENE = textwrap.dedent(
    """
    import numpy as np
    from unity_sb3.scenes import make_scene


    def faulty(seed=0, fail_at=3, mode="raise", num_agents=3):
        env = make_scene("Ball3D", seed=seed, num_agents=num_agents)
        step, get_steps = env.step, env.get_steps
        count = [0]

        def failing_step():
            count[0] += 1
            if mode == "raise" and count[0] >= fail_at:
                raise RuntimeError("scripted scene failure at step %d" % count[0])
            step()

        def poisoned_get_steps(name):
            dec, term = get_steps(name)
            if mode in ("nan", "inf") and count[0] >= fail_at and len(dec):
                dec.obs[0][len(dec) - 1, 1] = np.nan if mode == "nan" else np.inf
            return dec, term

        env.step, env.get_steps = failing_step, poisoned_get_steps
        return env
    """
)


def faulty_factory(tmp_path: Path, base_port: int, **params):
    """A factory for ``UnityVecEnv`` that launches the faulty scene in a stand-in player."""
    from unity_sb3.scenes.player.server import write_launcher
    from unity_sb3.unity.connect import LocalUnityEnvironment

    scene_file = tmp_path / "faulty_scene.py"
    scene_file.write_text(FAULTY_SCENE)
    launcher = write_launcher(f"{scene_file}:faulty", tmp_path / "build", scene_params=params)

    def factory():
        return LocalUnityEnvironment(
            str(launcher),
            base_port=base_port,
            find_free_port=True,
            timeout_wait=30,
            log_folder=str(tmp_path),
            no_graphics=True,
        )

    return factory


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


# ---------------------------------------------------------------------- checkpoints
def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_cli_train_interrupted_by_sigint_checkpoints_and_resumes_to_the_total(tmp_path):
    from stable_baselines3 import PPO

    from unity_sb3.callbacks.checkpoint import list_checkpoints

    run_dir = tmp_path / "results" / "soak"
    checkpoints = run_dir / "checkpoints"
    base = [PYTHON, "-m", "unity_sb3.cli", "train", "--env", "Ball3D", "--transport", "inprocess"]
    common = ["--results-dir", str(tmp_path / "results"), "--run-id", "soak", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [*base, *common, "--n-timesteps", "1000000", "--checkpoint-every", "1000"],
        cwd=ROOT,
        env=env,
        # a shell running this suite in the background ignores SIGINT, and children inherit that;
        # restore the default so Python turns SIGINT into KeyboardInterrupt as in a terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: list_checkpoints(checkpoints), 180, "the first periodic checkpoint")
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=300)  # saving, closing and plotting; slow on a loaded machine
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, out
    assert "Interrupted: saved checkpoint" in out and "continue with --resume" in out
    interrupted_at, newest = list_checkpoints(checkpoints)[-1]
    assert interrupted_at > 1000, "the interrupt wrote its own checkpoint after the periodic one"
    assert PPO.load(newest, device="cpu").num_timesteps == interrupted_at
    assert (run_dir / "model.zip").is_file()

    total = interrupted_at + 3000  # less than one more rollout (256 steps x 12 agents)
    result = subprocess.run(
        [*base, *common, "--n-timesteps", str(total), "--resume"],
        cwd=ROOT,
        env=env,
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


# ---------------------------------------------------------------------- close and cleanup
def thread_and_fd_counts() -> tuple[int, int]:
    import threading

    return threading.active_count(), len(os.listdir("/proc/self/fd"))


@pytest.mark.player
def test_repeated_open_close_leaks_no_threads_fds_processes_or_ports(tmp_path):
    kwargs = player_kwargs(tmp_path)
    counts = []
    for cycle in range(4):
        venv = UnityVecEnv(["Ball3D", "Ball3D"], open_kwargs=kwargs)
        venv.reset()
        venv.step(random_actions(venv, cycle))
        processes = [env.process for env in venv.unity_envs]
        ports = [env.port for env in venv.unity_envs]
        venv.close()
        venv.close()  # idempotent
        assert all(p.poll() is not None for p in processes), "every player exited"
        for port in ports:
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))  # free again
        time.sleep(0.3)  # let executor threads see their shutdown
        counts.append(thread_and_fd_counts())
    # the first cycle may start gRPC's process-wide machinery; after it nothing grows
    assert counts[1:] == [counts[1]] * 3, counts
    with pytest.raises(RuntimeError, match="closed"):
        venv.step(random_actions(venv, 9))


EXIT_WITHOUT_CLOSE = textwrap.dedent(
    """
    import sys
    import numpy as np
    import unity_sb3
    from unity_sb3.wrappers.vec_env import UnityVecEnv

    venv = UnityVecEnv(["Ball3D", "Ball3D"], open_kwargs={kwargs!r})
    venv.reset()
    venv.step(np.zeros((venv.num_envs, 2), np.float32))
    print(" ".join(str(env.process.pid) for env in venv.unity_envs), flush=True)
    {ending}
    """
)


@pytest.mark.player
@pytest.mark.parametrize("ending", ["pass", "sys.exit(3)", "raise RuntimeError('boom')"])
def test_players_end_when_the_interpreter_exits_without_close(tmp_path, ending):
    kwargs = player_kwargs(tmp_path)
    kwargs.pop("log_folder")
    script = tmp_path / "leave.py"
    script.write_text(EXIT_WITHOUT_CLOSE.format(kwargs=kwargs, ending=ending))
    result = subprocess.run([PYTHON, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == {"pass": 0, "sys.exit(3)": 3}.get(ending, 1), result.stderr
    pids = [int(p) for p in result.stdout.split()]
    assert len(pids) == 2
    wait_for(lambda: not any(alive(p) for p in pids), 15, "the players to exit")


def test_stats_channel_keeps_only_the_newest_values():
    from mlagents_envs.side_channel.incoming_message import IncomingMessage
    from mlagents_envs.side_channel.outgoing_message import OutgoingMessage
    from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod

    from unity_sb3.unity.channels import BoundedStatsSideChannel, UnityChannels

    channel = BoundedStatsSideChannel(max_values=100)
    assert isinstance(UnityChannels().stats, BoundedStatsSideChannel)
    for i in range(1000):
        out = OutgoingMessage()
        out.write_string("Environment/Reward")
        out.write_float32(float(i))
        out.write_int32(StatsAggregationMethod.AVERAGE.value)
        channel.on_message_received(IncomingMessage(out.buffer))
    values = channel.get_and_reset_stats()["Environment/Reward"]
    assert 100 <= len(values) <= 200
    assert values[-1] == (999.0, StatsAggregationMethod.AVERAGE)
    assert [v for v, _ in values] == list(range(1000 - len(values), 1000))
    assert channel.get_and_reset_stats() == {}
    with pytest.raises(ValueError, match="max_values"):
        BoundedStatsSideChannel(0)
