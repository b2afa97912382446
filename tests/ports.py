"""Ports for tests that start Unity players: one helper instead of a copy per test module."""

from __future__ import annotations

import socket


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port(span: int = 8) -> int:
    """A base port free now with the ``span`` ports after it free too (best effort: another
    program may take one before the test does; ``find_free_port`` covers that in real use)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + span < 65000 and all(_is_free(port + i) for i in range(1, span + 1)):
            return port
    raise RuntimeError(f"no run of {span + 1} free ports found on 127.0.0.1")
