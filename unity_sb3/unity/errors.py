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


class UnityObservationError(RuntimeError):
    """Unity sent NaN or infinite observations or rewards (``mlagents_envs`` refuses them).

    A ``RuntimeError`` as ``mlagents_envs``' own, and not a ``UnityException``: the data is bad,
    the process is not, so restarting it would not help.

    :param worker_id: the worker id of the instance that sent them.
    :param problems: ``(behavior, agent_id, what)`` for each bad value found, e.g.
        ``("3DBall?team=0", 4, "NaN in observation 0 ('VectorSensor')")``.
    :param detail: ``mlagents_envs``' own message.
    """

    def __init__(self, worker_id: int, problems: list[tuple[str, int, str]], detail: str = "") -> None:
        self.worker_id = worker_id
        self.problems = list(problems)
        if problems:
            behavior, agent, what = problems[0]
            where = f"{what} of agent {agent} of behavior {behavior!r}"
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        else:
            where, more = detail or "non-finite values", ""
        super().__init__(
            f"Unity worker {worker_id} sent {where}{more}. Non-finite values cannot be trained on; check "
            "that agent's CollectObservations, sensors and AddReward calls for a division by zero, an "
            "uninitialised or destroyed object, or a physics body that flew away, and clamp or normalise "
            "the values."
        )


class UnityConfigurationError(UnityEnvironmentException, ValueError):
    """Bad user input: unknown behavior, missing executable, bad option or parameter."""


class UnityExecutableError(UnityEnvironmentException):
    """The Unity build to launch is missing or cannot be run.

    :param path: the path that was asked for.
    :param detail: what is wrong and what to do.
    :param candidates: builds found nearby, listed in the message.
    """

    def __init__(self, path: str, detail: str, candidates: list[str] | None = None) -> None:
        self.path = path
        self.candidates = list(candidates or [])
        message = detail
        if self.candidates:
            shown = self.candidates[:10]
            more = len(self.candidates) - len(shown)
            message += (
                " Found nearby: " + ", ".join(shown) + (f" (and {more} more)" if more > 0 else "") + "."
            )
        super().__init__(message)


class UnityExecutableNotFoundError(UnityExecutableError, FileNotFoundError):
    """No Unity build at the given path."""


class UnityVersionError(UnityEnvironmentException):
    """Unity speaks a communication protocol version this Python side does not."""

    def __init__(self, python_version: str, unity_version: str, package_version: str = "") -> None:
        self.python_version = python_version
        self.unity_version = unity_version
        self.package_version = package_version
        package = f" (com.unity.ml-agents {package_version})" if package_version else ""
        super().__init__(
            f"Unity's communication version {unity_version}{package} is not compatible with this "
            f"Python side's {python_version}: the major versions must match. Use a Unity project "
            f"with an ML-Agents package whose communication version is {python_version.split('.')[0]}.x "
            "(com.unity.ml-agents 2.0 and later speak 1.5.0)."
        )
