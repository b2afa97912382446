"""mlagents_envs 0.28 on protobuf >= 4 through ``unity_sb3.unity.compat``.

The end-to-end checks run in a fresh interpreter, because the point is the import order:
``stable_baselines3`` (and protobuf, through tensorboard) first, ``unity_sb3`` second, and
only then ``mlagents_envs``. One subprocess per protobuf backend runs every check and reports
each one's outcome as JSON; the tests below read that report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from unity_sb3.unity import compat

CHECKS = [
    "import_order",
    "pb2_rebuilt",
    "grpc_servicer_imports",
    "mock_env_continuous",
    "mock_env_discrete",
    "message_round_trip",
]

SCRIPT = textwrap.dedent(
    r"""
    import json, sys, traceback

    import stable_baselines3  # noqa: F401  (first, on purpose)
    import google.protobuf
    from google.protobuf import descriptor_pool  # noqa: F401
    try:  # tensorboard registers its own protos in the default pool
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except Exception:
        pass
    protobuf_first = "google.protobuf" in sys.modules and "mlagents_envs" not in sys.modules

    import unity_sb3  # noqa: F401
    from unittest import mock

    import numpy as np

    results = {}

    def check(fn):
        try:
            fn()
            results[fn.__name__] = "ok"
        except BaseException:
            results[fn.__name__] = traceback.format_exc()
        return fn

    @check
    def import_order():
        assert protobuf_first, "protobuf was not imported before unity_sb3"
        assert int(google.protobuf.__version__.split(".")[0]) >= 4, google.protobuf.__version__
        from google.protobuf.internal import api_implementation
        import os
        wanted = os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"]
        assert api_implementation.Type() == wanted, (api_implementation.Type(), wanted)

    @check
    def pb2_rebuilt():
        from mlagents_envs.communicator_objects import header_pb2, unity_message_pb2
        assert header_pb2.HeaderProto.DESCRIPTOR.full_name == "communicator_objects.HeaderProto"
        assert "UnityMessageProto" in unity_message_pb2.DESCRIPTOR.message_types_by_name

    @check
    def grpc_servicer_imports():
        from mlagents_envs.communicator_objects import unity_to_external_pb2_grpc as g
        assert hasattr(g, "UnityToExternalProtoServicer")
        assert hasattr(g, "UnityToExternalProtoStub")
        assert callable(g.add_UnityToExternalProtoServicer_to_server)
        from mlagents_envs.rpc_communicator import RpcCommunicator  # noqa: F401

    def run_mock_env(discrete):
        from mlagents_envs.base_env import ActionTuple
        from mlagents_envs.environment import UnityEnvironment
        from mlagents_envs.mock_communicator import MockCommunicator

        comm = MockCommunicator(discrete_action=discrete, num_agents=3)
        with mock.patch.object(UnityEnvironment, "_get_communicator", return_value=comm), mock.patch(
            "mlagents_envs.env_utils.launch_executable"
        ) as launch:
            env = UnityEnvironment(file_name="fake_build", worker_id=0)
            assert launch.called
            assert list(env.behavior_specs) == ["RealFakeBrain"]
            spec = env.behavior_specs["RealFakeBrain"]
            if discrete:
                assert spec.action_spec.discrete_branches == (3, 2)
                assert spec.action_spec.continuous_size == 0
            else:
                assert spec.action_spec.continuous_size == 2
                assert spec.action_spec.discrete_size == 0
            assert spec.observation_specs[0].shape == (3,)
            env.reset()
            decision, terminal = env.get_steps("RealFakeBrain")
            # agent 2 is done in every mock message
            assert list(decision.agent_id) == [0, 1]
            assert list(terminal.agent_id) == [2]
            np.testing.assert_array_equal(decision.obs[0], [[1, 2, 3], [1, 2, 3]])
            np.testing.assert_array_equal(decision.reward, [1.0, 1.0])
            n = len(decision)
            if discrete:
                action = ActionTuple(discrete=np.array([[2, 1]] * n, dtype=np.int32))
            else:
                action = ActionTuple(continuous=np.full((n, 2), 0.5, dtype=np.float32))
            env.set_actions("RealFakeBrain", action)
            env.step()
            decision, _ = env.get_steps("RealFakeBrain")
            assert len(decision) == 2
            env.close()
            assert comm.has_been_closed

    @check
    def mock_env_continuous():
        run_mock_env(False)

    @check
    def mock_env_discrete():
        run_mock_env(True)

    @check
    def message_round_trip():
        from mlagents_envs.communicator_objects.agent_action_pb2 import AgentActionProto
        from mlagents_envs.communicator_objects.agent_info_pb2 import AgentInfoProto
        from mlagents_envs.communicator_objects.observation_pb2 import PNG, ObservationProto
        from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto

        msg = UnityMessageProto()
        msg.header.status = 200
        msg.header.message = "hello"
        infos = msg.unity_output.rl_output.agentInfos["Ball?team=0"]
        vec = ObservationProto(shape=[3], float_data=ObservationProto.FloatData(data=[0.5, -1.25, 3.0]))
        img = ObservationProto(shape=[8, 8, 3], compression_type=PNG, compressed_data=b"\x89PNG\x00\x01")
        infos.value.extend(
            [
                AgentInfoProto(reward=0.25, done=False, id=7, observations=[vec, img], group_id=2,
                               group_reward=-1.0, action_mask=[True, False]),
                AgentInfoProto(reward=-1.0, done=True, max_step_reached=True, id=9, observations=[vec]),
            ]
        )
        msg.unity_output.rl_output.side_channel = b"\x00\x01\x02"
        msg.unity_input.rl_input.agent_actions["Ball?team=0"].value.extend(
            [AgentActionProto(continuous_actions=[0.1, -0.2], discrete_actions=[1, 0, 2])]
        )
        msg.unity_input.rl_input.command = 1
        data = msg.SerializeToString()
        back = UnityMessageProto()
        back.ParseFromString(data)
        assert back == msg
        assert back.header.status == 200 and back.header.message == "hello"
        got = back.unity_output.rl_output.agentInfos["Ball?team=0"].value
        assert [a.id for a in got] == [7, 9]
        assert got[0].reward == 0.25 and got[0].group_id == 2 and got[0].group_reward == -1.0
        assert list(got[0].action_mask) == [True, False]
        assert got[1].done and got[1].max_step_reached
        assert list(got[0].observations[0].float_data.data) == [0.5, -1.25, 3.0]
        assert list(got[0].observations[1].shape) == [8, 8, 3]
        assert got[0].observations[1].compressed_data == b"\x89PNG\x00\x01"
        assert got[0].observations[1].compression_type == PNG
        act = back.unity_input.rl_input.agent_actions["Ball?team=0"].value[0]
        assert list(act.discrete_actions) == [1, 0, 2]
        np.testing.assert_allclose(list(act.continuous_actions), [0.1, -0.2], rtol=1e-6)
        assert back.unity_input.rl_input.command == 1
        assert back.unity_output.rl_output.side_channel == b"\x00\x01\x02"

    print("RESULTS" + json.dumps(results))
    """
)


@pytest.fixture(scope="module", params=["upb", "python"])
def fresh_interpreter_report(request: pytest.FixtureRequest) -> dict[str, str]:
    """Run every check in a fresh interpreter with the given protobuf backend."""
    env = dict(os.environ)
    env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = request.param
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS")]
    assert proc.returncode == 0 and lines, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULTS") :])


@pytest.mark.parametrize("check", CHECKS)
def test_fresh_interpreter(fresh_interpreter_report: dict[str, str], check: str) -> None:
    assert fresh_interpreter_report[check] == "ok", fresh_interpreter_report[check]


def test_extract_serialized_descriptor_from_protoc3_call() -> None:
    source = "DESCRIPTOR = _descriptor.FileDescriptor(\n  name='x.proto',\n  serialized_pb=_b('\\n\\x07x.proto\\x12\\x01p'))\n"
    assert compat.extract_serialized_descriptor(source) == b"\n\x07x.proto\x12\x01p"


def test_extract_serialized_descriptor_bytes_literal_and_latin1() -> None:
    assert compat.extract_serialized_descriptor("D = F(serialized_pb=b'\\xff\\x00')") == b"\xff\x00"
    # protoc-3 writes str literals whose characters are bytes: \xaa must become the byte 0xaa
    assert compat.extract_serialized_descriptor("D = F(serialized_pb=_b('\\xaa'))") == b"\xaa"


def test_extract_serialized_descriptor_missing() -> None:
    with pytest.raises(ImportError, match="no serialized_pb"):
        compat.extract_serialized_descriptor("x = 1\n", "mod_pb2.py")


def test_extract_serialized_descriptor_on_installed_file() -> None:
    from google.protobuf import descriptor_pb2

    path = compat._package_dir() / "header_pb2.py"
    data = compat.extract_serialized_descriptor(path.read_text(encoding="utf-8"), str(path))
    proto = descriptor_pb2.FileDescriptorProto.FromString(data)
    assert proto.name == "mlagents_envs/communicator_objects/header.proto"
    assert [m.name for m in proto.message_type] == ["HeaderProto"]


def test_dependency_order_puts_dependencies_first() -> None:
    protos = compat._load_file_protos(compat._package_dir())
    order = compat._dependency_order(protos)
    assert sorted(order) == sorted(protos)
    by_file = {p.name: m for m, p in protos.items()}
    for position, module in enumerate(order):
        for dep in protos[module].dependency:
            if dep in by_file:
                assert order.index(by_file[dep]) < position, (module, dep)


def test_install_is_idempotent() -> None:
    from mlagents_envs.communicator_objects import unity_message_pb2

    before = {name: mod for name, mod in sys.modules.items() if name.startswith(compat.PACKAGE + ".")}
    message_class = unity_message_pb2.UnityMessageProto
    compat.install()
    # force the slow path again: modules that exist must be kept, not rebuilt
    compat._installed = False
    compat.install()
    assert compat._installed
    after = {name: mod for name, mod in sys.modules.items() if name.startswith(compat.PACKAGE + ".")}
    assert all(after[name] is mod for name, mod in before.items())
    assert sys.modules[unity_message_pb2.__name__].UnityMessageProto is message_class


@pytest.mark.skipif(not compat.needs_rebuild(), reason="protobuf 3 keeps the generated modules")
def test_rebuilt_modules_point_at_installed_files() -> None:
    from mlagents_envs.communicator_objects import agent_info_pb2

    assert Path(agent_info_pb2.__file__).name == "agent_info_pb2.py"
    assert agent_info_pb2.AgentInfoProto.DESCRIPTOR.file.name.endswith("agent_info.proto")


def test_mlagents_loggers_do_not_stack_handlers() -> None:
    from mlagents_envs import logging_util
    from mlagents_envs.side_channel import side_channel_manager

    first = logging_util.get_logger("mlagents_envs.unity_sb3_probe")
    count = len(first.handlers)
    for _ in range(5):
        assert logging_util.get_logger("mlagents_envs.unity_sb3_probe") is first
    assert len(first.handlers) == count
    assert side_channel_manager.get_logger is logging_util.get_logger


def test_unknown_side_channel_warning_emitted_once_per_message() -> None:
    import logging
    import struct
    import uuid

    from mlagents_envs.side_channel.side_channel_manager import SideChannelManager

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    logger = logging.getLogger("mlagents_envs.side_channel.side_channel_manager")
    collect = Collect()
    logger.addHandler(collect)
    try:
        manager = SideChannelManager([])
        unknown = uuid.UUID("12345678-1234-5678-1234-567812345678")
        blob = unknown.bytes_le + struct.pack("<i", 1) + b"x"
        manager.process_side_channel_message(blob)
        handlers = len(logger.handlers)
        for _ in range(2):
            manager.process_side_channel_message(blob)
        assert len(logger.handlers) == handlers, "each warning added another handler"
        assert len([m for m in collect.messages if "12345678" in m]) == 3
    finally:
        logger.removeHandler(collect)


def test_channel_axis() -> None:
    from unity_sb3.unity.compat import channel_axis

    assert channel_axis((3, 84, 84), (1, 2, 2)) == 0
    assert channel_axis((84, 84, 3), (2, 2, 1)) == 2
    assert channel_axis((84, 84, 3)) == 2
    assert channel_axis((1, 84, 84)) == 0
    with pytest.raises(ValueError, match="3 dimensions"):
        channel_axis((84, 84))


def test_rpc_communicator_close_has_a_grace_period() -> None:
    # the behaviour (Unity gets the 400 reply, not a lost connection) is checked end to end by
    # tests/test_player.py's close_and_check on a plain mlagents UnityEnvironment
    from mlagents_envs.rpc_communicator import RpcCommunicator

    assert RpcCommunicator._unity_sb3_patched and compat.CLOSE_GRACE_S > 0
