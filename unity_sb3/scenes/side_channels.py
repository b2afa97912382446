"""The Unity half of ML-Agents side channels, for embedded scenes.

Python sends one blob per exchange: for each message, the 16-byte channel UUID (as
``uuid.UUID.bytes_le``, the way ``mlagents_envs``' ``SideChannelManager`` writes it), an
int32 little-endian payload length and the payload. Unity answers with blobs of the same
framing. This module parses what Python sends (engine configuration, environment
parameters with their samplers) and encodes what Unity sends back (stats), so a scene
behaves the same whether it runs in-process or behind the stand-in player.
"""

from __future__ import annotations

import functools
import logging
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
from mlagents_envs.exception import UnitySideChannelException
from mlagents_envs.side_channel.incoming_message import IncomingMessage
from mlagents_envs.side_channel.outgoing_message import OutgoingMessage
from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod

logger = logging.getLogger(__name__)

ENGINE_CONFIGURATION_CHANNEL_ID = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
ENVIRONMENT_PARAMETERS_CHANNEL_ID = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")
STATS_CHANNEL_ID = uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520")

#: At most this many stats messages wait for a reader; older ones are dropped first.
MAX_QUEUED_STATS = 10_000

_HEADER = struct.Struct("<i")


def split_messages(data: bytes | bytearray | memoryview) -> list[tuple[uuid.UUID, bytes]]:
    """Split a side-channel blob into ``(channel_id, payload)`` messages, in order.

    :param data: the blob (possibly empty).
    :return: the messages.
    :raises UnitySideChannelException: if the blob is truncated or malformed.
    """
    data = bytes(data)
    messages: list[tuple[uuid.UUID, bytes]] = []
    offset = 0
    while offset < len(data):
        if offset + 20 > len(data):
            raise UnitySideChannelException(
                f"Side-channel data is truncated: {len(data) - offset} byte(s) left at offset {offset}, "
                "a message header needs 20 (16-byte channel UUID + int32 length)."
            )
        channel_id = uuid.UUID(bytes_le=data[offset : offset + 16])
        (length,) = _HEADER.unpack_from(data, offset + 16)
        offset += 20
        if length < 0 or offset + length > len(data):
            raise UnitySideChannelException(
                f"Side-channel message for channel {channel_id} declares {length} byte(s) but "
                f"{len(data) - offset} remain; the sender and receiver disagree on the framing."
            )
        messages.append((channel_id, data[offset : offset + length]))
        offset += length
    return messages


def pack_messages(messages: Iterable[tuple[uuid.UUID, bytes]]) -> bytes:
    """Frame ``(channel_id, payload)`` messages into one blob (inverse of :func:`split_messages`)."""
    out = bytearray()
    for channel_id, payload in messages:
        out += channel_id.bytes_le
        out += _HEADER.pack(len(payload))
        out += payload
    return bytes(out)


@functools.lru_cache(maxsize=1024)
def encode_stat(key: str, value: float, method: StatsAggregationMethod) -> bytes:
    """Payload of one StatsSideChannel message (what Unity's ``StatsRecorder.Add`` sends).

    Cached: scenes send the same few (key, value) pairs again and again (Ball3D two per episode start).
    """
    msg = OutgoingMessage()
    msg.write_string(key)
    msg.write_float32(float(value))
    msg.write_int32(int(method.value))
    return bytes(msg.buffer)


class _EngineConfigType(IntEnum):
    SCREEN_RESOLUTION = 0
    QUALITY_LEVEL = 1
    TIME_SCALE = 2
    TARGET_FRAME_RATE = 3
    CAPTURE_FRAME_RATE = 4


class _EnvDataType(IntEnum):
    FLOAT = 0
    SAMPLER = 1


class _SamplerType(IntEnum):
    UNIFORM = 0
    GAUSSIAN = 1
    MULTIRANGEUNIFORM = 2


@dataclass
class EngineConfiguration:
    """Engine settings received from Python. Stored only: an embedded scene has no renderer or clock."""

    width: int | None = None
    height: int | None = None
    quality_level: int | None = None
    time_scale: float | None = None
    target_frame_rate: int | None = None
    capture_frame_rate: int | None = None


class Sampler:
    """A seeded sampler for one environment parameter, as Unity builds from a SAMPLER message.

    :param kind: ``"uniform"``, ``"gaussian"`` or ``"multirangeuniform"``.
    :param args: (min, max), (mean, std) or the flat interval list (min0, max0, min1, max1, ...).
    :param seed: the sampler's own seed (Unity seeds each sampler separately).
    """

    def __init__(self, kind: str, args: tuple[float, ...], seed: int) -> None:
        self.kind = kind
        self.args = tuple(float(a) for a in args)
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed & 0xFFFFFFFF)
        if kind == "multirangeuniform":
            if len(self.args) == 0 or len(self.args) % 2:
                raise UnitySideChannelException(
                    f"multirangeuniform sampler needs pairs of (min, max), got {len(self.args)} value(s)."
                )
            bounds = np.asarray(self.args, dtype=np.float64).reshape(-1, 2)
            widths = bounds[:, 1] - bounds[:, 0]
            if np.any(widths < 0):
                raise UnitySideChannelException(f"multirangeuniform interval with max < min: {self.args}")
            self._bounds = bounds
            total = widths.sum()
            self._cum = np.cumsum(widths) / total if total > 0 else np.linspace(1, 1, len(widths))

    def sample(self, n: int) -> np.ndarray:
        """Draw ``n`` values (float64, shape ``(n,)``)."""
        if self.kind == "uniform":
            return self._rng.uniform(self.args[0], self.args[1], size=n)
        if self.kind == "gaussian":
            return self._rng.normal(self.args[0], self.args[1], size=n)
        interval = np.searchsorted(self._cum, self._rng.random(n), side="right")
        interval = np.minimum(interval, len(self._bounds) - 1)
        lo, hi = self._bounds[interval, 0], self._bounds[interval, 1]
        return lo + (hi - lo) * self._rng.random(n)

    def __repr__(self) -> str:
        return f"Sampler({self.kind!r}, {self.args}, seed={self.seed})"


@dataclass
class UnitySideChannels:
    """Unity's end of the side channels for one scene.

    ``receive`` applies what Python sent; ``drain`` returns what the scene has queued for
    Python (stats). ``environment_parameters`` maps a key to a float or a :class:`Sampler`.
    """

    engine_config: EngineConfiguration = field(default_factory=EngineConfiguration)
    environment_parameters: dict[str, float | Sampler] = field(default_factory=dict)
    _stats: list[bytes] = field(default_factory=list)

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        """Apply a blob of side-channel messages sent by Python.

        Messages for channels a Unity player does not know are logged and skipped, as Unity does.
        """
        for channel_id, payload in split_messages(data):
            if channel_id == ENGINE_CONFIGURATION_CHANNEL_ID:
                self._apply_engine_configuration(IncomingMessage(payload))
            elif channel_id == ENVIRONMENT_PARAMETERS_CHANNEL_ID:
                self._apply_environment_parameter(IncomingMessage(payload))
            else:
                logger.warning("Unknown side channel data received. Channel type: %s.", channel_id)

    def get_with_default(self, key: str, default: float, n: int) -> np.ndarray:
        """Values of an environment parameter for ``n`` agents starting an episode.

        Like Unity's ``EnvironmentParameters.GetWithDefault``: a sampler draws a fresh value
        per call (here: per agent), a float is returned as is, an unknown key gives ``default``.

        :return: float64 array of shape ``(n,)``.
        """
        value = self.environment_parameters.get(key)
        if value is None:
            return np.full(n, default, dtype=np.float64)
        if isinstance(value, Sampler):
            return value.sample(n)
        return np.full(n, value, dtype=np.float64)

    def add_stat(self, key: str, value: float, method: StatsAggregationMethod) -> None:
        """Queue one stat for Python (Unity's ``Academy.Instance.StatsRecorder.Add``)."""
        self._stats.append(encode_stat(key, value, method))
        if len(self._stats) > MAX_QUEUED_STATS:
            del self._stats[: len(self._stats) - MAX_QUEUED_STATS]

    def drain(self) -> bytes:
        """Encode and clear the queued outgoing messages (empty bytes when none)."""
        if not self._stats:
            return b""
        blob = pack_messages((STATS_CHANNEL_ID, payload) for payload in self._stats)
        self._stats.clear()
        return blob

    def _apply_engine_configuration(self, msg: IncomingMessage) -> None:
        kind = msg.read_int32()
        cfg = self.engine_config
        if kind == _EngineConfigType.SCREEN_RESOLUTION:
            cfg.width, cfg.height = msg.read_int32(), msg.read_int32()
        elif kind == _EngineConfigType.QUALITY_LEVEL:
            cfg.quality_level = msg.read_int32()
        elif kind == _EngineConfigType.TIME_SCALE:
            cfg.time_scale = msg.read_float32()
        elif kind == _EngineConfigType.TARGET_FRAME_RATE:
            cfg.target_frame_rate = msg.read_int32()
        elif kind == _EngineConfigType.CAPTURE_FRAME_RATE:
            cfg.capture_frame_rate = msg.read_int32()
        else:
            logger.warning("Unknown engine configuration type %d received; ignored.", kind)

    def _apply_environment_parameter(self, msg: IncomingMessage) -> None:
        key = msg.read_string()
        data_type = msg.read_int32()
        if data_type == _EnvDataType.FLOAT:
            self.environment_parameters[key] = float(msg.read_float32())
        elif data_type == _EnvDataType.SAMPLER:
            seed = msg.read_int32()
            sampler_type = msg.read_int32()
            if sampler_type == _SamplerType.UNIFORM:
                sampler = Sampler("uniform", (msg.read_float32(), msg.read_float32()), seed)
            elif sampler_type == _SamplerType.GAUSSIAN:
                sampler = Sampler("gaussian", (msg.read_float32(), msg.read_float32()), seed)
            elif sampler_type == _SamplerType.MULTIRANGEUNIFORM:
                sampler = Sampler("multirangeuniform", tuple(msg.read_float32_list()), seed)
            else:
                logger.warning(
                    "Unknown sampler type %d for environment parameter %r; ignored.", sampler_type, key
                )
                return
            self.environment_parameters[key] = sampler
        else:
            logger.warning("Unknown environment parameter data type %d for %r; ignored.", data_type, key)
