"""Open a Unity environment: a build, the Editor, or an embedded scene.

:func:`open_unity` is the one entry point the wrappers call with a target string. It returns
a ``mlagents_envs.base_env.BaseEnv`` carrying ``env.unity_sb3_channels`` (a
:class:`~unity_sb3.unity.channels.UnityChannels`) with the engine settings and environment
parameters already queued, so they reach Unity with the first reset.

Builds and the Editor are driven by :class:`LocalUnityEnvironment`, a
``mlagents_envs.environment.UnityEnvironment`` that differs from its parent where it matters:

- its gRPC server (:class:`~unity_sb3.unity.loopback.LoopbackRpcCommunicator`) listens on
  ``bind_address`` (loopback by default; ``mlagents_envs`` listens on every interface,
  unauthenticated, so anything on the network could pose as Unity);
- each failure raises an error that says what happened and what to do
  (:mod:`unity_sb3.unity.errors`): missing or non-executable build, port in use (with a free
  ``worker_id``), timeout, version mismatch, Unity process exited (exit code and log path);
- it can search for a free port, writes the player log to a known file, and closes
  idempotently, killing the process group it started, on ``close()``, on garbage collection
  and at interpreter exit.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.errors import (
    UnityConfigurationError,
    UnityExecutableError,
    UnityObservationError,
    UnityPortInUseError,
    UnityProcessError,
    UnityTimeoutError,
    UnityVersionError,
)

import mlagents_envs  # isort: skip
from mlagents_envs.communicator_objects.unity_rl_initialization_input_pb2 import (  # isort: skip
    UnityRLInitializationInputProto,
)
from mlagents_envs.environment import UnityEnvironment  # isort: skip
from mlagents_envs.exception import UnityCommunicatorStoppedException  # isort: skip
from mlagents_envs.side_channel import DefaultTrainingAnalyticsSideChannel  # isort: skip
from mlagents_envs.side_channel.side_channel import SideChannel  # isort: skip
from mlagents_envs.side_channel.side_channel_manager import SideChannelManager  # isort: skip
from unity_sb3.unity.executable import resolve_executable
from unity_sb3.unity.loopback import LoopbackRpcCommunicator
from unity_sb3.unity.ports import (
    BASE_ENVIRONMENT_PORT,
    DEFAULT_EDITOR_PORT,
    PORT_SEARCH,
    check_port_range,
    is_loopback,
)

logger = logging.getLogger(__name__)

TRANSPORTS = ("auto", "inprocess", "player")

__all__ = [
    "LocalUnityEnvironment",
    "LoopbackRpcCommunicator",
]


# --------------------------------------------------------------------------------------------
# Process and connection lifetime
# --------------------------------------------------------------------------------------------
class _Resources:
    """What a :class:`LocalUnityEnvironment` must release; closed once, from any path."""

    def __init__(self, communicator: LoopbackRpcCommunicator, close_timeout: float) -> None:
        self.communicator = communicator
        self.process: subprocess.Popen | None = None
        self.output: Any = None
        self.temp_dirs: list[str] = []
        self.close_timeout = close_timeout
        self.connected = False  # a process that never connected will not read the goodbye
        self.closed = False
        _OPEN.add(self)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.communicator.close()
        except Exception:  # closing must not fail: it also runs at interpreter exit
            logger.debug("closing the communicator failed", exc_info=True)
        process = self.process
        if process is not None:
            try:
                process.wait(timeout=self.close_timeout if self.connected else 0.1)
            except subprocess.TimeoutExpired:
                if self.connected:
                    logger.warning(
                        "Unity (pid %d) did not exit within %g s; terminating it.",
                        process.pid,
                        self.close_timeout,
                    )
                _signal_group(process, signal.SIGTERM)
                try:
                    process.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    _signal_group(process, signal.SIGKILL)
                    process.wait()
            _signal_group(process, signal.SIGKILL)  # children it left behind in its session
        if self.output is not None:
            self.output.close()
        for directory in self.temp_dirs:
            shutil.rmtree(directory, ignore_errors=True)


_OPEN: weakref.WeakSet[_Resources] = weakref.WeakSet()


def _close_all_at_shutdown() -> None:
    """Close every environment still open when the interpreter shuts down.

    Runs before ``concurrent.futures`` joins its worker threads at shutdown (threading's exit
    hooks run last-registered first): a gRPC worker waiting in ``Exchange`` for Python's next
    message would otherwise never return, and the interpreter would hang instead of exiting.
    """
    for resources in list(_OPEN):
        with contextlib.suppress(Exception):
            resources.close()


if hasattr(threading, "_register_atexit"):  # CPython >= 3.9
    threading._register_atexit(_close_all_at_shutdown)


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(process.pid, sig)  # started with start_new_session: pgid == pid
        elif process.poll() is None:
            process.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _non_finite(output: Any) -> list[tuple[str, int, str]]:
    """``(behavior, agent_id, what)`` for every NaN/inf observation or reward in a ``UnityRLOutputProto``."""
    import numpy as np

    found = []
    for behavior, infos in output.agentInfos.items():
        for info in infos.value:
            for index, obs in enumerate(info.observations):
                if obs.WhichOneof("observation_data") != "float_data":
                    continue
                values = np.asarray(obs.float_data.data, dtype=np.float32)
                if not np.isfinite(values).all():
                    kind = "NaN" if np.isnan(values).any() else "infinite values"
                    name = f" ({obs.name!r})" if obs.name else ""
                    found.append((behavior, info.id, f"{kind} in observation {index}{name}"))
            for field in ("reward", "group_reward"):
                value = getattr(info, field)
                if not np.isfinite(value):
                    found.append((behavior, info.id, f"a {'NaN' if np.isnan(value) else 'infinite'} {field}"))
    return found


def _default_log_folder() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"unity_sb3-{uid}" / "logs"


def _tail(path: Path | None, lines: int = 12) -> str:
    if path is None or not path.is_file():
        return ""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 4000))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


class LocalUnityEnvironment(UnityEnvironment):
    """A ``UnityEnvironment`` for a build or the Editor, bound to loopback, with clear errors.

    Same arguments as ``UnityEnvironment`` (``file_name=None`` waits for the Editor on port
    5004), plus:

    :param bind_address: where the gRPC server listens. Unity builds and the Editor on this
        machine connect to localhost; pass ``"0.0.0.0"`` (logged as a warning) only for a
        player in another container or machine, on a network you trust.
    :param find_free_port: when the port of ``worker_id`` is taken, use the next free one
        (``worker_id`` grows accordingly).
    :param close_timeout: seconds ``close()`` waits for Unity to exit before terminating it.
    :param process_name: names the process in error messages.
    :param scene_names: embedded scene names, to suggest one when ``file_name`` is not a build.
    """

    def __init__(
        self,
        file_name: str | None = None,
        worker_id: int = 0,
        base_port: int | None = None,
        seed: int = 0,
        no_graphics: bool = False,
        timeout_wait: float = 60,
        additional_args: Sequence[str] | None = None,
        side_channels: Sequence[SideChannel] | None = None,
        log_folder: str | None = None,
        num_areas: int = 1,
        *,
        bind_address: str = "127.0.0.1",
        find_free_port: bool = False,
        close_timeout: float = 10.0,
        process_name: str | None = None,
        scene_names: Sequence[str] = (),
    ) -> None:
        self._loaded = False
        self._process: subprocess.Popen | None = None
        editor = file_name is None
        if base_port is None:
            base_port = DEFAULT_EDITOR_PORT if editor else BASE_ENVIRONMENT_PORT
        check_port_range(base_port, worker_id)
        if not timeout_wait or timeout_wait <= 0:
            raise UnityConfigurationError(
                f"timeout_wait must be a positive number of seconds, got {timeout_wait!r}."
            )
        if editor and (worker_id != 0 or find_free_port):
            raise UnityConfigurationError(
                "The Unity Editor always connects to one port (5004 unless base_port says otherwise): "
                "use worker_id=0 and find_free_port=False with the Editor."
            )
        if not is_loopback(bind_address):
            logger.warning(
                "The Unity gRPC server listens on %s without authentication: any machine that reaches "
                "this port can pose as Unity. Use it only on a trusted network.",
                bind_address,
            )
        executable = None if editor else resolve_executable(file_name, scene_names)
        self._process_name = process_name or ("Unity Editor" if editor else str(executable))
        self._additional_args = list(additional_args or [])
        self._no_graphics = no_graphics
        self._timeout_wait = timeout_wait
        self._log_folder = log_folder
        self._buffer_size = 12000
        self._bind_address = bind_address
        if editor:
            hint = (
                f"Press Play in the Unity Editor within {timeout_wait:g} s of starting; check that the scene's "
                "Agents have Behavior Type 'Default' and that the Editor connects to this port "
                f"({base_port + worker_id})."
            )
        else:
            hint = (
                f"Check that {executable} is an ML-Agents build that starts without user interaction, "
                "that its ML-Agents package matches (communication version "
                f"{self.API_VERSION}), and on a headless machine that it runs with no_graphics=True; "
                "raise timeout_wait for slow starts."
            )
        self._communicator = self._open_communicator(worker_id, base_port, timeout_wait, hint, find_free_port)
        self._worker_id = self._communicator.worker_id
        self._port = self._communicator.port
        self._resources = _Resources(self._communicator, close_timeout)
        self._finalizer = weakref.finalize(self, _Resources.close, self._resources)

        side_channels = list(side_channels or [])
        analytics = None
        if DefaultTrainingAnalyticsSideChannel.CHANNEL_ID not in [c.channel_id for c in side_channels]:
            analytics = DefaultTrainingAnalyticsSideChannel()
            side_channels.append(analytics)
        self._side_channel_manager = SideChannelManager(side_channels)
        self.academy_capabilities = None  # type: ignore[assignment]

        self.log_path: Path | None = None
        self.output_path: Path | None = None
        try:
            if editor:
                logger.info("Listening on port %d. Press Play in the Unity Editor to start.", self._port)
            else:
                self._launch(executable)
            self._loaded = True
            init = UnityRLInitializationInputProto(
                seed=seed,
                communication_version=self.API_VERSION,
                package_version=mlagents_envs.__version__,
                capabilities=UnityEnvironment._get_capabilities_proto(),
                num_areas=num_areas,
            )
            academy_output = self._send_academy_parameters(init)
            self._resources.connected = True
            params = academy_output.rl_initialization_output
            with warnings.catch_warnings():  # mlagents_envs uses distutils' StrictVersion
                warnings.simplefilter("ignore", DeprecationWarning)
                compatible = UnityEnvironment._check_communication_compatibility(
                    params.communication_version, self.API_VERSION, params.package_version
                )
            if not compatible:
                raise UnityVersionError(
                    self.API_VERSION, params.communication_version, params.package_version
                )
        except BaseException as error:
            self._loaded = False
            self._finalizer()
            if isinstance(error, UnityTimeoutError) and self.log_path is not None:
                error.args = (self._with_log(str(error.args[0])),)
            raise
        UnityEnvironment._warn_csharp_base_capabilities(
            params.capabilities, params.package_version, UnityEnvironment.API_VERSION
        )
        self._env_state: dict[str, Any] = {}
        self._env_specs: dict[str, Any] = {}
        self._env_actions: dict[str, Any] = {}
        self._is_first_message = True
        self._update_behavior_specs(academy_output)
        self.academy_capabilities = params.capabilities
        if analytics is not None:
            analytics.environment_initialized()

    # -- setup ----------------------------------------------------------------------------
    def _open_communicator(
        self, worker_id: int, base_port: int, timeout_wait: float, hint: str, find_free_port: bool
    ) -> LoopbackRpcCommunicator:
        last = min(worker_id + PORT_SEARCH, 65535 - base_port) if find_free_port else worker_id
        first_error: UnityPortInUseError | None = None
        for candidate in range(worker_id, last + 1):
            try:
                communicator = self._get_communicator(candidate, base_port, timeout_wait, hint)
            except UnityPortInUseError as error:
                first_error = first_error or error
                continue
            if candidate != worker_id:
                logger.info(
                    "Port %d was taken; using worker_id=%d (port %d).",
                    base_port + worker_id,
                    candidate,
                    base_port + candidate,
                )
            return communicator
        assert first_error is not None
        raise first_error

    def _get_communicator(  # type: ignore[override]
        self, worker_id: int, base_port: int, timeout_wait: float, hint: str = ""
    ) -> LoopbackRpcCommunicator:
        return LoopbackRpcCommunicator(worker_id, base_port, timeout_wait, self._bind_address, hint)

    def _launch(self, executable: Path) -> None:
        folder = Path(self._log_folder) if self._log_folder else _default_log_folder()
        folder.mkdir(parents=True, exist_ok=True)
        # the user's log folder follows mlagents' naming; the shared default one is keyed by port
        name = f"Player-{self._worker_id}" if self._log_folder else f"Player-port{self._port}"
        args = ["-nographics", "-batchmode"] if self._no_graphics else []
        args += [self._PORT_COMMAND_LINE_ARG, str(self._port)]
        lowered = [a.lower() for a in self._additional_args]
        if "-logfile" in lowered:
            index = lowered.index("-logfile")
            if index + 1 < len(self._additional_args) and self._additional_args[index + 1] != "-":
                self.log_path = Path(self._additional_args[index + 1])
        else:
            self.log_path = folder / f"{name}.log"
            args += ["-logFile", str(self.log_path)]
        args += self._additional_args
        self.output_path = folder / f"{name}.out"
        self._resources.output = self.output_path.open("wb")
        logger.debug("Launching %s %s", executable, args)
        try:
            self._process = _popen_retrying_busy(
                [str(executable), *args],
                stdin=subprocess.DEVNULL,
                stdout=self._resources.output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches Python only; close() ends the whole group
            )
        except PermissionError as error:
            raise UnityExecutableError(
                str(executable),
                f"Could not launch {executable}: permission denied; run `chmod +x {executable}`.",
            ) from error
        except OSError as error:
            raise UnityExecutableError(
                str(executable),
                f"Could not launch {executable}: {error.strerror} (is it a build for this platform?).",
            ) from error
        self._resources.process = self._process

    def _with_log(self, message: str) -> str:
        for path in (self.log_path, self.output_path):
            tail = _tail(path)
            if tail:
                message += f"\nLast lines of {path}:\n{tail}"
        return message

    # -- overrides of UnityEnvironment ------------------------------------------------------
    def _poll_process(self) -> None:
        process = self._process
        if process is None or process.poll() is None:
            return
        code = process.returncode
        signal_name = self._returncode_to_signal_name(code) if code < 0 else None
        detail = "the Unity process exited" + (f" ({signal_name})" if signal_name else "")
        detail = self._with_log(detail)
        raise UnityProcessError(
            self._worker_id,
            exit_code=code,
            log_path=str(self.log_path or self.output_path or "") or None,
            detail=detail,
            process_name=self._process_name,
        )

    def _update_state(self, output: Any) -> None:
        try:
            super()._update_state(output)
        except RuntimeError as error:  # rpc_utils' NaN/Inf check names neither behavior nor agent
            if "NaN" not in str(error) and "Infinite" not in str(error):
                raise
            raise UnityObservationError(self._worker_id, _non_finite(output), str(error)) from error

    def reset(self) -> None:
        self._check_open()
        try:
            super().reset()
        except UnityCommunicatorStoppedException as error:
            self._raise_stopped(error)

    def step(self) -> None:
        self._check_open()
        try:
            super().step()
        except UnityCommunicatorStoppedException as error:
            self._raise_stopped(error)

    def _check_open(self) -> None:
        if self._resources.closed:
            raise UnityCommunicatorStoppedException(
                f"Unity worker {self._worker_id} was closed; open a new environment."
            )

    def _raise_stopped(self, error: UnityCommunicatorStoppedException) -> None:
        if isinstance(error, UnityProcessError):
            raise error
        self._poll_process()
        raise UnityProcessError(
            self._worker_id,
            exit_code=None,
            log_path=str(self.log_path) if self.log_path else None,
            detail="Unity closed the connection",
            process_name=self._process_name,
        ) from error

    @property
    def worker_id(self) -> int:
        return self._worker_id

    @property
    def port(self) -> int:
        return self._port

    @property
    def process(self) -> subprocess.Popen | None:
        return self._process

    @property
    def closed(self) -> bool:
        return self._resources.closed

    def close(self) -> None:
        """Tell Unity to quit, stop the server, end the process group. Safe to call again."""
        self._loaded = False
        self._finalizer()

    def _close(self, timeout: float | None = None) -> None:
        self.close()


#: tries and first pause (seconds, doubled each try) of :func:`_popen_retrying_busy`
_BUSY_TRIES, _BUSY_PAUSE = 6, 0.02


def _popen_retrying_busy(args: list[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen``, tried again while the executable is "text file busy" (``ETXTBSY``).

    A launcher script just written can be busy for a moment: a process forked by another thread while
    the file was open for writing holds it until that child execs. Linux then refuses to execute it,
    though nothing is wrong with it; the condition clears within milliseconds.
    """
    pause = _BUSY_PAUSE
    for _ in range(_BUSY_TRIES - 1):
        try:
            return subprocess.Popen(args, **kwargs)
        except OSError as error:
            if error.errno != errno.ETXTBSY:
                raise
        time.sleep(pause)
        pause *= 2
    return subprocess.Popen(args, **kwargs)
