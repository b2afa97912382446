"""Errors on the Python side when the player (or a Unity build) dies or stops answering.

``mlagents_envs`` reports a killed player as "Environment shut down with return code -9
(SIGKILL)." without saying which process; :func:`player_failure` and :func:`player_errors` turn
that into :class:`~unity_sb3.unity.errors.UnityProcessError` or
:class:`~unity_sb3.unity.errors.UnityTimeoutError` naming the process, its pid, exit code and log.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mlagents_envs.exception import UnityException, UnityTimeOutException

from unity_sb3.unity.errors import UnityProcessError, UnityTimeoutError

__all__ = ["player_errors", "player_failure"]


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return "exited"


def player_failure(
    env: Any, exc: BaseException, *, name: str = "stand-in player", log_path: str | None = None
) -> UnityException | None:
    """A clear error for ``exc`` raised by ``UnityEnvironment`` ``env``, or ``None`` to keep ``exc``.

    :param env: the ``mlagents_envs.environment.UnityEnvironment`` that raised.
    :param exc: what it raised.
    :param name: how to name the process in the message, e.g. ``"stand-in player 'Ball3D'"``.
    :param log_path: the process's log file, when known.
    :return: :class:`UnityProcessError` when the process has exited (naming it, its pid and exit
        code), :class:`UnityTimeoutError` when it is alive but did not answer, else ``None``.
    """
    if isinstance(exc, UnityProcessError | UnityTimeoutError):
        return None
    worker_id = int(getattr(env, "_worker_id", -1))
    process = getattr(env, "_process", None)
    code = process.poll() if process is not None else None
    pid = getattr(process, "pid", None)
    label = f"{name}, pid {pid}" if pid is not None else name
    if code is not None:
        return UnityProcessError(
            worker_id,
            exit_code=code,
            log_path=log_path,
            detail=f"the process {_describe_exit(code)} while Python waited for it",
            process_name=label,
        )
    if isinstance(exc, UnityTimeOutException):
        timeout = float(getattr(env, "_timeout_wait", 0) or 0)
        return UnityTimeoutError(worker_id, timeout, detail=f"{label} is still running.", log_path=log_path)
    return None


@contextmanager
def player_errors(env: Any, *, name: str = "stand-in player", log_path: str | None = None) -> Iterator[None]:
    """Re-raise ``mlagents_envs`` errors about a dead or silent process as :func:`player_failure` says.

    ``mlagents_envs`` itself reports a killed player as "Environment shut down with return
    code -9 (SIGKILL)." without saying which process; use this around ``reset``/``step``::

        with player_errors(env, name="stand-in player 'Ball3D'", log_path=log):
            env.step()
    """
    try:
        yield
    except UnityException as exc:
        error = player_failure(env, exc, name=name, log_path=log_path)
        if error is None:
            raise
        raise error from exc
