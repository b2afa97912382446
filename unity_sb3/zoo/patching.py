"""Context managers that patch rl-zoo3 (and ``sys.argv``) for the length of one call."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any


@contextlib.contextmanager
def patched(target: Any, name: str, value: Any) -> Iterator[None]:
    """``target.name`` set to ``value`` inside the block, restored after it."""
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, old)


@contextlib.contextmanager
def patched_item(mapping: dict, key: Any, value: Any) -> Iterator[None]:
    """``mapping[key]`` set to ``value`` inside the block, restored (or removed) after it."""
    missing = object()
    old = mapping.get(key, missing)
    mapping[key] = value
    try:
        yield
    finally:
        if old is missing:
            del mapping[key]
        else:
            mapping[key] = old


@contextlib.contextmanager
def argv_as(argv: Sequence[str]) -> Iterator[None]:
    """``sys.argv`` set to ``argv`` inside the block (rl-zoo3's commands parse it), restored after it."""
    old = sys.argv
    sys.argv = list(argv)
    try:
        yield
    finally:
        sys.argv = old
