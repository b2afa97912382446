"""open_unity / LocalUnityEnvironment: targets, ports, errors, process lifetime.

"Builds" here are small scripts written into ``tmp_path``: shell scripts that exit or hang,
and ``FakeUnity``, a Python script that speaks Unity's side of the gRPC protocol (Unity is
the gRPC client calling ``Exchange`` on Python's server) with a configurable communication
version, exit step and exit code.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import socket
import stat
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from players import PYTHON, alive, player_kwargs, random_actions, wait_for
from ports import free_base_port

from unity_sb3.open import open_unity
from unity_sb3.unity.channels import EngineSettings, UnityChannels
from unity_sb3.unity.connect import LocalUnityEnvironment, LoopbackRpcCommunicator
from unity_sb3.unity.errors import (
    UnityConfigurationError,
    UnityExecutableError,
    UnityExecutableNotFoundError,
    UnityPortInUseError,
    UnityProcessError,
    UnityTimeoutError,
    UnityVersionError,
)
from unity_sb3.unity.executable import resolve_executable
from unity_sb3.unity.ports import is_loopback
from unity_sb3.wrappers.vec_env import UnityVecEnv

from mlagents_envs.base_env import ActionTuple  # isort: skip
from mlagents_envs.exception import UnityCommunicatorStoppedException  # isort: skip
from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel  # isort: skip

ROOT = Path(__file__).resolve().parent.parent

FAKE_UNITY = textwrap.dedent(
    """\
    #!{python}
    import json, os, struct, sys
    sys.path.insert(0, {root!r})
    import unity_sb3.unity.compat  # noqa: F401
    import grpc
    from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
    from mlagents_envs.communicator_objects.unity_to_external_pb2_grpc import UnityToExternalProtoStub

    cfg = json.loads(os.environ.get("FAKE_UNITY", "{{}}"))
    args = sys.argv[1:]
    port = int(args[args.index("--mlagents-port") + 1])
    record = {{"args": args, "pid": os.getpid()}}

    def save():
        with open(cfg["record"] + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(cfg["record"] + ".tmp", cfg["record"])

    STATS = bytes.fromhex("b7f7d8a1c8cef950b78bd3e165a78520")

    def output(step):
        msg = UnityMessageProto()
        msg.header.status = 200
        info = msg.unity_output.rl_output.agentInfos["Fake?team=0"].value.add()
        info.id = 0
        info.reward = 1.0
        obs = info.observations.add()
        obs.shape.append(1)
        obs.float_data.data.append(float(step))
        key = b"fake/step"
        payload = struct.pack("<i", len(key)) + key + struct.pack("<f", step) + struct.pack("<i", 1)
        msg.unity_output.rl_output.side_channel = STATS + struct.pack("<i", len(payload)) + payload
        return msg

    channel = grpc.insecure_channel(f"127.0.0.1:{{port}}")
    grpc.channel_ready_future(channel).result(timeout=30)
    stub = UnityToExternalProtoStub(channel)
    first = output(0)
    init = first.unity_output.rl_initialization_output
    init.name = "Fake"
    init.communication_version = cfg.get("version", "1.5.0")
    init.package_version = "3.0.0"
    init.capabilities.baseRLCapabilities = True
    brain = init.brain_parameters.add()
    brain.brain_name = "Fake?team=0"
    brain.is_training = True
    brain.action_spec.num_continuous_actions = 1
    reply = stub.Exchange(first)
    record["seed"] = reply.unity_input.rl_initialization_input.seed
    save()
    empty = UnityMessageProto()
    empty.header.status = 200
    reply = stub.Exchange(empty)
    step = 0
    while reply.header.status != 400:
        if step == 0:
            record["side_channel"] = reply.unity_input.rl_input.side_channel.hex()
            record["command"] = reply.unity_input.rl_input.command
        else:
            actions = reply.unity_input.rl_input.agent_actions["Fake?team=0"].value
            record.setdefault("actions", []).append([list(a.continuous_actions) for a in actions])
        save()
        if cfg.get("exit_after") is not None and step >= cfg["exit_after"]:
            sys.exit(cfg.get("code", 5))
        step += 1
        reply = stub.Exchange(output(step))
    record["goodbye"] = True
    save()
    """
)


def write_script(path: Path, text: str, executable: bool = True) -> Path:
    path.write_text(text)
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_unity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write FakeUnity.x86_64; returns ``configure(**cfg) -> (path, read_record)``."""
    path = write_script(
        tmp_path / "FakeUnity.x86_64", FAKE_UNITY.format(python=sys.executable, root=str(ROOT))
    )
    record = tmp_path / "record.json"

    def configure(**cfg):
        monkeypatch.setenv("FAKE_UNITY", json.dumps({"record": str(record), **cfg}))
        return path, lambda: json.loads(record.read_text())

    return configure


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is dead for our purpose only if reaped
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "zombie" in status.read_text())


# ------------------------------------------------------------------ argument checks
@pytest.mark.parametrize(
    ("base_port", "worker_id", "match"),
    [
        (65535, 1, "65536 is out of range"),
        (0, 0, "0 is out of range"),
        (5005, -1, "worker_id must be >= 0"),
        (5005, 1.5, "worker_id must be an int"),
    ],
)
def test_port_out_of_range_is_a_value_error(tmp_path, base_port, worker_id, match) -> None:
    build = write_script(tmp_path / "Hang.x86_64", "#!/bin/sh\nexec sleep 30\n")
    with pytest.raises(ValueError, match=match):
        open_unity(str(build), base_port=base_port, worker_id=worker_id)


def test_bad_transport_and_misplaced_scene_params(tmp_path) -> None:
    build = write_script(tmp_path / "Hang.x86_64", "#!/bin/sh\nexec sleep 30\n")
    with pytest.raises(UnityConfigurationError, match="transport must be one of"):
        open_unity(str(build), transport="grpc")
    with pytest.raises(UnityConfigurationError, match="only apply to embedded scenes"):
        open_unity(str(build), num_agents=3)
    with pytest.raises(UnityConfigurationError, match="runs embedded scenes"):
        open_unity(str(build), transport="inprocess")


def test_editor_needs_worker_zero() -> None:
    with pytest.raises(UnityConfigurationError, match="worker_id=0"):
        open_unity(None, worker_id=2)
    with pytest.raises(UnityConfigurationError, match="find_free_port=False"):
        open_unity("editor", find_free_port=True)


# ------------------------------------------------------------------ executables
def test_executable_not_found_lists_builds_nearby(tmp_path) -> None:
    write_script(tmp_path / "3DBall.x86_64", "#!/bin/sh\n")
    (tmp_path / "Walker").mkdir()
    write_script(tmp_path / "Walker" / "Walker.x86_64", "#!/bin/sh\n")
    (tmp_path / "notes.txt").write_text("not a build")
    with pytest.raises(UnityExecutableNotFoundError) as info:
        open_unity(str(tmp_path / "builds" / "Ball.x86_64"))
    message = str(info.value)
    assert "No Unity build at" in message and "does not exist" in message
    assert str(tmp_path / "3DBall.x86_64") in message
    assert str(tmp_path / "Walker" / "Walker.x86_64") in message
    assert "notes.txt" not in message
    assert isinstance(info.value, FileNotFoundError)


def test_not_found_mentions_embedded_scenes(tmp_path) -> None:
    with pytest.raises(UnityExecutableNotFoundError, match="not an embedded scene either"):
        resolve_executable(tmp_path / "Nope", scene_names=["Ball3D"])


def test_executable_is_found_without_suffix_and_in_its_folder(tmp_path) -> None:
    build = write_script(tmp_path / "3DBall.x86_64", "#!/bin/sh\n")
    assert resolve_executable(tmp_path / "3DBall") == build
    assert resolve_executable(build) == build
    assert resolve_executable(tmp_path) == build
    write_script(tmp_path / "Other.x86_64", "#!/bin/sh\n")
    with pytest.raises(UnityExecutableError, match="holds several builds") as info:
        resolve_executable(tmp_path)
    assert len(info.value.candidates) == 2


def test_executable_not_executable(tmp_path) -> None:
    build = write_script(tmp_path / "Ball.x86_64", "#!/bin/sh\n", executable=False)
    with pytest.raises(UnityExecutableError, match=r"not executable; run `chmod \+x"):
        open_unity(str(build))


@pytest.mark.parametrize("busy_tries", [2, 6])
def test_a_launcher_busy_for_a_moment_is_launched_and_one_busy_for_good_is_reported(
    monkeypatch, busy_tries: int
) -> None:
    """ETXTBSY ("text file busy"): a just-written launcher held open by a child another thread forked
    is tried again; one that stays busy raises the OSError, which the launch reports as
    ``UnityExecutableError`` naming the file."""
    import errno

    from unity_sb3.unity import connect

    calls = []
    real_popen = subprocess.Popen

    def popen(args, **kwargs):
        calls.append(args)
        if len(calls) <= busy_tries:
            raise OSError(errno.ETXTBSY, "Text file busy")
        return real_popen(args, **kwargs)

    monkeypatch.setattr(connect.subprocess, "Popen", popen)
    monkeypatch.setattr(connect, "_BUSY_PAUSE", 0.001)
    if busy_tries < connect._BUSY_TRIES:
        process = connect._popen_retrying_busy(["true"])
        assert process.wait(timeout=10) == 0 and len(calls) == busy_tries + 1
    else:
        with pytest.raises(OSError, match="Text file busy"):
            connect._popen_retrying_busy(["true"])
        assert len(calls) == connect._BUSY_TRIES

    def denied(args, **kwargs):
        calls.append(args)
        raise PermissionError(errno.EACCES, "Permission denied")

    calls.clear()
    monkeypatch.setattr(connect.subprocess, "Popen", denied)
    with pytest.raises(PermissionError):  # other errors are not tried again
        connect._popen_retrying_busy(["true"])
    assert len(calls) == 1


def test_process_that_exits_reports_code_and_log(tmp_path) -> None:
    build = write_script(tmp_path / "Crash.x86_64", "#!/bin/sh\necho 'fatal: no GPU' >&2\nexit 3\n")
    with pytest.raises(UnityProcessError) as info:
        open_unity(
            str(build), base_port=free_base_port(4), timeout_wait=20, log_folder=str(tmp_path / "logs")
        )
    error = info.value
    assert error.exit_code == 3
    assert error.log_path == str(tmp_path / "logs" / "Player-0.log")
    message = str(error)
    assert "exit code 3" in message and "Player-0.log" in message
    assert "fatal: no GPU" in message  # the captured output's last lines


def test_hanging_build_times_out_and_is_killed(tmp_path) -> None:
    pid_file = tmp_path / "pid"
    build = write_script(tmp_path / "Hang.x86_64", f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    started = time.monotonic()
    with pytest.raises(UnityTimeoutError) as info:
        open_unity(str(build), base_port=free_base_port(4), timeout_wait=1.0)
    assert "did not answer within 1 s" in str(info.value)
    assert "ML-Agents build" in str(info.value)  # says what to check
    assert time.monotonic() - started < 30
    pid = int(pid_file.read_text())
    assert not pid_alive(pid)


def test_editor_timeout_says_press_play(caplog) -> None:
    with caplog.at_level(logging.WARNING), pytest.raises(UnityTimeoutError, match="Press Play"):
        open_unity("editor", base_port=free_base_port(4), timeout_wait=0.3, bind_address="0.0.0.0")
    assert "without authentication" in caplog.text  # non-loopback binding warns


# ------------------------------------------------------------------ ports
def test_port_in_use_names_port_and_free_worker(tmp_path) -> None:
    port = free_base_port(4)
    build = write_script(tmp_path / "Hang.x86_64", "#!/bin/sh\nexec sleep 60\n")
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        with pytest.raises(UnityPortInUseError) as info:
            open_unity(str(build), base_port=port, worker_id=0)
    error = info.value
    assert error.port == port and error.free_worker_id == 1
    assert f"Port {port} (worker_id=0)" in str(error) and "worker_id=1 would be free" in str(error)


def test_find_free_port_moves_to_next_worker(fake_unity) -> None:
    path, _ = fake_unity()
    port = free_base_port(4)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        env = open_unity(str(path), base_port=port, find_free_port=True, timeout_wait=30)
        try:
            assert env.worker_id == 1 and env.port == port + 1
        finally:
            env.close()


def test_server_listens_on_loopback_only() -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent; picks the outgoing interface
        lan_ip = probe.getsockname()[0]
    except OSError:
        lan_ip = None
    finally:
        probe.close()
    if not lan_ip or lan_ip.startswith("127."):
        pytest.skip("no non-loopback address on this machine")
    port = free_base_port(4)
    communicator = LoopbackRpcCommunicator(0, port, 1, bind_address="127.0.0.1")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        with pytest.raises(OSError), socket.create_connection((lan_ip, port), timeout=2):
            pass
    finally:
        communicator.close()
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")


# ------------------------------------------------------------------ a build that speaks the protocol
def test_version_mismatch(fake_unity) -> None:
    path, read = fake_unity(version="2.0.0")
    with pytest.raises(UnityVersionError) as info:
        open_unity(str(path), base_port=free_base_port(4), timeout_wait=30)
    assert "2.0.0" in str(info.value) and "1.5.0" in str(info.value)
    assert not pid_alive(read()["pid"])


def test_build_lifecycle(fake_unity, tmp_path) -> None:
    path, read = fake_unity()
    port = free_base_port(4)
    env = open_unity(
        str(path),
        base_port=port,
        worker_id=1,
        seed=42,
        timeout_wait=30,
        engine_settings={"time_scale": 7.0, "width": None, "height": None},
        environment_parameters={"gravity": 9.81},
        log_folder=str(tmp_path / "logs"),
    )
    assert isinstance(env, LocalUnityEnvironment)
    channels = env.unity_sb3_channels
    assert isinstance(channels, UnityChannels) and channels.parameters.lesson_numbers == {"gravity": 0}
    record = read()
    assert record["seed"] == 42
    args = record["args"]
    assert args[args.index("--mlagents-port") + 1] == str(port + 1)
    assert "-nographics" in args and "-batchmode" in args
    assert args[args.index("-logFile") + 1] == str(tmp_path / "logs" / "Player-1.log")
    env.reset()
    record = read()
    wire = bytes.fromhex(record["side_channel"])
    assert bytes.fromhex("2c3451e97e4fea11b238784f4387d1f7") + struct.pack("<iif", 8, 2, 7.0) in wire
    assert b"gravity" in wire
    decision, _ = env.get_steps("Fake?team=0")
    np.testing.assert_array_equal(decision.obs[0], [[1.0]])  # FakeUnity's obs counts its outputs
    env.set_actions("Fake?team=0", ActionTuple(continuous=np.array([[0.25]], np.float32)))
    env.step()
    decision, _ = env.get_steps("Fake?team=0")
    np.testing.assert_array_equal(decision.obs[0], [[2.0]])
    assert read()["actions"] == [[[0.25]]]
    assert [v for v, _ in channels.stats.get_and_reset_stats()["fake/step"]] == [1.0, 2.0]
    process = env.process
    env.close()
    env.close()  # idempotent
    assert process.poll() == 0 and read().get("goodbye")
    assert env.closed
    with pytest.raises(UnityCommunicatorStoppedException, match="was closed"):
        env.step()


def test_process_dying_mid_run_names_exit_code_and_log(fake_unity) -> None:
    path, _ = fake_unity(exit_after=1, code=5)
    env = open_unity(str(path), base_port=free_base_port(4), timeout_wait=30)
    try:
        env.reset()
        with pytest.raises(UnityProcessError) as info:
            env.step()
            env.step()
        assert info.value.exit_code == 5
        assert "Player-port" in str(info.value)
    finally:
        env.close()


def test_unreferenced_env_ends_its_process(fake_unity) -> None:
    path, read = fake_unity()
    env = open_unity(str(path), base_port=free_base_port(4), timeout_wait=30)
    pid = read()["pid"]
    assert pid_alive(pid)
    del env
    gc.collect()
    assert not pid_alive(pid)


def test_user_side_channels_are_used(fake_unity) -> None:
    path, _ = fake_unity()
    engine = EngineConfigurationChannel()
    env = open_unity(str(path), base_port=free_base_port(4), timeout_wait=30, side_channels=[engine])
    try:
        assert env.unity_sb3_channels.engine is engine
        assert len(engine.message_queue) == 5  # the default EngineSettings were queued on it
    finally:
        env.close()


# ------------------------------------------------------------------ embedded scenes
def test_scene_inprocess_gets_channels_and_seed(monkeypatch) -> None:
    import unity_sb3.scenes as envs

    calls = {}

    class FakeScene:
        pass

    def make_scene(name, seed=0, side_channels=None, **params):
        calls.update(name=name, seed=seed, side_channels=side_channels, params=params)
        return FakeScene()

    monkeypatch.setattr(envs, "list_scenes", lambda: ["Ball3D", "GridWorld"])
    monkeypatch.setattr(envs, "make_scene", make_scene)
    env = open_unity("ball3d", seed=3, num_agents=4, engine_settings=EngineSettings(time_scale=2.0))
    channels = env.unity_sb3_channels
    assert calls["name"] == "Ball3D" and calls["seed"] == 3 and calls["params"] == {"num_agents": 4}
    assert calls["side_channels"] == channels.all()
    assert channels.engine_settings.time_scale == 2.0 and channels.engine.message_queue


def test_real_scene_inprocess() -> None:
    envs = pytest.importorskip("unity_sb3.scenes")
    if "Ball3D" not in envs.list_scenes():
        pytest.skip("Ball3D scene not available")
    env = open_unity("Ball3D", num_agents=2, environment_parameters={"scale": 1.0})
    try:
        env.reset()
        assert env.unity_sb3_channels.parameters is not None
        assert list(env.behavior_specs)
    finally:
        env.close()


@pytest.mark.player
def test_real_scene_through_stand_in_player() -> None:
    envs = pytest.importorskip("unity_sb3.scenes")
    if "Ball3D" not in envs.list_scenes():
        pytest.skip("Ball3D scene not available")
    env = open_unity("Ball3D", transport="player", base_port=free_base_port(4), num_agents=2, timeout_wait=60)
    try:
        assert isinstance(env, LocalUnityEnvironment)
        env.reset()
        name = next(iter(env.behavior_specs))
        decision, _ = env.get_steps(name)
        assert len(decision) == 2
        env.step()
        launcher_dir = Path(env._resources.temp_dirs[0])
        assert launcher_dir.is_dir()
    finally:
        env.close()
    assert env.process.poll() is not None
    assert not launcher_dir.exists()


# ------------------------------------------------------------------ close and cleanup
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
