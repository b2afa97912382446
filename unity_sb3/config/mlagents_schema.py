"""ML-Agents trainer YAML: the keys, defaults and errors, and the small checks the mapping uses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from unity_sb3 import validation

if TYPE_CHECKING:
    from unity_sb3.selfplay.settings import SelfPlaySettings

__all__: list[str] = []


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
    "output_path",
    "keep_checkpoints",
    "even_checkpoints",
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


TIME_HORIZON_DEFAULT = 64  # ML-Agents' TrainerSettings.time_horizon


KEEP_CHECKPOINTS_DEFAULT = 5  # ML-Agents' TrainerSettings.keep_checkpoints


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
    "no_graphics_monitor",
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


CONDITIONING_TYPES = ("hyper", "none")


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
    :param num_envs: ``env_settings.num_envs`` (Unity instances), or ``None`` when not given.
    :param cadence: ``checkpoint_every``, ``keep_checkpoints`` and ``summary_freq`` of
        ``unity-sb3 train`` from ML-Agents' ``checkpoint_interval``, ``keep_checkpoints`` and
        ``summary_freq``; only the keys the config gives.
    :param rows: the mapping, one row per ML-Agents setting.
    :param self_play: the ``self_play`` section as
        :class:`~unity_sb3.selfplay.settings.SelfPlaySettings`, or ``None`` when the behavior has none
        (:class:`~unity_sb3.callbacks.self_play.SelfPlayCallback` runs it).
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
    num_envs: int | None = None
    cadence: dict[str, int] = field(default_factory=dict)
    rows: list[MappedSetting] = field(default_factory=list)
    self_play: SelfPlaySettings | None = None

    @property
    def restart_on_crash(self) -> bool:
        """Whether crashed Unity instances are re-opened: as ML-Agents, when the config gives a
        restart setting and ``max_lifetime_restarts`` is not 0 (its default is 10)."""
        return bool(self.restarts) and self.restarts.get("max_restarts", 10) != 0

    def demo_settings(self) -> list[tuple[str, dict[str, Any]]]:
        """The settings that read demonstrations, as ``(ML-Agents key, settings dict)``: GAIL's
        reward signal and the BC term, when the run uses them."""
        out = []
        gail = (self.hyperparams.get("reward_signals") or {}).get("gail")
        if gail and gail.get("demo_path") is not None:
            out.append(("reward_signals.gail", gail))
        bc = self.hyperparams.get("behavioral_cloning")
        if bc and bc.get("demo_path") is not None:
            out.append(("behavioral_cloning", bc))
        return out

    def missing_demos(self) -> list[tuple[str, str]]:
        """``(ML-Agents key, demo_path)`` of every demo the run reads that does not exist."""
        from pathlib import Path

        return [
            (source, str(settings["demo_path"]))
            for source, settings in self.demo_settings()
            if not Path(str(settings["demo_path"])).exists()
        ]

    @property
    def unhonored(self) -> list[MappedSetting]:
        """Rows of settings that are ignored or only approximated."""
        return [row for row in self.rows if not row.honored]

    def table(self) -> str:
        """The mapping as a text table: ML-Agents key | value | SB3 setting | note."""
        header = ("ML-Agents key", "value", "SB3 / unity-sb3 setting", "note")
        lines = [
            (r.source, short_text(r.value), r.target, ("(not honored) " if not r.honored else "") + r.note)
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
        """The settings in the format of :func:`unity_sb3.config.hyperparams.load_hyperparams`.

        Restart limits, ``save_replay_buffer``, ``num_envs``, ``self_play`` and the checkpoint / summary cadence appear only
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
        if self.num_envs is not None:
            out["num_envs"] = self.num_envs
        out.update(self.cadence)
        if self.self_play is not None:  # a run setting too: unity_sb3.run_behaviors runs it
            out["self_play"] = self.self_play.as_dict()
        return out


def short_text(value: Any, limit: int = 40) -> str:
    """``value`` as text for a mapping row or a message (a mapping as one line of YAML), cut to ``limit``.

    :param value: any setting value
    :param limit: the most characters, ``...`` included
    """
    text = (
        str(value)
        if not isinstance(value, Mapping)
        else yaml.safe_dump(dict(value), default_flow_style=True).strip()
    )
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_keys(config: Any, allowed: tuple[str, ...] | list[str], where: str) -> None:
    """:func:`unity_sb3.validation.check_keys` raising :class:`MLAgentsConfigError`.

    :param config: the section read
    :param allowed: the keys it may have
    :param where: the section's place in the file, for the message
    """
    validation.check_keys(config, allowed, where, MLAgentsConfigError)


def number(value: Any, where: str, low: float | None = None, integer: bool = False) -> float | int:
    """:func:`unity_sb3.validation.number` (numbers written as text allowed) raising :class:`MLAgentsConfigError`.

    :param value: the setting's value
    :param where: the setting's place in the file, for the message
    :param low: the smallest value allowed, or ``None``
    :param integer: whether the value must be a whole number
    """
    return validation.number(value, where, low=low, integer=integer, text=True, error=MLAgentsConfigError)


def choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    """:func:`unity_sb3.validation.choice` raising :class:`MLAgentsConfigError`.

    :param value: the setting's value
    :param choices: the values allowed
    :param where: the setting's place in the file, for the message
    """
    return validation.choice(value, choices, where, MLAgentsConfigError)


def deep_update(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated in place with ``update``, nested mappings merged key by key rather than replaced.

    :param base: the defaults (its nested mappings are copied before they are merged into)
    :param update: the settings given
    """
    for key, value in update.items():
        if isinstance(base.get(key), Mapping) and isinstance(value, Mapping):
            base[key] = deep_update(dict(base[key]), value)
        else:
            base[key] = value
    return base


class Mapper:
    """Builds an :class:`MLAgentsRun` row by row."""

    def __init__(self, behavior: str, trainer_type: str) -> None:
        self.run = MLAgentsRun(
            behavior=behavior, trainer_type=trainer_type, algo=trainer_type, n_timesteps=500_000
        )

    def row(self, source: str, value: Any, target: str, note: str = "") -> None:
        self.run.rows.append(MappedSetting(source, value, target, note))

    def ignore(self, source: str, value: Any, why: str, target: str = "-") -> None:
        self.run.rows.append(MappedSetting(source, value, target, why, honored=False))


#: the checkpoint and summary cadence: ML-Agents key, unity-sb3 train run setting, smallest value, note
CADENCE: tuple[tuple[str, str, int | None, str], ...] = (
    ("checkpoint_interval", "checkpoint_every", 1, "agent steps between checkpoints in both"),
    ("keep_checkpoints", "keep_checkpoints", None, "older checkpoints are deleted in both; 0 keeps all"),
    (
        "summary_freq",
        "summary_freq",
        1,
        "mlagents-learn's summary line and Environment/* TensorBoard stats every N agent steps",
    ),
)
