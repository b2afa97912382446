"""Checks of user settings written once: numbers, keys, did-you-mean. A leaf: every room imports it."""

from __future__ import annotations

import difflib
import math
from typing import Any

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.errors import UnityConfigurationError


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _float(value: Any, where: str) -> float:
    if not _is_number(value) or not math.isfinite(float(value)):
        raise UnityConfigurationError(f"{where} must be a finite number, got {value!r}.")
    return float(value)


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """A ``" Did you mean 'x'?"`` suffix for an unknown ``word``, or ``""`` when nothing is close."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""
