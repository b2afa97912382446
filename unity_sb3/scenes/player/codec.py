"""Conversions between a ``BaseEnv``'s data and the Unity side of the ML-Agents protocol.

The stand-in player (:mod:`unity_sb3.scenes.player.server`) uses these to write what a Unity build
writes and read what Python sends. Everything here is checked against how
``mlagents_envs`` 0.28 parses it (``rpc_utils.behavior_spec_from_proto`` and
``steps_from_proto``):

- Float observations (rank 1 and 2) travel as ``float_data`` (32-bit floats: exact).
- Rank-3 (visual) observations travel PNG-compressed, as Unity sends camera and render
  texture sensors: one height x width image per three channels. Current Unity packages
  declare visual observations channel-first (C, H, W) and older ones (H, W, C);
  :func:`unity_sb3.unity.compat.channel_axis` tells them apart (by dimension properties,
  then by size) and the patched decoder in :mod:`unity_sb3.unity.compat` restores either
  layout, so the player encodes with that same function and Python gets back the scene's
  array in the scene's layout. Channel counts other than 3 use concatenated PNGs plus
  ``compressed_channel_mapping`` (capabilities ``concatenatedPngObservations`` and
  ``compressedChannelMapping``), as Unity does for stacked or grayscale sensors.
- PNG is 8-bit: each value is clipped to [0, 1] and rounded to the nearest ``k / 255``
  (what Unity's ``Color`` -> ``Color32`` conversion does). Values that already are
  ``np.float32(k) / 255`` arrive bit-identical; any other value moves by at most 0.5/255.
- Action masks: one ``bool`` per discrete action, all branches concatenated,
  ``True`` = not allowed (the same meaning as ``DecisionSteps.action_mask``).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from itertools import chain

import numpy as np
from mlagents_envs.base_env import ActionTuple, BehaviorSpec, DecisionSteps, ObservationSpec, TerminalSteps
from mlagents_envs.communicator_objects.agent_action_pb2 import AgentActionProto
from mlagents_envs.communicator_objects.observation_pb2 import NONE, PNG, ObservationProto
from mlagents_envs.communicator_objects.unity_rl_output_pb2 import UnityRLOutputProto

from unity_sb3.scenes.player.layouts import ActionLayout, InfoLayout
from unity_sb3.unity.proto import (
    PngCache,
    channel_mapping,
    encode_visual,
    encode_visual_batch,
    is_channel_first,
)

#: Channel of ``DefaultTrainingAnalyticsSideChannel``: Unity's runtime consumes it, not the scene.
TRAINING_ANALYTICS_CHANNEL = uuid.UUID("b664a4a9-d86f-5a5f-95cb-e8353a7e8356")


def without_channels(data: bytes, channels: set[uuid.UUID]) -> bytes:
    """Side-channel bytes with the messages of ``channels`` removed.

    The format (both directions) is a sequence of: channel id (16 bytes, ``uuid.bytes_le``),
    little-endian int32 length, payload.

    :raises ProtocolError: when the bytes are truncated.
    """
    kept = []
    offset = 0
    view = memoryview(data)
    while offset < len(data):
        if offset + 20 > len(data):
            raise ProtocolError(
                f"truncated side-channel data: {len(data) - offset} bytes left at offset {offset}"
            )
        channel_id = uuid.UUID(bytes_le=bytes(view[offset : offset + 16]))
        (length,) = struct.unpack_from("<i", data, offset + 16)
        end = offset + 20 + length
        if length < 0 or end > len(data):
            raise ProtocolError(
                f"side-channel message of {length} bytes at offset {offset} runs past the end"
            )
        if channel_id not in channels:
            kept.append(view[offset:end])
        offset = end
    return b"".join(kept)


class ProtocolError(RuntimeError):
    """Python sent something a Unity build could not have accepted (e.g. wrong action count)."""


class BehaviorEncoder:
    """Writes one behavior's ``DecisionSteps`` and ``TerminalSteps`` into ``AgentInfoProto``\\ s.

    The fixed part of each observation (shape, name, type, dimension properties, compression,
    channel mapping) is serialized once and merged into each agent's observation. Each visual
    observation keeps a :class:`~unity_sb3.unity.proto.PngCache`: scenes redraw the same frames.

    :param spec: the behavior's spec.
    :param compress_visual: send rank-3 observations as PNG (like Unity's camera sensors) or,
        when ``False``, as raw floats (like a sensor with compression ``None``; exact floats).
    """

    def __init__(self, spec: BehaviorSpec, compress_visual: bool = True) -> None:
        self.spec = spec
        self.compress_visual = compress_visual
        self._templates: list[bytes] = []
        self._visual: list[bool] = []
        self._channel_first: list[bool] = []
        self._png_caches: list[PngCache | None] = []
        for obs_spec in spec.observation_specs:
            visual = compress_visual and len(obs_spec.shape) == 3
            self._visual.append(visual)
            self._channel_first.append(visual and is_channel_first(obs_spec))
            self._png_caches.append(PngCache() if visual else None)
            self._templates.append(self._template(obs_spec, visual).SerializeToString())
        self._mask_size = int(sum(spec.action_spec.discrete_branches))
        sizes = [int(np.prod(obs_spec.shape)) for obs_spec in spec.observation_specs]
        #: every observation floats: each agent's record has one size, written for all at once
        self.layout = (
            InfoLayout(self._templates, sizes, self._mask_size)
            if not any(self._visual) and all(sizes)
            else None
        )

    @staticmethod
    def _template(obs_spec: ObservationSpec, visual: bool) -> ObservationProto:
        proto = ObservationProto(
            shape=list(obs_spec.shape),
            compression_type=PNG if visual else NONE,
            dimension_properties=[int(d) for d in obs_spec.dimension_property],
            observation_type=obs_spec.observation_type.value,
            name=obs_spec.name,
        )
        if visual:
            channels = obs_spec.shape[0] if is_channel_first(obs_spec) else obs_spec.shape[2]
            proto.compressed_channel_mapping.extend(channel_mapping(channels))
        return proto

    def _check(self, obs: list[np.ndarray], n: int) -> None:
        """Raise ``ValueError`` unless ``obs`` are ``n`` agents' observations of the spec's shapes."""
        if len(obs) != len(self._templates):
            raise ValueError(
                f"the scene gave {len(obs)} observations, its spec declares {len(self._templates)}"
            )
        for o, obs_spec in zip(obs, self.spec.observation_specs):
            if tuple(np.shape(o)) != (n, *obs_spec.shape):
                raise ValueError(
                    f"observation {obs_spec.name!r} has shape {tuple(np.shape(o))}, "
                    f"its spec says {(n, *obs_spec.shape)} for {n} agents"
                )

    def _observations(self, obs: list[np.ndarray], n: int) -> list[list]:
        """Per observation: a list of n per-agent payloads (float lists or PNG bytes)."""
        self._check(obs, n)
        payloads = []
        for o, visual, channel_first, cache in zip(obs, self._visual, self._channel_first, self._png_caches):
            if visual:
                payloads.append(encode_visual_batch(np.asarray(o), channel_first, cache))
            else:
                payloads.append(np.asarray(o, dtype=np.float32).reshape(n, -1).tolist())
        return payloads

    def write(
        self,
        infos,
        steps: DecisionSteps | TerminalSteps,
        *,
        done: bool,
    ) -> None:
        """Append one ``AgentInfoProto`` per agent of ``steps`` to the repeated field ``infos``.

        :param infos: ``UnityRLOutputProto.agentInfos[name].value``.
        :param steps: decision steps (``done=False``) or terminal steps (``done=True``).
        :param done: whether these agents ended their episode.
        """
        n = len(steps.agent_id)
        if n == 0:
            return
        ids = np.asarray(steps.agent_id).tolist()
        rewards = np.asarray(steps.reward, dtype=np.float32).tolist()
        group_ids = np.asarray(steps.group_id).tolist()
        group_rewards = np.asarray(steps.group_reward, dtype=np.float32).tolist()
        interrupted = np.asarray(steps.interrupted).tolist() if done else None
        masks = None
        if not done and self._mask_size and steps.action_mask is not None:
            masks = np.concatenate([np.asarray(m, dtype=bool) for m in steps.action_mask], axis=1).tolist()
        payloads = self._observations(steps.obs, n)
        for i in range(n):
            info = infos.add(
                id=ids[i],
                reward=rewards[i],
                done=done,
                group_id=group_ids[i],
                group_reward=group_rewards[i],
            )
            if done:
                info.max_step_reached = interrupted[i]
            elif masks is not None:
                info.action_mask.extend(masks[i])
            for template, visual, payload in zip(self._templates, self._visual, payloads):
                obs = info.observations.add()
                obs.MergeFromString(template)
                if visual:
                    obs.compressed_data = payload[i]
                else:
                    obs.float_data.data.extend(payload[i])

    def encode(self, steps: DecisionSteps | TerminalSteps, *, done: bool) -> bytes:
        """What :meth:`write` appends, as ``ListAgentInfoProto`` bytes (needs :attr:`layout`).

        Merged into ``UnityRLOutputProto.agentInfos[name]`` these give the message :meth:`write`
        builds, field for field (see :mod:`unity_sb3.scenes.player.layouts`).
        """
        n = len(steps.agent_id)
        if n == 0:
            return b""
        self._check(steps.obs, n)
        masks = None
        if not done and self._mask_size and steps.action_mask is not None:
            masks = np.concatenate([np.asarray(m, dtype=bool) for m in steps.action_mask], axis=1)
        return self.layout.encode(
            steps.reward,
            _int32(steps.agent_id, "agent ids"),
            _int32(steps.group_id, "group ids"),
            steps.group_reward,
            steps.obs,
            done=done,
            interrupted=np.asarray(steps.interrupted) if done else None,
            masks=masks,
        )

    def write_placeholder(self, infos) -> None:
        """Append one agent with zero observations: the handshake only needs its shapes."""
        info = infos.add(id=0)
        for template, visual, channel_first, obs_spec in zip(
            self._templates, self._visual, self._channel_first, self.spec.observation_specs
        ):
            obs = info.observations.add()
            obs.MergeFromString(template)
            zeros = np.zeros(obs_spec.shape, dtype=np.float32)
            if visual:
                obs.compressed_data = encode_visual(zeros, channel_first)
            else:
                obs.float_data.data.extend(zeros.ravel().tolist())


def write_steps(
    output: UnityRLOutputProto,
    name: str,
    encoder: BehaviorEncoder,
    decision_steps: DecisionSteps,
    terminal_steps: TerminalSteps,
) -> None:
    """Write one behavior's step into ``output.agentInfos[name]``: terminal agents first.

    An agent that ended and immediately asked for a new decision appears twice, as in Unity
    (its final info with ``done=True``, then its new episode's first info).
    """
    if encoder.layout is not None:
        data = encoder.encode(terminal_steps, done=True) + encoder.encode(decision_steps, done=False)
        output.agentInfos[name].MergeFromString(data)
        return
    infos = output.agentInfos[name].value
    encoder.write(infos, terminal_steps, done=True)
    encoder.write(infos, decision_steps, done=False)


def _int32(values, what: str) -> np.ndarray:
    """``values`` as an int32 array; ``ValueError`` for values out of int32's range (as protobuf says)."""
    array = np.asarray(values)
    if array.dtype != np.int32:
        if array.size and (array.min() < -(2**31) or array.max() >= 2**31):
            raise ValueError(f"{what} must fit in int32, got values from {array.min()} to {array.max()}")
        array = array.astype(np.int32)
    return array


def actions_from_message(
    actions, spec: BehaviorSpec, n_agents: int, name: str = "", layout: ActionLayout | None = None
) -> ActionTuple:
    """:func:`actions_from_proto` of a whole ``ListAgentActionProto``, the same actions.

    With ``layout`` (the behavior's :class:`~unity_sb3.scenes.player.layouts.ActionLayout`), the
    message's bytes are read in one go when every agent is laid out as ``mlagents_envs`` writes it;
    anything else is read field by field.

    :param actions: ``UnityRLInputProto.agent_actions[name]``.
    """
    if layout is not None:
        decoded = layout.decode(actions.SerializeToString(), n_agents)
        if decoded is not None:
            return ActionTuple(continuous=decoded[0], discrete=decoded[1])
    return actions_from_proto(actions.value, spec, n_agents, name)


def actions_from_proto(actions, spec: BehaviorSpec, n_agents: int, name: str = "") -> ActionTuple:
    """Read Python's ``AgentActionProto`` list for one behavior into an ``ActionTuple``.

    Actions come in the order of the agents of the last ``DecisionSteps``. Like Unity, the
    deprecated ``vector_actions_deprecated`` field is read when the new fields are empty.

    :param actions: ``UnityRLInputProto.agent_actions[name].value``.
    :param spec: the behavior's spec.
    :param n_agents: how many agents asked for a decision.
    :param name: behavior name, for error messages.
    :raises ProtocolError: when the counts do not match.
    """
    n = len(actions)
    if n != n_agents:
        raise ProtocolError(
            f"behavior {name!r}: Python sent {n} actions but {n_agents} agents asked for a decision"
        )
    c = spec.action_spec.continuous_size
    d = spec.action_spec.discrete_size
    first: AgentActionProto | None = actions[0] if n else None
    if (
        first is not None
        and len(first.continuous_actions) == 0
        and len(first.discrete_actions) == 0
        and c + d
    ):
        flat = np.fromiter(
            chain.from_iterable(a.vector_actions_deprecated for a in actions), dtype=np.float32
        )
        if flat.size != n * (c + d):
            raise ProtocolError(
                f"behavior {name!r}: expected {n * (c + d)} deprecated action values, got {flat.size}"
            )
        flat = flat.reshape(n, c + d)
        return ActionTuple(continuous=flat[:, :c].copy(), discrete=flat[:, c:].astype(np.int32))
    continuous = np.fromiter(chain.from_iterable(a.continuous_actions for a in actions), dtype=np.float32)
    discrete = np.fromiter(chain.from_iterable(a.discrete_actions for a in actions), dtype=np.int32)
    if continuous.size != n * c or discrete.size != n * d:
        raise ProtocolError(
            f"behavior {name!r}: each of the {n} actions must have {c} continuous and {d} discrete values; "
            f"got {continuous.size} and {discrete.size} in total"
        )
    continuous = continuous.reshape(n, c)
    discrete = discrete.reshape(n, d)
    return ActionTuple(continuous=continuous, discrete=discrete)


def behavior_specs_of(env) -> Mapping[str, BehaviorSpec]:
    """``env.behavior_specs`` as a plain dict (name -> spec), in the environment's order."""
    return dict(env.behavior_specs.items())
