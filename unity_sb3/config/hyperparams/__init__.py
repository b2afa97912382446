"""Hyperparameters shipped for the embedded scenes, in RL Zoo's YAML format.

``<algo>.yml`` maps a gymnasium id (``unity_sb3/<Scene>-v0``) to the algorithm's settings, so
the same files serve ``unity-sb3 train`` and ``python -m unity_sb3.zoo``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from unity_sb3.validation import did_you_mean

HYPERPARAMS_DIR = Path(__file__).resolve().parent


def gym_id(env: str) -> str:
    """The gymnasium id of an embedded scene name (``Ball3D`` -> ``unity_sb3/Ball3D-v0``)."""
    return env if "/" in env or env.endswith(".yml") else f"unity_sb3/{env}-v0"


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    data = yaml.unsafe_load(path.read_text()) if path.suffix in (".yml", ".yaml") else None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a YAML mapping")
    return data


def load_hyperparams(
    algo: str,
    env: str,
    config: str | Path | None = None,
    behavior: str | None = None,
    demo_path: str | Path | None = None,
) -> dict[str, Any]:
    """Hyperparameters for ``algo`` on ``env``: the shipped defaults, then ``config`` on top.

    ``config`` may be an RL Zoo style file (``{gym_id: {...}}``), a flat mapping of settings, or
    an ML-Agents trainer config (it has ``behaviors:``; see :mod:`unity_sb3.config.mlagents`):
    that one replaces the shipped defaults, prints its mapping, and adds ``algo`` (from the
    behavior's ``trainer_type``) to the result. ``behavior`` picks one of its behaviors;
    ``demo_path`` replaces every ``demo_path`` of its GAIL and behavioral cloning sections.

    :return: a dict with ``n_timesteps``, ``policy``, ``normalize`` and constructor arguments.
        ``policy_kwargs`` stays as written (RL Zoo's expression string, or a mapping) so the
        result can be saved as plain YAML; :func:`parse_policy_kwargs` evaluates it when the
        model is built.
    """
    key = gym_id(env)
    shipped = HYPERPARAMS_DIR / f"{algo.lower()}.yml"
    params: dict[str, Any] = {}
    if shipped.is_file():
        params.update(yaml.unsafe_load(shipped.read_text()).get(key, {}))
    if config is not None:
        data = read_yaml(config)
        from unity_sb3.config.mlagents import is_mlagents_config, load_mlagents_hyperparams

        if is_mlagents_config(data):
            return load_mlagents_hyperparams(data, behavior=behavior, env=env, demo_path=demo_path)
        if key in data:
            params.update(data[key])
        elif any("/" in k or k.endswith("-v0") for k in data):
            raise KeyError(
                f"{config} has no entry for {key!r}.{did_you_mean(key, data)} Entries: {', '.join(data)}"
            )
        else:
            params.update(data)
    return params
