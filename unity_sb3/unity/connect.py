"""Open a Unity environment: a build, the Editor, or an embedded scene.

:func:`open_unity` is the one entry point the wrappers call with a target string. It returns
a ``mlagents_envs.base_env.BaseEnv`` carrying ``env.unity_sb3_channels`` (a
:class:`~unity_sb3.unity.channels.UnityChannels`) with the engine settings and environment
parameters already queued, so they reach Unity with the first reset.

Builds and the Editor are driven by :class:`LocalUnityEnvironment`, a
``mlagents_envs.environment.UnityEnvironment`` that differs from its parent where it matters:

- its gRPC server listens on ``bind_address`` (loopback by default; ``mlagents_envs`` listens
  on every interface, unauthenticated, so anything on the network could pose as Unity);
- each failure raises an error that says what happened and what to do
  (:mod:`unity_sb3.unity.errors`): missing or non-executable build, port in use (with a free
  ``worker_id``), timeout, version mismatch, Unity process exited (exit code and log path);
- it can search for a free port, writes the player log to a known file, and closes
  idempotently, killing the process group it started, on ``close()``, on garbage collection
  and at interpreter exit.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import ipaddress
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.channels import EngineSettings, EnvironmentParameters, UnityChannels
from unity_sb3.unity.errors import (
    UnityConfigurationError,
    UnityExecutableError,
    UnityExecutableNotFoundError,
    UnityObservationError,
    UnityPortInUseError,
    UnityProcessError,
    UnityTimeoutError,
    UnityVersionError,
)

import mlagents_envs  # isort: skip
from mlagents_envs.base_env import BaseEnv  # isort: skip
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto  # isort: skip
from mlagents_envs.communicator_objects.unity_rl_initialization_input_pb2 import (  # isort: skip
    UnityRLInitializationInputProto,
)
from mlagents_envs.communicator_objects.unity_to_external_pb2_grpc import (  # isort: skip
    add_UnityToExternalProtoServicer_to_server,
)
from mlagents_envs.environment import UnityEnvironment  # isort: skip
from mlagents_envs.exception import UnityCommunicatorStoppedException  # isort: skip
from mlagents_envs.rpc_communicator import RpcCommunicator, UnityToExternalServicerImplementation  # isort: skip
from mlagents_envs.side_channel import DefaultTrainingAnalyticsSideChannel  # isort: skip
from mlagents_envs.side_channel.side_channel import SideChannel  # isort: skip
from mlagents_envs.side_channel.side_channel_manager import SideChannelManager  # isort: skip

logger = logging.getLogger(__name__)

DEFAULT_EDITOR_PORT = UnityEnvironment.DEFAULT_EDITOR_PORT  # 5004
BASE_ENVIRONMENT_PORT = UnityEnvironment.BASE_ENVIRONMENT_PORT  # 5005
BUILD_SUFFIXES = (".x86_64", ".x86", ".exe", ".app")
TRANSPORTS = ("auto", "inprocess", "player")
#: how many worker ids ``find_free_port`` (and the port-in-use hint) tries
PORT_SEARCH = 64

__all__ = [
    "LocalUnityEnvironment",
    "LoopbackRpcCommunicator",
    "find_free_worker_id",
    "is_loopback",
    "open_unity",
    "resolve_executable",
]


# --------------------------------------------------------------------------------------------
# Addresses and ports
# --------------------------------------------------------------------------------------------
def is_loopback(address: str) -> bool:
    """Whether ``address`` only accepts connections from this machine."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_port_range(base_port: int, worker_id: int) -> int:
    for name, value in (("worker_id", worker_id), ("base_port", base_port)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise UnityConfigurationError(f"{name} must be an int, got {value!r}.")
    if worker_id < 0:
        raise UnityConfigurationError(f"worker_id must be >= 0, got {worker_id}.")
    port = base_port + worker_id
    if not 1 <= port <= 65535:
        raise UnityConfigurationError(
            f"Port base_port + worker_id = {base_port} + {worker_id} = {port} is out of range 1-65535; "
            f"use a smaller base_port or worker_id (the default base_port is {BASE_ENVIRONMENT_PORT})."
        )
    return port


def _port_is_free(port: int, bind_address: str) -> bool:
    host = bind_address.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        if sys.platform.startswith("linux"):
            # a closed port in TIME_WAIT is reusable; a listening one is not
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRNOTAVAIL:
                raise UnityConfigurationError(
                    f"bind_address {bind_address!r} is not an address of this machine."
                ) from error
            return False
    return True


def find_free_worker_id(base_port: int, worker_id: int, bind_address: str = "127.0.0.1") -> int | None:
    """The first ``worker_id`` after ``worker_id`` whose port is free, or ``None`` if none is near."""
    for candidate in range(worker_id + 1, worker_id + 1 + PORT_SEARCH):
        if base_port + candidate > 65535:
            return None
        if _port_is_free(base_port + candidate, bind_address):
            return candidate
    return None


# --------------------------------------------------------------------------------------------
# Communicator
# --------------------------------------------------------------------------------------------
class _Servicer(UnityToExternalServicerImplementation):
    """Hands each ``Exchange`` to the Python side; fails the call cleanly once Python closed."""

    def Exchange(self, request: UnityMessageProto, context: grpc.ServicerContext) -> UnityMessageProto:
        try:
            self.child_conn.send(request)
            return self.child_conn.recv()
        except (EOFError, OSError):
            context.abort(grpc.StatusCode.UNAVAILABLE, "the Python side closed the connection")
            raise  # unreachable: abort raises


class LoopbackRpcCommunicator(RpcCommunicator):
    """``mlagents_envs``' gRPC communicator, listening on one address instead of every interface.

    Also: no ``SO_REUSEPORT`` (so two trainers cannot share a port), a poll interval that stays
    sensible for short timeouts, a bounded wait for the second handshake message, and errors
    from :mod:`unity_sb3.unity.errors`.

    :param worker_id: offset from ``base_port``.
    :param base_port: the port of worker 0.
    :param timeout_wait: seconds to wait for each message from Unity.
    :param bind_address: address to listen on; loopback by default.
    :param timeout_hint: appended to the timeout error (what to check).
    """

    def __init__(
        self,
        worker_id: int = 0,
        base_port: int = BASE_ENVIRONMENT_PORT,
        timeout_wait: float = 60,
        bind_address: str = "127.0.0.1",
        timeout_hint: str = "",
    ) -> None:
        self.bind_address = bind_address
        self.timeout_hint = timeout_hint
        super().__init__(worker_id, base_port, timeout_wait)

    def check_port(self, port: int) -> None:
        if not _port_is_free(port, self.bind_address):
            raise UnityPortInUseError(
                port,
                self.worker_id,
                find_free_worker_id(port - self.worker_id, self.worker_id, self.bind_address),
            )

    def create_server(self) -> None:
        self.check_port(self.port)
        # kept to shut down in close(): grpc's server.stop() leaves its executor's threads running
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"unity-grpc-{self.port}")
        server = grpc.server(self._executor, options=(("grpc.so_reuseport", 0),))
        servicer = _Servicer()
        add_UnityToExternalProtoServicer_to_server(servicer, server)
        host = self.bind_address.strip("[]")
        address = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        try:
            bound = server.add_insecure_port(address)
        except RuntimeError:
            bound = 0
        if bound != self.port:
            server.stop(None)
            self._executor.shutdown(wait=False)
            raise UnityPortInUseError(
                self.port,
                self.worker_id,
                find_free_worker_id(self.port - self.worker_id, self.worker_id, self.bind_address),
            )
        server.start()
        self.server = server
        self.unity_to_external = servicer
        self.is_open = True

    def poll_for_timeout(self, poll_callback: Any = None) -> None:
        deadline = time.monotonic() + self.timeout_wait
        interval = min(1.0, max(0.02, self.timeout_wait / 10))
        while (remaining := deadline - time.monotonic()) > 0:
            if self.unity_to_external.parent_conn.poll(min(interval, remaining)):
                return
            if poll_callback is not None:
                poll_callback()
        if poll_callback is not None:
            poll_callback()  # a dead process explains the silence better than a timeout
        raise UnityTimeoutError(self.worker_id, self.timeout_wait, detail=self.timeout_hint)

    def initialize(self, inputs: Any, poll_callback: Any = None) -> Any:
        self.poll_for_timeout(poll_callback)
        academy_output = self.unity_to_external.parent_conn.recv().unity_output
        message = UnityMessageProto()
        message.header.status = 200
        message.unity_input.CopyFrom(inputs)
        self.unity_to_external.parent_conn.send(message)
        self.poll_for_timeout(poll_callback)  # the parent waits for this one without a timeout
        self.unity_to_external.parent_conn.recv()
        return academy_output

    def close(self) -> None:
        if not self.is_open:
            return
        super().close()  # the 400 to Unity, then a server stop with a grace period (compat)
        self._executor.shutdown(wait=False)
        self.unity_to_external.child_conn.close()  # a socket pair: one fd per end


# --------------------------------------------------------------------------------------------
# Executables
# --------------------------------------------------------------------------------------------
def _looks_like_build(path: Path) -> bool:
    if path.name.startswith("UnityCrashHandler"):
        return False
    if path.suffix in BUILD_SUFFIXES:
        return True
    return path.is_file() and os.access(path, os.X_OK)


def _nearby_builds(directory: Path) -> list[str]:
    found: list[str] = []
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return found
    for entry in entries:
        if _looks_like_build(entry):
            found.append(str(entry))
        elif entry.is_dir():
            with contextlib.suppress(OSError):
                found += [str(p) for p in sorted(entry.iterdir()) if p.suffix in BUILD_SUFFIXES]
    return found


def _app_binary(app: Path) -> Path | None:
    macos = app / "Contents" / "MacOS"
    if (macos / app.stem).is_file():
        return macos / app.stem
    binaries = sorted(p for p in macos.glob("*") if p.is_file()) if macos.is_dir() else []
    return binaries[0] if binaries else None


def resolve_executable(target: str | os.PathLike[str], scene_names: Sequence[str] = ()) -> Path:
    """The file to launch for a Unity build given as ``target``.

    Accepts the executable itself, its path without the platform suffix (``builds/3DBall`` for
    ``builds/3DBall.x86_64``, as ``mlagents_envs`` does), a macOS ``.app`` bundle, or a build
    folder holding exactly one executable.

    :param target: path to the build.
    :param scene_names: embedded scene names, mentioned when nothing is found.
    :raises UnityExecutableNotFoundError: nothing there; the message lists builds nearby.
    :raises UnityExecutableError: the file is not executable, or a folder holds several builds.
    """
    path = Path(target).expanduser()
    resolved: Path | None = None
    if path.is_dir() and path.suffix == ".app":
        resolved = _app_binary(path)
    elif path.is_file():
        resolved = path
    elif path.is_dir():
        builds = [Path(p) for p in _nearby_builds(path) if Path(p).parent == path]
        if len(builds) > 1:
            named = [b for b in builds if b.stem == path.name]
            if len(named) != 1:
                raise UnityExecutableError(
                    str(target),
                    f"The folder {path} holds several builds; pass the one to launch.",
                    [str(b) for b in builds],
                )
            builds = named
        if builds:
            resolved = _app_binary(builds[0]) if builds[0].suffix == ".app" else builds[0]
    else:
        for suffix in BUILD_SUFFIXES:
            candidate = path.with_name(path.name + suffix)
            if candidate.exists():
                resolved = _app_binary(candidate) if suffix == ".app" else candidate
                break
    if resolved is None:
        directory = path if path.is_dir() else path.parent
        while not directory.exists() and directory != directory.parent:
            directory = directory.parent
        detail = f"No Unity build at {str(target)!r}"
        if not path.parent.exists():
            detail += f" (the folder {path.parent} does not exist)"
        detail += "."
        if scene_names:
            detail += f" It is not an embedded scene either ({', '.join(scene_names)})."
            by_lower = {name.lower(): name for name in scene_names}
            close = difflib.get_close_matches(path.name.lower(), by_lower, n=1, cutoff=0.6)
            if close:
                detail += f" Did you mean the scene {by_lower[close[0]]!r}?"
        raise UnityExecutableNotFoundError(str(target), detail, _nearby_builds(directory))
    if not os.access(resolved, os.X_OK):
        raise UnityExecutableError(
            str(target),
            f"The Unity build {resolved} is not executable; run `chmod +x {resolved}` and try again.",
        )
    return resolved


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
    ) -> None:
        self._loaded = False
        self._process: subprocess.Popen | None = None
        editor = file_name is None
        if base_port is None:
            base_port = DEFAULT_EDITOR_PORT if editor else BASE_ENVIRONMENT_PORT
        _check_port_range(base_port, worker_id)
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
        executable = None if editor else resolve_executable(file_name, _scene_names())
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
            self._process = subprocess.Popen(
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


# --------------------------------------------------------------------------------------------
# open_unity
# --------------------------------------------------------------------------------------------
def _scene_names() -> list[str]:
    try:
        from unity_sb3.envs import list_scenes
    except ImportError:
        return []
    return list(list_scenes())


def _scene_name(target: str, scenes: Sequence[str]) -> str | None:
    by_lower = {name.lower(): name for name in scenes}
    return by_lower.get(target.lower())


def _target_kind(target: str | os.PathLike[str] | None, transport: str) -> tuple[str, str | None]:
    """``("editor", None)``, ``("scene", name)`` or ``("build", path)``."""
    if target is None or (isinstance(target, str) and target.lower() == "editor"):
        return "editor", None
    text = os.fspath(target)
    path = Path(text).expanduser()
    exists = path.exists() or any(path.with_name(path.name + s).exists() for s in BUILD_SUFFIXES)
    scene = None if exists else _scene_name(text, _scene_names())
    if transport in ("inprocess", "player") and scene is None:
        raise UnityConfigurationError(
            f"transport={transport!r} runs embedded scenes, and {text!r} is not one "
            f"(scenes: {', '.join(_scene_names()) or 'none installed'}); use transport='auto' for a build."
        )
    return ("scene", scene) if scene is not None else ("build", text)


def open_unity(
    target: str | os.PathLike[str] | None = None,
    *,
    transport: str = "auto",
    worker_id: int = 0,
    base_port: int | None = None,
    find_free_port: bool = False,
    seed: int = 0,
    no_graphics: bool = True,
    timeout_wait: float = 60,
    additional_args: list[str] | None = None,
    log_folder: str | None = None,
    engine_settings: EngineSettings | Mapping[str, Any] | None = None,
    environment_parameters: Mapping[str, Any] | EnvironmentParameters | None = None,
    side_channels: list[SideChannel] | None = None,
    bind_address: str = "127.0.0.1",
    **scene_params: Any,
) -> BaseEnv:
    """Open a Unity environment and return it as a ``BaseEnv``.

    :param target: a Unity build (the executable, its path without suffix, or its folder);
        ``None`` or ``"editor"`` to wait for the Editor's Play button (port 5004); or the name of
        an embedded scene (``unity_sb3.envs.list_scenes()``, case-insensitive).
    :param transport: for embedded scenes: ``"inprocess"`` (a plain Python object, fastest),
        ``"player"`` (the stand-in Unity player in its own process, over gRPC, exactly like a
        build), or ``"auto"`` (in-process for scenes; builds and the Editor always use gRPC).
    :param worker_id: offset from ``base_port``; one per Unity instance running at once.
    :param base_port: port of worker 0; default 5005 for builds, 5004 for the Editor.
    :param find_free_port: when the port is taken, move to the next free ``worker_id``.
    :param seed: the seed Unity receives in the handshake (the scene's seed in-process); also
        seeds environment-parameter samplers without their own seed.
    :param no_graphics: launch builds with ``-nographics -batchmode`` (no rendering, so no
        visual observations).
    :param timeout_wait: seconds to wait for Unity to connect and for each step.
    :param additional_args: more command-line arguments for the build.
    :param log_folder: where the build writes ``Player-<worker_id>.log`` (and the captured
        stdout/stderr as ``.out``); default a per-user temporary folder.
    :param engine_settings: :class:`~unity_sb3.unity.channels.EngineSettings` or a dict of its
        fields; default ``mlagents-learn``'s (time scale 20).
    :param environment_parameters: ML-Agents' ``environment_parameters`` mapping (constants,
        samplers, curricula); lesson 0 values are sent with the first reset. Drive curricula
        with :class:`~unity_sb3.unity.channels.CurriculumCallback`.
    :param side_channels: more ``mlagents_envs`` side channels; an engine, environment
        parameters or stats channel given here replaces the one created.
    :param bind_address: address the gRPC server listens on (loopback by default).
    :param scene_params: scene keyword arguments (embedded scenes only), e.g. ``num_agents=4``.
    :return: the environment, with ``env.unity_sb3_channels``.
    """
    if transport not in TRANSPORTS:
        raise UnityConfigurationError(f"transport must be one of {TRANSPORTS}, got {transport!r}.")
    kind, name = _target_kind(target, transport)
    if scene_params and kind != "scene":
        raise UnityConfigurationError(
            f"Scene parameters {sorted(scene_params)} only apply to embedded scenes, not to "
            f"{'the Editor' if kind == 'editor' else 'a Unity build'}; unknown keyword argument(s)?"
        )
    settings = EngineSettings.coerce(engine_settings)
    channels = UnityChannels.from_side_channels(side_channels)
    channels.engine_settings = settings
    settings.apply(channels.engine)
    if environment_parameters is not None:
        if not isinstance(environment_parameters, EnvironmentParameters):
            environment_parameters = EnvironmentParameters(environment_parameters, seed=seed)
        channels.parameters = environment_parameters
        environment_parameters.apply(channels.environment_parameters)
    graphics_off = no_graphics if settings.no_graphics is None else settings.no_graphics

    env: Any
    if kind == "scene" and transport != "player":
        from unity_sb3.envs import make_scene

        env = make_scene(name, seed=seed, side_channels=channels.all(), **scene_params)
    else:
        file_name: str | None = name
        temp_dir: str | None = None
        if kind == "scene":
            from unity_sb3.unity.player import write_launcher

            temp_dir = tempfile.mkdtemp(prefix="unity_sb3-player-")
            file_name = str(write_launcher(name, temp_dir, scene_params=scene_params or None))
        try:
            env = LocalUnityEnvironment(
                file_name,
                worker_id=worker_id,
                base_port=base_port,
                seed=seed,
                no_graphics=graphics_off,
                timeout_wait=timeout_wait,
                additional_args=additional_args,
                side_channels=channels.all(),
                log_folder=log_folder,
                bind_address=bind_address,
                find_free_port=find_free_port,
                process_name=f"stand-in player {name!r}" if kind == "scene" else None,
            )
        except BaseException:
            if temp_dir is not None:
                shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        if temp_dir is not None:
            env._resources.temp_dirs.append(temp_dir)
    env.unity_sb3_channels = channels
    return env
