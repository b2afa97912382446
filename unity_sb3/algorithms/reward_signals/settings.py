"""Reward-signal settings as ML-Agents' trainer YAML writes them (``reward_signals:``), checked."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from unity_sb3 import validation
from unity_sb3.validation import did_you_mean

SIGNAL_NAMES = ("extrinsic", "curiosity", "rnd", "gail")


NETWORK_SETTINGS_DEFAULTS: dict[str, Any] = {
    "hidden_units": 128,
    "num_layers": 2,
    "normalize": False,
    "vis_encode_type": "simple",
    # accepted for YAML compatibility; reward-signal networks have no memory (ML-Agents ignores it too)
    "memory": None,
    "goal_conditioning_type": "hyper",
    "deterministic": False,
}


VIS_ENCODE_TYPES = ("simple", "nature_cnn", "resnet", "match3", "fully_connected")


_COMMON_DEFAULTS: dict[str, Any] = {"strength": 1.0, "gamma": None, "network_settings": None}


SIGNAL_DEFAULTS: dict[str, dict[str, Any]] = {
    "extrinsic": dict(_COMMON_DEFAULTS),
    "curiosity": {**_COMMON_DEFAULTS, "learning_rate": 3e-4, "encoding_size": None},
    "rnd": {**_COMMON_DEFAULTS, "learning_rate": 1e-4, "encoding_size": None},
    "gail": {
        **_COMMON_DEFAULTS,
        "learning_rate": 3e-4,
        "encoding_size": None,
        "use_actions": False,
        "use_vail": False,
        "demo_path": None,
        # our extension: expert data given directly (Demonstration, (obs, actions[, dones]) or a dict)
        "demonstrations": None,
    },
}


class RewardSignalConfigError(ValueError):
    """A ``reward_signals`` (or ``behavioral_cloning``) configuration is invalid."""


def check_keys(config: Mapping[str, Any], allowed: list[str] | tuple[str, ...], where: str) -> None:
    """Raise :class:`RewardSignalConfigError` for the first key of ``config`` not in ``allowed``.

    :param config: the user's mapping.
    :param allowed: the valid keys.
    :param where: what the mapping configures, for the message (e.g. ``"reward_signals['gail']"``).
    """
    validation.check_keys(config, allowed, where, RewardSignalConfigError)


def _number(value: Any, name: str, where: str, low: float | None = None, high: float | None = None) -> float:
    return validation.number(value, f"{where}: {name}", low=low, high=high, error=RewardSignalConfigError)


def parse_network_settings(config: Mapping[str, Any] | None, where: str, encoding_size: int | None) -> dict:
    """Fill ML-Agents' ``network_settings`` defaults; ``encoding_size`` (deprecated) sets ``hidden_units``.

    As in ML-Agents, ``encoding_size`` only applies when ``network_settings`` is not given.
    """
    settings = dict(NETWORK_SETTINGS_DEFAULTS)
    if config is None:
        if encoding_size is not None:
            settings["hidden_units"] = int(_number(encoding_size, "encoding_size", where, 1))
        return settings
    if not isinstance(config, Mapping):
        raise RewardSignalConfigError(
            f"{where}.network_settings must be a dict, got {type(config).__name__}."
        )
    check_keys(config, tuple(NETWORK_SETTINGS_DEFAULTS), f"{where}.network_settings")
    settings.update(config)
    settings["hidden_units"] = int(_number(settings["hidden_units"], "hidden_units", where, 1))
    settings["num_layers"] = int(_number(settings["num_layers"], "num_layers", where, 0))
    validation.choice(
        settings["vis_encode_type"],
        VIS_ENCODE_TYPES,
        f"{where}.network_settings.vis_encode_type",
        RewardSignalConfigError,
    )
    if settings["memory"] is not None:
        warnings.warn(
            f"{where}.network_settings.memory is ignored: reward-signal networks have no memory "
            "(ML-Agents ignores it too).",
            UserWarning,
            stacklevel=3,
        )
    return settings


def parse_reward_signals(config: Mapping[str, Any] | None, default_gamma: float) -> dict[str, dict] | None:
    """Validate an ML-Agents style ``reward_signals`` dict and fill in the defaults.

    :param config: the user's ``reward_signals`` argument, or ``None`` (no signals: plain SB3 behaviour).
    :param default_gamma: the gamma a signal gets when its config does not give one (the
        algorithm's ``gamma`` argument).
    :return: ``None`` when ``config`` is ``None``, else ``{name: settings}`` in the user's order with
        every key present (``network_settings`` as a full dict).
    """
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise RewardSignalConfigError(
            f"reward_signals must be a dict like {{'extrinsic': {{'strength': 1.0}}}}, got {type(config).__name__}."
        )
    if len(config) == 0:
        raise RewardSignalConfigError(
            "reward_signals is empty: give at least one signal (e.g. {'extrinsic': {}}), or None for plain SB3."
        )
    parsed: dict[str, dict] = {}
    for name, signal_config in config.items():
        if name not in SIGNAL_DEFAULTS:
            raise RewardSignalConfigError(
                f"Unknown reward signal {name!r}.{did_you_mean(name, SIGNAL_NAMES)} "
                f"Valid signals: {', '.join(SIGNAL_NAMES)}."
            )
        where = f"reward_signals[{name!r}]"
        if signal_config is None:
            signal_config = {}
        if not isinstance(signal_config, Mapping):
            raise RewardSignalConfigError(f"{where} must be a dict of settings, got {signal_config!r}.")
        check_keys(signal_config, tuple(SIGNAL_DEFAULTS[name]), where)
        settings = {**SIGNAL_DEFAULTS[name], **signal_config}
        settings["strength"] = _number(settings["strength"], "strength", where)
        gamma = default_gamma if settings["gamma"] is None else settings["gamma"]
        settings["gamma"] = _number(gamma, "gamma", where, 0.0, 1.0)
        if "learning_rate" in settings:
            settings["learning_rate"] = _number(settings["learning_rate"], "learning_rate", where, 0.0)
            if settings["learning_rate"] == 0.0:
                raise RewardSignalConfigError(f"{where}: learning_rate must be > 0.")
        settings["network_settings"] = parse_network_settings(
            signal_config.get("network_settings"), where, signal_config.get("encoding_size")
        )
        if name == "gail" and settings["demo_path"] is None and settings["demonstrations"] is None:
            raise RewardSignalConfigError(
                f"{where} needs expert data: 'demo_path' (a .demo file or directory) or "
                "'demonstrations' (a Demonstration, or (observations, actions) arrays)."
            )
        parsed[name] = settings
    return parsed
