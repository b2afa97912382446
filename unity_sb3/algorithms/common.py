"""Pieces shared by the project's PPO and SAC: reward-signal configuration and the BC hook.

Reward signals are configured with the same dictionary an ML-Agents trainer YAML uses under
``reward_signals``, so a config can be carried over unchanged::

    {
        "extrinsic": {"strength": 1.0, "gamma": 0.99},
        "curiosity": {"strength": 0.02, "gamma": 0.99, "learning_rate": 3e-4,
                      "network_settings": {"hidden_units": 64}},
        "rnd": {"strength": 0.01},
        "gail": {"strength": 0.01, "demo_path": "Expert.demo", "use_actions": False, "use_vail": False},
    }

Unknown signal names or keys raise a :class:`RewardSignalConfigError` that suggests the
closest valid spelling. Missing keys take ML-Agents' defaults (``settings.py``), except that
``gamma`` defaults to the algorithm's own ``gamma`` argument (0.99 unless changed), so an SB3
user who sets ``gamma=0.95`` does not silently get 0.99 on the extrinsic head.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from collections.abc import Mapping
from typing import Any

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


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """A ``" Did you mean 'x'?"`` suffix for an unknown ``word``, or ``""`` when nothing is close."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def check_keys(config: Mapping[str, Any], allowed: list[str] | tuple[str, ...], where: str) -> None:
    """Raise :class:`RewardSignalConfigError` for the first key of ``config`` not in ``allowed``.

    :param config: the user's mapping.
    :param allowed: the valid keys.
    :param where: what the mapping configures, for the message (e.g. ``"reward_signals['gail']"``).
    """
    for key in config:
        if key not in allowed:
            raise RewardSignalConfigError(
                f"Unknown key {key!r} in {where}.{did_you_mean(key, allowed)} "
                f"Valid keys: {', '.join(sorted(allowed))}."
            )


def _number(value: Any, name: str, where: str, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RewardSignalConfigError(f"{where}: {name} must be a number, got {value!r}.")
    value = float(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise RewardSignalConfigError(f"{where}: {name}={value} is outside [{low}, {high}].")
    return value


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
    if settings["vis_encode_type"] not in VIS_ENCODE_TYPES:
        raise RewardSignalConfigError(
            f"{where}.network_settings: unknown vis_encode_type {settings['vis_encode_type']!r}."
            f"{did_you_mean(settings['vis_encode_type'], VIS_ENCODE_TYPES)} Valid: {', '.join(VIS_ENCODE_TYPES)}."
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


def make_bc_module(algorithm: Any, config: Mapping[str, Any] | None) -> Any | None:
    """Build the behavioral-cloning term for ``algorithm`` from its ``behavioral_cloning`` config.

    The BC implementation lives in :mod:`unity_sb3.algorithms.bc`. Contract with it:
    ``bc.make_bc_module(algorithm, settings: dict) -> module`` where ``module.update() -> dict[str,
    float]`` runs one BC update (PPO calls it once after each policy update, SAC after each gradient
    step) and returns values to log under ``behavioral_cloning/<key>``. When the module has
    ``state_dict``/``load_state_dict`` it is saved and loaded with the model.

    :param algorithm: the PPO/SAC instance (its policy is built).
    :param config: the user's ``behavioral_cloning`` dict, or ``None``.
    :return: the module, or ``None`` when ``config`` is ``None``.
    """
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise RewardSignalConfigError(
            f"behavioral_cloning must be a dict like {{'demo_path': ..., 'strength': 0.5}}, got {config!r}."
        )
    try:
        bc = importlib.import_module("unity_sb3.algorithms.bc")
    except ModuleNotFoundError as error:
        if error.name != "unity_sb3.algorithms.bc":
            raise
        raise NotImplementedError(
            "behavioral_cloning=... needs unity_sb3.algorithms.bc, which this installation does not have. "
            "Pass behavioral_cloning=None, or use GAIL (reward_signals={'gail': {...}}) for imitation."
        ) from None
    factory = getattr(bc, "make_bc_module", None)
    if factory is None:
        raise NotImplementedError(
            "unity_sb3.algorithms.bc has no make_bc_module(algorithm, settings): the BC term during "
            "PPO/SAC training is not available in this version. Pass behavioral_cloning=None."
        )
    return factory(algorithm, dict(config))


def log_stats(logger: Any, prefix: str, stats: Mapping[str, list[float]]) -> None:
    """Record the mean of each list of values under ``prefix/<key>`` in an SB3 logger."""
    for key, values in stats.items():
        if len(values) > 0:
            logger.record(f"{prefix}/{key}", float(sum(values) / len(values)))


def drop_absent_components(algorithm: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Saved parameters minus those of components the loading model does not have.

    A model saved with behavioral cloning (``_bc``) or reward signals (``signals.*``) can be
    loaded with those switched off (``custom_objects={"behavioral_cloning": None}``); SB3
    would then call ``load_state_dict`` on ``None``. Their saved state is dropped, with a warning.

    :param algorithm: the model being loaded into.
    :param params: SB3's ``{name: state_dict}`` from the saved file.
    """
    kept = {}
    for name, state in params.items():
        owner = name.split(".")[0]
        component = getattr(algorithm, owner, None) if owner in ("_bc", "signals") else True
        if component is None or (owner == "signals" and not component):
            warnings.warn(
                f"The saved model has {owner.strip('_')} state but this model was built without it; "
                f"dropping '{name}'.",
                stacklevel=3,
            )
            continue
        kept[name] = state
    return kept


class SavedComponentsMixin:
    """Saving and loading of the reward signals' and the BC module's state (PPO and SAC).

    Put it before the SB3 class (``class PPO(SavedComponentsMixin, stable_baselines3.PPO)``).
    The signals' networks and optimizers and the BC module's state go into the saved model; a
    model saved with them loads into one built without them (their state is dropped).
    """

    signals: Any
    _bc: Any

    def set_parameters(
        self,
        load_path_or_dict: str | dict[str, Any],
        exact_match: bool = True,
        device: str | Any = "auto",
    ) -> None:
        from stable_baselines3.common.save_util import load_from_zip_file

        if not isinstance(load_path_or_dict, dict):
            _, load_path_or_dict, _ = load_from_zip_file(load_path_or_dict, device=device, load_data=False)
        super().set_parameters(drop_absent_components(self, load_path_or_dict), exact_match, device)  # type: ignore[misc]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts, others = super()._get_torch_save_params()  # type: ignore[misc]
        if self.signals is not None and len(self.signals) > 0:
            state_dicts = [*state_dicts, "signals", *(f"signals.{name}.optimizer" for name in self.signals)]
        if self._bc is not None and hasattr(self._bc, "state_dict"):
            state_dicts = [*state_dicts, "_bc"]
        return state_dicts, others
