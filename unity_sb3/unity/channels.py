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

:func:`unity_sb3.open.open_unity` creates one :class:`UnityChannels` per Unity
instance and stores it as ``env.unity_sb3_channels``; callbacks find it through
``training_env.get_attr("unity_sb3_channels")``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from array import array
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
from unity_sb3.unity.parameters import INT32_MAX, INT32_MIN, EnvironmentParameters
from unity_sb3.validation import is_int, is_number, unknown_keys

logger = logging.getLogger(__name__)


__all__ = [
    "EngineSettings",
    "UnityChannels",
    "find_channels",
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
        ``no_graphics`` argument of :func:`~unity_sb3.open.open_unity`. This one is a
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
            if value is not None and (not is_int(value) or not 0 < value <= INT32_MAX):
                raise UnityConfigurationError(f"EngineSettings.{name} must be a positive int, got {value!r}.")
        for name in ("quality_level", "target_frame_rate", "capture_frame_rate"):
            value = getattr(self, name)
            if value is not None and (not is_int(value) or not INT32_MIN <= value <= INT32_MAX):
                raise UnityConfigurationError(f"EngineSettings.{name} must be an int32, got {value!r}.")
        if self.quality_level is not None and self.quality_level < 0:
            raise UnityConfigurationError(
                f"EngineSettings.quality_level must be >= 0, got {self.quality_level}."
            )
        if self.time_scale is not None and (
            not is_number(self.time_scale) or not math.isfinite(self.time_scale) or self.time_scale <= 0
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
        unknown = unknown_keys(value, known)
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
# The channels of one Unity instance
# --------------------------------------------------------------------------------------------
class BoundedStatsSideChannel(StatsSideChannel):
    """A ``StatsSideChannel`` that keeps only the newest values of each key, in flat arrays.

    ``mlagents-learn`` drains the stats every step; a run without :class:`StatsCallback` never
    does, so a scene that records stats every episode would grow memory for as long as it runs
    (about 2 MiB per million agent-steps of Ball3D, found by ``benchmarks/soak.py``). The values
    kept are float32 and int8 arrays rather than ``(value, method)`` tuples: tens of thousands of
    long-lived tuples made Python's full garbage collections (~100 ms each in a training process)
    recur every few thousand steps (benchmarks/RESULTS.md, "UnityVecEnv overhead").

    ``get_and_reset_stats()`` and ``stats`` give what mlagents_envs' channel gives: per key a list
    of ``(value, StatsAggregationMethod)`` (``stats`` builds a fresh copy at each read).

    :param max_values: values kept per key until ``get_and_reset_stats()``; older ones are
        dropped (at most ``2 * max_values`` are held between trims).
    """

    def __init__(self, max_values: int = 10_000) -> None:
        if max_values < 1:
            raise ValueError(f"max_values must be >= 1, got {max_values}")
        self.max_values = int(max_values)
        self._values: dict[str, tuple[array, array]] = {}
        super().__init__()

    @property
    def stats(self) -> defaultdict[str, list[tuple[float, StatsAggregationMethod]]]:
        """The values kept, as mlagents_envs' ``StatsSideChannel.stats``."""
        out: defaultdict[str, list[tuple[float, StatsAggregationMethod]]] = defaultdict(list)
        for key, (values, methods) in self._values.items():
            out[key] = [(value, _METHODS[method]) for value, method in zip(values, methods)]
        return out

    @stats.setter
    def stats(self, stats: Mapping[str, Sequence[tuple[float, Any]]]) -> None:
        self._values = {}
        for key, pairs in stats.items():
            for value, method in pairs:
                self._add(key, value, StatsAggregationMethod(method))

    def on_message_received(self, msg: IncomingMessage) -> None:
        key = msg.read_string()
        value = msg.read_float32()
        self._add(key, value, StatsAggregationMethod(msg.read_int32()))

    def _add(self, key: str, value: float, method: StatsAggregationMethod) -> None:
        stored = self._values.get(key)
        if stored is None:
            stored = self._values[key] = (array("f"), array("b"))
        values, methods = stored
        values.append(value)
        methods.append(method.value)
        if len(values) > 2 * self.max_values:  # trim in chunks: amortised O(1) per message
            del values[: -self.max_values], methods[: -self.max_values]


_METHODS = {method.value: method for method in StatsAggregationMethod}


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


def as_channel_list(channels: UnityChannels | Sequence[UnityChannels] | None) -> list[UnityChannels] | None:
    """The channels a callback was given as a list (one env's channels or several), ``None`` for none given.

    :param channels: one :class:`UnityChannels`, a sequence of them, or ``None``
    """
    if channels is None:
        return None
    return [channels] if isinstance(channels, UnityChannels) else list(channels)
