"""Errors raised when talking to Unity.

Each subclasses the matching ``mlagents_envs.exception`` class, so code that already catches
``UnityException`` (or one of its subclasses) keeps working, while messages say what was
wrong and what to do.
"""

from __future__ import annotations

from mlagents_envs.exception import (
    UnityCommunicatorStoppedException,
    UnityEnvironmentException,
    UnityTimeOutException,
    UnityWorkerInUseException,
)


class UnityProcessError(UnityCommunicatorStoppedException):
    """The Unity process (a build, the Editor or the stand-in player) exited or crashed.

    :param worker_id: the worker id of the instance that failed.
    :param exit_code: the process exit code, or ``None`` when unknown (still running / not ours).
    :param log_path: where the process wrote its log, when known.
    :param detail: what happened, in words.
    """

    def __init__(
        self,
        worker_id: int,
        exit_code: int | None = None,
        log_path: str | None = None,
        detail: str = "the Unity process stopped",
        process_name: str | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.exit_code = exit_code
        self.log_path = log_path
        self.process_name = process_name
        parts = [f"Unity worker {worker_id}"]
        if process_name:
            parts.append(f"({process_name})")
        message = " ".join(parts) + f": {detail}"
        if exit_code is not None:
            message += f"; exit code {exit_code}"
        if log_path:
            message += f"; see its log at {log_path}"
        super().__init__(message)


class UnityTimeoutError(UnityTimeOutException):
    """Unity did not answer within ``timeout_wait`` seconds."""

    def __init__(self, worker_id: int, timeout: float, detail: str = "", log_path: str | None = None) -> None:
        self.worker_id = worker_id
        self.timeout = timeout
        self.log_path = log_path
        message = f"Unity worker {worker_id} did not answer within {timeout:g} s."
        if detail:
            message += " " + detail
        if log_path:
            message += f" Its log: {log_path}"
        super().__init__(message)


class UnityPortInUseError(UnityWorkerInUseException):
    """The port for a worker id is taken by another program."""

    def __init__(self, port: int, worker_id: int, free_worker_id: int | None = None) -> None:
        self.port = port
        self.worker_id = worker_id
        self.free_worker_id = free_worker_id
        # UnityWorkerInUseException formats its own message from the worker id; bypass it.
        message = f"Port {port} (worker_id={worker_id}) is already in use by another program."
        if free_worker_id is not None:
            message += f" worker_id={free_worker_id} would be free; pass it, or find_free_port=True."
        else:
            message += " Pass another worker_id or base_port, or find_free_port=True."
        Exception.__init__(self, message)


class UnityConfigurationError(UnityEnvironmentException, ValueError):
    """Bad user input: unknown behavior, missing executable, bad option or parameter."""
