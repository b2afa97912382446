"""The one home of the wire encoders: behavior specs (brain parameters), observations, PNG."""

from __future__ import annotations

import struct
import zlib

import numpy as np
from mlagents_envs.base_env import BehaviorSpec, ObservationSpec
from mlagents_envs.communicator_objects.brain_parameters_pb2 import ActionSpecProto, BrainParametersProto
from mlagents_envs.communicator_objects.capabilities_pb2 import UnityRLCapabilitiesProto
from mlagents_envs.communicator_objects.space_type_pb2 import continuous as SPACE_CONTINUOUS
from mlagents_envs.communicator_objects.space_type_pb2 import discrete as SPACE_DISCRETE

from unity_sb3.unity.compat import channel_axis

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


#: zlib level for PNG data: 1 is ~3x faster than the default 6 and the images are tiny.
PNG_COMPRESSION_LEVEL = 1


def capabilities_proto() -> UnityRLCapabilitiesProto:
    """Capabilities of a current Unity package (communication version 1.5.0): all of them."""
    return UnityRLCapabilitiesProto(
        baseRLCapabilities=True,
        concatenatedPngObservations=True,
        compressedChannelMapping=True,
        hybridActions=True,
        trainingAnalytics=True,
        variableLengthObservation=True,
        multiAgentGroups=True,
    )


def brain_parameters_proto(name: str, spec: BehaviorSpec, is_training: bool = True) -> BrainParametersProto:
    """The ``BrainParametersProto`` Unity sends for a behavior.

    The deprecated single-type fields are filled too when the actions are not hybrid, as
    Unity does for trainers older than communication version 1.3.

    :param name: behavior name, e.g. ``"3DBall?team=0"``.
    :param spec: the behavior's spec.
    :param is_training: whether the behavior is controlled by the trainer.
    """
    action_spec = spec.action_spec
    proto = BrainParametersProto(
        brain_name=name,
        is_training=is_training,
        action_spec=ActionSpecProto(
            num_continuous_actions=action_spec.continuous_size,
            num_discrete_actions=action_spec.discrete_size,
            discrete_branch_sizes=list(action_spec.discrete_branches),
        ),
    )
    if action_spec.discrete_size == 0:
        proto.vector_action_size_deprecated.append(action_spec.continuous_size)
        proto.vector_action_space_type_deprecated = SPACE_CONTINUOUS
    elif action_spec.continuous_size == 0:
        proto.vector_action_size_deprecated.extend(action_spec.discrete_branches)
        proto.vector_action_space_type_deprecated = SPACE_DISCRETE
    return proto


def to_uint8(values: np.ndarray) -> np.ndarray:
    """Quantise floats in [0, 1] to bytes as Unity's ``Color32`` does: clip, scale by 255, round.

    :param values: float array of any shape.
    :return: ``uint8`` array of the same shape.
    """
    return np.rint(np.clip(values, 0.0, 1.0) * 255.0).astype(np.uint8)


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def encode_png_rgb(image: np.ndarray, level: int = PNG_COMPRESSION_LEVEL) -> bytes:
    """Encode one 8-bit RGB image as PNG (no filtering, zlib ``level``).

    :param image: ``uint8`` array of shape (height, width, 3).
    :param level: zlib compression level, 0-9.
    :return: the PNG file's bytes.
    """
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(
            f"encode_png_rgb needs a uint8 (height, width, 3) array, got {image.dtype} {image.shape}"
        )
    height, width, _ = image.shape
    rows = np.zeros((height, 1 + width * 3), dtype=np.uint8)  # a 0 byte per row: filter type None
    rows[:, 1:] = image.reshape(height, width * 3)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit, colour type 2 (RGB)
    return (
        PNG_SIGNATURE
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), level))
        + _png_chunk(b"IEND", b"")
    )


def channel_mapping(channels: int) -> list[int]:
    """The ``compressed_channel_mapping`` Unity sends for ``channels`` channels (empty for 3).

    Channels are packed three to a PNG; padding channels map to -1. One channel maps to
    ``[0, -1, -1]`` rather than Unity's grayscale ``[0, 0, 0]`` so that ``mlagents_envs``
    averages a single value and returns it bit-exact.

    :param channels: number of channels of the observation.
    """
    if channels == 3:
        return []
    padded = -(-channels // 3) * 3
    return list(range(channels)) + [-1] * (padded - channels)


class PngCache:
    """Remembers the PNGs of recent images: scenes redraw the same frames (GridWorld's cells).

    Keys are the exact bytes zlib would compress, so a hit returns what encoding would give.
    When the keys held exceed ``max_bytes`` the cache starts over (cheaper than LRU order).

    :param max_bytes: bound on the summed size of the stored keys, in bytes.
    """

    def __init__(self, max_bytes: int = 16 * 2**20) -> None:
        self.max_bytes = max_bytes
        self._pngs: dict[bytes, bytes] = {}
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> bytes | None:
        """The PNG stored for ``key``, or ``None``."""
        png = self._pngs.get(key)
        if png is None:
            self.misses += 1
        else:
            self.hits += 1
        return png

    def put(self, key: bytes, png: bytes) -> None:
        """Store ``png`` for ``key``, first forgetting everything if the bound would be passed."""
        if self._bytes + len(key) > self.max_bytes:
            self._pngs.clear()
            self._bytes = 0
        self._pngs[key] = png
        self._bytes += len(key)


def _png_rows(images: np.ndarray, channel_first: bool) -> np.ndarray:
    """Quantised images as PNG scanlines: ``rows[i, g, y]`` = filter byte 0, then the RGB bytes of
    row ``y`` of the ``g``-th three-channel group of image ``i`` (channels zero-padded to 3k).

    :return: ``uint8`` array (n, groups, height, 1 + 3 width).
    """
    data = to_uint8(images)
    if not channel_first:
        data = data.transpose(0, 3, 1, 2)
    n, c, h, w = data.shape
    groups = -(-c // 3)
    rows = np.empty((n, groups, h, 1 + w * 3), dtype=np.uint8)
    rows[..., 0] = 0
    pixels = rows[..., 1:].reshape(n, groups, h, w, 3)  # a view into rows
    for channel in range(groups * 3):  # one plane at a time: long inner loops, fast copies
        group, colour = divmod(channel, 3)
        pixels[:, group, :, :, colour] = data[:, channel] if channel < c else 0
    return rows


def encode_visual_batch(
    images: np.ndarray, channel_first: bool = False, cache: PngCache | None = None
) -> list[bytes]:
    """PNG-encode the rank-3 observations of a batch of agents, one payload per agent.

    Quantisation, layout and filtering are done once for the whole batch; only zlib and the
    chunk framing run per image (and not at all for an image found in ``cache``).

    :param images: float array (n, height, width, channels) or, with ``channel_first``,
        (n, channels, height, width); values in [0, 1] (others are clipped).
    :param channel_first: whether the channels come first in each observation.
    :param cache: PNGs of earlier images, consulted and filled when given.
    :return: for each agent, one PNG or ``ceil(channels / 3)`` PNGs concatenated, channels
        zero-padded to a multiple of 3.
    """
    rows = _png_rows(images, channel_first)
    n, groups, h, line = rows.shape
    ihdr = _png_chunk(b"IHDR", struct.pack(">IIBBBBB", (line - 1) // 3, h, 8, 2, 0, 0, 0))
    head, tail = PNG_SIGNATURE + ihdr, _png_chunk(b"IEND", b"")
    payloads = []
    for i in range(n):
        key = rows[i].tobytes()
        payload = cache.get(key) if cache is not None else None
        if payload is None:
            size = h * line
            payload = b"".join(
                head
                + _png_chunk(b"IDAT", zlib.compress(key[g * size : (g + 1) * size], PNG_COMPRESSION_LEVEL))
                + tail
                for g in range(groups)
            )
            if cache is not None:
                cache.put(key, payload)
        payloads.append(payload)
    return payloads


def encode_visual(image: np.ndarray, channel_first: bool = False) -> bytes:
    """PNG-encode one rank-3 observation (see :func:`encode_visual_batch`).

    :param image: float array, (height, width, channels) or, with ``channel_first``,
        (channels, height, width); values in [0, 1] (others are clipped).
    :param channel_first: whether the channels are the first axis.
    """
    return encode_visual_batch(np.asarray(image)[None], channel_first)[0]


def is_channel_first(obs_spec: ObservationSpec) -> bool:
    """Whether a rank-3 observation spec is channel-first, as the Python side will decide it."""
    return channel_axis(tuple(obs_spec.shape), tuple(int(d) for d in obs_spec.dimension_property)) == 0
