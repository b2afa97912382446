"""Checks of user settings written once: numbers, keys, choices, did-you-mean.

A leaf every room imports (``unity/`` included, which may not import ``config/``: hence a
top-level module, see docs/DECISIONS.md). Each check takes the error class of its caller
(``UnityConfigurationError``, ``MLAgentsConfigError``, ``RewardSignalConfigError``, ...), so
every room keeps raising its own error with one wording.
"""

from __future__ import annotations

import contextlib
import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.errors import UnityConfigurationError

__all__ = [
    "check_keys",
    "choice",
    "close_matches",
    "did_you_mean",
    "finite_float",
    "flag",
    "is_int",
    "is_number",
    "number",
    "number_from_text",
    "short_repr",
    "unknown_keys",
]


def is_int(value: Any) -> bool:
    """Whether ``value`` is a whole number type (Python or numpy int; ``bool`` is not)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number type (Python or numpy int/float; ``bool`` is not)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about large user values."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def finite_float(value: Any, where: str, error: type[Exception] = UnityConfigurationError) -> float:
    """``value`` as a float, or ``error`` when it is not a finite number.

    :param where: what the value sets, for the message.
    """
    if not is_number(value) or not math.isfinite(float(value)):
        raise error(f"{where} must be a finite number, got {value!r}.")
    return float(value)


def close_matches(
    word: Any, choices: Iterable[str], *, n: int = 1, cutoff: float = 0.6, ignore_case: bool = False
) -> list[str]:
    """The ``choices`` closest to ``word`` (best first; ``difflib``'s ratio >= ``cutoff``).

    :param n: at most this many.
    :param ignore_case: compare lower-cased; the original spellings are returned.
    """
    choices = list(choices)
    if not ignore_case:
        return difflib.get_close_matches(str(word), choices, n=n, cutoff=cutoff)
    lowered = {c.lower(): c for c in choices}
    return [lowered[c] for c in difflib.get_close_matches(str(word).lower(), lowered, n=n, cutoff=cutoff)]


def did_you_mean(word: Any, choices: Iterable[str], *, cutoff: float = 0.6) -> str:
    """A ``" Did you mean 'x'?"`` suffix for an unknown ``word``, or ``""`` when nothing is close."""
    close = close_matches(word, choices, cutoff=cutoff)
    return f" Did you mean {close[0]!r}?" if close else ""


def unknown_keys(config: Mapping[str, Any], allowed: Iterable[str]) -> list[str]:
    """The keys of ``config`` not in ``allowed``, sorted."""
    allowed = set(allowed)
    return sorted((key for key in config if key not in allowed), key=str)


def check_keys(
    config: Any,
    allowed: Iterable[str],
    where: str,
    error: type[Exception] = UnityConfigurationError,
) -> None:
    """Raise ``error`` for the first key of ``config`` not in ``allowed``, with a did-you-mean.

    ``None`` passes (an empty YAML section); anything else that is not a mapping is refused.

    :param config: the user's mapping.
    :param allowed: the valid keys.
    :param where: what the mapping configures (e.g. ``"reward_signals['gail']"``).
    :param error: the exception class to raise.
    """
    if config is None:
        return
    if not isinstance(config, Mapping):
        raise error(f"{where} must be a mapping of settings, got {config!r}.")
    allowed = tuple(allowed)
    for key in config:
        if key not in allowed:
            raise error(
                f"Unknown key {key!r} in {where}.{did_you_mean(key, allowed)} "
                f"Valid keys: {', '.join(sorted(allowed))}."
            )


def number_from_text(value: Any) -> Any:
    """``value`` as a float when it is a string that spells one, else ``value`` unchanged.

    YAML 1.1 (PyYAML) reads ``3.0e-4`` as a float but ``3e-4`` and ``6e1`` as strings.
    """
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return float(value)
    return value


def number(
    value: Any,
    where: str,
    *,
    low: float | None = None,
    high: float | None = None,
    integer: bool = False,
    text: bool = False,
    error: type[Exception] = UnityConfigurationError,
) -> Any:
    """``value`` checked as a finite number in ``[low, high]``: a float, or an int with ``integer``.

    :param where: what the value sets, for the message (e.g. ``"behaviors.3DBall.hyperparameters.beta"``).
    :param low: the smallest allowed value, or ``None``.
    :param high: the largest allowed value, or ``None``.
    :param integer: require a whole number (``2.0`` is accepted as ``2``) and return an ``int``.
    :param text: also read numbers written as text (YAML 1.1 reads ``3.0e-4`` as a float but
        ``3e-4`` as a string).
    :param error: the exception class to raise.
    """
    if text:
        value = number_from_text(value)
    if not is_number(value) or not math.isfinite(value):
        raise error(f"{where} must be a number, got {value!r}.")
    if high is not None and ((low is not None and value < low) or value > high):
        raise error(f"{where}={float(value)} is outside [{low}, {high}].")
    if low is not None and value < low:
        raise error(f"{where} must be >= {low}, got {value}.")
    if integer:
        if float(value) != int(value):
            raise error(f"{where} must be a whole number, got {value}.")
        return int(value)
    return float(value)


def choice(
    value: Any, choices: Iterable[str], where: str, error: type[Exception] = UnityConfigurationError
) -> Any:
    """``value`` when it is one of ``choices``, else ``error`` listing them, with a did-you-mean."""
    choices = tuple(choices)
    if value not in choices:
        raise error(
            f"{where} must be one of {', '.join(choices)}, got {value!r}.{did_you_mean(value, choices)}"
        )
    return value


def flag(value: Any, where: str, error: type[Exception] = UnityConfigurationError) -> bool:
    """``value`` when it is ``True`` or ``False``, else ``error`` (YAML's ``yes``/``1`` are not flags here)."""
    if not isinstance(value, bool):
        raise error(f"{where} must be true or false, got {value!r}.")
    return value
