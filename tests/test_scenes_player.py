"""Tests of the stand-in Unity player: codec units in-process, the real protocol in subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

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
from mlagents_envs.communicator_objects.unity_input_pb2 import UnityInputProto
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
from mlagents_envs.communicator_objects.unity_rl_initialization_input_pb2 import (
    UnityRLInitializationInputProto,
)
from mlagents_envs.communicator_objects.unity_rl_output_pb2 import UnityRLOutputProto
from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.rpc_communicator import RpcCommunicator
from mlagents_envs.rpc_utils import behavior_spec_from_proto, steps_from_proto
from mlagents_envs.side_channel.environment_parameters_channel import EnvironmentParametersChannel
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel
from ports import free_base_port

from unity_sb3.scenes.player.codec import (
    TRAINING_ANALYTICS_CHANNEL,
    BehaviorEncoder,
    ProtocolError,
    actions_from_proto,
    without_channels,
    write_steps,
)
from unity_sb3.scenes.player.failures import player_errors
from unity_sb3.scenes.player.launcher import write_launcher
from unity_sb3.scenes.player.server import (
    COMMUNICATION_VERSION,
    EXIT_CLOSED,
    EXIT_NO_PYTHON,
    EXIT_SCENE_ERROR,
    EXIT_USAGE,
    StandInPlayer,
    main,
)
from unity_sb3.scenes.protocol_test import (
    CONT,
    HYBRID,
    ProtocolTestScene,
    make_protocol_test_scene,
    pack_side_channel_message,
)
from unity_sb3.scenes.random_play import random_actions
from unity_sb3.unity.errors import UnityProcessError
from unity_sb3.unity.proto import (
    PngCache,
    brain_parameters_proto,
    channel_mapping,
    encode_png_rgb,
    encode_visual_batch,
)

TEST_SCENE = "unity_sb3.scenes.protocol_test:make_protocol_test_scene"
HALF_STEP = 0.5 / 255 + 1e-6  # PNG quantisation bound for values that are not k/255
_TE = DimensionProperty.TRANSLATIONAL_EQUIVARIANCE
_NONE = DimensionProperty.NONE


# ---------------------------------------------------------------------------------- helpers


def roundtrip(
    spec: BehaviorSpec, decision: DecisionSteps, terminal: TerminalSteps, compress_visual: bool = True
):
    """Encode one step as the player does, serialize, and parse it as mlagents_envs does."""
    output = UnityRLOutputProto()
    write_steps(output, "B", BehaviorEncoder(spec, compress_visual), decision, terminal)
    parsed = UnityRLOutputProto.FromString(output.SerializeToString())
    return steps_from_proto(parsed.agentInfos["B"].value, spec)


def _masks(steps: DecisionSteps, spec: BehaviorSpec) -> list[np.ndarray]:
    if steps.action_mask is not None:
        return [np.asarray(m, dtype=bool) for m in steps.action_mask]
    return [np.zeros((len(steps), b), dtype=bool) for b in spec.action_spec.discrete_branches]


def assert_steps_equal(got, expected, spec: BehaviorSpec, where: str, visual_atol: float = 0.0) -> None:
    """DecisionSteps / TerminalSteps ``got`` (through the protocol) equal ``expected`` (in-process)."""
    np.testing.assert_array_equal(got.agent_id, expected.agent_id, err_msg=f"{where}: agent ids")
    np.testing.assert_array_equal(
        got.reward, np.asarray(expected.reward, np.float32), err_msg=f"{where}: rewards"
    )
    np.testing.assert_array_equal(
        np.asarray(got.group_id), np.asarray(expected.group_id), err_msg=f"{where}: group"
    )
    np.testing.assert_array_equal(
        got.group_reward, np.asarray(expected.group_reward, np.float32), err_msg=f"{where}: group rewards"
    )
    assert len(got.obs) == len(expected.obs), where
    for i, (a, b) in enumerate(zip(got.obs, expected.obs)):
        assert a.shape == np.shape(b), f"{where}: obs {i} shape {a.shape} != {np.shape(b)}"
        if len(spec.observation_specs[i].shape) == 3 and visual_atol:
            np.testing.assert_allclose(a, b, rtol=0, atol=visual_atol, err_msg=f"{where}: visual obs {i}")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"{where}: obs {i}")
    if isinstance(expected, TerminalSteps):
        np.testing.assert_array_equal(got.interrupted, expected.interrupted, err_msg=f"{where}: interrupted")
    elif spec.action_spec.discrete_size:
        for m_got, m_exp in zip(_masks(got, spec), _masks(expected, spec)):
            np.testing.assert_array_equal(m_got, m_exp, err_msg=f"{where}: action mask")


def open_player(tmp_path: Path, scene: str, seed: int, **kwargs) -> tuple[UnityEnvironment, Path]:
    """Launch the player through a launcher file, exactly as for a Unity build."""
    launcher = write_launcher(scene, tmp_path / "build", scene_params=kwargs.pop("scene_params", None))
    env = UnityEnvironment(
        file_name=str(launcher),
        worker_id=0,
        base_port=free_base_port(4),
        seed=seed,
        no_graphics=True,
        timeout_wait=kwargs.pop("timeout_wait", 30),
        log_folder=str(tmp_path),
        **kwargs,
    )
    return env, tmp_path / "Player-0.log"


def close_and_check(env: UnityEnvironment, log: Path) -> None:
    """close() ends the player with exit code 0 and leaves no process behind."""
    process = env._process
    env.close()
    assert process.poll() == EXIT_CLOSED, log.read_text()
    assert not Path(f"/proc/{process.pid}").exists() or process.returncode is not None
    assert "header status 400" in log.read_text()


def compare_runs(env: UnityEnvironment, reference, steps: int, seed: int, visual_atol: float) -> None:
    """Same actions into both; every step's DecisionSteps and TerminalSteps must match."""
    assert dict(env.behavior_specs.items()) == dict(reference.behavior_specs.items())
    rng = np.random.default_rng(seed)
    env.reset()
    reference.reset()
    for t in range(steps):
        for name, spec in reference.behavior_specs.items():
            got_d, got_t = env.get_steps(name)
            exp_d, exp_t = reference.get_steps(name)
            assert_steps_equal(got_d, exp_d, spec, f"step {t} {name} decision", visual_atol)
            assert_steps_equal(got_t, exp_t, spec, f"step {t} {name} terminal", visual_atol)
            if len(exp_d):
                actions = random_actions(spec, exp_d, rng)
                env.set_actions(name, actions)
                reference.set_actions(name, actions)
        env.step()
        reference.step()


# ---------------------------------------------------------------------------------- codec units


def _visual_spec(shape, dims) -> BehaviorSpec:
    return BehaviorSpec([ObservationSpec(shape, dims, ObservationType.DEFAULT, "cam")], ActionSpec(1, ()))


@pytest.mark.parametrize(
    ("shape", "dims"),
    [
        ((6, 5, 3), (_TE, _TE, _NONE)),  # one RGB PNG, no mapping
        ((6, 5, 1), (_TE, _TE, _NONE)),  # grayscale
        ((6, 5, 2), (_TE, _TE, _NONE)),
        ((6, 5, 4), (_TE, _TE, _NONE)),  # two PNGs, mapping with padding
        ((6, 5, 9), (_TE, _TE, _NONE)),  # stacked: three PNGs
        ((3, 6, 5), (_NONE, _TE, _TE)),  # channel-first, as current Unity packages declare
        ((1, 6, 5), (_NONE, _TE, _TE)),
        ((4, 8, 8), (DimensionProperty.UNSPECIFIED,) * 3),  # no properties: told apart by size
    ],
)
def test_visual_roundtrip_is_exact_for_uint8_images(shape, dims):
    spec = _visual_spec(shape, dims)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(4, *shape)).astype(np.float32) / np.float32(255.0)
    decision = DecisionSteps(
        [images], np.zeros(4, np.float32), np.arange(4), None, np.zeros(4, np.int32), np.zeros(4)
    )
    got, _ = roundtrip(spec, decision, TerminalSteps.empty(spec))
    assert got.obs[0].dtype == np.float32
    np.testing.assert_array_equal(got.obs[0], images)


def test_visual_float_values_are_quantised_and_clipped():
    spec = _visual_spec((5, 4, 3), (_TE, _TE, _NONE))
    values = np.random.default_rng(1).uniform(-0.5, 1.5, size=(2, 5, 4, 3)).astype(np.float32)
    decision = DecisionSteps(
        [values], np.zeros(2, np.float32), np.arange(2), None, np.zeros(2, np.int32), np.zeros(2)
    )
    got, _ = roundtrip(spec, decision, TerminalSteps.empty(spec))
    np.testing.assert_allclose(got.obs[0], np.clip(values, 0, 1), rtol=0, atol=HALF_STEP)


def test_raw_visual_observations_are_exact_floats():
    spec = _visual_spec((5, 4, 3), (_TE, _TE, _NONE))
    values = np.random.default_rng(2).normal(size=(2, 5, 4, 3)).astype(np.float32)
    decision = DecisionSteps(
        [values], np.zeros(2, np.float32), np.arange(2), None, np.zeros(2, np.int32), np.zeros(2)
    )
    got, _ = roundtrip(spec, decision, TerminalSteps.empty(spec), compress_visual=False)
    np.testing.assert_array_equal(got.obs[0], values)


def test_png_is_a_valid_file():
    import io

    from PIL import Image

    image = np.random.default_rng(3).integers(0, 256, size=(7, 9, 3), dtype=np.uint8)
    decoded = np.array(Image.open(io.BytesIO(encode_png_rgb(image))))
    np.testing.assert_array_equal(decoded, image)
    with pytest.raises(ValueError, match="uint8"):
        encode_png_rgb(image.astype(np.float32))


@pytest.mark.parametrize(
    ("shape", "channel_first"),
    [((6, 5, 3), False), ((3, 6, 5), True), ((6, 5, 1), False), ((4, 6, 5), True), ((6, 5, 6), False)],
)
def test_png_cache_gives_the_bytes_encoding_gives(shape, channel_first):
    images = np.random.default_rng(4).uniform(-0.1, 1.1, size=(4, *shape)).astype(np.float32)
    images[2] = images[0]  # one repeated frame
    cache = PngCache()
    first = encode_visual_batch(images, channel_first, cache)
    assert first == encode_visual_batch(images, channel_first)
    assert (cache.hits, cache.misses) == (1, 3)
    assert encode_visual_batch(images, channel_first, cache) == first
    assert (cache.hits, cache.misses) == (5, 3)


def test_png_cache_starts_over_past_its_bound():
    cache = PngCache(max_bytes=10)
    cache.put(b"a" * 6, b"A")
    cache.put(b"b" * 6, b"B")  # 12 bytes of keys: the first is forgotten
    assert cache.get(b"a" * 6) is None
    assert cache.get(b"b" * 6) == b"B"


@pytest.mark.parametrize(
    ("channels", "mapping"),
    [(3, []), (1, [0, -1, -1]), (2, [0, 1, -1]), (4, [0, 1, 2, 3, -1, -1]), (6, [0, 1, 2, 3, 4, 5])],
)
def test_channel_mapping(channels, mapping):
    assert channel_mapping(channels) == mapping


def test_protocol_scene_steps_survive_the_codec():
    """Masks, groups, interrupted, empty behaviors, rank-2 and goal observations, many steps."""
    scene = ProtocolTestScene(seed=3)
    scene.reset()
    rng = np.random.default_rng(0)
    seen_terminal = seen_interrupted = seen_empty = False
    for t in range(60):
        for name, spec in scene.behavior_specs.items():
            decision, terminal = scene.get_steps(name)
            got_d, got_t = roundtrip(spec, decision, terminal)
            assert_steps_equal(got_d, decision, spec, f"step {t} {name}")
            assert_steps_equal(got_t, terminal, spec, f"step {t} {name}")
            seen_terminal |= len(terminal) > 0
            seen_interrupted |= bool(np.any(terminal.interrupted))
            seen_empty |= len(decision) == 0
            if len(decision):
                scene.set_actions(name, random_actions(spec, decision, rng))
        scene.step()
    assert seen_terminal and seen_interrupted and seen_empty


@pytest.mark.parametrize("name", [HYBRID, CONT])
def test_brain_parameters_give_back_the_spec(name):
    spec = ProtocolTestScene().behavior_specs[name]
    output = UnityRLOutputProto()
    BehaviorEncoder(spec).write_placeholder(output.agentInfos[name].value)
    agent = output.agentInfos[name].value[0]
    assert behavior_spec_from_proto(brain_parameters_proto(name, spec), agent) == spec


def _python_actions(actions: ActionTuple) -> list[AgentActionProto]:
    """AgentActionProtos as UnityEnvironment._generate_step_input builds them."""
    protos = []
    for i in range(len(actions.continuous)):
        proto = AgentActionProto()
        proto.vector_actions_deprecated.extend(actions.continuous[i])
        proto.continuous_actions.extend(actions.continuous[i])
        proto.vector_actions_deprecated.extend(actions.discrete[i])
        proto.discrete_actions.extend(actions.discrete[i])
        protos.append(proto)
    return protos


def test_actions_from_proto_hybrid_and_deprecated_fields():
    spec = BehaviorSpec([], ActionSpec(2, (3, 2)))
    actions = ActionTuple(
        continuous=np.array([[0.5, -1.0], [0.25, 0.0]], np.float32),
        discrete=np.array([[2, 1], [0, 0]], np.int32),
    )
    got = actions_from_proto(_python_actions(actions), spec, 2)
    np.testing.assert_array_equal(got.continuous, actions.continuous)
    np.testing.assert_array_equal(got.discrete, actions.discrete)
    deprecated = [AgentActionProto(vector_actions_deprecated=[0.5, -1.0, 2, 1])]
    got = actions_from_proto(deprecated, spec, 1)
    np.testing.assert_array_equal(got.continuous, [[0.5, -1.0]])
    np.testing.assert_array_equal(got.discrete, [[2, 1]])
    assert got.discrete.dtype == np.int32


def test_actions_from_proto_rejects_wrong_counts():
    spec = BehaviorSpec([], ActionSpec(2, ()))
    one = _python_actions(ActionTuple(continuous=np.zeros((1, 2), np.float32)))
    with pytest.raises(ProtocolError, match="1 actions but 3 agents"):
        actions_from_proto(one, spec, 3, "B")
    with pytest.raises(ProtocolError, match="2 continuous"):
        actions_from_proto([AgentActionProto(continuous_actions=[1.0, 2.0, 3.0])], spec, 1, "B")


def test_encoder_rejects_observations_that_do_not_match_the_spec():
    spec = _visual_spec((6, 5, 3), (_TE, _TE, _NONE))
    wrong = DecisionSteps(
        [np.zeros((1, 5, 6, 3), np.float32)], np.zeros(1), np.arange(1), None, [0], np.zeros(1)
    )
    with pytest.raises(ValueError, match="'cam' has shape"):
        write_steps(UnityRLOutputProto(), "B", BehaviorEncoder(spec), wrong, TerminalSteps.empty(spec))


def test_training_analytics_messages_are_kept_from_the_scene():
    other = uuid.uuid4()
    data = pack_side_channel_message(TRAINING_ANALYTICS_CHANNEL, b"xyz") + pack_side_channel_message(
        other, b"ab"
    )
    assert without_channels(data, {TRAINING_ANALYTICS_CHANNEL}) == pack_side_channel_message(other, b"ab")
    with pytest.raises(ProtocolError, match="runs past the end"):
        without_channels(data[:-1], set())
    with pytest.raises(ProtocolError, match="truncated"):
        without_channels(data + b"\x01\x02", set())


# ---------------------------------------------------------------------------------- player units


def test_initialization_message_is_what_a_current_unity_sends():
    scene = ProtocolTestScene(seed=0)
    message = StandInPlayer(scene, port=1, name="toy").handshake_message()
    assert message.header.status == 200
    init = message.unity_output.rl_initialization_output
    assert init.communication_version == COMMUNICATION_VERSION == UnityEnvironment.API_VERSION
    assert init.name == "toy" and init.package_version
    capabilities = init.capabilities
    fields = [f.name for f in capabilities.DESCRIPTOR.fields]
    assert len(fields) == 7 and all(getattr(capabilities, f) for f in fields)
    assert [b.brain_name for b in init.brain_parameters] == [HYBRID, CONT]
    for brain in init.brain_parameters:  # Python reads the specs from one agent per behavior
        agent = message.unity_output.rl_output.agentInfos[brain.brain_name].value[0]
        assert behavior_spec_from_proto(brain, agent) == scene.behavior_specs[brain.brain_name]


def _input(command: int, side_channel: bytes = b"") -> UnityMessageProto:
    message = UnityMessageProto()
    message.header.status = 200
    message.unity_input.rl_input.command = command
    message.unity_input.rl_input.side_channel = side_channel
    return message


def test_handshake_seed_reseeds_and_commands_are_applied():
    from mlagents_envs.communicator_objects.command_pb2 import QUIT, RESET, STEP

    scene = ProtocolTestScene(seed=0)
    player = StandInPlayer(scene, port=1)
    reply = UnityMessageProto()
    reply.header.status = 200
    reply.unity_input.rl_initialization_input.seed = 9
    assert player._accept_initialization(reply)
    assert player._apply_input(_input(STEP))  # a step before any reset resets, as Unity starts
    expected = ProtocolTestScene(seed=9)
    expected.reset()
    np.testing.assert_array_equal(scene.get_steps(HYBRID)[0].obs[0], expected.get_steps(HYBRID)[0].obs[0])
    parameters = EnvironmentParametersChannel()
    parameters.set_float_parameter("reward_scale", 2.5)
    data = pack_side_channel_message(parameters.channel_id, bytes(parameters.message_queue[0]))
    assert player._apply_input(_input(RESET, data))
    assert scene.environment_parameters == {"reward_scale": 2.5}
    assert not player._apply_input(_input(QUIT))
    closing = UnityMessageProto()
    closing.header.status = 400
    assert not player._accept_initialization(closing)


# ---------------------------------------------------------------------------------- CLI units


def test_main_reports_bad_input(tmp_path):
    log = tmp_path / "p.log"
    assert main([TEST_SCENE, "--mlagents-port", "1", "--param", "oops", "-logFile", str(log)]) == EXIT_USAGE
    assert "key=value" in log.read_text()
    assert main(["NoSuchScene", "--mlagents-port", "1", "-logFile", str(log)]) == EXIT_SCENE_ERROR
    assert "NoSuchScene" in log.read_text()
    with pytest.raises(SystemExit):
        main([TEST_SCENE])  # --mlagents-port is required


# ---------------------------------------------------------------------------------- the real protocol


@pytest.mark.player
def test_protocol_scene_through_the_player_matches_in_process(tmp_path):
    env, log = open_player(tmp_path, TEST_SCENE, seed=11)
    # the launcher exec's the player: the process UnityEnvironment holds is the player itself
    assert b"unity_sb3.scenes.player" in Path(f"/proc/{env._process.pid}/cmdline").read_bytes()
    try:
        compare_runs(env, make_protocol_test_scene(seed=11), steps=200, seed=0, visual_atol=0.0)
    finally:
        close_and_check(env, log)
    assert "seed 11" in log.read_text()


def _embedded_scenes() -> list[str]:
    try:
        from unity_sb3.scenes import list_scenes
    except ImportError:
        return []
    return list_scenes()


@pytest.mark.player
@pytest.mark.parametrize("scene", _embedded_scenes())
def test_embedded_scene_through_the_player_matches_in_process(tmp_path, scene):
    from unity_sb3.scenes import make_scene

    try:
        reference = make_scene(scene, seed=5)
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"scene {scene} not available yet: {exc}")
    env, log = open_player(tmp_path, scene, seed=5)
    try:
        compare_runs(env, reference, steps=200, seed=1, visual_atol=HALF_STEP)
    finally:
        close_and_check(env, log)


@pytest.mark.player
def test_side_channels_both_ways(tmp_path):
    parameters, stats = EnvironmentParametersChannel(), StatsSideChannel()
    env, log = open_player(tmp_path, TEST_SCENE, seed=2, side_channels=[parameters, stats])
    try:
        env.reset()
        rewards = []
        for t in range(12):
            if t == 6:
                parameters.set_float_parameter("reward_scale", 0.0)
            for name, spec in env.behavior_specs.items():
                decision, _ = env.get_steps(name)
                if len(decision):
                    env.set_actions(name, random_actions(spec, decision, np.random.default_rng(t)))
            env.step()
            decision, terminal = env.get_steps(HYBRID)
            rewards.append(np.abs(np.concatenate([decision.reward, terminal.reward])).sum())
        assert all(r > 0 for r in rewards[:6]) and all(r == 0 for r in rewards[6:]), rewards
        received = stats.get_and_reset_stats()
        assert received["Protocol/step"][-1][0] == 12.0
        assert "Unknown side channel" not in log.read_text()  # training analytics stay with the player
    finally:
        close_and_check(env, log)


@pytest.mark.player
def test_killing_the_player_raises_a_clear_error(tmp_path):
    env, log = open_player(tmp_path, TEST_SCENE, seed=0, timeout_wait=10)
    process = env._process
    try:
        env.reset()
        env.step()
        os.kill(process.pid, signal.SIGKILL)
        started = time.monotonic()
        with (
            pytest.raises(UnityProcessError) as info,
            player_errors(env, name="stand-in player", log_path=str(log)),
        ):
            for _ in range(3):
                env.step()
        assert time.monotonic() - started < 10  # within timeout_wait, not after it
        message = str(info.value)
        assert f"pid {process.pid}" in message and "SIGKILL" in message and "exit code -9" in message
        assert info.value.exit_code == -9 and str(log) in message
    finally:
        env.close()
    assert process.poll() == -9


def _start_player(port: int, log: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "unity_sb3.scenes.player", TEST_SCENE, "--mlagents-port", str(port)]
    return subprocess.Popen([*command, "-logFile", str(log), *extra], stdout=subprocess.DEVNULL)


def _handshake(communicator: RpcCommunicator) -> None:
    init = UnityInputProto()
    init.rl_initialization_input.CopyFrom(
        UnityRLInitializationInputProto(seed=1, communication_version="1.5.0")
    )
    communicator.initialize(init)


@pytest.mark.player
@pytest.mark.parametrize("how", ["python_disappears", "python_stops_answering"])
def test_player_exits_cleanly_without_python(tmp_path, how):
    port, log = free_base_port(4), tmp_path / "player.log"
    communicator = RpcCommunicator(worker_id=0, base_port=port, timeout_wait=20)
    process = _start_player(port, log, "--timeout", "1")
    try:
        _handshake(communicator)
        if how == "python_disappears":
            communicator.server.stop(None)  # the server goes away without a 400 message
        code = process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        # release the server thread still waiting for Python's reply, then stop the server
        communicator.unity_to_external.parent_conn.send(UnityMessageProto())
        communicator.server.stop(None)
    text = log.read_text()
    if how == "python_disappears":
        assert code == EXIT_CLOSED and "Lost the connection to Python" in text
    else:
        assert code == EXIT_NO_PYTHON and "did not answer within 1.0 s" in text
    assert "Traceback" not in text
