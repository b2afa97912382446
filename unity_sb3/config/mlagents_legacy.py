"""ML-Agents trainer configs in the format of ML-Agents 0.16 and older, upgraded to the current one.

Before ML-Agents release 3 (0.17) a trainer config held one section per behavior at its top level,
with a shared ``default`` section and every setting flat in it::

    default:
        trainer: ppo
        batch_size: 1024
        hidden_units: 128
        use_recurrent: false
    3DBall:
        normalize: true
        batch_size: 64

ML-Agents converts such a file with ``mlagents-upgrade-config``, which cannot be installed beside a
current Python. :func:`upgrade_legacy_config` converts it the same way: each behavior's section is
``default`` updated with its own; ``trainer`` becomes ``trainer_type``; the settings of that
trainer's hyperparameters, of the network (``normalize``, ``hidden_units``, ``num_layers``,
``vis_encode_type``; ``use_recurrent`` with ``sequence_length`` and ``memory_size`` becomes
``memory``) and of the trainer itself move to their sections. The 0.12-era ``pretraining`` section
is ``behavioral_cloning``, and self-play's ``play_against_current_self_ratio`` is
``play_against_latest_model_ratio`` (its later name). A setting that has no place in the current
format (``train_interval``, ``num_update``, ...) is reported, where ML-Agents' script drops it
silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unity_sb3.config.mlagents_schema import (
    HYPERPARAMETER_DEFAULTS,
    MEMORY_DEFAULTS,
    TRAINER_KEYS,
    MLAgentsConfigError,
)

__all__ = ["is_legacy_config", "upgrade_legacy_config"]

#: the old flat keys that went into ``network_settings``
_NETWORK_KEYS = ("normalize", "hidden_units", "num_layers", "vis_encode_type")
#: old keys a later section of the file holds
_NESTED = ("hyperparameters", "network_settings")


def is_legacy_config(data: Mapping[str, Any]) -> bool:
    """Whether ``data`` is a trainer config in the pre-0.17 format: no ``behaviors`` section, every
    top-level value a section, and a ``default`` section or one that names its ``trainer``."""
    if "behaviors" in data or not data:
        return False
    if not all(isinstance(value, Mapping) for value in data.values()):
        return False
    return "default" in data or any("trainer" in value for value in data.values())


def upgrade_legacy_config(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """The current form of a pre-0.17 trainer config, as ``mlagents-upgrade-config`` writes it.

    :param data: the old file's mapping (:func:`is_legacy_config`).
    :return: ``{"behaviors": {...}}``, and the settings left out as ``(behavior.key, value)``.
    :raises MLAgentsConfigError: a behavior names no trainer, or one that ML-Agents no longer has.
    """
    default = dict(data.get("default") or {})
    behaviors: dict[str, Any] = {}
    dropped: list[tuple[str, Any]] = []
    for name, own in data.items():
        if name == "default":
            continue
        section = {**default, **own}
        behaviors[name], left = _upgrade_section(str(name), section)
        dropped += [(f"{name}.{key}", value) for key, value in left.items()]
    if not behaviors:
        raise MLAgentsConfigError("the old-format config has a default section but no behavior section")
    return {"behaviors": behaviors}, dropped


def _upgrade_section(name: str, section: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One behavior's flat settings -> its current sections, and the settings with no place there."""
    trainer = section.pop("trainer", None)
    if trainer is None:
        raise MLAgentsConfigError(
            f"{name}: an old-format section names its trainer with 'trainer: ppo' (or sac)"
        )
    if trainer not in HYPERPARAMETER_DEFAULTS:
        raise MLAgentsConfigError(
            f"{name}: trainer {trainer!r} is not one ML-Agents trains any more (ppo, sac, poca); an old "
            "'offline_bc' trainer is a behavioral_cloning section of a ppo or sac trainer now"
        )
    upgraded: dict[str, Any] = {"trainer_type": trainer}
    hyper = HYPERPARAMETER_DEFAULTS[trainer]
    upgraded["hyperparameters"] = {key: section.pop(key) for key in list(section) if key in hyper}
    network = {key: section.pop(key) for key in _NETWORK_KEYS if key in section}
    recurrent = section.pop("use_recurrent", False)
    memory = {key: section.pop(key, MEMORY_DEFAULTS[key]) for key in MEMORY_DEFAULTS}
    if recurrent:
        network["memory"] = memory
    upgraded["network_settings"] = network
    if "pretraining" in section and "behavioral_cloning" not in section:
        section["behavioral_cloning"] = section.pop("pretraining")
    self_play = section.get("self_play")
    if isinstance(self_play, Mapping) and "play_against_current_self_ratio" in self_play:
        # the 0.14-era name of play_against_latest_model_ratio
        self_play = dict(self_play)
        self_play.setdefault(
            "play_against_latest_model_ratio", self_play.pop("play_against_current_self_ratio")
        )
        self_play.pop("play_against_current_self_ratio", None)
        section["self_play"] = self_play
    for key in TRAINER_KEYS:
        if key in section and key not in _NESTED:
            upgraded[key] = section.pop(key)
    return upgraded, section
