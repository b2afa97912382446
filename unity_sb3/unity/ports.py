"""Ports of the gRPC server Unity connects to: ranges, loopback, finding a free worker id."""

from __future__ import annotations

import errno
import ipaddress
import socket
import sys

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.errors import (
    UnityConfigurationError,
)

from mlagents_envs.environment import UnityEnvironment  # isort: skip

__all__: list[str] = []


DEFAULT_EDITOR_PORT = UnityEnvironment.DEFAULT_EDITOR_PORT  # 5004


BASE_ENVIRONMENT_PORT = UnityEnvironment.BASE_ENVIRONMENT_PORT  # 5005


#: how many worker ids ``find_free_port`` (and the port-in-use hint) tries
PORT_SEARCH = 64


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


def check_port_range(base_port: int, worker_id: int) -> int:
    """The port ``base_port + worker_id``, after checking both are ints and the port is in 1-65535.

    :param base_port: the port of worker 0
    :param worker_id: the instance's offset from ``base_port``, >= 0
    :raises UnityConfigurationError: a value that is not an int, a negative ``worker_id``, a port out of range
    """
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


def port_is_free(port: int, bind_address: str) -> bool:
    """Whether a listening socket could bind ``port`` on ``bind_address`` now.

    :param port: the port to try
    :param bind_address: the address to bind (IPv4 or IPv6, brackets allowed)
    :raises UnityConfigurationError: ``bind_address`` is not an address of this machine
    """
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
        if port_is_free(base_port + candidate, bind_address):
            return candidate
    return None
