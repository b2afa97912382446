"""Fixed byte layouts: the player's per-agent protobuf records for a whole batch in a few numpy calls.

Building one ``AgentInfoProto`` per agent through protobuf's Python API costs ~4 us an agent
(``add``, the observation template merged, the floats extended), and reading Python's
``AgentActionProto``\\ s one by one ~2 us an agent. When every record of a batch has the same size
the bytes can be written and read as rows of a numpy structured array instead:

- :class:`InfoLayout` writes ``ListAgentInfoProto`` bytes for agents whose observations are all
  floats (no PNG): every field of a record has a fixed size when its varints (``id``,
  ``group_id``) are written in 5 bytes (a valid, non-minimal varint of the int32's 32 bits, as
  protobuf parsers accept) and its zero fields are written too. The player merges these bytes
  into its output message, and protobuf serializes that message as always: the bytes on the
  wire are protobuf's own canonical encoding of the same message (minimal varints, zero fields
  left out), so nothing Python receives changes.
- :class:`ActionLayout` reads ``ListAgentActionProto`` bytes as ``mlagents_envs`` writes them
  (``vector_actions_deprecated``, ``continuous_actions``, ``discrete_actions``, each packed, every
  discrete action below 128) and says ``None`` for anything else, which the caller then reads
  field by field.

Field numbers and wire types come from the messages' descriptors.
"""

from __future__ import annotations

import numpy as np
from mlagents_envs.communicator_objects.agent_action_pb2 import AgentActionProto
from mlagents_envs.communicator_objects.agent_info_pb2 import AgentInfoProto
from mlagents_envs.communicator_objects.observation_pb2 import ObservationProto
from mlagents_envs.communicator_objects.unity_rl_input_pb2 import UnityRLInputProto
from mlagents_envs.communicator_objects.unity_rl_output_pb2 import UnityRLOutputProto

_VARINT, _FIXED32, _LENGTH = 0, 5, 2
#: A 5-byte varint of a uint32: 7 bits per byte, the continuation bit on all but the last.
_SHIFTS = np.array([0, 7, 14, 21, 28], dtype=np.uint32)
_CONTINUE = np.array([0x80, 0x80, 0x80, 0x80, 0], dtype=np.uint32)  # bit 7 of bytes 0-3 set
#: 0 as a 5-byte varint: what a varint field of a record holds until it is written.
_ZERO5 = b"\x80\x80\x80\x80\x00"


def varint(value: int) -> bytes:
    """The minimal varint of a non-negative ``value``."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(message, field: str, wire_type: int) -> bytes:
    return varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | wire_type)


def varint5(values: np.ndarray) -> np.ndarray:
    """5-byte varints of int32 ``values`` (their 32 bits: a negative value as its uint32), shape (..., 5).

    As uint32 whose low byte is the varint's byte: ``(bits >> 7k) | 0x80`` keeps bits 7k .. 7k + 6
    below the continuation bit (the bits above go when the caller stores it as a byte); the last
    byte, ``bits >> 28``, is at most 15.
    """
    bits = np.asarray(values, dtype=np.int32).view(np.uint32)[..., None]
    return np.bitwise_or(np.right_shift(bits, _SHIFTS), _CONTINUE)


class _Builder:
    """Lays out one record: constant bytes and named fixed-size fields, in order."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.names: list[str] = []
        self.formats: list[object] = []
        self.offsets: list[int] = []
        self.size = 0

    def const(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)

    def field(self, name: str, fmt: object, initial: bytes | None = None) -> None:
        """A field of format ``fmt`` holding ``initial`` (zero bytes by default) until written."""
        itemsize = np.dtype(fmt).itemsize
        self.names.append(name)
        self.formats.append(fmt)
        self.offsets.append(self.size)
        self.const(bytes(itemsize) if initial is None else initial)

    def build(self, prefix: bytes = b"") -> tuple[bytes, np.dtype]:
        """The record's bytes (fields zero) after ``prefix``, and the dtype of its fields."""
        shift = len(prefix)
        dtype = np.dtype(
            {
                "names": self.names,
                "formats": self.formats,
                "offsets": [o + shift for o in self.offsets],
                "itemsize": shift + self.size,
            }
        )
        return prefix + b"".join(self.parts), dtype


class InfoLayout:
    """``ListAgentInfoProto`` bytes of a batch of agents with float observations only.

    :param templates: each observation's ``ObservationProto`` without its data, serialized.
    :param sizes: each observation's number of floats (all > 0).
    :param mask_size: the behavior's action-mask length (0 without discrete actions).
    """

    def __init__(self, templates: list[bytes], sizes: list[int], mask_size: int) -> None:
        self.templates = list(templates)
        self.sizes = [int(s) for s in sizes]
        self.mask_size = int(mask_size)
        self._records: dict[tuple[bool, bool], tuple[bytes, np.dtype]] = {}

    def record(self, done: bool, with_mask: bool) -> tuple[bytes, np.dtype]:
        """One agent's record (a ``value`` entry of ``ListAgentInfoProto``) and its fields' dtype."""
        key = (done, with_mask)
        if key not in self._records:
            b = _Builder()
            b.const(_tag(AgentInfoProto, "reward", _FIXED32))
            b.field("reward", "<f4")
            b.const(_tag(AgentInfoProto, "done", _VARINT) + (b"\x01" if done else b"\x00"))
            b.const(_tag(AgentInfoProto, "max_step_reached", _VARINT))
            b.field("interrupted", "u1")
            b.const(_tag(AgentInfoProto, "id", _VARINT))
            b.field("id", ("u1", 5), _ZERO5)
            if with_mask:
                b.const(_tag(AgentInfoProto, "action_mask", _LENGTH) + varint(self.mask_size))
                b.field("mask", ("u1", self.mask_size))
            for j, (template, size) in enumerate(zip(self.templates, self.sizes)):
                data = _tag(ObservationProto.FloatData, "data", _LENGTH) + varint(4 * size)
                float_data = _tag(ObservationProto, "float_data", _LENGTH) + varint(len(data) + 4 * size)
                observation = len(template) + len(float_data) + len(data) + 4 * size
                b.const(_tag(AgentInfoProto, "observations", _LENGTH) + varint(observation))
                b.const(template + float_data + data)
                b.field(f"obs{j}", ("<f4", size))
            b.const(_tag(AgentInfoProto, "group_id", _VARINT))
            b.field("group_id", ("u1", 5), _ZERO5)
            b.const(_tag(AgentInfoProto, "group_reward", _FIXED32))
            b.field("group_reward", "<f4")
            prefix = _tag(UnityRLOutputProto.ListAgentInfoProto, "value", _LENGTH) + varint(b.size)
            self._records[key] = b.build(prefix)
        return self._records[key]

    def encode(
        self,
        rewards: np.ndarray,
        ids: np.ndarray,
        group_ids: np.ndarray,
        group_rewards: np.ndarray,
        obs: list[np.ndarray],
        *,
        done: bool,
        interrupted: np.ndarray | None = None,
        masks: np.ndarray | None = None,
    ) -> bytes:
        """The records of ``n`` agents, concatenated.

        :param rewards: (n,), written as float32; ``group_rewards`` too.
        :param ids: (n,) int32 agent ids; ``group_ids`` too.
        :param obs: per observation, (n, ...) with that observation's size per agent.
        :param done: whether these agents ended their episode.
        :param interrupted: (n,) bools, for ended agents.
        :param masks: (n, mask_size) bools (True = not allowed), or ``None`` for no mask.
        """
        n = len(ids)
        if n == 0:
            return b""
        template, dtype = self.record(done, masks is not None)
        buffer = bytearray(template * n)
        rows = np.frombuffer(buffer, dtype=dtype)
        rows["reward"] = rewards
        if interrupted is not None:
            rows["interrupted"] = interrupted
        rows["id"] = varint5(ids)  # stored as bytes: each uint32's low byte
        if np.count_nonzero(group_ids):  # mostly all 0, which the record holds
            rows["group_id"] = varint5(group_ids)
        if masks is not None:
            rows["mask"] = masks
        for j, o in enumerate(obs):
            rows[f"obs{j}"] = o if np.ndim(o) == 2 else np.reshape(o, (n, -1))
        rows["group_reward"] = group_rewards
        return bytes(buffer)


class ActionLayout:
    """Reads ``ListAgentActionProto`` bytes whose every agent is laid out as ``mlagents_envs`` writes it.

    :param continuous: continuous actions per agent.
    :param discrete: discrete branches per agent.
    """

    def __init__(self, continuous: int, discrete: int) -> None:
        self.continuous, self.discrete = int(continuous), int(discrete)
        b = _Builder()
        if continuous + discrete:  # the deprecated field holds both, discrete ones as floats
            b.const(_tag(AgentActionProto, "vector_actions_deprecated", _LENGTH))
            b.const(varint(4 * (continuous + discrete)))
            b.field("deprecated", ("<f4", continuous + discrete))
        if continuous:
            b.const(_tag(AgentActionProto, "continuous_actions", _LENGTH) + varint(4 * continuous))
            b.field("continuous", ("<f4", continuous))
        if discrete:  # one byte per action while every action is below 128
            b.const(_tag(AgentActionProto, "discrete_actions", _LENGTH) + varint(discrete))
            b.field("discrete", ("u1", discrete))
        prefix = _tag(UnityRLInputProto.ListAgentActionProto, "value", _LENGTH) + varint(b.size)
        record, dtype = b.build(prefix)
        self.size = len(record)
        fields = {name: dtype.fields[name][1] for name in dtype.names}  # name -> offset
        is_field = np.zeros(self.size, dtype=bool)
        for name, offset in fields.items():
            is_field[offset : offset + dtype.fields[name][0].itemsize] = True
        #: (offset, byte) of every constant byte: tags and lengths
        self._constants = [(int(k), record[k]) for k in np.flatnonzero(~is_field)]
        self._continuous_at = fields.get("continuous", 0)
        self._discrete_at = fields.get("discrete", 0)

    def decode(self, data: bytes, n: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(continuous (n, c) float32, discrete (n, d) int32) from ``data``, or ``None`` if laid out otherwise.

        Checked with bytes operations (no per-agent Python): every record's tags and lengths, and
        every discrete byte below 128 (a one-byte varint).
        """
        size = self.size
        if len(data) != n * size or n == 0:
            return None
        for offset, byte in self._constants:  # the byte at ``offset`` of every record
            if data[offset::size].count(byte) != n:
                return None
        continuous = np.ndarray((n, self.continuous), "<f4", data, self._continuous_at, (size, 4))
        discrete = np.ndarray((n, self.discrete), np.uint8, data, self._discrete_at, (size, 1))
        for k in range(self.discrete):
            if not data[self._discrete_at + k :: size].isascii():
                return None
        return continuous.astype(np.float32), discrete.astype(np.int32)
