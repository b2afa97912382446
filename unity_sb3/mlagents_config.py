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

import contextlib
import difflib
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MLAgentsConfigError",
    "MLAgentsConfigWarning",
    "MLAgentsRun",
    "MappedSetting",
    "convert_mlagents_config",
    "is_mlagents_config",
    "load_mlagents_hyperparams",
    "mlagents_callbacks",
    "prepare_model_args",
    "resolve_schedule",
]

TOP_LEVEL_KEYS = (
    "behaviors",
    "default_settings",
    "environment_parameters",
    "engine_settings",
    "env_settings",
    "checkpoint_settings",
    "torch_settings",
    "debug",
)
TRAINER_KEYS = (
    "trainer_type",
    "hyperparameters",
    "network_settings",
    "reward_signals",
    "behavioral_cloning",
    "init_path",
    "keep_checkpoints",
    "checkpoint_interval",
    "max_steps",
    "time_horizon",
    "summary_freq",
    "threaded",
    "self_play",
)
TRAINER_TYPES = ("ppo", "sac", "poca")
# ML-Agents' defaults (trainers/settings.py); POCA uses PPO's settings.
_PPO_DEFAULTS: dict[str, Any] = {
    "batch_size": 1024,
    "buffer_size": 10240,
    "learning_rate": 3.0e-4,
    "learning_rate_schedule": "linear",
    "beta": 5.0e-3,
    "epsilon": 0.2,
    "lambd": 0.95,
    "num_epoch": 3,
    "beta_schedule": None,  # None: follows learning_rate_schedule
    "epsilon_schedule": None,
    "shared_critic": False,
}
_SAC_DEFAULTS: dict[str, Any] = {
    "batch_size": 128,
    "buffer_size": 50000,
    "learning_rate": 3.0e-4,
    "learning_rate_schedule": "constant",
    "buffer_init_steps": 0,
    "tau": 0.005,
    "steps_per_update": 1.0,
    "save_replay_buffer": False,
    "init_entcoef": 1.0,
    "reward_signal_steps_per_update": None,  # None: steps_per_update
}
HYPERPARAMETER_DEFAULTS: dict[str, dict[str, Any]] = {
    "ppo": _PPO_DEFAULTS,
    "poca": _PPO_DEFAULTS,
    "sac": _SAC_DEFAULTS,
}
NETWORK_DEFAULTS: dict[str, Any] = {
    "normalize": False,
    "hidden_units": 128,
    "num_layers": 2,
    "vis_encode_type": "simple",
    "memory": None,
    "goal_conditioning_type": "hyper",
    "conditioning_type": "hyper",
    "max_num_agents": 4,
    "deterministic": False,
}
MEMORY_DEFAULTS: dict[str, Any] = {"sequence_length": 64, "memory_size": 128}
BC_KEYS = ("demo_path", "steps", "strength", "samples_per_update", "num_epoch", "batch_size")
SIGNAL_NAMES = ("extrinsic", "curiosity", "rnd", "gail")
ENV_SETTINGS_KEYS = (
    "env_path",
    "env_args",
    "base_port",
    "num_envs",
    "num_areas",
    "seed",
    "timeout_wait",
    "max_lifetime_restarts",
    "restarts_rate_limit_n",
    "restarts_rate_limit_period_s",
)
ENGINE_KEYS = (
    "width",
    "height",
    "quality_level",
    "time_scale",
    "target_frame_rate",
    "capture_frame_rate",
    "no_graphics",
)
CHECKPOINT_KEYS = (
    "run_id",
    "initialize_from",
    "load_model",
    "resume",
    "force",
    "train_model",
    "inference",
    "results_dir",
)
TORCH_KEYS = ("device",)
# env_settings restart keys -> the ``unity-sb3 train`` / RunConfig settings they become
RESTART_KEYS = {
    "max_lifetime_restarts": "max_restarts",
    "restarts_rate_limit_n": "restarts_rate_limit_n",
    "restarts_rate_limit_period_s": "restarts_rate_limit_period_s",
}
VIS_ENCODE_TYPES = ("simple", "nature_cnn", "resnet", "match3", "fully_connected")
SCHEDULE_TYPES = ("linear", "constant")
# ML-Agents' floors for linear decay (DecayedValue min values in the PPO/POCA optimizers)
SCHEDULE_FLOORS = {"learning_rate": 1e-10, "epsilon": 0.1, "beta": 1e-5}
SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf", "ent_coef")


class MLAgentsConfigError(ValueError):
    """An ML-Agents trainer config is invalid or cannot be mapped (the message says what to change)."""


class MLAgentsConfigWarning(UserWarning):
    """A setting of an ML-Agents trainer config that unity-sb3 cannot honor."""


@dataclass
class MappedSetting:
    """One row of the mapping table.

    :param source: the ML-Agents key, dotted (``hyperparameters.beta``).
    :param value: its value in the config (or ML-Agents' default).
    :param target: what it became on the SB3 side (``ent_coef=0.001``), or ``-`` when ignored.
    :param note: why, when the mapping is not one to one.
    :param honored: ``False`` when the setting is ignored or only approximated (warned about).
    """

    source: str
    value: Any
    target: str
    note: str = ""
    honored: bool = True


@dataclass
class MLAgentsRun:
    """An ML-Agents behavior's settings mapped onto unity-sb3.

    :param behavior: the behavior name in the config.
    :param trainer_type: ML-Agents' ``trainer_type``.
    :param algo: the unity-sb3 algorithm name (``ppo``, ``sac``, ``poca`` or ``recurrent_ppo``).
    :param n_timesteps: total agent steps (``max_steps``).
    :param policy: policy name; ``"auto"`` picks Mlp/Cnn/MultiInput from the observation space.
    :param normalize: ``False`` or ``VecNormalize`` keyword arguments.
    :param hyperparams: the algorithm's constructor arguments (plain data, see module doc).
    :param open_kwargs: keyword arguments for ``open_unity`` (environment parameters, engine
        settings, ports, command-line arguments).
    :param restarts: crash-restart limits from ``env_settings`` as ``unity-sb3 train`` names
        them (``max_restarts``, ``restarts_rate_limit_n``, ``restarts_rate_limit_period_s``);
        only the keys the config gives.
    :param save_replay_buffer: SAC's ``hyperparameters.save_replay_buffer``.
    :param cadence: ``checkpoint_every``, ``keep_checkpoints`` and ``summary_freq`` of
        ``unity-sb3 train`` from ML-Agents' ``checkpoint_interval``, ``keep_checkpoints`` and
        ``summary_freq``; only the keys the config gives.
    :param rows: the mapping, one row per ML-Agents setting.
    """

    behavior: str
    trainer_type: str
    algo: str
    n_timesteps: int
    policy: str = "auto"
    normalize: bool | dict[str, Any] = False
    hyperparams: dict[str, Any] = field(default_factory=dict)
    open_kwargs: dict[str, Any] = field(default_factory=dict)
    restarts: dict[str, Any] = field(default_factory=dict)
    save_replay_buffer: bool = False
    cadence: dict[str, int] = field(default_factory=dict)
    rows: list[MappedSetting] = field(default_factory=list)

    @property
    def restart_on_crash(self) -> bool:
        """Whether crashed Unity instances are re-opened: as ML-Agents, when the config gives a
        restart setting and ``max_lifetime_restarts`` is not 0 (its default is 10)."""
        return bool(self.restarts) and self.restarts.get("max_restarts", 10) != 0

    @property
    def unhonored(self) -> list[MappedSetting]:
        """Rows of settings that are ignored or only approximated."""
        return [row for row in self.rows if not row.honored]

    def table(self) -> str:
        """The mapping as a text table: ML-Agents key | value | SB3 setting | note."""
        header = ("ML-Agents key", "value", "SB3 / unity-sb3 setting", "note")
        lines = [
            (r.source, _short(r.value), r.target, ("(not honored) " if not r.honored else "") + r.note)
            for r in self.rows
        ]
        widths = [
            max(len(h), *(len(line[i]) for line in lines)) if lines else len(h)
            for i, h in enumerate(header[:3])
        ]
        out = [
            f"ML-Agents behavior {self.behavior!r} (trainer_type {self.trainer_type}) -> unity-sb3 {self.algo}"
        ]
        fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
        out.append(fmt.format(*header).rstrip())
        out.append(fmt.format(*("-" * w for w in widths), "----").rstrip())
        out.extend(fmt.format(*line).rstrip() for line in lines)
        return "\n".join(out)

    def as_hyperparams(self) -> dict[str, Any]:
        """The settings in the format of :func:`unity_sb3.hyperparams.load_hyperparams`.

        Restart limits, ``save_replay_buffer`` and the checkpoint / summary cadence appear only
        when the config gives them; they are run settings (:class:`unity_sb3.run.RunConfig`), not
        constructor arguments.
        """
        out = {
            "algo": self.algo,
            "n_timesteps": self.n_timesteps,
            "policy": self.policy,
            "normalize": self.normalize,
            "open_kwargs": dict(self.open_kwargs),
            **self.hyperparams,
        }
        if self.restarts:
            out.update(self.restarts, restart_on_crash=self.restart_on_crash)
        if self.save_replay_buffer:
            out["save_replay_buffer"] = True
        out.update(self.cadence)
        return out


def _short(value: Any, limit: int = 40) -> str:
    text = (
        str(value)
        if not isinstance(value, Mapping)
        else yaml.safe_dump(dict(value), default_flow_style=True).strip()
    )
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_mlagents_config(data: Any) -> bool:
    """Whether a loaded YAML mapping is an ML-Agents trainer config (it has ``behaviors:``)."""
    return isinstance(data, Mapping) and "behaviors" in data


def _check_keys(config: Any, allowed: tuple[str, ...] | list[str], where: str) -> None:
    if config is None:
        return
    if not isinstance(config, Mapping):
        raise MLAgentsConfigError(f"{where} must be a mapping of settings, got {config!r}.")
    for key in config:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise MLAgentsConfigError(
                f"Unknown key {key!r} in {where}.{hint} Valid keys: {', '.join(sorted(allowed))}."
            )


def _number(value: Any, where: str, low: float | None = None, integer: bool = False) -> float | int:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)  # YAML 1.1 reads "3.0e-4" as a float but "3e-4" as a string
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MLAgentsConfigError(f"{where} must be a number, got {value!r}.")
    if low is not None and value < low:
        raise MLAgentsConfigError(f"{where} must be >= {low}, got {value}.")
    if integer:
        if float(value) != int(value):
            raise MLAgentsConfigError(f"{where} must be a whole number, got {value}.")
        return int(value)
    return float(value)


def _choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    if value not in choices:
        close = difflib.get_close_matches(str(value), list(choices), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise MLAgentsConfigError(f"{where} must be one of {', '.join(choices)}, got {value!r}.{hint}")
    return value


def _deep_update(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in update.items():
        if isinstance(base.get(key), Mapping) and isinstance(value, Mapping):
            base[key] = _deep_update(dict(base[key]), value)
        else:
            base[key] = value
    return base


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
        from unity_sb3.envs import SCENES, scene_class

        name = env.removeprefix("unity_sb3/").removesuffix("-v0")
        if name.lower() not in {s.lower() for s in SCENES}:
            return []
        cls = scene_class(name)
        names = getattr(cls, "behavior_names", None) or [getattr(cls, "behavior_name", "")]
        return [n.split("?")[0] for n in names if n]
    except Exception:  # description only: never fail the conversion because of it
        return []


class _Mapper:
    """Builds an :class:`MLAgentsRun` row by row."""

    def __init__(self, behavior: str, trainer_type: str) -> None:
        self.run = MLAgentsRun(
            behavior=behavior, trainer_type=trainer_type, algo=trainer_type, n_timesteps=500_000
        )

    def row(self, source: str, value: Any, target: str, note: str = "") -> None:
        self.run.rows.append(MappedSetting(source, value, target, note))

    def ignore(self, source: str, value: Any, why: str, target: str = "-") -> None:
        self.run.rows.append(MappedSetting(source, value, target, why, honored=False))


def convert_mlagents_config(
    config: str | Path | Mapping[str, Any],
    behavior: str | None = None,
    env: str | None = None,
) -> MLAgentsRun:
    """Map one behavior of an ML-Agents trainer config onto a unity-sb3 algorithm.

    :param config: the YAML file, or its loaded mapping.
    :param behavior: the behavior to train (name with or without ``?team=``); default: the only
        one, or the one the embedded scene ``env`` has.
    :param env: the scene or build the run uses (only to pick the behavior).
    :return: the mapped run; nothing is printed or warned here (see
        :func:`load_mlagents_hyperparams`).
    :raises MLAgentsConfigError: unknown keys (with the closest valid one), bad values, or a
        behavior that cannot be chosen.
    """
    data = _load(config)
    _check_keys(data, TOP_LEVEL_KEYS, "the ML-Agents config (top level)")
    behaviors = data.get("behaviors")
    if not isinstance(behaviors, Mapping) or not behaviors:
        raise MLAgentsConfigError("'behaviors' must map at least one behavior name to its trainer settings.")
    defaults = data.get("default_settings") or {}
    _check_keys(defaults, TRAINER_KEYS, "default_settings")
    name = (
        behavior.split("?")[0] if behavior and defaults and behavior.split("?")[0] not in behaviors else None
    )
    if name is None:
        name = _pick_behavior(behaviors, behavior, _scene_behaviors(env))
    settings = _deep_update(dict(defaults), behaviors.get(name) or {})
    where = f"behaviors.{name}"
    _check_keys(settings, TRAINER_KEYS, where)
    trainer_type = _choice(settings.get("trainer_type", "ppo"), TRAINER_TYPES, f"{where}.trainer_type")
    m = _Mapper(name, trainer_type)
    m.row("trainer_type", trainer_type, f"algorithm {trainer_type}")

    hyper = dict(HYPERPARAMETER_DEFAULTS[trainer_type])
    given = settings.get("hyperparameters") or {}
    _check_keys(given, tuple(hyper), f"{where}.hyperparameters ({trainer_type})")
    hyper.update(given)
    network = dict(NETWORK_DEFAULTS)
    given_net = settings.get("network_settings") or {}
    _check_keys(given_net, tuple(NETWORK_DEFAULTS), f"{where}.network_settings")
    network.update(given_net)

    gamma = _map_reward_signals(m, settings.get("reward_signals"), f"{where}.reward_signals")
    if trainer_type == "sac":
        _map_sac(m, hyper, gamma, where)
    else:
        _map_on_policy(m, hyper, gamma, where)
    _map_network(m, network, where)
    _map_behavioral_cloning(m, settings.get("behavioral_cloning"), where)
    _map_trainer_misc(m, settings)
    _map_top_level(m, data)
    return m.run


def _map_reward_signals(m: _Mapper, signals: Any, where: str) -> float:
    """Extrinsic gamma -> ``gamma``; other signals (or a non-unit strength) -> ``reward_signals=``."""
    if signals is None:
        signals = {"extrinsic": {"gamma": 0.99, "strength": 1.0}}
    if not isinstance(signals, Mapping) or not signals:
        raise MLAgentsConfigError(
            f"{where} must map signal names ({', '.join(SIGNAL_NAMES)}) to their settings."
        )
    _check_keys(signals, SIGNAL_NAMES, where)
    extrinsic = signals.get("extrinsic") or {}
    gamma = _number(extrinsic.get("gamma", 0.99), f"{where}.extrinsic.gamma", 0.0)
    m.row("reward_signals.extrinsic.gamma", gamma, f"gamma={gamma}")
    m.run.hyperparams["gamma"] = gamma
    plain = set(signals) == {"extrinsic"} and float(extrinsic.get("strength", 1.0)) == 1.0
    if plain:
        m.row(
            "reward_signals.extrinsic.strength",
            extrinsic.get("strength", 1.0),
            "reward as is",
            "plain SB3 update",
        )
        return gamma
    converted = {key: dict(value or {}) for key, value in signals.items()}
    if m.run.trainer_type == "poca":
        m.ignore(
            "reward_signals",
            ", ".join(s for s in signals if s != "extrinsic") or "extrinsic.strength",
            "POCA has no reward signals in unity-sb3 (only the extrinsic reward, at strength 1)",
        )
        return gamma
    m.run.hyperparams["reward_signals"] = converted
    for signal in converted:
        m.row(
            f"reward_signals.{signal}",
            _short(converted[signal]),
            f"reward_signals[{signal!r}]",
            "one value head per signal",
        )
    return gamma


def _schedule(value: float, kind: str, schedule: str) -> float | str:
    if schedule == "constant":
        return value
    return f"lin_{value!r}_{SCHEDULE_FLOORS[kind]!r}"


def _map_on_policy(m: _Mapper, hyper: dict[str, Any], gamma: float, where: str) -> None:
    h = f"{where}.hyperparameters"
    out = m.run.hyperparams
    batch = _number(hyper["batch_size"], f"{h}.batch_size", 1, integer=True)
    buffer = _number(hyper["buffer_size"], f"{h}.buffer_size", 1, integer=True)
    if batch > buffer:
        raise MLAgentsConfigError(f"{h}: batch_size ({batch}) must not exceed buffer_size ({buffer}).")
    lr = _number(hyper["learning_rate"], f"{h}.learning_rate", 0.0)
    lr_schedule = _choice(hyper["learning_rate_schedule"], SCHEDULE_TYPES, f"{h}.learning_rate_schedule")
    beta_schedule = _choice(hyper["beta_schedule"] or lr_schedule, SCHEDULE_TYPES, f"{h}.beta_schedule")
    eps_schedule = _choice(hyper["epsilon_schedule"] or lr_schedule, SCHEDULE_TYPES, f"{h}.epsilon_schedule")
    beta = _number(hyper["beta"], f"{h}.beta", 0.0)
    epsilon = _number(hyper["epsilon"], f"{h}.epsilon", 0.0)
    lambd = _number(hyper["lambd"], f"{h}.lambd", 0.0)
    epochs = _number(hyper["num_epoch"], f"{h}.num_epoch", 1, integer=True)

    out["batch_size"] = batch
    m.row("hyperparameters.batch_size", batch, f"batch_size={batch}")
    out["mlagents_per_slot"] = {"buffer_size": buffer}
    m.row(
        "hyperparameters.buffer_size",
        buffer,
        "n_steps=ceil(buffer_size / n_slots)",
        "SB3's n_steps counts steps per slot (one slot = one agent); resolved when Unity is open",
    )
    m.row("hyperparameters.beta", beta, f"ent_coef={beta}")
    m.row("hyperparameters.epsilon", epsilon, f"clip_range={epsilon}")
    m.row("hyperparameters.lambd", lambd, f"gae_lambda={lambd}")
    m.row("hyperparameters.num_epoch", epochs, f"n_epochs={epochs}")
    out.update(gae_lambda=lambd, n_epochs=epochs)
    if m.run.trainer_type == "poca":
        # POCA implements ML-Agents' schedules itself: one `schedule` for lr, clip range and entropy.
        out.update(learning_rate=lr, clip_range=epsilon, ent_coef=beta, schedule=lr_schedule)
        m.row("hyperparameters.learning_rate", lr, f"learning_rate={lr}")
        m.row(
            "hyperparameters.learning_rate_schedule",
            lr_schedule,
            f"schedule={lr_schedule!r}",
            "POCA decays lr, clip and entropy with ML-Agents' floors",
        )
        for key, kind, sched, value, target in (
            ("epsilon_schedule", "epsilon", eps_schedule, epsilon, "clip_range"),
            ("beta_schedule", "beta", beta_schedule, beta, "ent_coef"),
        ):
            if sched != lr_schedule:
                out[target] = _schedule(value, kind, sched)
                m.row(f"hyperparameters.{key}", sched, f"{target}={out[target]!r}")
        out["max_grad_norm"] = None
        m.row("(ML-Agents has no gradient clipping)", None, "max_grad_norm=None")
        return
    out["learning_rate"] = _schedule(lr, "learning_rate", lr_schedule)
    m.row("hyperparameters.learning_rate", lr, f"learning_rate={out['learning_rate']!r}")
    m.row(
        "hyperparameters.learning_rate_schedule",
        lr_schedule,
        "linear -> lin_<start>_<floor> schedule" if lr_schedule == "linear" else "constant",
    )
    out["clip_range"] = _schedule(epsilon, "epsilon", eps_schedule)
    m.row("hyperparameters.epsilon_schedule", eps_schedule, f"clip_range={out['clip_range']!r}")
    out["ent_coef"] = beta
    if beta_schedule == "linear" and beta > 0:
        m.ignore(
            "hyperparameters.beta_schedule",
            "linear" if hyper["beta_schedule"] else "linear (follows learning_rate_schedule)",
            f"SB3 PPO's ent_coef is a constant; it stays at {beta}",
            f"ent_coef={beta}",
        )
    if hyper.get("shared_critic"):
        m.ignore("hyperparameters.shared_critic", True, "SB3 PPO keeps separate actor and critic networks")


def _map_sac(m: _Mapper, hyper: dict[str, Any], gamma: float, where: str) -> None:
    h = f"{where}.hyperparameters"
    out = m.run.hyperparams
    batch = _number(hyper["batch_size"], f"{h}.batch_size", 1, integer=True)
    buffer = _number(hyper["buffer_size"], f"{h}.buffer_size", 1, integer=True)
    lr = _number(hyper["learning_rate"], f"{h}.learning_rate", 0.0)
    lr_schedule = _choice(hyper["learning_rate_schedule"], SCHEDULE_TYPES, f"{h}.learning_rate_schedule")
    init_steps = _number(hyper["buffer_init_steps"], f"{h}.buffer_init_steps", 0, integer=True)
    tau = _number(hyper["tau"], f"{h}.tau", 0.0)
    per_update = _number(hyper["steps_per_update"], f"{h}.steps_per_update", 0.0)
    if per_update <= 0:
        raise MLAgentsConfigError(f"{h}.steps_per_update must be > 0, got {per_update}.")
    entcoef = _number(hyper["init_entcoef"], f"{h}.init_entcoef", 0.0)
    out.update(batch_size=batch, buffer_size=buffer, learning_starts=init_steps, tau=tau)
    out["learning_rate"] = _schedule(lr, "learning_rate", lr_schedule)
    out["ent_coef"] = f"auto_{entcoef!r}"
    out["mlagents_per_slot"] = {"steps_per_update": per_update}
    m.row("hyperparameters.batch_size", batch, f"batch_size={batch}")
    m.row("hyperparameters.buffer_size", buffer, f"buffer_size={buffer}", "both count agent transitions")
    m.row("hyperparameters.learning_rate", lr, f"learning_rate={out['learning_rate']!r}")
    m.row(
        "hyperparameters.learning_rate_schedule",
        lr_schedule,
        "linear -> lin_<start>_<floor> schedule" if lr_schedule == "linear" else "constant",
    )
    m.row(
        "hyperparameters.buffer_init_steps",
        init_steps,
        f"learning_starts={init_steps}",
        "agent steps in both",
    )
    m.row("hyperparameters.tau", tau, f"tau={tau}")
    m.row(
        "hyperparameters.steps_per_update",
        per_update,
        "train_freq / gradient_steps",
        "n_slots agent steps per VecEnv step -> n_slots/steps_per_update gradient steps; resolved when Unity is open",
    )
    m.row(
        "hyperparameters.init_entcoef",
        entcoef,
        f"ent_coef={out['ent_coef']!r}",
        "learned, starting at init_entcoef",
    )
    save_buffer = hyper["save_replay_buffer"]
    if not isinstance(save_buffer, bool):
        raise MLAgentsConfigError(f"{h}.save_replay_buffer must be true or false, got {save_buffer!r}.")
    m.run.save_replay_buffer = save_buffer
    m.row(
        "hyperparameters.save_replay_buffer",
        save_buffer,
        f"unity-sb3 train {'--save-replay-buffer' if save_buffer else '(no replay buffer file)'}",
        "checkpoints/replay_buffer.pkl beside each checkpoint, loaded by --resume" if save_buffer else "",
    )
    rs = hyper["reward_signal_steps_per_update"]
    if rs is not None and float(rs) != per_update:
        m.ignore(
            "hyperparameters.reward_signal_steps_per_update",
            rs,
            "reward signals are updated once per SAC gradient step (rate of steps_per_update)",
        )


def _map_network(m: _Mapper, network: dict[str, Any], where: str) -> None:
    n = f"{where}.network_settings"
    units = _number(network["hidden_units"], f"{n}.hidden_units", 1, integer=True)
    layers = _number(network["num_layers"], f"{n}.num_layers", 0, integer=True)
    arch = [units] * layers
    extra = ""
    if m.run.trainer_type == "poca":
        extra = f", critic_net_arch={arch}, critic_embed_dim={units}"
    m.run.hyperparams["policy_kwargs"] = f"dict(net_arch={arch}, activation_fn=nn.SiLU{extra})"
    m.row(
        "network_settings.hidden_units/num_layers",
        f"{units} x {layers}",
        f"policy_kwargs net_arch={arch}",
        "separate actor and critic, as ML-Agents",
    )
    m.row("(ML-Agents uses Swish)", None, "activation_fn=nn.SiLU")
    normalize = network["normalize"]
    if not isinstance(normalize, bool):
        raise MLAgentsConfigError(f"{n}.normalize must be true or false, got {normalize!r}.")
    if normalize:
        m.run.normalize = {"norm_obs": True, "norm_reward": False}
        m.row(
            "network_settings.normalize",
            True,
            "VecNormalize(norm_obs=True, norm_reward=False)",
            "running mean/std of observations",
        )
    else:
        m.row("network_settings.normalize", False, "no VecNormalize")
    vis = _choice(network["vis_encode_type"], VIS_ENCODE_TYPES, f"{n}.vis_encode_type")
    m.run.hyperparams["policy_kwargs"] = (
        m.run.hyperparams["policy_kwargs"][:-1]
        + f", features_extractor_class=UnityMultiInputExtractor, features_extractor_kwargs=dict(encoder={vis!r}))"
    )
    m.row(
        "network_settings.vis_encode_type",
        vis,
        f"UnityMultiInputExtractor(encoder={vis!r})",
        "ML-Agents' encoder for every image observation; vectors are concatenated as they are",
    )
    memory = network["memory"]
    if memory is not None:
        _check_keys(memory, tuple(MEMORY_DEFAULTS), f"{n}.memory")
        mem = {**MEMORY_DEFAULTS, **memory}
        size = _number(mem["memory_size"], f"{n}.memory.memory_size", 2, integer=True)
        if size % 2:
            raise MLAgentsConfigError(
                f"{n}.memory.memory_size must be even (LSTM hidden + cell state), got {size}."
            )
        if m.run.trainer_type != "ppo":
            m.ignore(
                "network_settings.memory",
                _short(memory),
                f"no recurrent {m.run.trainer_type.upper()} in unity-sb3; the policy has no memory",
            )
        else:
            m.run.algo = "recurrent_ppo"
            m.run.hyperparams["policy_kwargs"] = (
                m.run.hyperparams["policy_kwargs"][:-1] + f", lstm_hidden_size={size // 2})"
            )
            m.row(
                "network_settings.memory.memory_size",
                size,
                f"recurrent_ppo, lstm_hidden_size={size // 2}",
                "ML-Agents' memory holds the LSTM's hidden and cell state",
            )
            m.ignore(
                "network_settings.memory.sequence_length",
                mem["sequence_length"],
                "RecurrentPPO backpropagates through whole rollout sequences, not fixed-length chunks",
            )
            for key in ("reward_signals", "behavioral_cloning"):
                if key in m.run.hyperparams:
                    m.run.hyperparams.pop(key)
                    m.ignore(
                        key,
                        "...",
                        "sb3-contrib's RecurrentPPO has no reward signals or BC term; only the extrinsic reward is used",
                    )
    for key in ("goal_conditioning_type", "conditioning_type"):
        if network[key] != "hyper":
            m.ignore(
                f"network_settings.{key}", network[key], "goal signals are plain observations in SB3 policies"
            )
    if network["deterministic"]:
        m.ignore("network_settings.deterministic", True, "use deterministic=True when predicting/evaluating")


def _map_behavioral_cloning(m: _Mapper, bc: Any, where: str) -> None:
    if bc is None:
        return
    _check_keys(bc, BC_KEYS, f"{where}.behavioral_cloning")
    if "demo_path" not in bc:
        raise MLAgentsConfigError(f"{where}.behavioral_cloning needs demo_path (a .demo file or folder).")
    if m.run.trainer_type == "poca":
        m.ignore(
            "behavioral_cloning",
            _short(bc),
            "POCA has no BC term in unity-sb3; pretrain with unity_sb3.pretrain_bc",
        )
        return
    m.run.hyperparams["behavioral_cloning"] = dict(bc)
    m.row("behavioral_cloning", _short(bc), "behavioral_cloning=", "same keys and meaning")


def _map_trainer_misc(m: _Mapper, settings: Mapping[str, Any]) -> None:
    max_steps = _number(settings.get("max_steps", 500_000), "max_steps", 1)
    m.run.n_timesteps = int(max_steps)
    m.row("max_steps", int(max_steps), f"n_timesteps={int(max_steps)}", "agent steps in both")
    if "time_horizon" in settings:
        on_policy = m.run.trainer_type != "sac"
        why = (
            "SB3 cuts trajectories (and bootstraps) only at rollout ends (n_steps) and episode ends"
            if on_policy
            else "SAC stores single transitions; there are no trajectory chunks to cut"
        )
        m.ignore("time_horizon", settings["time_horizon"], why)
    for key, target, minimum, note in _CADENCE:
        value = settings.get(key)
        if value is None:
            continue
        value = max(_number(value, key, minimum, integer=True), 0)  # ML-Agents: <= 0 keeps all
        m.run.cadence[target] = int(value)
        m.row(key, int(value), f"unity-sb3 train {target}={int(value)}", note)
    ignored = {
        "threaded": "SB3 collects and updates in one thread",
        "init_path": "load the model with ALGO.load(path) and continue with learn()",
        "self_play": "self-play (ghost trainer) is not implemented in unity-sb3",
    }
    for key, why in ignored.items():
        if key in settings and settings[key] is not None:
            if key == "threaded" and not settings[key]:
                continue
            m.ignore(key, settings[key], why)


# ML-Agents key, unity-sb3 train run setting, smallest value, note
_CADENCE: tuple[tuple[str, str, int | None, str], ...] = (
    ("checkpoint_interval", "checkpoint_every", 1, "agent steps between checkpoints in both"),
    ("keep_checkpoints", "keep_checkpoints", None, "older checkpoints are deleted in both; 0 keeps all"),
    (
        "summary_freq",
        "summary_freq",
        1,
        "mlagents-learn's summary line and Environment/* TensorBoard stats every N agent steps",
    ),
)


def _map_top_level(m: _Mapper, data: Mapping[str, Any]) -> None:
    params = data.get("environment_parameters")
    if params is not None:
        from unity_sb3.unity.channels import EnvironmentParameters

        params = _normalize_lessons(params)
        parsed = EnvironmentParameters(params)  # validates samplers and curricula now
        m.run.open_kwargs["environment_parameters"] = params
        target = "open_unity(environment_parameters=...)"
        if parsed.has_curriculum:
            target += " + CurriculumCallback"
        m.row("environment_parameters", ", ".join(params), target)
    engine = data.get("engine_settings")
    if engine:
        _check_keys(engine, ENGINE_KEYS, "engine_settings")
        engine = dict(engine)
        no_graphics = engine.pop("no_graphics", None)
        if no_graphics is not None:
            m.run.open_kwargs["no_graphics"] = bool(no_graphics)
            m.row("engine_settings.no_graphics", no_graphics, f"open_unity(no_graphics={bool(no_graphics)})")
        if engine:
            from unity_sb3.unity.channels import EngineSettings

            defaults = EngineSettings()
            full = {k: engine.get(k, getattr(defaults, k)) for k in ENGINE_KEYS if k != "no_graphics"}
            EngineSettings(**full)  # validate
            m.run.open_kwargs["engine_settings"] = full
            m.row("engine_settings", _short(engine), "EngineSettings(...)", "replaces --time-scale")
    env_settings = data.get("env_settings")
    if env_settings:
        _check_keys(env_settings, ENV_SETTINGS_KEYS, "env_settings")
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
            else:
                flag = {"env_path": "--env", "num_envs": "--num-envs", "seed": "--seed"}.get(key)
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
        _check_keys(checkpoint, CHECKPOINT_KEYS, "checkpoint_settings")
        for key, value in checkpoint.items():
            m.ignore(
                f"checkpoint_settings.{key}",
                value,
                "use unity-sb3 train --run-id/--results-dir/--resume/--force",
            )
    torch_settings = data.get("torch_settings")
    if torch_settings:
        _check_keys(torch_settings, TORCH_KEYS, "torch_settings")
        if torch_settings.get("device") is not None:
            m.ignore("torch_settings.device", torch_settings["device"], "use unity-sb3 train --device")
    if data.get("debug"):
        m.ignore("debug", True, "use -v/--verbose")


def _restart_setting(key: str, value: Any) -> int | float:
    """Check one ``env_settings`` restart value (ML-Agents' meaning) and return it."""
    where = f"env_settings.{key}"
    if key == "restarts_rate_limit_period_s":
        seconds = _number(value, where)
        if seconds <= 0:
            raise MLAgentsConfigError(f"{where} must be a positive number of seconds, got {value!r}.")
        return seconds
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise MLAgentsConfigError(f"{where} must be a whole number >= 0, or -1 for no limit; got {value!r}.")
    return value


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
) -> dict[str, Any]:
    """Convert an ML-Agents config for ``unity-sb3 train``: print the table, warn per unhonored setting.

    :return: :meth:`MLAgentsRun.as_hyperparams` (includes ``algo``).
    """
    run = convert_mlagents_config(config, behavior=behavior, env=env)
    if verbose:
        print(run.table())
    for row in run.unhonored:
        warnings.warn(
            f"ML-Agents setting {row.source}={_short(row.value)} is not honored: {row.note}.",
            MLAgentsConfigWarning,
            stacklevel=3,
        )
    return run.as_hyperparams()


# --------------------------------------------------------------------------------------------
# Resolution once the environment exists
# --------------------------------------------------------------------------------------------
def resolve_schedule(value: Any) -> Any:
    """``"lin_<start>"`` (to 0, RL Zoo) or ``"lin_<start>_<end>"`` -> an SB3 schedule; other values as they are."""
    if not (isinstance(value, str) and value.startswith("lin_")):
        return value
    from stable_baselines3.common.utils import FloatSchedule, LinearSchedule

    parts = value.split("_")[1:]
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 2):
        raise MLAgentsConfigError(f"bad schedule {value!r}: write lin_<start> or lin_<start>_<end>.")
    start, end = numbers[0], numbers[1] if len(numbers) == 2 else 0.0
    return FloatSchedule(LinearSchedule(start, end, 1.0))


def _auto_policy(observation_space: Any) -> str:
    from gymnasium import spaces
    from stable_baselines3.common.preprocessing import is_image_space

    if isinstance(observation_space, spaces.Dict):
        return "MultiInputPolicy"
    if is_image_space(observation_space):
        return "CnnPolicy"
    return "MlpPolicy"


def prepare_model_args(
    algo: str, policy: Any, hyperparams: Mapping[str, Any], env: Any
) -> tuple[Any, dict[str, Any]]:
    """Turn saved (plain-data) hyperparameters into constructor arguments for ``env``.

    Resolves ``mlagents_per_slot`` against ``env.num_envs`` (PPO/POCA/RecurrentPPO
    ``buffer_size`` -> ``n_steps``; SAC ``steps_per_update`` -> ``train_freq`` and
    ``gradient_steps``), linear schedule strings, ``policy_kwargs`` strings and
    ``policy="auto"``.

    :param algo: algorithm name.
    :param policy: policy name or class; ``"auto"`` picks from the observation space.
    :param hyperparams: constructor arguments as saved.
    :param env: the (VecEnv) environment the model will train on.
    :return: ``(policy, kwargs)``.
    """
    from unity_sb3.hyperparams import parse_policy_kwargs

    kwargs = dict(hyperparams)
    n_slots = int(getattr(env, "num_envs", 1))
    per_slot = kwargs.pop("mlagents_per_slot", None) or {}
    if "buffer_size" in per_slot:
        buffer = int(per_slot["buffer_size"])
        kwargs["n_steps"] = max(1, math.ceil(buffer / n_slots))
        rollout = kwargs["n_steps"] * n_slots
        if int(kwargs.get("batch_size", 1)) > rollout:
            kwargs["batch_size"] = rollout
        print(
            f"buffer_size {buffer} with {n_slots} slots -> n_steps={kwargs['n_steps']} ({rollout} agent steps per update)"
        )
    if "steps_per_update" in per_slot:
        per_update = float(per_slot["steps_per_update"])
        if per_update <= n_slots:
            kwargs["train_freq"], kwargs["gradient_steps"] = 1, max(1, round(n_slots / per_update))
        else:
            kwargs["train_freq"], kwargs["gradient_steps"] = max(1, round(per_update / n_slots)), 1
        print(
            f"steps_per_update {per_update:g} with {n_slots} slots -> train_freq={kwargs['train_freq']}, "
            f"gradient_steps={kwargs['gradient_steps']}"
        )
    for key in SCHEDULE_KEYS:
        if key in kwargs:
            if (
                key == "ent_coef"
                and isinstance(kwargs[key], str)
                and kwargs[key].startswith("lin_")
                and algo != "poca"
            ):
                raise MLAgentsConfigError(
                    f"{algo}: ent_coef cannot be a schedule ({kwargs[key]!r}); give a number."
                )
            kwargs[key] = resolve_schedule(kwargs[key])
    if isinstance(kwargs.get("policy_kwargs"), str):
        kwargs["policy_kwargs"] = parse_policy_kwargs(kwargs["policy_kwargs"])
    if policy == "auto":
        policy = _auto_policy(env.observation_space)
    _check_hyperparameter_names(algo, kwargs)
    return policy, kwargs


def _check_hyperparameter_names(algo: str, kwargs: Mapping[str, Any]) -> None:
    """A misspelt hyperparameter gets its closest valid name (instead of ``__init__``'s TypeError)."""
    import inspect

    from unity_sb3.algorithms.registry import algorithm_class

    try:
        cls = algorithm_class(algo)
    except (ValueError, ImportError):
        return
    names: set[str] = set()
    for klass in cls.__mro__:  # subclasses hand **kwargs on to their parents
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names.update(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    else:
        return  # takes any keyword: nothing to check against
    names = {n for n in names if not n.startswith("_")} - {"self", "policy", "env"}
    for key in kwargs:
        if key not in names:
            close = difflib.get_close_matches(str(key), sorted(names), n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"Unknown hyperparameter {key!r} for {algo} ({cls.__name__}).{hint} "
                f"Valid ones: {', '.join(sorted(names))}."
            )


def mlagents_callbacks(open_kwargs: Mapping[str, Any], behavior: str | None = None) -> list[Any]:
    """Callbacks a run needs for its ``open_kwargs``: a ``CurriculumCallback`` when there is a curriculum.

    An ``EnvironmentParameters`` object in ``open_kwargs["environment_parameters"]`` (the one the
    Unity instances were opened with) is the one the callback advances; a mapping lets the
    callback take the parameters ``open_unity`` stored on the environment.
    """
    params = open_kwargs.get("environment_parameters")
    if not params:
        return []
    from unity_sb3.unity.channels import CurriculumCallback, EnvironmentParameters

    given = params if isinstance(params, EnvironmentParameters) else None
    if not (given or EnvironmentParameters(params)).has_curriculum:
        return []
    return [CurriculumCallback(given, behavior_name=behavior)]
