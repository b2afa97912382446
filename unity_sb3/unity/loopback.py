"""The gRPC server a local Unity process connects to: :class:`LoopbackRpcCommunicator`.

``mlagents_envs``' ``RpcCommunicator`` with the differences that matter for a trainer on a
shared machine: it listens on one address (loopback by default) instead of every interface,
unauthenticated; it never shares its port (no ``SO_REUSEPORT``); it waits a bounded time for
each handshake message; and it fails with the errors of :mod:`unity_sb3.unity.errors` (port in
use, with a free ``worker_id``; timeout, with what to check). Its servicer fails a call cleanly
once the Python side has closed. :class:`~unity_sb3.unity.connect.LocalUnityEnvironment` opens
one per build or Editor it drives.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.errors import UnityPortInUseError, UnityTimeoutError

from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto  # isort: skip
from mlagents_envs.communicator_objects.unity_to_external_pb2_grpc import (  # isort: skip
    add_UnityToExternalProtoServicer_to_server,
)
from mlagents_envs.rpc_communicator import RpcCommunicator, UnityToExternalServicerImplementation  # isort: skip
from unity_sb3.unity.ports import BASE_ENVIRONMENT_PORT, find_free_worker_id, port_is_free

__all__ = ["LoopbackRpcCommunicator"]


class _Servicer(UnityToExternalServicerImplementation):
    """Hands each ``Exchange`` to the Python side; fails the call cleanly once Python closed."""

    def Exchange(self, request: UnityMessageProto, context: grpc.ServicerContext) -> UnityMessageProto:
        """Pass Unity's message to Python and return Python's answer.

        :param request: Unity's message.
        :param context: the call's context; aborted with ``UNAVAILABLE`` once Python closed its end.
        :return: Python's answer to Unity.
        """
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
        """Raise :class:`UnityPortInUseError` (naming a free ``worker_id``) unless ``port`` is free.

        :param port: the port to listen on, checked on ``bind_address``.
        """
        if not port_is_free(port, self.bind_address):
            raise UnityPortInUseError(
                port,
                self.worker_id,
                find_free_worker_id(port - self.worker_id, self.worker_id, self.bind_address),
            )

    def create_server(self) -> None:
        """Start the gRPC server on ``bind_address``; raise :class:`UnityPortInUseError` if it cannot bind."""
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
        """Wait for Unity's next message; raise :class:`UnityTimeoutError` after ``timeout_wait`` seconds.

        :param poll_callback: called between polls and once more before the timeout error (it raises
            when the Unity process has exited, which explains the silence better).
        """
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
        """The handshake: Unity's first message, our answer, and Unity's second message, each wait bounded.

        :param inputs: the ``UnityInputProto`` to answer Unity's first message with.
        :param poll_callback: as for :meth:`poll_for_timeout`.
        :return: the ``UnityOutputProto`` of Unity's first message (the academy's parameters).
        """
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
        """Say goodbye to Unity, stop the server and its threads, close our end of the pipe. Idempotent."""
        if not self.is_open:
            return
        super().close()  # the 400 to Unity, then a server stop with a grace period (compat)
        self._executor.shutdown(wait=False)
        self.unity_to_external.child_conn.close()  # a socket pair: one fd per end
