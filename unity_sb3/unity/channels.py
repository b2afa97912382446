"""Side channels: engine settings, environment parameters (samplers, curricula) and stats.

Three of Unity's side channels matter for training:

- ``EngineConfigurationChannel`` (Python -> Unity): resolution, quality level, time scale and
  frame rates, set from an :class:`EngineSettings`.
- ``EnvironmentParametersChannel`` (Python -> Unity): float parameters and samplers that the
  scene reads with ``Academy.Instance.EnvironmentParameters.GetWithDefault(key, default)``.
  :class:`EnvironmentParameters` reads the ``environment_parameters`` section of an ML-Agents
  trainer YAML (constants, ``uniform`` / ``gaussian`` / ``multirangeuniform`` samplers and
  curricula of lessons) and :class:`CurriculumCallback` advances lessons during SB3 training
  with the same rules as ``mlagents-learn``.
- ``StatsSideChannel`` (Unity -> Python): ``Academy.Instance.StatsRecorder.Add(key, value,
  aggregation)``; :class:`StatsCallback` forwards those values to SB3's logger (TensorBoard).

:func:`unity_sb3.unity.connect.open_unity` creates one :class:`UnityChannels` per Unity
instance and stores it as ``env.unity_sb3_channels``; callbacks find it through
``training_env.get_attr("unity_sb3_channels")``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.errors import UnityConfigurationError

from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel  # isort: skip
from mlagents_envs.side_channel.environment_parameters_channel import (  # isort: skip
    EnvironmentParametersChannel,
)
from mlagents_envs.side_channel.incoming_message import IncomingMessage  # isort: skip
from mlagents_envs.side_channel.side_channel import SideChannel  # isort: skip
from mlagents_envs.side_channel.stats_side_channel import (  # isort: skip
    StatsAggregationMethod,
    StatsSideChannel,
)

logger = logging.getLogger(__name__)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

__all__ = [
    "CompletionCriteria",
    "ConstantSampler",
    "CurriculumCallback",
    "EngineSettings",
    "EnvironmentParameter",
    "EnvironmentParameters",
    "GaussianSampler",
    "Lesson",
    "MultiRangeUniformSampler",
    "StatsCallback",
    "UniformSampler",
    "UnityChannels",
    "find_channels",
    "parse_sampler",
]


# --------------------------------------------------------------------------------------------
# Engine settings
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineSettings:
    """Unity engine settings sent through ``EngineConfigurationChannel``.

    The defaults are those of ``mlagents-learn`` (its ``engine_settings`` section), so a build
    trains at the speed ML-Agents users expect. A field set to ``None`` is not sent and Unity
    keeps its own value.

    :param width: window width in pixels (set together with ``height``).
    :param height: window height in pixels.
    :param quality_level: index into the project's quality settings (0 = lowest).
    :param time_scale: simulation speed multiplier; Unity clamps it to at least 1 (and at most
        100 in the Editor).
    :param target_frame_rate: frames per second Unity tries to render; -1 = as fast as possible.
    :param capture_frame_rate: fixes the time between frames to ``1 / capture_frame_rate`` s of
        game time, whatever the real frame rate (0 = off).
    :param no_graphics: launch builds with ``-nographics -batchmode``; ``None`` defers to the
        ``no_graphics`` argument of :func:`~unity_sb3.unity.connect.open_unity`. This one is a
        command-line flag, not a channel message.
    """

    width: int | None = 84
    height: int | None = 84
    quality_level: int | None = 5
    time_scale: float | None = 20.0
    target_frame_rate: int | None = -1
    capture_frame_rate: int | None = 60
    no_graphics: bool | None = None

    def __post_init__(self) -> None:
        if (self.width is None) != (self.height is None):
            raise UnityConfigurationError(
                f"EngineSettings: width and height are set together (got width={self.width}, "
                f"height={self.height}); give both or neither."
            )
        for name in ("width", "height"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or not 0 < value <= INT32_MAX):
                raise UnityConfigurationError(f"EngineSettings.{name} must be a positive int, got {value!r}.")
        for name in ("quality_level", "target_frame_rate", "capture_frame_rate"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or not INT32_MIN <= value <= INT32_MAX):
                raise UnityConfigurationError(f"EngineSettings.{name} must be an int32, got {value!r}.")
        if self.quality_level is not None and self.quality_level < 0:
            raise UnityConfigurationError(
                f"EngineSettings.quality_level must be >= 0, got {self.quality_level}."
            )
        if self.time_scale is not None and (
            not _is_number(self.time_scale) or not math.isfinite(self.time_scale) or self.time_scale <= 0
        ):
            raise UnityConfigurationError(
                f"EngineSettings.time_scale must be a positive number, got {self.time_scale!r}."
            )

    @classmethod
    def coerce(cls, value: EngineSettings | Mapping[str, Any] | None) -> EngineSettings:
        """Accept an :class:`EngineSettings`, a mapping of its fields (as in a YAML file) or ``None``."""
        if value is None:
            return cls()
        if isinstance(value, EngineSettings):
            return value
        if not isinstance(value, Mapping):
            raise UnityConfigurationError(
                f"engine_settings must be an EngineSettings or a dict, got {type(value).__name__}."
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise UnityConfigurationError(
                f"Unknown engine setting(s) {unknown}; known ones are {sorted(known)}."
            )
        return cls(**value)

    def apply(self, channel: EngineConfigurationChannel) -> None:
        """Queue the settings on ``channel``; they reach Unity with the next reset or step."""
        channel.set_configuration_parameters(
            width=self.width,
            height=self.height,
            quality_level=self.quality_level,
            time_scale=None if self.time_scale is None else float(self.time_scale),
            target_frame_rate=self.target_frame_rate,
            capture_frame_rate=self.capture_frame_rate,
        )


# --------------------------------------------------------------------------------------------
# Samplers (one environment parameter's value)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConstantSampler:
    """A fixed float value."""

    value: float
    seed: int = -1

    def apply(self, key: str, channel: EnvironmentParametersChannel) -> None:
        channel.set_float_parameter(key, float(self.value))


@dataclass(frozen=True)
class UniformSampler:
    """Unity samples uniformly in ``[min_value, max_value]`` (on each episode reset, per agent or scene)."""

    min_value: float = 0.0
    max_value: float = 1.0
    seed: int = -1

    def __post_init__(self) -> None:
        if self.min_value > self.max_value:
            raise UnityConfigurationError(
                f"uniform sampler: min_value ({self.min_value}) is greater than max_value ({self.max_value})."
            )

    def apply(self, key: str, channel: EnvironmentParametersChannel) -> None:
        channel.set_uniform_sampler_parameters(key, float(self.min_value), float(self.max_value), self.seed)


@dataclass(frozen=True)
class GaussianSampler:
    """Unity samples from a normal distribution ``N(mean, st_dev**2)``."""

    mean: float = 1.0
    st_dev: float = 1.0
    seed: int = -1

    def __post_init__(self) -> None:
        if self.st_dev < 0:
            raise UnityConfigurationError(f"gaussian sampler: st_dev must be >= 0, got {self.st_dev}.")

    def apply(self, key: str, channel: EnvironmentParametersChannel) -> None:
        channel.set_gaussian_sampler_parameters(key, float(self.mean), float(self.st_dev), self.seed)


@dataclass(frozen=True)
class MultiRangeUniformSampler:
    """Unity picks one interval (weighted by its length), then a uniform value inside it."""

    intervals: tuple[tuple[float, float], ...] = ((0.0, 1.0),)
    seed: int = -1

    def __post_init__(self) -> None:
        if not self.intervals:
            raise UnityConfigurationError("multirangeuniform sampler: intervals must not be empty.")
        for interval in self.intervals:
            if len(interval) != 2:
                raise UnityConfigurationError(
                    f"multirangeuniform sampler: the interval {list(interval)} must contain exactly two values."
                )
            if interval[0] > interval[1]:
                raise UnityConfigurationError(
                    f"multirangeuniform sampler: minimum is greater than maximum in interval {list(interval)}."
                )

    def apply(self, key: str, channel: EnvironmentParametersChannel) -> None:
        channel.set_multirangeuniform_sampler_parameters(
            key, [(float(a), float(b)) for a, b in self.intervals], self.seed
        )


Sampler = Union[ConstantSampler, UniformSampler, GaussianSampler, MultiRangeUniformSampler]  # noqa: UP007

_SAMPLER_TYPES: dict[str, tuple[type, dict[str, str]]] = {
    # sampler_type -> (class, {yaml key: kind})
    "constant": (ConstantSampler, {"value": "float", "seed": "int"}),
    "uniform": (UniformSampler, {"min_value": "float", "max_value": "float", "seed": "int"}),
    "gaussian": (GaussianSampler, {"mean": "float", "st_dev": "float", "seed": "int"}),
    "multirangeuniform": (MultiRangeUniformSampler, {"intervals": "intervals", "seed": "int"}),
}


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


def parse_sampler(config: Any, where: str = "parameter") -> Sampler:
    """Read one parameter value as ML-Agents' ``environment_parameters`` YAML spells it.

    ``3.5`` is a constant; ``{sampler_type: uniform, sampler_parameters: {min_value: 1,
    max_value: 2}}`` a sampler (``gaussian`` takes ``mean``/``st_dev``, ``multirangeuniform``
    takes ``intervals: [[a, b], ...]``; each may add ``seed``). Already-built samplers pass
    through.

    :param config: the YAML value.
    :param where: names the parameter in error messages.
    :return: the sampler.
    """
    if isinstance(config, (ConstantSampler, UniformSampler, GaussianSampler, MultiRangeUniformSampler)):
        return config
    if _is_number(config):
        return ConstantSampler(_float(config, where))
    if not isinstance(config, Mapping):
        raise UnityConfigurationError(
            f"{where}: expected a number or a sampler mapping "
            "{sampler_type: ..., sampler_parameters: {...}}, got " + repr(config)
        )
    unknown = sorted(set(config) - {"sampler_type", "sampler_parameters"})
    if unknown:
        raise UnityConfigurationError(
            f"{where}: unknown key(s) {unknown} in a sampler; a sampler has sampler_type and sampler_parameters."
        )
    if "sampler_type" not in config:
        raise UnityConfigurationError(
            f"{where}: the sampler has no sampler_type (one of {sorted(_SAMPLER_TYPES)})."
        )
    if "sampler_parameters" not in config:
        raise UnityConfigurationError(f"{where}: the sampler has no sampler_parameters.")
    sampler_type = str(config["sampler_type"]).lower()
    if sampler_type not in _SAMPLER_TYPES:
        raise UnityConfigurationError(
            f"{where}: unknown sampler_type {config['sampler_type']!r}; use one of {sorted(_SAMPLER_TYPES)}."
        )
    cls, schema = _SAMPLER_TYPES[sampler_type]
    params = config["sampler_parameters"]
    if not isinstance(params, Mapping):
        raise UnityConfigurationError(f"{where}: sampler_parameters must be a mapping, got {params!r}.")
    unknown = sorted(set(params) - set(schema))
    if unknown:
        raise UnityConfigurationError(
            f"{where}: unknown sampler_parameters {unknown} for sampler_type {sampler_type}; "
            f"it takes {sorted(schema)}."
        )
    if sampler_type == "constant" and "value" not in params:
        raise UnityConfigurationError(f"{where}: a constant sampler needs sampler_parameters.value.")
    kwargs: dict[str, Any] = {}
    for key, value in params.items():
        kind = schema[key]
        if kind == "float":
            kwargs[key] = _float(value, f"{where}.{key}")
        elif kind == "int":
            if not _is_int(value) or not INT32_MIN <= value <= INT32_MAX:
                raise UnityConfigurationError(f"{where}.{key} must be an int32, got {value!r}.")
            kwargs[key] = int(value)
        else:  # intervals
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
                raise UnityConfigurationError(
                    f"{where}.intervals must be a list of [min, max] pairs, got {value!r}."
                )
            intervals = []
            for interval in value:
                if isinstance(interval, (str, bytes)) or not isinstance(interval, Sequence):
                    raise UnityConfigurationError(
                        f"{where}.intervals: {interval!r} is not a [min, max] pair."
                    )
                intervals.append(tuple(_float(v, f"{where}.intervals") for v in interval))
            kwargs[key] = tuple(intervals)
    return cls(**kwargs)


# --------------------------------------------------------------------------------------------
# Curriculum
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompletionCriteria:
    """When a lesson is complete, as in ML-Agents' ``completion_criteria``.

    :param behavior: the behavior whose episodes (or training progress) are measured.
    :param measure: ``"reward"`` (mean cumulative reward of the last ``min_lesson_length``
        episodes) or ``"progress"`` (training steps / total steps, in [0, 1]).
    :param threshold: the lesson ends when the measure is strictly greater than this.
    :param min_lesson_length: episodes that must finish in this lesson before it can end.
    :param signal_smoothing: smooth the reward measure as ``0.25 * previous + 0.75 * current``.
    :param require_reset: reset the environment when the lesson changes.
    """

    behavior: str
    measure: str = "reward"
    threshold: float = 0.0
    min_lesson_length: int = 0
    signal_smoothing: bool = True
    require_reset: bool = False

    def __post_init__(self) -> None:
        if self.measure not in ("reward", "progress"):
            raise UnityConfigurationError(
                f"completion_criteria.measure must be 'reward' or 'progress', got {self.measure!r}."
            )
        if self.measure == "progress" and not 0.0 <= self.threshold <= 1.0:
            raise UnityConfigurationError(
                f"completion_criteria.threshold must be in [0, 1] when the measure is progress, got {self.threshold}."
            )
        if self.min_lesson_length < 0:
            raise UnityConfigurationError(
                f"completion_criteria.min_lesson_length must be >= 0, got {self.min_lesson_length}."
            )

    def need_increment(
        self, progress: float, rewards: Sequence[float], smoothing: float
    ) -> tuple[bool, float]:
        """Whether the lesson is complete, and the new smoothed reward.

        :param progress: training progress in [0, 1].
        :param rewards: cumulative rewards of the episodes finished in this lesson (most recent
            ``min_lesson_length`` of them at most).
        :param smoothing: the previous smoothed reward.
        :return: ``(complete, new_smoothing)``.
        """
        if len(rewards) < self.min_lesson_length:
            return False, smoothing
        if self.measure == "progress":
            return progress > self.threshold, smoothing
        if len(rewards) < 1:
            return False, smoothing
        measure = float(np.mean(rewards))
        if math.isnan(measure):
            return False, smoothing
        if self.signal_smoothing:
            measure = 0.25 * smoothing + 0.75 * measure
            smoothing = measure
        return measure > self.threshold, smoothing


@dataclass(frozen=True)
class Lesson:
    """One step of a curriculum: a value for the parameter and when to move on (``None`` = last)."""

    name: str
    value: Sampler
    completion_criteria: CompletionCriteria | None = None


@dataclass(frozen=True)
class EnvironmentParameter:
    """One environment parameter: a plain value is a curriculum of one lesson."""

    name: str
    lessons: tuple[Lesson, ...]

    @property
    def is_curriculum(self) -> bool:
        return len(self.lessons) > 1


_CRITERIA_KEYS = {f.name for f in dataclasses.fields(CompletionCriteria)}


def _parse_criteria(config: Any, where: str) -> CompletionCriteria:
    if not isinstance(config, Mapping):
        raise UnityConfigurationError(f"{where}: completion_criteria must be a mapping, got {config!r}.")
    unknown = sorted(set(config) - _CRITERIA_KEYS)
    if unknown:
        raise UnityConfigurationError(
            f"{where}: unknown completion_criteria key(s) {unknown}; known ones are {sorted(_CRITERIA_KEYS)}."
        )
    if "behavior" not in config:
        raise UnityConfigurationError(
            f"{where}: completion_criteria needs 'behavior' (the behavior name whose episodes are measured)."
        )
    kwargs = dict(config)
    kwargs["behavior"] = str(config["behavior"])
    kwargs["measure"] = str(config.get("measure", "reward")).lower()
    if "threshold" in kwargs:
        kwargs["threshold"] = _float(kwargs["threshold"], f"{where}.completion_criteria.threshold")
    if "min_lesson_length" in kwargs:
        value = kwargs["min_lesson_length"]
        if not _is_int(value):
            raise UnityConfigurationError(f"{where}: min_lesson_length must be an int, got {value!r}.")
        kwargs["min_lesson_length"] = int(value)
    for key in ("signal_smoothing", "require_reset"):
        if key in kwargs and not isinstance(kwargs[key], bool):
            raise UnityConfigurationError(f"{where}: {key} must be true or false, got {kwargs[key]!r}.")
    try:
        return CompletionCriteria(**kwargs)
    except UnityConfigurationError as error:
        raise UnityConfigurationError(f"{where}: {error}") from None


def _parse_parameter(name: str, config: Any) -> EnvironmentParameter:
    if not isinstance(name, str) or not name:
        raise UnityConfigurationError(f"environment parameter names must be non-empty strings, got {name!r}.")
    if not name.isascii():
        raise UnityConfigurationError(
            f"environment parameter {name!r}: Unity reads parameter names as ASCII; rename it."
        )
    if isinstance(config, EnvironmentParameter):
        return config
    if not (isinstance(config, Mapping) and "curriculum" in config):
        return EnvironmentParameter(name, (Lesson(name, parse_sampler(config, name)),))
    unknown = sorted(set(config) - {"curriculum"})
    if unknown:
        raise UnityConfigurationError(f"{name}: unknown key(s) {unknown} next to 'curriculum'.")
    lessons_config = config["curriculum"]
    if isinstance(lessons_config, (str, bytes, Mapping)) or not isinstance(lessons_config, Sequence):
        raise UnityConfigurationError(
            f"{name}: curriculum must be a list of lessons, got {lessons_config!r}."
        )
    if not lessons_config:
        raise UnityConfigurationError(f"{name}: the curriculum has no lessons.")
    lessons = []
    for index, lesson in enumerate(lessons_config):
        where = f"{name}.curriculum[{index}]"
        if not isinstance(lesson, Mapping):
            raise UnityConfigurationError(
                f"{where}: a lesson is a mapping with name, value, completion_criteria."
            )
        unknown = sorted(set(lesson) - {"name", "value", "completion_criteria"})
        if unknown:
            raise UnityConfigurationError(
                f"{where}: unknown key(s) {unknown}; a lesson has name, value and completion_criteria."
            )
        for key in ("name", "value"):
            if key not in lesson:
                raise UnityConfigurationError(f"{where}: the lesson has no {key!r}.")
        last = index == len(lessons_config) - 1
        criteria = lesson.get("completion_criteria")
        if criteria is None and not last:
            raise UnityConfigurationError(
                f"{where} ({lesson['name']!r}): every lesson but the last needs completion_criteria."
            )
        if criteria is not None and last:
            logger.warning("%s: the final lesson's completion_criteria is ignored.", where)
            criteria = None
        lessons.append(
            Lesson(
                name=str(lesson["name"]),
                value=parse_sampler(lesson["value"], f"{where}.value"),
                completion_criteria=None if criteria is None else _parse_criteria(criteria, where),
            )
        )
    return EnvironmentParameter(name, tuple(lessons))


class EnvironmentParameters:
    """The ``environment_parameters`` of a run and the state of its curricula.

    Samplers without a ``seed`` get ``seed + i`` (``i`` counting unseeded lessons in order),
    as ``mlagents-learn`` seeds them from its run seed.

    :param config: mapping of parameter name -> number, sampler mapping or
        ``{curriculum: [lessons]}``, as in ML-Agents' YAML; ``None`` means no parameters.
    :param seed: the run seed the samplers' seeds derive from.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, seed: int = 0) -> None:
        if config is None:
            config = {}
        if not isinstance(config, Mapping):
            raise UnityConfigurationError(
                f"environment_parameters must be a mapping of name -> value, got {type(config).__name__}."
            )
        parameters = {name: _parse_parameter(name, value) for name, value in config.items()}
        offset = 0
        for name, parameter in parameters.items():
            lessons = []
            for lesson in parameter.lessons:
                if lesson.value.seed == -1:
                    lesson = dataclasses.replace(
                        lesson, value=dataclasses.replace(lesson.value, seed=seed + offset)
                    )
                    offset += 1
                lessons.append(lesson)
            parameters[name] = EnvironmentParameter(name, tuple(lessons))
        self.parameters: dict[str, EnvironmentParameter] = parameters
        self.lesson_numbers: dict[str, int] = dict.fromkeys(parameters, 0)
        self.smoothed_values: dict[str, float] = dict.fromkeys(parameters, 0.0)

    def __repr__(self) -> str:
        return f"EnvironmentParameters({self.lesson_numbers})"

    def __bool__(self) -> bool:
        return bool(self.parameters)

    @property
    def has_curriculum(self) -> bool:
        return any(p.is_curriculum for p in self.parameters.values())

    def behaviors(self) -> set[str]:
        """Behaviors named by some completion criteria."""
        return {
            _brain_name(lesson.completion_criteria.behavior)
            for p in self.parameters.values()
            for lesson in p.lessons
            if lesson.completion_criteria is not None
        }

    def reward_buffer_size(self, behavior: str | None = None) -> int:
        """How many recent episode rewards the curriculum needs (``mlagents-learn``'s reward buffer size).

        :param behavior: only count criteria of this behavior; ``None`` counts all.
        """
        sizes = [
            lesson.completion_criteria.min_lesson_length
            for p in self.parameters.values()
            for lesson in p.lessons
            if lesson.completion_criteria is not None
            and (
                behavior is None or _brain_name(lesson.completion_criteria.behavior) == _brain_name(behavior)
            )
        ]
        return max([1, *sizes])

    def current_lessons(self) -> dict[str, Lesson]:
        return {name: p.lessons[self.lesson_numbers[name]] for name, p in self.parameters.items()}

    def current_samplers(self) -> dict[str, Sampler]:
        return {name: lesson.value for name, lesson in self.current_lessons().items()}

    def apply(self, channel: EnvironmentParametersChannel) -> None:
        """Queue every parameter's current value on ``channel`` (sent with the next reset or step)."""
        for name, sampler in self.current_samplers().items():
            sampler.apply(name, channel)

    def update_lessons(
        self,
        progress: float | Mapping[str, float],
        rewards: Sequence[float] | Mapping[str, Sequence[float]],
    ) -> tuple[bool, bool]:
        """Advance every parameter whose current lesson is complete (at most one lesson per call).

        :param progress: training progress in [0, 1], one value or one per behavior.
        :param rewards: cumulative rewards of recent finished episodes, one sequence or one per
            behavior (keyed without ``?team=``). Criteria of a behavior missing from a mapping
            are not evaluated.
        :return: ``(updated, must_reset)``: whether some lesson changed, and whether a lesson
            that ended asks for an environment reset.
        """
        updated = must_reset = False
        for name, parameter in self.parameters.items():
            number = self.lesson_numbers[name]
            criteria = parameter.lessons[number].completion_criteria
            if criteria is None or number + 1 >= len(parameter.lessons):
                continue
            brain = _brain_name(criteria.behavior)
            if isinstance(progress, Mapping):
                if brain not in progress:
                    continue
                behavior_progress = float(progress[brain])
            else:
                behavior_progress = float(progress)
            if isinstance(rewards, Mapping):
                if brain not in rewards:
                    continue
                behavior_rewards = list(rewards[brain])
            else:
                behavior_rewards = list(rewards)
            increment, self.smoothed_values[name] = criteria.need_increment(
                behavior_progress, behavior_rewards, self.smoothed_values[name]
            )
            if increment:
                self.lesson_numbers[name] = number + 1
                logger.info(
                    "Parameter %r has changed. Now in lesson %r (%d).",
                    name,
                    parameter.lessons[number + 1].name,
                    number + 1,
                )
                updated = True
                must_reset = must_reset or criteria.require_reset
        return updated, must_reset

    def state_dict(self) -> dict[str, Any]:
        """The curricula's progress, as plain JSON-able data, to resume a run.

        ``lesson_numbers``: each parameter's current lesson (0-based); ``lesson_names``: their
        names, only to check that a loaded state still fits the ``environment_parameters``;
        ``smoothed_values``: each parameter's smoothed reward (``signal_smoothing``), so that a
        resumed completion check continues where it stopped instead of from 0 (``mlagents-learn``
        saves the lesson numbers only).
        """
        return {
            "lesson_numbers": dict(self.lesson_numbers),
            "lesson_names": {name: lesson.name for name, lesson in self.current_lessons().items()},
            "smoothed_values": dict(self.smoothed_values),
        }

    @staticmethod
    def _check_state(state: Any) -> None:
        """Raise a clear error when ``state`` is not shaped like a :meth:`state_dict`."""
        if not isinstance(state, Mapping) or not isinstance(state.get("lesson_numbers"), Mapping):
            raise UnityConfigurationError(
                "a curriculum state is a mapping with 'lesson_numbers' (parameter name -> lesson), as "
                f"EnvironmentParameters.state_dict() returns; got {_short_repr(state)}."
            )
        for key in ("lesson_names", "smoothed_values"):
            if not isinstance(state.get(key) or {}, Mapping):
                raise UnityConfigurationError(
                    f"curriculum state: {key} must be a mapping of parameter name -> value, "
                    f"got {_short_repr(state[key])}."
                )
        for name, number in state["lesson_numbers"].items():
            if not _is_int(number) or number < 0:
                raise UnityConfigurationError(
                    f"curriculum state: the lesson number of {name!r} must be an int >= 0, got {number!r}."
                )
        for name, value in (state.get("smoothed_values") or {}).items():
            _float(value, f"curriculum state: the smoothed value of {name!r}")

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Continue the curricula from a :meth:`state_dict` (it does not send anything to Unity).

        A state that does not fit these parameters means the YAML changed between the runs: a
        parameter the state names is gone, a saved lesson number is past the end of its
        curriculum, or the saved lesson's name differs from the lesson at that position now. With
        ``strict`` that is an error naming the parameter, and nothing is changed, because silently
        training on another lesson than the saved one wastes the run. With ``strict=False`` each
        mismatch is a warning: unknown parameters are ignored, numbers are clamped to the last
        lesson, renamed lessons keep their number. Parameters the state does not name start at
        lesson 0 (a curriculum added to the YAML), as in ``mlagents-learn``.

        :param state: a :meth:`state_dict` (possibly read back from JSON).
        :param strict: raise on a mismatch instead of warning.
        :raises UnityConfigurationError: for a malformed state, or a mismatch with ``strict``.
        """
        self._check_state(state)
        names, smoothed = state.get("lesson_names") or {}, state.get("smoothed_values") or {}
        hint = (
            "The environment_parameters changed since the state was saved: restore them, start a new "
            "run, or load with strict=False to continue anyway."
        )
        problems: list[str] = []
        numbers = dict.fromkeys(self.parameters, 0)
        for name, number in state["lesson_numbers"].items():
            parameter = self.parameters.get(name)
            if parameter is None:
                problems.append(
                    f"the saved state has a parameter {name!r} that environment_parameters does not have "
                    f"(it has {sorted(self.parameters)})"
                )
                continue
            count = len(parameter.lessons)
            if number >= count:
                problems.append(
                    f"parameter {name!r} was saved in lesson {number} but its curriculum now has "
                    f"{count} lesson(s) (0 to {count - 1})"
                )
                number = count - 1
            elif name in names and names[name] != parameter.lessons[number].name:
                problems.append(
                    f"parameter {name!r}: lesson {number} was named {names[name]!r} when saved and is "
                    f"{parameter.lessons[number].name!r} now"
                )
            numbers[name] = int(number)
        values = dict.fromkeys(self.parameters, 0.0)
        for name, value in smoothed.items():
            if name in values:
                values[name] = float(value)
        if problems and strict:
            raise UnityConfigurationError("; ".join(problems) + ". " + hint)
        for problem in problems:
            warnings.warn(f"{problem}; continuing (strict=False).", UserWarning, stacklevel=2)
        for name, parameter in self.parameters.items():
            if parameter.is_curriculum and name not in state["lesson_numbers"]:
                logger.warning("The curriculum state has no %r: it starts at lesson 0.", name)
        self.lesson_numbers = numbers
        self.smoothed_values = values


# --------------------------------------------------------------------------------------------
# The channels of one Unity instance
# --------------------------------------------------------------------------------------------
class BoundedStatsSideChannel(StatsSideChannel):
    """A ``StatsSideChannel`` that keeps only the newest values of each key.

    ``mlagents-learn`` drains the stats every step; a run without :class:`StatsCallback` never
    does, so a scene that records stats every episode would grow memory for as long as it runs
    (about 2 MiB per million agent-steps of Ball3D, found by ``benchmarks/soak.py``).

    :param max_values: values kept per key until ``get_and_reset_stats()``; older ones are
        dropped (at most ``2 * max_values`` are held between trims).
    """

    def __init__(self, max_values: int = 10_000) -> None:
        super().__init__()
        if max_values < 1:
            raise ValueError(f"max_values must be >= 1, got {max_values}")
        self.max_values = int(max_values)

    def on_message_received(self, msg: IncomingMessage) -> None:
        key = msg.read_string()
        value = msg.read_float32()
        method = StatsAggregationMethod(msg.read_int32())
        values = self.stats[key]
        values.append((value, method))
        if len(values) > 2 * self.max_values:  # trim in chunks: amortised O(1) per message
            del values[: -self.max_values]


@dataclass
class UnityChannels:
    """The side channels of one Unity instance, as ``env.unity_sb3_channels``.

    :param engine: engine configuration (Python -> Unity).
    :param environment_parameters: environment parameters (Python -> Unity).
    :param stats: stats Unity records (Unity -> Python).
    :param extra: the user's other side channels.
    :param parameters: the parsed ``environment_parameters`` and curriculum state, if any.
    :param engine_settings: the engine settings that were applied.
    """

    engine: EngineConfigurationChannel = field(default_factory=EngineConfigurationChannel)
    environment_parameters: EnvironmentParametersChannel = field(default_factory=EnvironmentParametersChannel)
    stats: StatsSideChannel = field(default_factory=BoundedStatsSideChannel)
    extra: list[SideChannel] = field(default_factory=list)
    parameters: EnvironmentParameters | None = None
    engine_settings: EngineSettings | None = None

    @classmethod
    def from_side_channels(cls, side_channels: Iterable[SideChannel] | None = None) -> UnityChannels:
        """Build the set, reusing the user's engine / parameters / stats channels when given."""
        channels = cls()
        seen: set[Any] = set()
        for channel in side_channels or ():
            if not isinstance(channel, SideChannel):
                raise UnityConfigurationError(
                    f"side_channels must hold mlagents_envs SideChannel objects, got {type(channel).__name__}."
                )
            if channel.channel_id in seen:
                raise UnityConfigurationError(f"two side channels share the channel id {channel.channel_id}.")
            seen.add(channel.channel_id)
            if isinstance(channel, EngineConfigurationChannel):
                channels.engine = channel
            elif isinstance(channel, EnvironmentParametersChannel):
                channels.environment_parameters = channel
            elif isinstance(channel, StatsSideChannel):
                channels.stats = channel
            else:
                channels.extra.append(channel)
        return channels

    def all(self) -> list[SideChannel]:
        """Every channel, to pass as ``side_channels=``."""
        return [self.engine, self.environment_parameters, self.stats, *self.extra]


def find_channels(training_env: Any) -> list[UnityChannels]:
    """The distinct :class:`UnityChannels` behind a (vectorised) training environment.

    :param training_env: an SB3 ``VecEnv`` (``get_attr`` is used), or an env carrying
        ``unity_sb3_channels`` itself.
    :return: one entry per Unity instance, in slot order, duplicates removed.
    """
    found: list[Any] = []
    direct = getattr(training_env, "unity_sb3_channels", None)
    if direct is not None:
        found = list(direct) if isinstance(direct, (list, tuple)) else [direct]
    elif hasattr(training_env, "get_attr"):
        try:
            found = list(training_env.get_attr("unity_sb3_channels"))
        except AttributeError:
            found = []
    result: list[UnityChannels] = []
    ids: set[int] = set()
    for item in found:
        for channels in item if isinstance(item, (list, tuple)) else [item]:
            if isinstance(channels, UnityChannels) and id(channels) not in ids:
                ids.add(id(channels))
                result.append(channels)
    if not result:
        raise UnityConfigurationError(
            "No Unity side channels found on the training environment: it has no "
            "'unity_sb3_channels' attribute. Open the environment with unity_sb3.open_unity (the "
            "wrappers do), or pass channels=env.unity_sb3_channels to the callback."
        )
    return result


def _brain_name(behavior: str | None) -> str | None:
    """``"3DBall?team=0"`` -> ``"3DBall"``: completion criteria name behaviors without the team."""
    return None if behavior is None else behavior.partition("?")[0]


def _as_channel_list(channels: UnityChannels | Sequence[UnityChannels] | None) -> list[UnityChannels] | None:
    if channels is None:
        return None
    return [channels] if isinstance(channels, UnityChannels) else list(channels)


# --------------------------------------------------------------------------------------------
# SB3 callbacks
# --------------------------------------------------------------------------------------------
class CurriculumCallback(BaseCallback):
    """Advance environment-parameter curricula during SB3 training, like ``mlagents-learn``.

    After every environment step the callback collects the cumulative reward of each episode
    that ended (``infos[i]["episode"]["r"]`` from a ``Monitor``/``VecMonitor`` when present,
    else the sum of the step rewards it saw), keeps the last ``min_lesson_length`` of them,
    and asks each parameter's current lesson whether it is complete (see
    :meth:`CompletionCriteria.need_increment`). When a lesson changes, the reward buffer is
    cleared, every parameter's current value is sent to every Unity instance, and
    ``curriculum/<parameter>`` in the logger holds the lesson number. A finished lesson with
    ``require_reset: true`` resets the environments at the end of the current rollout
    (episodes in progress are dropped, as ``mlagents-learn`` does). When an instance was
    restarted after a crash (``infos[i]["restarted"]``), the current values are sent again.

    :meth:`state_dict` / :meth:`load_state_dict` save and restore the curricula's progress
    (lessons, smoothed rewards, the recent episode returns) so that a resumed run continues at
    the saved lessons; ``unity-sb3 train`` keeps it in the run folder's ``curriculum.json``.

    :param environment_parameters: the ``environment_parameters`` mapping, or an
        :class:`EnvironmentParameters`; ``None`` takes the one ``open_unity`` stored in the
        channels.
    :param channels: the channels to send to; ``None`` finds them on the training env.
    :param behavior_name: the behavior this model trains; criteria naming another behavior
        are not evaluated. ``None`` asks the training env (``get_attr("behavior_name")``) and,
        if it does not say, evaluates every criterion on this model's episodes.
    :param max_steps: total steps for the ``progress`` measure; ``None`` uses the
        ``total_timesteps`` given to ``learn``.
    :param seed: seeds unseeded samplers when ``environment_parameters`` is a mapping.
    :param verbose: 1 prints lesson changes.
    """

    def __init__(
        self,
        environment_parameters: Mapping[str, Any] | EnvironmentParameters | None = None,
        channels: UnityChannels | Sequence[UnityChannels] | None = None,
        behavior_name: str | None = None,
        max_steps: int | None = None,
        seed: int = 0,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        if environment_parameters is None or isinstance(environment_parameters, EnvironmentParameters):
            self.parameters = environment_parameters
        else:
            self.parameters = EnvironmentParameters(environment_parameters, seed=seed)
        self._given_channels = _as_channel_list(channels)
        self.channels: list[UnityChannels] = []
        self.behavior_name = behavior_name
        if max_steps is not None and max_steps <= 0:
            raise UnityConfigurationError(f"max_steps must be positive, got {max_steps}.")
        self.max_steps = max_steps
        self.reward_buffer: deque[float] = deque()  # bounded by _init_callback, once the criteria are known
        self._running_returns: np.ndarray | None = None
        self._reset_pending = False
        self._initialized = False
        self._pending_state: tuple[Mapping[str, Any], bool] | None = None  # loaded once parameters are known
        self._reset_on_start = False

    def _init_callback(self) -> None:
        self.channels = self._given_channels or find_channels(self.training_env)
        if self.parameters is None:
            stored = [c.parameters for c in self.channels if c.parameters]
            if not stored:
                raise UnityConfigurationError(
                    "CurriculumCallback has no environment parameters: pass environment_parameters=..., "
                    "or open the environment with open_unity(..., environment_parameters=...)."
                )
            self.parameters = stored[0]
        self._share_parameters()
        if self.behavior_name is None:
            self.behavior_name = self._env_behavior_name()
        self.behavior_name = _brain_name(self.behavior_name)
        # keeps the returns loaded before training, or counted by an earlier learn() on this callback
        self.reward_buffer = deque(
            self.reward_buffer, maxlen=self.parameters.reward_buffer_size(self.behavior_name)
        )
        if self._pending_state is not None:
            state, strict = self._pending_state
            self._pending_state = None
            self._load_parameters(state["parameters"], strict)
        self._running_returns = np.zeros(self.training_env.num_envs, dtype=np.float64)
        self._initialized = True
        if self.behavior_name is not None:
            other = sorted(self.parameters.behaviors() - {self.behavior_name})
            if other:
                logger.warning(
                    "Curriculum criteria for behavior(s) %s are not evaluated: this model trains %r.",
                    other,
                    self.behavior_name,
                )

    def _env_behavior_name(self) -> str | None:
        try:
            names = {n for n in self.training_env.get_attr("behavior_name") if isinstance(n, str)}
        except Exception:  # a VecEnv without the attribute raises AttributeError (or worse)
            return None
        return names.pop() if len(names) == 1 else None

    def _on_training_start(self) -> None:
        for channels in self.channels:
            self.parameters.apply(channels.environment_parameters)
        if self._reset_on_start:
            # a loaded state changed lessons after SB3's first reset ran with the old values
            self._reset_on_start = False
            self._reset_training_env()
        self._record_lessons()

    def state_dict(self) -> dict[str, Any]:
        """The curricula's progress, as plain JSON-able data.

        :return: ``{"parameters": EnvironmentParameters.state_dict(), "reward_buffer": [...]}``;
            the reward buffer holds the returns of the episodes finished in the current lessons
            that the completion check still counts (at most the largest ``min_lesson_length``).
        """
        if self.parameters is None:
            raise UnityConfigurationError(
                "CurriculumCallback.state_dict(): the callback has no environment parameters yet; pass "
                "environment_parameters=... or call it after training started."
            )
        return {
            "parameters": self.parameters.state_dict(),
            "reward_buffer": [float(r) for r in self.reward_buffer],
        }

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Continue the curricula from a :meth:`state_dict`.

        The lessons are loaded at once when the callback has its parameters (else when training
        starts) and their values are queued on the channels the callback knows. If the load
        changes a lesson before training starts, the environments are reset when it starts (SB3
        has already reset them with the old values); during training, at the end of the rollout.

        :param state: a :meth:`state_dict` (possibly read back from JSON).
        :param strict: a parameter or lesson that no longer fits is an error; ``False`` warns and
            continues (see :meth:`EnvironmentParameters.load_state_dict`).
        :raises UnityConfigurationError: for a malformed state, or a mismatch with ``strict``.
        """
        if not isinstance(state, Mapping) or not isinstance(state.get("parameters"), Mapping):
            raise UnityConfigurationError(
                "a CurriculumCallback state is a mapping with 'parameters' (and 'reward_buffer'), as "
                f"CurriculumCallback.state_dict() returns; got {_short_repr(state)}."
            )
        raw = state.get("reward_buffer", [])
        if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Sequence):
            raise UnityConfigurationError(
                f"curriculum state: reward_buffer must be a list of episode returns, got {_short_repr(raw)}."
            )
        rewards = [_float(r, "curriculum state: a reward_buffer entry") for r in raw]
        if self.parameters is None:
            EnvironmentParameters._check_state(state["parameters"])
            self._pending_state = (state, strict)
        else:
            self._load_parameters(state["parameters"], strict)
        self.reward_buffer.clear()
        self.reward_buffer.extend(rewards)

    def _load_parameters(self, state: Mapping[str, Any], strict: bool) -> None:
        before = dict(self.parameters.lesson_numbers)
        self.parameters.load_state_dict(state, strict=strict)
        for channels in self.channels or self._given_channels or []:
            self.parameters.apply(channels.environment_parameters)
        if self.parameters.lesson_numbers != before:
            if self._initialized:
                self._reset_pending = True
            else:
                self._reset_on_start = True

    def _progress(self) -> float:
        total = self.max_steps or getattr(self.model, "_total_timesteps", 0) or 0
        return float(self.num_timesteps) / float(total) if total > 0 else 0.0

    def _finished_episode_returns(self) -> list[float]:
        infos = self.locals.get("infos") or []
        dones = self.locals.get("dones")
        rewards = self.locals.get("rewards")
        returns: list[float] = []
        if self._running_returns is None or len(self._running_returns) != len(infos):
            self._running_returns = np.zeros(len(infos), dtype=np.float64)
        if rewards is not None:
            self._running_returns += np.asarray(rewards, dtype=np.float64).reshape(-1)[: len(infos)]
        for i, info in enumerate(infos):
            name = _brain_name(info.get("behavior_name"))
            episode = info.get("episode")
            done = bool(dones[i]) if dones is not None else episode is not None
            if done or episode is not None:
                if name is None or self.behavior_name is None or name == self.behavior_name:
                    returns.append(
                        float(episode["r"]) if episode is not None else float(self._running_returns[i])
                    )
                self._running_returns[i] = 0.0
        return returns

    def _share_parameters(self) -> None:
        """Make every instance's channels record the lessons this callback advances (each Unity
        instance opened from a config has its own copy, which would otherwise stay at lesson 0)."""
        for channels in self.channels:
            channels.parameters = self.parameters

    def _on_step(self) -> bool:
        if any(info.get("restarted") for info in self.locals.get("infos") or []):
            # a re-opened Unity instance has new channels and got lesson-0 values when it opened
            if not self._given_channels:
                self.channels = find_channels(self.training_env)
                self._share_parameters()
            for channels in self.channels:
                self.parameters.apply(channels.environment_parameters)
        self.reward_buffer.extend(self._finished_episode_returns())
        key = self.behavior_name or ""
        progress: Any = self._progress()
        rewards: Any = list(self.reward_buffer)
        if self.behavior_name is not None:  # evaluate only this behavior's criteria
            progress, rewards = {key: progress}, {key: rewards}
        updated, must_reset = self.parameters.update_lessons(progress, rewards)
        if updated:
            self.reward_buffer.clear()
            for channels in self.channels:
                self.parameters.apply(channels.environment_parameters)
            if self.verbose:
                print(
                    f"Curriculum: lessons now {self.parameters.lesson_numbers} at step {self.num_timesteps}"
                )
            self._reset_pending = self._reset_pending or must_reset
        self._record_lessons()
        return True

    def _on_rollout_end(self) -> None:
        if not self._reset_pending:
            return
        self._reset_pending = False
        self._reset_training_env()

    def _reset_training_env(self) -> None:
        # Same effect as mlagents-learn's reset on a lesson change: restart every episode so
        # that the whole scene starts over with the new values.
        model = self.model
        obs = self.training_env.reset()
        model._last_obs = obs
        model._last_episode_starts = np.ones((self.training_env.num_envs,), dtype=bool)
        normalizer = getattr(model, "_vec_normalize_env", None)
        if normalizer is not None and hasattr(model, "_last_original_obs"):
            model._last_original_obs = normalizer.get_original_obs()
        elif hasattr(model, "_last_original_obs") and model._last_original_obs is not None:
            model._last_original_obs = obs
        if self._running_returns is not None:
            self._running_returns[:] = 0.0

    def _record_lessons(self) -> None:
        for name, parameter in self.parameters.parameters.items():
            if parameter.is_curriculum:
                self.logger.record(f"curriculum/{name}", self.parameters.lesson_numbers[name])


class StatsCallback(BaseCallback):
    """Forward the stats Unity records (``StatsRecorder.Add``) to SB3's logger.

    Values that arrive between two logger dumps are combined by their aggregation method:
    ``AVERAGE`` -> mean, ``MOST_RECENT`` -> last value, ``SUM`` -> sum, ``HISTOGRAM`` -> mean
    of the values. Stats of every Unity instance are combined.

    :param channels: the channels to read; ``None`` finds them on the training env.
    :param prefix: prepended to every key (Unity keys may already hold a ``/``).
    :param verbose: unused, for SB3's callback signature.
    """

    def __init__(
        self,
        channels: UnityChannels | Sequence[UnityChannels] | None = None,
        prefix: str = "",
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        self._given_channels = _as_channel_list(channels)
        self.channels: list[UnityChannels] = []
        self.prefix = prefix

    def _init_callback(self) -> None:
        self.channels = self._given_channels or find_channels(self.training_env)

    def _on_step(self) -> bool:
        self.forward()
        return True

    def _on_rollout_end(self) -> None:
        self.forward()

    def forward(self) -> None:
        """Read every channel's pending stats into the logger now."""
        for channels in self.channels:
            for key, values in channels.stats.get_and_reset_stats().items():
                self.record(self.prefix + key, values)

    def record(self, key: str, values: Sequence[tuple[float, StatsAggregationMethod]]) -> None:
        """Record ``(value, aggregation)`` pairs of one key with their aggregation honored."""
        log = self.logger
        for value, method in values:
            value = float(value)
            if method == StatsAggregationMethod.MOST_RECENT:
                log.record(key, value)
            elif method == StatsAggregationMethod.SUM:
                log.record(key, float(log.name_to_value.get(key, 0.0)) + value)
            else:  # AVERAGE and HISTOGRAM: mean over the logging period
                log.record_mean(key, value)
