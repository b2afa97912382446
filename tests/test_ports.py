"""Ports: Unity instances started at once get distinct free ports; out-of-range ports are refused up front."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest

from unity_sb3.open import open_unity
from unity_sb3.unity.errors import UnityConfigurationError, UnityPortInUseError
from unity_sb3.wrappers.vec_env import UnityVecEnv

pytestmark = pytest.mark.player


def free_range(span: int) -> int:
    """A base port whose next ``span`` ports are free right now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + span >= 65000:
            continue
        free = True
        for port in range(base, base + span):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    free = False
                    break
        if free:
            return base
    raise RuntimeError("no free port range")


def squat(stack: ExitStack, ports: list[int]) -> None:
    """Hold ``ports`` with listening sockets, as another program would."""
    for port in ports:
        sock = stack.enter_context(socket.socket())
        sock.bind(("127.0.0.1", port))
        sock.listen()


def step_once(env) -> None:
    """Reset and step a ``BaseEnv`` once (proves the instance is really connected)."""
    env.reset()
    (name,) = list(env.behavior_specs)
    decisions, _ = env.get_steps(name)
    env.set_actions(name, env.behavior_specs[name].action_spec.random_action(len(decisions)))
    env.step()


@pytest.mark.parametrize("round_", range(2))
def test_four_players_opened_at_once_get_distinct_free_ports(tmp_path, round_):
    base = free_range(16)
    taken = [base, base + 2, base + 3]
    envs: list = [None] * 4
    errors: list = []
    barrier = threading.Barrier(4)

    def start(k: int) -> None:
        try:
            barrier.wait()
            envs[k] = open_unity(
                "Ball3D",
                transport="player",
                base_port=base,
                worker_id=0,  # all four ask for the same port at the same time
                find_free_port=True,
                timeout_wait=60,
                num_agents=2,
                log_folder=str(tmp_path / f"w{k}"),
            )
        except Exception as exc:  # reported below
            errors.append(exc)

    with ExitStack() as stack:
        squat(stack, taken)
        threads = [threading.Thread(target=start, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            assert not errors, errors
            ports = [env.port for env in envs]
            assert len(set(ports)) == 4, f"port collision: {ports}"
            assert not set(ports) & set(taken), f"took a port another program holds: {ports}"
            assert all(env.worker_id == env.port - base for env in envs)
            for env in envs:
                step_once(env)
        finally:
            for env in envs:
                if env is not None:
                    env.close()
    assert all(env.process.poll() is not None for env in envs if env is not None)


def test_vec_env_with_four_instances_skips_ports_in_use(tmp_path):
    base = free_range(16)
    taken = [base + 1, base + 2]
    with ExitStack() as stack:
        squat(stack, taken)
        kwargs = {
            "transport": "player",
            "base_port": base,
            "find_free_port": True,
            "timeout_wait": 60,
            "num_agents": 2,
            "log_folder": str(tmp_path),
        }
        venv = UnityVecEnv(["Ball3D"] * 4, open_kwargs=kwargs)
        try:
            ports = [env.port for env in venv.unity_envs]
            assert len(set(ports)) == 4 and not set(ports) & set(taken)
            assert venv.worker_ids == [0, 0, 1, 1, 2, 2, 3, 3]  # slots keep the instance index
            venv.reset()
            venv.step(np.zeros((venv.num_envs, 2), np.float32))
        finally:
            venv.close()


def test_without_find_free_port_a_taken_port_names_a_free_worker_id(tmp_path):
    base = free_range(8)
    with ExitStack() as stack:
        squat(stack, [base])
        with pytest.raises(
            UnityPortInUseError, match=rf"Port {base} \(worker_id=0\).*worker_id=1 would be free"
        ):
            open_unity("Ball3D", transport="player", base_port=base, timeout_wait=30)


def test_top_of_the_port_range(tmp_path):
    with ExitStack() as stack:
        try:
            squat(stack, [65535])
        except OSError:
            pytest.skip("port 65535 is in use on this machine")
        # nothing above 65535 to move to: a clear error instead of an invalid port
        with pytest.raises(UnityPortInUseError, match="Port 65535"):
            open_unity("Ball3D", transport="player", base_port=65535, find_free_port=True, timeout_wait=30)


@pytest.mark.parametrize(
    ("open_kwargs", "match"),
    [
        ({"base_port": 65534}, r"65534 \+ 2 = 65536 is out of range 1-65535"),
        ({"base_port": 70000}, "70000 is out of range"),
        ({"base_port": -5}, "out of range"),
        ({"worker_id": -3}, "worker_id must be >= 0"),
        ({"base_port": "5005"}, "base_port must be an int"),
    ],
)
def test_vec_env_ports_out_of_range_are_refused_and_nothing_is_left_open(tmp_path, open_kwargs, match):
    before = threading.active_count()
    kwargs = {"transport": "player", "timeout_wait": 30, "log_folder": str(tmp_path), **open_kwargs}
    with pytest.raises(UnityConfigurationError, match=match):
        UnityVecEnv(["Ball3D"] * 3, open_kwargs=kwargs)
    assert threading.active_count() <= before
    logs = list(Path(tmp_path).glob("*.log"))
    for log in logs:  # any instance that started was closed again
        assert "Exit code" in log.read_text()


@pytest.mark.parametrize("port", ["0", "70000", "-1", "http"])
def test_player_refuses_a_bad_port(port):
    result = subprocess.run(
        [sys.executable, "-m", "unity_sb3.scenes.player", "Ball3D", "--mlagents-port", port],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--mlagents-port" in result.stderr and (
        "out of range" in result.stderr or "not a port" in result.stderr
    )
