"""A small ``BaseEnv`` that uses every feature of the Unity protocol, to test the stand-in player.

:class:`ProtocolTestScene` is not a task to learn; it is a conformance scene in the spirit of
SB3's ``IdentityEnv``: whatever an embedded scene happens not to use, it does. Two behaviors:

- ``"Hybrid?team=0"``: ``num_agents`` agents with hybrid actions (2 continuous, discrete
  branches (3, 2)), random action masks, group ids and group rewards, and six observations:
  a vector, an HWC RGB image, a channel-first 4-channel stack, a 1-channel image, a rank-2
  buffer and a goal signal. Episodes end at random (``done``) or after ``max_steps``
  decisions (``interrupted``); an agent that ended either asks again in the same step under a
  new id or sits out one step, as Unity agents do.
- ``"Cont?team=0"``: 3 continuous agents that ask for a decision every second step only, so
  its ``DecisionSteps`` are empty every other step.

Images are multiples of 1/255 so they survive PNG exactly. Side channels: an environment
parameter ``reward_scale`` multiplies the rewards; each step reports the stat
``"Protocol/step"``. Start it in the player as ``unity_sb3.scenes.protocol_test:make_protocol_test_scene``.
"""

from __future__ import annotations

import struct
import uuid

import numpy as np
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BaseEnv,
    BehaviorMapping,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
    TerminalSteps,
)
from mlagents_envs.exception import UnityActionException
from mlagents_envs.side_channel import IncomingMessage, OutgoingMessage

ENVIRONMENT_PARAMETERS_CHANNEL = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")
STATS_CHANNEL = uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520")

HYBRID = "Hybrid?team=0"
CONT = "Cont?team=0"

_TE = DimensionProperty.TRANSLATIONAL_EQUIVARIANCE
_NONE = DimensionProperty.NONE


def _spec(name: str, shape: tuple[int, ...], dims: tuple, kind: ObservationType = ObservationType.DEFAULT):
    return ObservationSpec(shape=shape, dimension_property=dims, observation_type=kind, name=name)


HYBRID_SPEC = BehaviorSpec(
    observation_specs=[
        _spec("vector", (5,), (_NONE,)),
        _spec("camera_hwc", (6, 5, 3), (_TE, _TE, _NONE)),
        _spec("stack_chw", (4, 6, 5), (_NONE, _TE, _TE)),
        _spec("gray", (6, 5, 1), (_TE, _TE, _NONE)),
        _spec("buffer", (3, 2), (DimensionProperty.VARIABLE_SIZE, _NONE)),
        _spec("goal", (2,), (_NONE,), ObservationType.GOAL_SIGNAL),
    ],
    action_spec=ActionSpec(2, (3, 2)),
)
CONT_SPEC = BehaviorSpec(observation_specs=[_spec("vector", (3,), (_NONE,))], action_spec=ActionSpec(1, ()))


def pack_side_channel_message(channel_id: uuid.UUID, payload: bytes) -> bytes:
    """One side-channel message in the wire format both ends use: id, int32 length, payload."""
    return channel_id.bytes_le + struct.pack("<i", len(payload)) + payload


def unpack_side_channel_messages(data: bytes) -> list[tuple[uuid.UUID, bytes]]:
    """Split side-channel bytes into ``(channel id, payload)`` pairs."""
    messages = []
    offset = 0
    while offset + 20 <= len(data):
        channel_id = uuid.UUID(bytes_le=bytes(data[offset : offset + 16]))
        (length,) = struct.unpack_from("<i", data, offset + 16)
        messages.append((channel_id, bytes(data[offset + 20 : offset + 20 + length])))
        offset += 20 + length
    return messages


class ProtocolTestScene(BaseEnv):
    """See the module docstring.

    :param seed: seed of the scene's random generator (replaced by :meth:`reseed`).
    :param num_agents: agents of the hybrid behavior.
    :param max_steps: decisions before an episode is interrupted.
    :param end_probability: chance per decision that an episode ends by itself.
    """

    def __init__(self, seed: int = 0, num_agents: int = 6, max_steps: int = 7, end_probability: float = 0.1):
        if num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {num_agents}")
        self.num_agents = int(num_agents)
        self.max_steps = int(max_steps)
        self.end_probability = float(end_probability)
        self.environment_parameters: dict[str, float] = {}
        self._outgoing: list[bytes] = []
        self._specs = {HYBRID: HYBRID_SPEC, CONT: CONT_SPEC}
        self.reseed(seed)
        self._started = False

    # -- BaseEnv -------------------------------------------------------------------------------

    @property
    def behavior_specs(self) -> BehaviorMapping:
        return BehaviorMapping(self._specs)

    def reseed(self, seed: int) -> None:
        """Restart the random stream from ``seed`` (the next :meth:`reset` starts from it)."""
        self._rng = np.random.default_rng(seed)
        self._next_id = 0

    def _new_ids(self, n: int) -> np.ndarray:
        ids = np.arange(self._next_id, self._next_id + n, dtype=np.int32)
        self._next_id += n
        return ids

    def reset(self) -> None:
        n = self.num_agents
        self._step_count = 0
        self._ids = self._new_ids(n)
        self._state = self._rng.uniform(-1, 1, size=(n, 5)).astype(np.float32)
        self._age = np.zeros(n, dtype=np.int64)
        self._present = np.ones(n, dtype=bool)
        self._group = np.where(np.arange(n) < n - 1, np.arange(n) % 2 + 1, 0).astype(np.int32)
        self._actions = HYBRID_SPEC.action_spec.empty_action(n)
        self._cont_ids = self._new_ids(3)
        self._cont_state = self._rng.uniform(-1, 1, size=(3, 3)).astype(np.float32)
        self._cont_actions = CONT_SPEC.action_spec.empty_action(3)
        self._terminal = TerminalSteps.empty(HYBRID_SPEC)
        self._decision = self._hybrid_steps(np.arange(n), np.zeros(n, np.float32), np.zeros(n, np.float32))[0]
        self._cont_decision = self._cont_steps(np.zeros(3, dtype=np.float32))
        self._started = True

    def step(self) -> None:
        if not self._started:
            self.reset()
            return
        rng = self._rng
        n = self.num_agents
        scale = np.float32(self.environment_parameters.get("reward_scale", 1.0))
        asked = self._decision.agent_id
        slots = np.flatnonzero(np.isin(self._ids, asked) & self._present)
        cont = self._actions.continuous  # aligned with the last DecisionSteps, i.e. with slots
        disc = self._actions.discrete
        push = np.concatenate([cont, disc.astype(np.float32), np.ones((len(slots), 1), np.float32)], axis=1)
        noise = rng.normal(0, 0.01, (len(slots), 5)).astype(np.float32)
        self._state[slots] = np.float32(0.9) * self._state[slots] + np.float32(0.1) * push + noise
        reward = ((disc[:, 0] == 1) * np.float32(0.1) - (cont**2).sum(axis=1)).astype(np.float32) * scale
        self._age[slots] += 1
        ended = rng.random(len(slots)) < self.end_probability
        interrupted = (self._age[slots] >= self.max_steps) & ~ended
        done = ended | interrupted
        done_slots = slots[done]
        # A group reward goes to every member of group 1 when any agent's discrete branch 1 says 1.
        group_bonus = np.float32(0.5) if (disc[:, 1] == 1).any() else np.float32(0.0)
        group_reward = np.where(self._group == 1, group_bonus, np.float32(0)).astype(np.float32)

        terminal = self._hybrid_steps(done_slots, reward[done], group_reward[done_slots], interrupted[done])
        # Ended agents restart now (new id) or sit out one step; agents that sat out come back.
        returning = np.flatnonzero(~self._present)
        restart_now = done_slots[rng.random(len(done_slots)) < 0.5]
        sit_out = np.setdiff1d(done_slots, restart_now)
        for group in (restart_now, returning):
            self._ids[group] = self._new_ids(len(group))
            self._state[group] = rng.uniform(-1, 1, size=(len(group), 5)).astype(np.float32)
            self._age[group] = 0
        self._present[returning] = True
        self._present[sit_out] = False
        deciding = np.flatnonzero(self._present)
        full_reward = np.zeros(n, dtype=np.float32)
        full_reward[slots[~done]] = reward[~done]
        self._decision = self._hybrid_steps(deciding, full_reward[deciding], group_reward[deciding])[0]
        self._terminal = terminal[1]

        self._step_count += 1
        cont_asked = len(self._cont_decision) > 0
        if cont_asked:
            self._cont_state = 0.5 * self._cont_state + self._cont_actions.continuous
        if self._step_count % 2 == 0:
            self._cont_decision = self._cont_steps(-np.abs(self._cont_state[:, 0]) * scale)
        else:
            self._cont_decision = DecisionSteps.empty(CONT_SPEC)
        self._actions = HYBRID_SPEC.action_spec.empty_action(len(self._decision))
        self._cont_actions = CONT_SPEC.action_spec.empty_action(len(self._cont_decision))
        self._queue_stat("Protocol/step", float(self._step_count))

    def _images(self, n: int) -> list[np.ndarray]:
        out = []
        for obs_spec in HYBRID_SPEC.observation_specs[1:4]:
            values = self._rng.integers(0, 256, size=(n, *obs_spec.shape))
            out.append(values.astype(np.float32) / np.float32(255.0))
        return out

    def _hybrid_steps(self, slots, reward, group_reward, interrupted=None):
        n = len(slots)
        state = self._state[slots]
        obs = [
            state,
            *self._images(n),
            np.tile(state[:, None, :2], (1, 3, 1)) * np.float32(0.5),
            state[:, 3:5],
        ]
        obs = [np.ascontiguousarray(o, dtype=np.float32) for o in obs]
        ids = self._ids[slots].copy()
        groups = self._group[slots].copy()
        group_reward = np.zeros(n, np.float32) if group_reward is None else group_reward.astype(np.float32)
        if interrupted is not None:
            return None, TerminalSteps(
                obs, reward.astype(np.float32), interrupted.astype(bool), ids, groups, group_reward
            )
        masks = self._rng.random((n, 5)) < 0.3
        masks[:, 0] = False  # keep one action allowed per branch
        masks[:, 3] = False
        mask_list = [masks[:, :3], masks[:, 3:]]
        return DecisionSteps(obs, reward.astype(np.float32), ids, mask_list, groups, group_reward), None

    def _cont_steps(self, reward: np.ndarray) -> DecisionSteps:
        return DecisionSteps(
            [self._cont_state.astype(np.float32)],
            reward.astype(np.float32),
            self._cont_ids.copy(),
            None,
            np.zeros(3, dtype=np.int32),
            np.zeros(3, dtype=np.float32),
        )

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        spec = self._specs[behavior_name]
        n = len(self.get_steps(behavior_name)[0])
        action = spec.action_spec._validate_action(action, n, behavior_name)
        if behavior_name == HYBRID:
            self._actions = action
        else:
            self._cont_actions = action

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        decision = self.get_steps(behavior_name)[0]
        if agent_id not in decision.agent_id_to_index:
            raise UnityActionException(f"agent {agent_id} of {behavior_name} did not ask for a decision")
        index = decision.agent_id_to_index[agent_id]
        target = self._actions if behavior_name == HYBRID else self._cont_actions
        target.continuous[index] = action.continuous[0]
        target.discrete[index] = action.discrete[0]

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        if not self._started:
            raise RuntimeError("call reset() before get_steps()")
        if behavior_name == HYBRID:
            return self._decision, self._terminal
        if behavior_name == CONT:
            return self._cont_decision, TerminalSteps.empty(CONT_SPEC)
        raise KeyError(f"unknown behavior {behavior_name!r}; this scene has {list(self._specs)}")

    def close(self) -> None:
        self._started = False

    # -- side channels -------------------------------------------------------------------------

    def receive_side_channel_data(self, data: bytes) -> None:
        """Apply Python's side-channel bytes: float environment parameters; others are ignored."""
        for channel_id, payload in unpack_side_channel_messages(data):
            if channel_id != ENVIRONMENT_PARAMETERS_CHANNEL:
                continue
            message = IncomingMessage(payload)
            key = message.read_string()
            if message.read_int32() == 0:  # FLOAT (samplers are not needed here)
                self.environment_parameters[key] = message.read_float32()

    def _queue_stat(self, key: str, value: float) -> None:
        message = OutgoingMessage()
        message.write_string(key)
        message.write_float32(value)
        message.write_int32(1)  # StatsAggregationMethod.MOST_RECENT
        self._outgoing.append(pack_side_channel_message(STATS_CHANNEL, bytes(message.buffer)))
        del self._outgoing[:-100]  # nobody drains in-process: keep the queue bounded

    def drain_side_channel_data(self) -> bytes:
        """Side-channel bytes for Python (stats) queued since the last call."""
        data = b"".join(self._outgoing)
        self._outgoing.clear()
        return data


def make_protocol_test_scene(seed: int = 0, **params) -> ProtocolTestScene:
    """Factory for ``python -m unity_sb3.scenes.player unity_sb3.scenes.protocol_test:make_protocol_test_scene``."""
    return ProtocolTestScene(seed=seed, **params)
