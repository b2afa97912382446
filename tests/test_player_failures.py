"""Tests of the errors that name a dead or silent player (or Unity build)."""

from __future__ import annotations

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.exception import UnityEnvironmentException, UnityTimeOutException

from unity_sb3.scenes.player.failures import player_failure
from unity_sb3.unity.errors import UnityProcessError, UnityTimeoutError


class _FakeProcess:
    def __init__(self, code):
        self.code, self.pid = code, 4242

    def poll(self):
        return self.code


class _FakeEnv:
    def __init__(self, code):
        self._process, self._worker_id, self._timeout_wait = _FakeProcess(code), 7, 12


def test_player_failure_names_process_and_exit_code():
    error = player_failure(
        _FakeEnv(-9), UnityEnvironmentException("x"), name="stand-in player 'Ball3D'", log_path="l"
    )
    assert isinstance(error, UnityProcessError) and error.exit_code == -9
    for part in ("worker 7", "stand-in player 'Ball3D'", "pid 4242", "SIGKILL", "exit code -9", "l"):
        assert part in str(error)
    timeout = player_failure(_FakeEnv(None), UnityTimeOutException("slow"))
    assert isinstance(timeout, UnityTimeoutError) and "pid 4242 is still running" in str(timeout)
    assert player_failure(_FakeEnv(None), UnityEnvironmentException("other")) is None
