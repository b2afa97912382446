"""Context managers that patch rl-zoo3 (and ``sys.argv``) for the length of one call."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any


@contextlib.contextmanager
def _patched(target: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, old)


@contextlib.contextmanager
def _patched_item(mapping: dict, key: Any, value: Any) -> Iterator[None]:
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
def _argv(argv: Sequence[str]) -> Iterator[None]:
    old = sys.argv
    sys.argv = list(argv)
    try:
        yield
    finally:
        sys.argv = old
