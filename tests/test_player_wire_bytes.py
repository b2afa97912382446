"""The stand-in player sends the same bytes however fast its codec is.

``wire_fingerprint`` drives a player in-process exactly as ``run`` does between two ``Exchange``
calls (the reply parsed from bytes, ``_apply_input``, ``output_message`` serialized, with the
behaviors in name order: upb orders map entries by a per-process hash seed), with inputs
built as ``mlagents_envs``' ``UnityEnvironment._generate_step_input`` builds them (seeded random
actions, a reset now and then), and hashes every message the player sends, handshake included.
On this project's machine the hashes must equal the ones recorded from the player of 2927f63,
before its codec's fast paths (``RECORDED``). Everywhere, the fast paths must give what the plain
per-agent protobuf code gives (``plain_write``, ``plain_actions``), message for message.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from recorded_floats import computes_as_recorded

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
    TerminalSteps,
)
from mlagents_envs.communicator_objects.agent_action_pb2 import AgentActionProto
from mlagents_envs.communicator_objects.command_pb2 import RESET, STEP
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
from mlagents_envs.communicator_objects.unity_rl_output_pb2 import UnityRLOutputProto

from unity_sb3.scenes.player.codec import (
    BehaviorEncoder,
    ProtocolError,
    actions_from_message,
    actions_from_proto,
    write_steps,
)
from unity_sb3.scenes.player.launcher import load_scene
from unity_sb3.scenes.player.layouts import ActionLayout
from unity_sb3.scenes.player.server import StandInPlayer
from unity_sb3.scenes.random_play import random_actions as random_unity_actions

PROTOCOL_SCENE = "unity_sb3.scenes.protocol_test:make_protocol_test_scene"


def random_actions(spec: BehaviorSpec, steps: DecisionSteps, rng: np.random.Generator) -> ActionTuple:
    """Uniform continuous actions in [-1.2, 1.2] (the player clips them); discrete ones among the allowed."""
    return random_unity_actions(spec, steps, rng, high=1.2)


def python_input(actions: dict[str, ActionTuple], command: int = STEP) -> bytes:
    """A serialized input as ``UnityEnvironment._generate_step_input`` builds it."""
    message = UnityMessageProto()
    message.header.status = 200
    rl_input = message.unity_input.rl_input
    for name, action in actions.items():
        for i in range(len(action.continuous)):
            proto = AgentActionProto()
            proto.vector_actions_deprecated.extend(action.continuous[i])
            proto.continuous_actions.extend(action.continuous[i])
            proto.vector_actions_deprecated.extend(action.discrete[i])
            proto.discrete_actions.extend(action.discrete[i])
            rl_input.agent_actions[name].value.extend([proto])
    rl_input.command = command
    return message.SerializeToString()


def wire_fingerprint(scene: str, exchanges: int, seed: int = 5, reset_every: int = 150, **params) -> str:
    """sha256 of every message a player of ``scene`` sends over ``exchanges`` seeded exchanges."""
    env = load_scene(scene, seed=0, params=params)
    player = StandInPlayer(env, port=1, name=scene)
    digest = hashlib.sha256(player.handshake_message().SerializeToString(deterministic=True))
    init = UnityMessageProto()
    init.header.status = 200
    init.unity_input.rl_initialization_input.seed = seed
    assert player._accept_initialization(UnityMessageProto.FromString(init.SerializeToString()))
    rng = np.random.default_rng(seed)
    data = python_input({}, RESET)
    for t in range(exchanges):
        assert player._apply_input(UnityMessageProto.FromString(data))
        digest.update(player.output_message().SerializeToString(deterministic=True))
        actions = {}
        for name, spec in player.specs.items():
            decision = env.get_steps(name)[0]
            if len(decision):
                actions[name] = random_actions(spec, decision, rng)
        data = python_input(actions, RESET if (t + 1) % reset_every == 0 else STEP)
    env.close()
    return digest.hexdigest()


# (scene, exchanges, scene parameters) and the hash the player of 2927f63 gave on this project's
# machine (x86_64 Linux, numpy 2.4, protobuf 7 upb). Ball3D then always sent its mass and scale as
# stats; it now does so only when asked (``report_parameters``), as Unity's 3DBall sends none.
RECORDED = [
    (
        "Ball3D",
        2000,
        {"report_parameters": True},
        "2e04eeaab29a3d87a284b32ae9e986bdae518bbf592ad1c1e42648cd32df1ffe",
    ),
    (
        "Ball3D",
        300,
        {"num_agents": 64, "max_steps": 60, "report_parameters": True},
        "9756c8a84ccf3d68bfe42a2a9a7665807b8131f4886cdae3fbd6fc4330f019f8",
    ),
    ("GridWorld", 1000, {}, "183467e3b780860646b471b79d9b06fb2a704edee01527269f84a32fe08caaf1"),
    ("Escape", 1500, {}, "850997cbb93b2f54012012b30c55cb4b9f96cb890cd41d00d02ede159dbf1b12"),
    (PROTOCOL_SCENE, 1000, {}, "51d08a6b39979963c2d06b414ded8b2cea26e01afde96481f55452bd3eb3d156"),
]


@pytest.mark.parametrize(("scene", "exchanges", "params", "recorded"), RECORDED)
def test_player_sends_the_recorded_bytes(scene, exchanges, params, recorded):
    if not computes_as_recorded():
        pytest.skip("recorded on x86_64 (AVX-512) with numpy 2.4: scene floats may differ elsewhere")
    assert wire_fingerprint(scene, exchanges, **params) == recorded


# ------------------------------------------------------------------ the fast paths against the plain code


def plain_write(output: UnityRLOutputProto, name: str, encoder, decision, terminal) -> None:
    """``write_steps`` as it was: one ``AgentInfoProto`` per agent through protobuf's Python API."""
    infos = output.agentInfos[name].value
    encoder.write(infos, terminal, done=True)
    encoder.write(infos, decision, done=False)


def _both_ways(spec: BehaviorSpec, decision, terminal) -> tuple[bytes, bytes]:
    encoder = BehaviorEncoder(spec, compress_visual=False)  # rank 3 as floats too
    assert encoder.layout is not None
    fast, plain = UnityRLOutputProto(), UnityRLOutputProto()
    write_steps(fast, "B", encoder, decision, terminal)
    plain_write(plain, "B", encoder, decision, terminal)
    return fast.SerializeToString(), plain.SerializeToString()


def _spec(obs_shapes, branches=(), continuous=0) -> BehaviorSpec:
    obs = [
        ObservationSpec(shape, (DimensionProperty.NONE,) * len(shape), ObservationType.DEFAULT, f"o{i}")
        for i, shape in enumerate(obs_shapes)
    ]
    return BehaviorSpec(obs, ActionSpec(continuous, tuple(branches)))


@pytest.mark.parametrize(
    ("obs_shapes", "branches"),
    [([(8,)], ()), ([(22,)], (5,)), ([(3, 2), (1,), (300,)], (3, 200)), ([(4, 5, 6)], (2, 2))],
)
def test_info_records_are_the_plain_messages(obs_shapes, branches):
    """Edge values included: ids and group ids negative, 0, past 2^28 and 2^31 - 1; rewards -0.0,
    NaN, inf and tiny; all masks; terminal agents interrupted or not; one agent; none."""
    spec = _spec(obs_shapes, branches, continuous=1)
    rng = np.random.default_rng(len(obs_shapes))
    for n in (0, 1, 7, 40):
        ids = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
        ids[: min(n, 4)] = [0, 2**31 - 1, -1, 2**28 + 5][: min(n, 4)]
        groups = rng.choice([0, 0, 3, -7, 2**30], n).astype(np.int32)
        rewards = rng.choice([0.0, -0.0, np.nan, np.inf, 1e-42, 0.1, -1.0], n)
        obs = [rng.normal(size=(n, *shape)).astype(np.float32) for shape in obs_shapes]
        masks = [rng.random((n, b)) < 0.5 for b in branches] if branches else None
        decision = DecisionSteps(obs, rewards, ids, masks, groups, rewards[::-1].copy())
        terminal = TerminalSteps(obs, rewards, rng.random(n) < 0.5, ids, groups, rewards)
        fast, plain = _both_ways(spec, decision, terminal)
        assert fast == plain, f"{n} agents"
        without_masks = DecisionSteps(obs, rewards, ids, None, np.zeros(n, np.int32), rewards)
        fast, plain = _both_ways(spec, without_masks, TerminalSteps.empty(spec))
        assert fast == plain, f"{n} agents, no masks"


def test_info_records_reject_what_protobuf_rejects():
    spec = _spec([(2,)])
    obs = [np.zeros((1, 2), np.float32)]
    too_big = DecisionSteps(obs, np.zeros(1), np.array([2**31]), None, np.zeros(1, np.int32), np.zeros(1))
    with pytest.raises(ValueError, match="int32"):
        write_steps(UnityRLOutputProto(), "B", BehaviorEncoder(spec), too_big, TerminalSteps.empty(spec))
    wrong = DecisionSteps([np.zeros((1, 3), np.float32)], np.zeros(1), [0], None, [0], np.zeros(1))
    with pytest.raises(ValueError, match="'o0' has shape"):
        write_steps(UnityRLOutputProto(), "B", BehaviorEncoder(spec), wrong, TerminalSteps.empty(spec))


def test_visual_observations_keep_the_plain_path():
    spec = _spec([(3, 4, 5)])
    assert BehaviorEncoder(spec).layout is None
    assert BehaviorEncoder(spec, compress_visual=False).layout is not None


def _list_of(protos: list[AgentActionProto]):
    message = UnityMessageProto()
    message.unity_input.rl_input.agent_actions["B"].value.extend(protos)
    return UnityMessageProto.FromString(message.SerializeToString()).unity_input.rl_input.agent_actions["B"]


@pytest.mark.parametrize(("continuous", "branches"), [(2, ()), (0, (5,)), (3, (4, 200, 2)), (0, ())])
def test_action_layout_reads_what_the_fields_say(continuous, branches):
    spec = _spec([], branches, continuous)
    layout = ActionLayout(continuous, len(branches))
    rng = np.random.default_rng(continuous)
    for n in (1, 12, 130):
        steps = DecisionSteps([], np.zeros(n), np.arange(n), None, np.zeros(n), np.zeros(n))
        actions = random_actions(spec, steps, rng)
        actions.continuous[:, :1] = np.float32(-0.0)
        data = python_input({"B": actions})
        listed = UnityMessageProto.FromString(data).unity_input.rl_input.agent_actions["B"]
        fast = actions_from_message(listed, spec, n, "B", layout)
        plain = actions_from_proto(listed.value, spec, n, "B")
        for got, expected in ((fast.continuous, plain.continuous), (fast.discrete, plain.discrete)):
            assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()
        # every branch of 200 sends actions >= 128 at times: two-byte varints, read field by field
        wide = any(b > 128 for b in branches) and (actions.discrete >= 128).any()
        assert (layout.decode(listed.SerializeToString(), n) is None) == wide


def test_action_layout_leaves_other_layouts_to_the_fields():
    spec = _spec([], (3,), 2)
    layout = ActionLayout(2, 1)
    new_only = _list_of([AgentActionProto(continuous_actions=[0.5, 1.0], discrete_actions=[2])])
    deprecated_only = _list_of([AgentActionProto(vector_actions_deprecated=[0.5, 1.0, 2])])
    negative = _list_of(
        [
            AgentActionProto(
                vector_actions_deprecated=[0.5, 1.0, -1], continuous_actions=[0.5, 1.0], discrete_actions=[-1]
            )
        ]
    )
    for listed in (new_only, deprecated_only, negative):
        assert layout.decode(listed.SerializeToString(), 1) is None
        got = actions_from_message(listed, spec, 1, "B", layout)
        np.testing.assert_array_equal(got.continuous, [[0.5, 1.0]])
    with pytest.raises(ProtocolError, match="1 actions but 2 agents"):
        actions_from_message(new_only, spec, 2, "B", layout)
