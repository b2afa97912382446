"""The ``.demo`` byte format: framing, metadata, brain parameters, records and PNG observations.

A ``.demo`` file, as Unity's ``DemonstrationWriter`` writes it and ML-Agents' ``demo_loader``
reads it, is a stream of varint-length-prefixed protobuf messages:

- byte 0: ``DemonstrationMetaProto`` (length-prefixed). The writer reserves bytes 0..32 for it
  and seeks to byte 33 before writing anything else; readers seek to 33 after reading it.
- byte 33: one ``BrainParametersProto`` (length-prefixed).
- then ``AgentInfoActionPairProto`` records (length-prefixed), ``meta.number_steps`` of them,
  or up to the end of the file when ``number_steps == 0`` (a recording that was never closed).

Unity's writer rewrites the metadata at offset 0 when it closes, and (by accident) first writes
the same metadata bytes, unprefixed, at the end of the file: those are the "trailing bytes" some
real recordings carry after their last record. They are not a record.

This module only knows bytes and protobuf messages; :mod:`unity_sb3.demos.reader` builds the
dataset on top. Every problem with the bytes raises :class:`DemoFormatError` with the offset.
"""

from __future__ import annotations

import io
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError
from mlagents_envs.base_env import (
    ActionSpec,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)
from mlagents_envs.communicator_objects.agent_info_action_pair_pb2 import AgentInfoActionPairProto
from mlagents_envs.communicator_objects.agent_info_pb2 import AgentInfoProto
from mlagents_envs.communicator_objects.brain_parameters_pb2 import BrainParametersProto
from mlagents_envs.communicator_objects.demonstration_meta_pb2 import DemonstrationMetaProto
from mlagents_envs.communicator_objects.observation_pb2 import NONE as COMPRESSION_NONE
from mlagents_envs.communicator_objects.observation_pb2 import PNG as COMPRESSION_PNG
from mlagents_envs.communicator_objects.observation_pb2 import ObservationProto

from unity_sb3.unity.proto import PNG_SIGNATURE, encode_png_rgb, to_uint8

#: Byte offset of the brain parameters (Unity: ``DemonstrationWriter.MetaDataBytes + 1``).
BRAIN_PARAMETERS_OFFSET = 33
#: ``DemonstrationMetaProto.api_version`` values this reader understands (as ML-Agents' loader).
SUPPORTED_API_VERSIONS = (0, 1)
#: The version our writer puts in the file (Unity's ``DemonstrationMetaData.ApiVersion``).
WRITER_API_VERSION = 1
#: ``BrainParametersProto.vector_action_space_type_deprecated`` values.
SPACE_TYPE_DISCRETE = 0
SPACE_TYPE_CONTINUOUS = 1

_CHW = (
    DimensionProperty.NONE,
    DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
    DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
)
_HWC = (
    DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
    DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
    DimensionProperty.NONE,
)
# an observation bigger than this many values is not a real recording but corrupt data
_MAX_OBS_VALUES = 1 << 28


class DemoFormatError(ValueError):
    """A ``.demo`` file is truncated, corrupt or of an unsupported version.

    :param message: what is wrong.
    :param path: the file, when known.
    :param offset: the byte offset where the problem was found, when known.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None) -> None:
        self.path = path
        self.offset = offset
        where = []
        if path is not None:
            where.append(str(path))
        if offset is not None:
            where.append(f"at byte {offset}")
        prefix = (" ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)


@dataclass(frozen=True)
class DemoMeta:
    """The ``DemonstrationMetaProto`` of a file (or the sum over several files).

    :param api_version: format version (Unity writes 1).
    :param demonstration_name: the name given to the recorder (Unity truncates it to 16 characters).
    :param number_steps: records the writer says it wrote (0: the file was never closed).
    :param number_episodes: episodes the writer counted (Unity counts done records + 1).
    :param mean_reward: sum of all record rewards / ``number_episodes``.
    :param trailing_bytes: bytes after the last record read (not part of the protobuf message).
    """

    api_version: int
    demonstration_name: str
    number_steps: int
    number_episodes: int
    mean_reward: float
    trailing_bytes: int = 0


# ---------------------------------------------------------------------------------- varints
def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    if value < 0:
        raise ValueError(f"varint of a negative number: {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(data: bytes, pos: int, *, what: str, path: str | None = None) -> tuple[int, int]:
    """Read a varint (at most 32 bits, as Unity's length prefixes) at ``pos``.

    :return: ``(value, position after the varint)``.
    """
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= len(data):
            raise DemoFormatError(
                f"file ends inside the length prefix of {what} (file size {len(data)} bytes); "
                "the file is truncated",
                path=path,
                offset=start,
            )
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift >= 35:
            raise DemoFormatError(
                f"the length prefix of {what} is not a valid varint", path=path, offset=start
            )
    if result >= 1 << 32:
        raise DemoFormatError(f"the length prefix of {what} is larger than 32 bits", path=path, offset=start)
    return result, pos


def read_frame(data: bytes, pos: int, *, what: str, path: str | None = None) -> tuple[int, int]:
    """Read one length-prefixed message frame at ``pos``.

    :return: ``(start, end)`` of the message bytes.
    """
    length, start = decode_varint(data, pos, what=what, path=path)
    end = start + length
    if end > len(data):
        raise DemoFormatError(
            f"{what} says it is {length} bytes long but the file ends {len(data) - start} bytes later "
            f"(file size {len(data)}); the file is truncated or corrupt",
            path=path,
            offset=pos,
        )
    return start, end


def parse_message(cls: type, payload: bytes, *, what: str, path: str | None, offset: int):
    """``cls.FromString(payload)`` with protobuf errors turned into :class:`DemoFormatError`."""
    try:
        return cls.FromString(payload)
    except (DecodeError, RuntimeError, ValueError, TypeError) as exc:  # upb raises DecodeError
        raise DemoFormatError(
            f"{what} is not a valid {cls.__name__}: {exc}", path=path, offset=offset
        ) from exc


def write_delimited(stream: io.BufferedIOBase, message) -> int:
    """Write a varint-length-prefixed message; return the bytes written."""
    payload = message.SerializeToString()
    prefix = encode_varint(len(payload))
    stream.write(prefix)
    stream.write(payload)
    return len(prefix) + len(payload)


# ---------------------------------------------------------------------------------- metadata
def meta_to_proto(meta: DemoMeta) -> DemonstrationMetaProto:
    return DemonstrationMetaProto(
        api_version=meta.api_version,
        demonstration_name=meta.demonstration_name,
        number_steps=meta.number_steps,
        number_episodes=meta.number_episodes,
        mean_reward=meta.mean_reward,
    )


def meta_from_proto(proto: DemonstrationMetaProto, trailing_bytes: int = 0) -> DemoMeta:
    return DemoMeta(
        api_version=int(proto.api_version),
        demonstration_name=str(proto.demonstration_name),
        number_steps=int(proto.number_steps),
        number_episodes=int(proto.number_episodes),
        mean_reward=float(proto.mean_reward),
        trailing_bytes=trailing_bytes,
    )


def fit_demonstration_name(name: str, meta: DemoMeta) -> str:
    """Shorten ``name`` until the length-prefixed metadata fits before byte 33.

    Unity's recorder keeps names to 16 characters for the same reason; longer names would
    overwrite the brain parameters.
    """
    while True:
        proto = meta_to_proto(
            DemoMeta(meta.api_version, name, meta.number_steps, meta.number_episodes, meta.mean_reward)
        )
        size = proto.ByteSize()
        if len(encode_varint(size)) + size <= BRAIN_PARAMETERS_OFFSET or not name:
            return name
        name = name[:-1]


# ---------------------------------------------------------------------------------- behavior spec
def behavior_spec_from_protos(
    brain: BrainParametersProto,
    agent_info: AgentInfoProto,
    *,
    path: str | None = None,
    offset: int | None = None,
) -> BehaviorSpec:
    """The ``BehaviorSpec`` of a recording: actions from the brain parameters (new ``action_spec``,
    else the legacy fields, like ``mlagents_envs.rpc_utils.behavior_spec_from_proto``), observation
    shapes from the first record."""
    obs_specs = []
    for i, obs in enumerate(agent_info.observations):
        shape = tuple(int(d) for d in obs.shape)
        if not 1 <= len(shape) <= 3 or any(d < 0 for d in shape):
            raise DemoFormatError(
                f"observation {i} of the first record has an invalid shape {shape}", path=path, offset=offset
            )
        if math.prod(shape) > _MAX_OBS_VALUES:
            raise DemoFormatError(
                f"observation {i} of the first record has an absurd shape {shape}", path=path, offset=offset
            )
        props = tuple(int(p) for p in obs.dimension_properties)
        try:
            dim_props = (
                tuple(DimensionProperty(p) for p in props)
                if props
                else (DimensionProperty.UNSPECIFIED,) * len(shape)
            )
            obs_type = ObservationType(int(obs.observation_type))
        except ValueError as exc:
            raise DemoFormatError(
                f"observation {i} of the first record: {exc}", path=path, offset=offset
            ) from exc
        if len(dim_props) != len(shape):
            raise DemoFormatError(
                f"observation {i} of the first record has {len(dim_props)} dimension properties for shape {shape}",
                path=path,
                offset=offset,
            )
        obs_specs.append(
            ObservationSpec(
                shape=shape, dimension_property=dim_props, observation_type=obs_type, name=obs.name
            )
        )

    spec = brain.action_spec
    if (
        spec.num_continuous_actions == 0
        and spec.num_discrete_actions == 0
        and not len(spec.discrete_branch_sizes)
    ):
        sizes = tuple(int(s) for s in brain.vector_action_size_deprecated)
        if brain.vector_action_space_type_deprecated == SPACE_TYPE_CONTINUOUS:
            if len(sizes) != 1:
                raise DemoFormatError(
                    f"legacy continuous action space must have exactly one size, got {list(sizes)}",
                    path=path,
                    offset=offset,
                )
            continuous, branches = sizes[0], ()
        else:
            continuous, branches = 0, sizes
    else:
        continuous, branches = (
            int(spec.num_continuous_actions),
            tuple(int(b) for b in spec.discrete_branch_sizes),
        )
    if continuous < 0 or any(b <= 0 for b in branches):
        raise DemoFormatError(
            f"invalid action spec: {continuous} continuous actions, discrete branches {list(branches)}",
            path=path,
            offset=offset,
        )
    return BehaviorSpec(obs_specs, ActionSpec(continuous, branches))


# ---------------------------------------------------------------------------------- PNG observations
def split_pngs(data: bytes) -> list[bytes]:
    """Split concatenated PNG files (Unity concatenates one RGB PNG per 3 channels) by walking
    their chunks up to each ``IEND``."""
    images = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 8] != PNG_SIGNATURE:
            raise ValueError(f"no PNG signature at byte {pos} of the compressed observation")
        cursor = pos + 8
        while True:
            if cursor + 12 > len(data):
                raise ValueError("compressed observation ends inside a PNG chunk")
            length = int.from_bytes(data[cursor : cursor + 4], "big")
            kind = data[cursor + 4 : cursor + 8]
            cursor += 12 + length
            if cursor > len(data):
                raise ValueError("compressed observation ends inside a PNG chunk")
            if kind == b"IEND":
                break
        images.append(data[pos:cursor])
        pos = cursor
    if not images:
        raise ValueError("compressed observation holds no PNG image")
    return images


def _decode_png(png: bytes) -> np.ndarray:
    """One PNG as ``(H, W, C)`` float64 levels in [0, 255]."""
    from PIL import Image

    with Image.open(io.BytesIO(png), formats=("PNG",)) as image:
        if image.mode not in ("L", "LA", "RGB", "RGBA"):
            image = image.convert("RGB")
        array = np.asarray(image, dtype=np.float64)
    if array.ndim == 2:
        array = array[:, :, None]
    return array


def _enum_int(value) -> int:
    """``int`` of an ``mlagents_envs`` enum member (``ObservationType`` is a plain ``Enum``)."""
    return int(getattr(value, "value", value))


def visual_layout(
    shape: Sequence[int], dimension_property: Sequence[int], image_hw: tuple[int, int] | None = None
) -> str:
    """``"hwc"`` or ``"chw"`` for a 3-D observation.

    The dimension properties decide when they say which axis is the channel (Unity 2.x writes
    ``(TE, TE, NONE)``, Unity 3.x ``(NONE, TE, TE)``); otherwise the decoded image's size does;
    otherwise HWC (older Unity versions wrote no dimension properties and were all HWC).
    """
    props = tuple(_enum_int(p) for p in dimension_property)
    if props == tuple(_enum_int(p) for p in _CHW):
        return "chw"
    if props == tuple(_enum_int(p) for p in _HWC):
        return "hwc"
    if image_hw is not None:
        hwc = tuple(shape[:2]) == image_hw
        chw = tuple(shape[1:]) == image_hw
        if chw and not hwc:
            return "chw"
    return "hwc"


def decode_png_observation(
    data: bytes, shape: Sequence[int], mapping: Sequence[int], dimension_property: Sequence[int]
) -> np.ndarray:
    """Decode a PNG-compressed observation to float32 in [0, 1] in ``shape``.

    Channels of the concatenated PNGs are combined as ``mlagents_envs`` does: with a
    ``compressed_channel_mapping``, channel ``k`` is the mean of the PNG channels mapped to ``k``
    (``-1``: padding, dropped); without one, a 1-channel observation is the mean of the first
    image's channels and otherwise the first ``C`` channels are kept.

    :raises ValueError: when the bytes are not PNGs or do not fit ``shape``.
    """
    if len(shape) != 3:
        raise ValueError(f"a PNG-compressed observation must be 3-D, its shape is {tuple(shape)}")
    images = [_decode_png(png) for png in split_pngs(data)]
    height, width = images[0].shape[:2]
    if any(img.shape[:2] != (height, width) for img in images):
        raise ValueError("the concatenated PNG images have different sizes")
    layout = visual_layout(shape, dimension_property, (height, width))
    channels = shape[0] if layout == "chw" else shape[2]
    stacked = np.concatenate(images, axis=2)
    if len(mapping):
        mapping = [int(m) for m in mapping]
        if len(mapping) != stacked.shape[2]:
            raise ValueError(
                f"channel mapping has {len(mapping)} entries for {stacked.shape[2]} decoded channels"
            )
        targets = sorted({m for m in mapping if m > -1})
        if targets != list(range(len(targets))):
            raise ValueError(f"invalid compressed channel mapping {mapping}")
        levels = np.stack(
            [stacked[:, :, [i for i, m in enumerate(mapping) if m == k]].mean(axis=2) for k in targets],
            axis=2,
        )
    elif channels == 1:
        levels = images[0].mean(axis=2, keepdims=True)
    else:
        levels = stacked[:, :, :channels]
    # average integer levels first, then divide once in float32 (as mlagents_envs divides):
    # identical channels (a grey image stored as RGB) decode to exactly k / 255
    out = levels.astype(np.float32) / np.float32(255.0)
    if layout == "chw":
        out = out.transpose(2, 0, 1)
    if out.shape != tuple(shape):
        raise ValueError(f"decoded PNG observation has shape {out.shape}, the record says {tuple(shape)}")
    return np.ascontiguousarray(out)


def is_uint8_representable(obs: np.ndarray) -> bool:
    """Whether float values are exactly ``k / 255`` for integers ``k`` in [0, 255] (PNG is lossless for them)."""
    obs = np.asarray(obs, dtype=np.float32)
    if obs.size == 0 or not np.all(np.isfinite(obs)) or obs.min() < 0.0 or obs.max() > 1.0:
        return False
    levels = np.round(obs * 255.0).astype(np.uint8)
    return bool(np.array_equal(levels.astype(np.float32) / np.float32(255.0), obs))


def encode_png_observation(obs: np.ndarray, layout: str) -> tuple[bytes, list[int]]:
    """PNG-compress one 3-D observation in [0, 1] the way Unity does: one RGB PNG per 3 channels.

    :param obs: float array, HWC or CHW (``layout``); values are rounded to ``k / 255``.
    :return: the concatenated PNG bytes and the ``compressed_channel_mapping``. A 1-channel
        observation is stored as a grey RGB image with mapping ``[0, 0, 0]``; a channel count that
        is not a multiple of 3 is padded with zero channels mapped to ``-1``.
    """
    hwc = np.asarray(obs, dtype=np.float32)
    if layout == "chw":
        hwc = hwc.transpose(1, 2, 0)
    levels = to_uint8(hwc)
    channels = levels.shape[2]
    if channels == 1:
        levels = np.repeat(levels, 3, axis=2)
        mapping = [0, 0, 0]
    else:
        pad = (-channels) % 3
        if pad:
            levels = np.concatenate([levels, np.zeros((*levels.shape[:2], pad), np.uint8)], axis=2)
        mapping = list(range(channels)) + [-1] * pad
    pngs = (
        encode_png_rgb(np.ascontiguousarray(levels[:, :, start : start + 3]))
        for start in range(0, levels.shape[2], 3)
    )
    return b"".join(pngs), mapping


def decode_observation(
    obs: ObservationProto, shape: tuple[int, ...], dimension_property: Sequence[int]
) -> np.ndarray:
    """One observation of one record as float32 in ``shape``.

    :raises ValueError: when the data does not fit the shape or cannot be decoded.
    """
    if tuple(obs.shape) != tuple(shape):
        raise ValueError(f"shape {tuple(obs.shape)} differs from the first record's {tuple(shape)}")
    if obs.compression_type == COMPRESSION_NONE:
        values = obs.float_data.data
        if len(values) != math.prod(shape):
            raise ValueError(f"{len(values)} float values for shape {tuple(shape)}")
        return np.asarray(values, dtype=np.float32).reshape(shape)
    if obs.compression_type == COMPRESSION_PNG:
        props = tuple(obs.dimension_properties) or tuple(dimension_property)
        try:
            return decode_png_observation(obs.compressed_data, shape, obs.compressed_channel_mapping, props)
        except (
            OSError,
            SyntaxError,
            zlib.error,
            EOFError,
            MemoryError,
        ) as exc:  # Pillow's ways to say "bad PNG"
            raise ValueError(f"PNG data cannot be decoded: {exc}") from exc
        except Exception as exc:  # Pillow raises many types (DecompressionBombError, struct.error, ...)
            raise ValueError(f"PNG data cannot be decoded: {type(exc).__name__}: {exc}") from exc
    raise ValueError(f"unknown compression type {obs.compression_type}")


def encode_observation(obs: np.ndarray, spec: ObservationSpec, compress: bool) -> ObservationProto:
    """``ObservationProto`` of one agent's observation (as Unity's ``GetObservationProto``)."""
    shape = tuple(int(d) for d in spec.shape)
    proto = ObservationProto(
        shape=shape, observation_type=_enum_int(spec.observation_type), name=spec.name or ""
    )
    props = [_enum_int(p) for p in spec.dimension_property]
    if any(props):
        proto.dimension_properties.extend(props)
    if compress:
        layout = visual_layout(shape, props)
        data, mapping = encode_png_observation(obs, layout)
        proto.compression_type = COMPRESSION_PNG
        proto.compressed_data = data
        proto.compressed_channel_mapping.extend(mapping)
    else:
        proto.compression_type = COMPRESSION_NONE
        proto.float_data.data.extend(np.asarray(obs, dtype=np.float32).ravel().tolist())
    return proto


def make_record(
    observations: Sequence[np.ndarray],
    spec: BehaviorSpec,
    compress: Sequence[bool],
    *,
    reward: float,
    done: bool,
    interrupted: bool,
    agent_id: int,
    continuous: np.ndarray | None,
    discrete: np.ndarray | None,
    action_mask: np.ndarray | None = None,
    group_id: int = 0,
    group_reward: float = 0.0,
) -> AgentInfoActionPairProto:
    """One ``AgentInfoActionPairProto``: new action fields always; the legacy
    ``vector_actions_deprecated`` too when the actions are not hybrid (older loaders read it,
    current ML-Agents uses it for ``prev_action``)."""
    info = AgentInfoProto(
        reward=float(reward),
        done=bool(done),
        max_step_reached=bool(interrupted),
        id=int(agent_id),
        group_id=int(group_id),
        group_reward=float(group_reward),
    )
    if action_mask is not None:
        info.action_mask.extend(bool(m) for m in np.asarray(action_mask).ravel())
    for o, o_spec, c in zip(observations, spec.observation_specs, compress):
        info.observations.append(encode_observation(o, o_spec, c))
    pair = AgentInfoActionPairProto(agent_info=info)
    action_spec = spec.action_spec
    if continuous is not None and action_spec.continuous_size:
        values = np.asarray(continuous, dtype=np.float32).ravel().tolist()
        pair.action_info.continuous_actions.extend(values)
        if not action_spec.discrete_size:
            pair.action_info.vector_actions_deprecated.extend(values)
    if discrete is not None and action_spec.discrete_size:
        values = np.asarray(discrete).astype(np.int64).ravel().tolist()
        pair.action_info.discrete_actions.extend(values)
        if not action_spec.continuous_size:
            pair.action_info.vector_actions_deprecated.extend(float(v) for v in values)
    return pair
