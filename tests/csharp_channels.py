"""Side-channel bytes as Unity's C# side reads and writes them.

The readers below mirror com.unity.ml-agents' C# code: ``IncomingMessage`` wraps a
``BinaryReader`` (int32 and float32 little endian, strings as int32 length + ASCII bytes,
float lists as int32 count + float32s); ``SideChannelManager`` frames each message as
``Guid.ToByteArray()`` (16 bytes, mixed endian) + int32 length + payload; the
``OnMessageReceived`` of ``EngineConfigurationChannel``, ``EnvironmentParametersChannel`` and
``StatsSideChannel`` read the fields in the order reproduced here.
"""

from __future__ import annotations

import struct

from unity_sb3.unity.channels import UnityChannels

from mlagents_envs.side_channel.side_channel_manager import SideChannelManager  # isort: skip


# Guid.ToByteArray() of the C# channel ids (first three groups little endian).
ENGINE_GUID = bytes.fromhex("2c3451e97e4fea11b238784f4387d1f7")  # e951342c-4f7e-11ea-b238-784f4387d1f7
PARAMS_GUID = bytes.fromhex("1e894c530f81ea11a9d0822485860400")  # 534c891e-810f-11ea-a9d0-822485860400
STATS_GUID = bytes.fromhex("b7f7d8a1c8cef950b78bd3e165a78520")  # a1d8f7b7-cec8-50f9-b78b-d3e165a78520


class CSharpReader:
    """``IncomingMessage`` of the C# package: BinaryReader semantics, defaults at the end."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = bytes(data), 0

    def can_read_more(self) -> bool:
        return self.pos < len(self.data)

    def read_int32(self, default: int = 0) -> int:
        if not self.can_read_more():
            return default
        (value,) = struct.unpack_from("<i", self.data, self.pos)
        self.pos += 4
        return value

    def read_float32(self, default: float = 0.0) -> float:
        if not self.can_read_more():
            return default
        (value,) = struct.unpack_from("<f", self.data, self.pos)
        self.pos += 4
        return value

    def read_string(self, default: str | None = None) -> str | None:
        if not self.can_read_more():
            return default
        length = self.read_int32()
        value = self.data[self.pos : self.pos + length].decode("ascii")
        self.pos += length
        return value

    def read_float_list(self) -> list[float]:
        return [self.read_float32() for _ in range(self.read_int32())]


def csharp_split(data: bytes) -> list[tuple[bytes, bytes]]:
    """``SideChannelManager.ProcessSideChannelData``: (guid bytes, payload) per message."""
    out, pos = [], 0
    while pos < len(data):
        guid = data[pos : pos + 16]
        (length,) = struct.unpack_from("<i", data, pos + 16)
        out.append((guid, data[pos + 20 : pos + 20 + length]))
        pos += 20 + length
    assert pos == len(data)
    return out


def csharp_engine_configuration(payload: bytes) -> tuple:
    """``EngineConfigurationChannel.OnMessageReceived``: what Unity sets."""
    msg = CSharpReader(payload)
    kind = msg.read_int32()
    if kind == 0:
        return ("ScreenResolution", msg.read_int32(), msg.read_int32())
    if kind == 1:
        return ("QualityLevel", msg.read_int32())
    if kind == 2:
        return ("TimeScale", msg.read_float32())
    if kind == 3:
        return ("TargetFrameRate", msg.read_int32())
    if kind == 4:
        return ("CaptureFrameRate", msg.read_int32())
    return ("Unknown", kind)


def csharp_environment_parameter(payload: bytes) -> tuple:
    """``EnvironmentParametersChannel.OnMessageReceived``: key and what it becomes."""
    msg = CSharpReader(payload)
    key = msg.read_string()
    kind = msg.read_int32()
    if kind == 0:
        return (key, "Float", msg.read_float32())
    assert kind == 1, kind
    seed = msg.read_int32()
    sampler = msg.read_int32()
    if sampler == 0:
        return (key, "Uniform", seed, msg.read_float32(), msg.read_float32())
    if sampler == 1:
        return (key, "Gaussian", seed, msg.read_float32(), msg.read_float32())
    if sampler == 2:
        return (key, "MultiRangeUniform", seed, msg.read_float_list())
    return (key, "Unknown", sampler)


def csharp_stat(key: str, value: float, method: int) -> bytes:
    """``StatsSideChannel.AddStat`` + framing, as Unity sends it."""
    encoded = key.encode("ascii")
    payload = struct.pack("<i", len(encoded)) + encoded + struct.pack("<f", value) + struct.pack("<i", method)
    return STATS_GUID + struct.pack("<i", len(payload)) + payload


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def wire(channels: UnityChannels) -> bytes:
    return bytes(SideChannelManager(channels.all()).generate_side_channel_messages())
