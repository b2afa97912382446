"""ML-Agents trainer configs (the YAML of ``mlagents-learn``) as unity-sb3 runs.

``unity-sb3 train --config 3DBall.yaml`` accepts the file ML-Agents users already have::

    behaviors:
      3DBall:
        trainer_type: ppo
        hyperparameters: {batch_size: 64, buffer_size: 12000, beta: 0.001, ...}
        network_settings: {normalize: true, hidden_units: 128, num_layers: 2}
        reward_signals: {extrinsic: {gamma: 0.99, strength: 1.0}}
        max_steps: 500000
    environment_parameters: {...}
    engine_settings: {time_scale: 20}

:func:`convert_mlagents_config` maps it onto an SB3 algorithm and the project's plugins and
records every decision as a row of :meth:`MLAgentsRun.table` (ML-Agents key -> SB3 setting).
Settings with no SB3 counterpart are listed with the reason and each one is warned about
(:class:`MLAgentsConfigWarning`). Unknown keys raise :class:`MLAgentsConfigError` with the
closest valid spelling.

Units. ML-Agents counts *agent* steps over all agents of the behavior; SB3 counts steps per
``VecEnv`` slot, and one ``UnityVecEnv`` slot is one agent. So PPO's ``buffer_size`` (agent
steps per update) becomes ``n_steps = ceil(buffer_size / n_slots)``, and SAC's
``steps_per_update`` (agent steps per gradient step) becomes ``train_freq`` /
``gradient_steps`` for ``n_slots`` agent steps per ``VecEnv`` step. The number of slots is only
known once Unity is open, so these wait in ``hyperparams["mlagents_per_slot"]`` until
:func:`prepare_model_args` resolves them against the environment. ``max_steps`` and
``buffer_init_steps`` are already agent steps in SB3 (``num_timesteps`` grows by
``n_slots`` per step).

The hyperparameters produced stay plain YAML data (they are saved in the run's
``config.yaml``): linear schedules are strings (``"lin_<start>"`` or
``"lin_<start>_<end>"``, RL Zoo's convention extended with an end value) and
``policy_kwargs`` is a Python expression string, both resolved by :func:`prepare_model_args`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from unity_sb3 import validation
from unity_sb3.config.mlagents_legacy import is_legacy_config, upgrade_legacy_config
from unity_sb3.config.mlagents_schema import (
    CHECKPOINT_KEYS,
    ENGINE_KEYS,
    ENV_SETTINGS_KEYS,
    HYPERPARAMETER_DEFAULTS,
    NETWORK_DEFAULTS,
    RESTART_KEYS,
    TOP_LEVEL_KEYS,
    TORCH_KEYS,
    TRAINER_KEYS,
    TRAINER_TYPES,
    Mapper,
    MLAgentsConfigError,
    MLAgentsConfigWarning,
    MLAgentsRun,
    check_keys,
    choice,
    deep_update,
    number,
    short_text,
)
from unity_sb3.config.mlagents_trainer import (
    map_behavioral_cloning,
    map_network,
    map_on_policy,
    map_reward_signals,
    map_sac,
    map_trainer_misc,
)
from unity_sb3.validation import number_from_text
from unity_sb3.wrappers.restarts import RestartPolicy

__all__ = [
    "convert_mlagents_config",
    "is_mlagents_config",
    "load_mlagents_hyperparams",
]


def is_mlagents_config(data: Any) -> bool:
    """Whether a loaded YAML mapping is an ML-Agents trainer config (it has ``behaviors:``, or it is in
    the format of ML-Agents 0.16 and older, :func:`~unity_sb3.config.mlagents_legacy.is_legacy_config`)."""
    return isinstance(data, Mapping) and ("behaviors" in data or is_legacy_config(data))


def _load(config: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(config, Mapping):
        return dict(config)
    path = Path(config)
    if not path.is_file():
        raise FileNotFoundError(f"ML-Agents config file not found: {path}")
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, Mapping):
        raise MLAgentsConfigError(f"{path} must hold a YAML mapping with a 'behaviors:' section.")
    return dict(data)


def _pick_behavior(behaviors: Mapping[str, Any], behavior: str | None, scene_behaviors: list[str]) -> str:
    names = list(behaviors)
    if behavior is not None:
        base = behavior.split("?")[0]
        if base in behaviors:
            return base
        raise MLAgentsConfigError(
            f"behavior {behavior!r} is not in the config's behaviors ({', '.join(names)}); "
            "pick one with --behavior or add an entry (or default_settings) for it."
        )
    if len(names) == 1:
        return names[0]
    matching = [name for name in names if name in scene_behaviors]
    if len(matching) == 1:
        return matching[0]
    raise MLAgentsConfigError(
        f"the config has several behaviors ({', '.join(names)}); pass --behavior NAME "
        "(one UnityVecEnv trains one behavior)."
    )


def _scene_behaviors(env: str | None) -> list[str]:
    """Behavior names (without ``?team=``) of an embedded scene, or [] for builds and unknown names."""
    if env is None:
        return []
    try:
        from unity_sb3.scenes import SCENES, scene_class

        name = env.removeprefix("unity_sb3/").removesuffix("-v0")
        if name.lower() not in {s.lower() for s in SCENES}:
            return []
        cls = scene_class(name)
        names = getattr(cls, "behavior_names", None) or [getattr(cls, "behavior_name", "")]
        return [n.split("?")[0] for n in names if n]
    except Exception:  # description only: never fail the conversion because of it
        return []


def convert_mlagents_config(
    config: str | Path | Mapping[str, Any],
    behavior: str | None = None,
    env: str | None = None,
    demo_path: str | Path | None = None,
) -> MLAgentsRun:
    """Map one behavior of an ML-Agents trainer config onto a unity-sb3 algorithm.

    :param config: the YAML file, or its loaded mapping.
    :param behavior: the behavior to train (name with or without ``?team=``); default: the only
        one, or the one the embedded scene ``env`` has.
    :param env: the scene or build the run uses (only to pick the behavior).
    :param demo_path: a ``.demo`` file or folder that replaces every ``demo_path`` of the
        behavior (GAIL and behavioral cloning), e.g. when Unity's configs point into a Unity
        project that is not here. Whether the demos exist is not checked here
        (:meth:`MLAgentsRun.missing_demos`; :func:`load_mlagents_hyperparams` refuses missing ones).
    :return: the mapped run; nothing is printed or warned here (see
        :func:`load_mlagents_hyperparams`).
    :raises MLAgentsConfigError: unknown keys (with the closest valid one), bad values, or a
        behavior that cannot be chosen.
    """
    data = _load(config)
    legacy = is_legacy_config(data)
    dropped: list[tuple[str, Any]] = []
    if legacy:
        data, dropped = upgrade_legacy_config(data)
    check_keys(data, TOP_LEVEL_KEYS, "the ML-Agents config (top level)")
    behaviors = data.get("behaviors")
    if not isinstance(behaviors, Mapping) or not behaviors:
        raise MLAgentsConfigError("'behaviors' must map at least one behavior name to its trainer settings.")
    defaults = data.get("default_settings") or {}
    check_keys(defaults, TRAINER_KEYS, "default_settings")
    name = (
        behavior.split("?")[0] if behavior and defaults and behavior.split("?")[0] not in behaviors else None
    )
    if name is None:
        name = _pick_behavior(behaviors, behavior, _scene_behaviors(env))
    settings = deep_update(dict(defaults), behaviors.get(name) or {})
    where = f"behaviors.{name}"
    check_keys(settings, TRAINER_KEYS, where)
    trainer_type = choice(settings.get("trainer_type", "ppo"), TRAINER_TYPES, f"{where}.trainer_type")
    m = Mapper(name, trainer_type)
    if legacy:
        m.row(
            "(the file)",
            "ML-Agents <= 0.16 format",
            "current format",
            "converted as mlagents-upgrade-config does",
        )
        for key, value in dropped:
            if key.partition(".")[0] == name:
                m.ignore(key, value, "no place in the current format (mlagents-upgrade-config drops it)")
    m.row("trainer_type", trainer_type, f"algorithm {trainer_type}")

    hyper = dict(HYPERPARAMETER_DEFAULTS[trainer_type])
    given = settings.get("hyperparameters") or {}
    check_keys(given, tuple(hyper), f"{where}.hyperparameters ({trainer_type})")
    hyper.update(given)
    network = dict(NETWORK_DEFAULTS)
    given_net = settings.get("network_settings") or {}
    check_keys(given_net, tuple(NETWORK_DEFAULTS), f"{where}.network_settings")
    network.update(given_net)

    gamma = map_reward_signals(m, settings.get("reward_signals"), f"{where}.reward_signals")
    if trainer_type == "sac":
        map_sac(m, hyper, gamma, where)
    else:
        map_on_policy(m, hyper, gamma, where)
    map_network(m, network, where, shared_critic=_shared_critic(hyper, trainer_type, where))
    map_behavioral_cloning(m, settings.get("behavioral_cloning"), where)
    map_trainer_misc(m, settings)
    _map_top_level(m, data)
    if demo_path is not None:
        _override_demo_path(m, str(demo_path))
    return m.run


def _shared_critic(hyper: Mapping[str, Any], trainer_type: str, where: str) -> bool:
    if "shared_critic" not in hyper:
        return False
    return validation.flag(
        hyper["shared_critic"], f"{where}.hyperparameters.shared_critic", MLAgentsConfigError
    )


def _override_demo_path(m: Mapper, demo_path: str) -> None:
    """Point every demo the run uses (GAIL, behavioral cloning) at ``demo_path``."""
    for source, settings in m.run.demo_settings():
        m.row(
            f"{source}.demo_path",
            settings["demo_path"],
            f"demo_path={demo_path!r}",
            "overridden by demo_path=",
        )
        settings["demo_path"] = demo_path


def _map_top_level(m: Mapper, data: Mapping[str, Any]) -> None:
    params = data.get("environment_parameters")
    if params is not None:
        from unity_sb3.unity.parameters import EnvironmentParameters

        params = _normalize_lessons(params)
        parsed = EnvironmentParameters(params)  # validates samplers and curricula now
        m.run.open_kwargs["environment_parameters"] = params
        target = "open_unity(environment_parameters=...)"
        if parsed.has_curriculum:
            target += " + CurriculumCallback"
        m.row("environment_parameters", ", ".join(params), target)
    engine = data.get("engine_settings")
    if engine:
        check_keys(engine, ENGINE_KEYS, "engine_settings")
        engine = dict(engine)
        # flags of the build's command line, not channel messages
        flags = ("no_graphics", "no_graphics_monitor")
        for key in flags:
            value = engine.pop(key, None)
            if value is not None:
                value = validation.flag(value, f"engine_settings.{key}", MLAgentsConfigError)
                m.run.open_kwargs[key] = value
                note = "worker 0 with graphics, the others without, as ML-Agents" if key == flags[1] else ""
                m.row(f"engine_settings.{key}", value, f"open_unity({key}={value})", note)
        if engine:
            from unity_sb3.unity.channels import EngineSettings

            defaults = EngineSettings()
            full = {k: engine.get(k, getattr(defaults, k)) for k in ENGINE_KEYS if k not in flags}
            EngineSettings(**full)  # validate
            m.run.open_kwargs["engine_settings"] = full
            m.row("engine_settings", short_text(engine), "EngineSettings(...)", "replaces --time-scale")
    env_settings = data.get("env_settings")
    if env_settings:
        check_keys(env_settings, ENV_SETTINGS_KEYS, "env_settings")
        for key, value in env_settings.items():
            if value is None:
                continue
            if key == "env_args":
                m.run.open_kwargs["additional_args"] = list(value)
                m.row("env_settings.env_args", value, "open_unity(additional_args=...)")
            elif key == "base_port":
                m.run.open_kwargs["base_port"] = int(value)
                m.row("env_settings.base_port", value, f"open_unity(base_port={int(value)})")
            elif key == "timeout_wait":
                m.run.open_kwargs["timeout_wait"] = float(value)
                m.row("env_settings.timeout_wait", value, f"open_unity(timeout_wait={float(value)})")
            elif key in RESTART_KEYS:
                m.run.restarts[RESTART_KEYS[key]] = _restart_setting(key, value)
            elif key == "num_envs":
                n = number(value, "env_settings.num_envs", 1, integer=True)
                m.run.num_envs = int(n)
                m.row(
                    "env_settings.num_envs",
                    n,
                    f"unity-sb3 train --num-envs {n}",
                    "Unity instances; --num-envs wins",
                )
            elif key == "num_areas":
                n = number(value, "env_settings.num_areas", 1, integer=True)
                if n > 1:
                    m.run.open_kwargs["num_areas"] = int(n)
                    m.row(
                        "env_settings.num_areas",
                        n,
                        f"open_unity(num_areas={n})",
                        "training areas per instance (Unity's TrainingAreaReplicator); --num-areas wins",
                    )
            else:
                flag = {"env_path": "--env", "seed": "--seed"}.get(key)
                why = f"give it on the command line ({flag})" if flag else "not supported by unity-sb3"
                m.ignore(f"env_settings.{key}", value, why)
    if m.run.restarts:
        for key, target in RESTART_KEYS.items():
            if target in m.run.restarts:
                value = m.run.restarts[target]
                m.row(f"env_settings.{key}", value, f"--{target.replace('_', '-')} {value}")
        m.row(
            "(a restart setting is given)",
            None,
            f"restart_on_crash={m.run.restart_on_crash}",
            "ML-Agents re-opens crashed instances unless max_lifetime_restarts is 0",
        )
    checkpoint = data.get("checkpoint_settings")
    if checkpoint:
        check_keys(checkpoint, CHECKPOINT_KEYS, "checkpoint_settings")
        for key, value in checkpoint.items():
            if value is None or value is False:  # asks for nothing (how mlagents-learn writes its defaults)
                continue
            m.ignore(
                f"checkpoint_settings.{key}",
                value,
                "use unity-sb3 train --run-id/--results-dir/--resume/--force/--initialize-from",
            )
    torch_settings = data.get("torch_settings")
    if torch_settings:
        check_keys(torch_settings, TORCH_KEYS, "torch_settings")
        if torch_settings.get("device") is not None:
            m.ignore("torch_settings.device", torch_settings["device"], "use unity-sb3 train --device")
    if data.get("debug"):
        m.ignore("debug", True, "use -v/--verbose")


def _restart_setting(key: str, value: Any) -> int | float:
    """Check one ``env_settings`` restart value (ML-Agents' meaning) and return it."""
    name = RESTART_KEYS[key]
    if name == "restarts_rate_limit_period_s":
        value = number_from_text(value)
    return RestartPolicy.check_setting(name, value, f"env_settings.{key}", MLAgentsConfigError)


def _normalize_lessons(params: Any) -> Any:
    """Accept lessons written ``- Lesson0: {value: ...}`` (an ML-Agents 0.x-era form) as ``- name: Lesson0``."""
    if not isinstance(params, Mapping):
        return params
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, Mapping) and isinstance(value.get("curriculum"), list):
            lessons = []
            for lesson in value["curriculum"]:
                if (
                    isinstance(lesson, Mapping)
                    and len(lesson) == 1
                    and "name" not in lesson
                    and isinstance(next(iter(lesson.values())), Mapping)
                    and "value" in next(iter(lesson.values()))
                ):
                    ((name, body),) = lesson.items()
                    lesson = {"name": name, **body}
                lessons.append(lesson)
            value = {**value, "curriculum": lessons}
        out[key] = value
    return out


def load_mlagents_hyperparams(
    config: str | Path | Mapping[str, Any],
    behavior: str | None = None,
    env: str | None = None,
    verbose: bool = True,
    demo_path: str | Path | None = None,
) -> dict[str, Any]:
    """Convert an ML-Agents config for ``unity-sb3 train``: print the table, warn per unhonored setting.

    :param demo_path: replaces every ``demo_path`` of the behavior (see :func:`convert_mlagents_config`).
    :return: :meth:`MLAgentsRun.as_hyperparams` (includes ``algo``).
    :raises MLAgentsConfigError: as :func:`convert_mlagents_config`, and when a demo the run
        uses does not exist (before Unity is opened).
    """
    run = convert_mlagents_config(config, behavior=behavior, env=env, demo_path=demo_path)
    missing = run.missing_demos()
    if missing:
        listed = "; ".join(f"{source}.demo_path={path!r}" for source, path in missing)
        raise MLAgentsConfigError(
            f"demonstrations not found: {listed} (relative paths are read from the working directory "
            f"{Path.cwd()}, as mlagents-learn does). Copy the .demo files there, edit demo_path in the "
            "YAML, or pass demo_path= to load_mlagents_hyperparams / convert_mlagents_config."
        )
    if verbose:
        print(run.table())
    for row in run.unhonored:
        warnings.warn(
            f"ML-Agents setting {row.source}={short_text(row.value)} is not honored: {row.note}.",
            MLAgentsConfigWarning,
            stacklevel=3,
        )
    return run.as_hyperparams()
