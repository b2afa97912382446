"""Environment parameters: constants, samplers and curricula (lessons, completion criteria)."""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.errors import UnityConfigurationError

from mlagents_envs.side_channel.environment_parameters_channel import (  # isort: skip
    EnvironmentParametersChannel,
)
from unity_sb3.validation import finite_float, flag, is_int, is_number, short_repr, unknown_keys

logger = logging.getLogger(__name__)

__all__: list[str] = []


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


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
    if is_number(config):
        return ConstantSampler(finite_float(config, where))
    if not isinstance(config, Mapping):
        raise UnityConfigurationError(
            f"{where}: expected a number or a sampler mapping "
            "{sampler_type: ..., sampler_parameters: {...}}, got " + repr(config)
        )
    unknown = unknown_keys(config, ("sampler_type", "sampler_parameters"))
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
    unknown = unknown_keys(params, schema)
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
            kwargs[key] = finite_float(value, f"{where}.{key}")
        elif kind == "int":
            if not is_int(value) or not INT32_MIN <= value <= INT32_MAX:
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
                intervals.append(tuple(finite_float(v, f"{where}.intervals") for v in interval))
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
    unknown = unknown_keys(config, _CRITERIA_KEYS)
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
        kwargs["threshold"] = finite_float(kwargs["threshold"], f"{where}.completion_criteria.threshold")
    if "min_lesson_length" in kwargs:
        value = kwargs["min_lesson_length"]
        if not is_int(value):
            raise UnityConfigurationError(f"{where}: min_lesson_length must be an int, got {value!r}.")
        kwargs["min_lesson_length"] = int(value)
    for key in ("signal_smoothing", "require_reset"):
        if key in kwargs:
            flag(kwargs[key], f"{where}: {key}")
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
    unknown = unknown_keys(config, ("curriculum",))
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
        unknown = unknown_keys(lesson, ("name", "value", "completion_criteria"))
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
            brain_name(lesson.completion_criteria.behavior)
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
            and (behavior is None or brain_name(lesson.completion_criteria.behavior) == brain_name(behavior))
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
            brain = brain_name(criteria.behavior)
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
                f"EnvironmentParameters.state_dict() returns; got {short_repr(state)}."
            )
        for key in ("lesson_names", "smoothed_values"):
            if not isinstance(state.get(key) or {}, Mapping):
                raise UnityConfigurationError(
                    f"curriculum state: {key} must be a mapping of parameter name -> value, "
                    f"got {short_repr(state[key])}."
                )
        for name, number in state["lesson_numbers"].items():
            if not is_int(number) or number < 0:
                raise UnityConfigurationError(
                    f"curriculum state: the lesson number of {name!r} must be an int >= 0, got {number!r}."
                )
        for name, value in (state.get("smoothed_values") or {}).items():
            finite_float(value, f"curriculum state: the smoothed value of {name!r}")

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


def brain_name(behavior: str | None) -> str | None:
    """``"3DBall?team=0"`` -> ``"3DBall"``: completion criteria name behaviors without the team."""
    return None if behavior is None else behavior.partition("?")[0]
