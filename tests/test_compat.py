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


# ------------------------------------------------- mlagents_envs first: the start-up import hook
# Scripts written for ML-Agents import mlagents_envs first and never import unity_sb3. The
# `unity_sb3_mlagents.pth` file that installing unity_sb3 puts into site-packages registers
# `_unity_sb3_hook.MlagentsEnvsFinder`, which runs the compat layer on the first import of
# mlagents_envs. These checks run in fresh interpreters started outside the checkout (so only the
# installed package is importable), as a user's script would be.

ROOT = Path(__file__).resolve().parent.parent

MLAGENTS_FIRST = textwrap.dedent(
    r"""
    import json, sys
    {first}
    assert "unity_sb3" not in sys.modules, "the start-up hook must not import unity_sb3"
    assert "google.protobuf" not in sys.modules or {first!r}, "the start-up hook must not import protobuf"
    from mlagents_envs.base_env import ActionTuple
    from mlagents_envs.environment import UnityEnvironment
    import numpy as np

    env = UnityEnvironment(file_name=sys.argv[1], worker_id=0, base_port=int(sys.argv[2]), seed=3,
                           no_graphics=True, timeout_wait=60, log_folder=sys.argv[3])
    try:
        env.reset()
        name = next(iter(env.behavior_specs))
        spec = env.behavior_specs[name]
        counts = []
        for _ in range(3):
            decision, terminal = env.get_steps(name)
            counts.append(len(decision) + len(terminal))
            env.set_actions(name, spec.action_spec.random_action(len(decision)))
            env.step()
    finally:
        env.close()
    print("RESULT" + json.dumps({{"behavior": name, "agents": counts,
                                  "obs": [list(s.shape) for s in spec.observation_specs]}}))
    """
)


def _run_fresh(
    code: str, *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter in ``cwd`` (no PYTHONPATH unless ``env`` sets one)."""
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environ.update({"OMP_NUM_THREADS": "1", **(env or {})})
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=environ, timeout=300, cwd=cwd
    )


@pytest.mark.player
@pytest.mark.parametrize("first", ["", "import stable_baselines3"], ids=["mlagents_only", "sb3_first"])
def test_mlagents_script_without_unity_sb3_talks_to_the_player(tmp_path: Path, first: str) -> None:
    from ports import free_base_port

    from unity_sb3.scenes.player.launcher import write_launcher

    launcher = write_launcher("Ball3D", tmp_path / "build")
    script = MLAGENTS_FIRST.format(first=first)
    proc = _run_fresh(script, str(launcher), str(free_base_port(4)), str(tmp_path), cwd=tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert proc.returncode == 0 and lines, f"script failed:\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(lines[-1][len("RESULT") :])
    assert result["behavior"].startswith("3DBall")
    assert result["obs"] == [[8]]
    assert all(count == 12 for count in result["agents"]), result


def test_startup_hook_is_installed_and_cheap() -> None:
    import _unity_sb3_hook

    assert _unity_sb3_hook.MlagentsEnvsFinder in sys.meta_path
    proc = _run_fresh(
        "import sys, _unity_sb3_hook as h; print(h.MlagentsEnvsFinder in sys.meta_path, "
        "any(m in sys.modules for m in ('unity_sb3', 'google.protobuf', 'numpy', 'mlagents_envs')))",
        cwd=ROOT.parent,
    )
    assert proc.stdout.split() == ["True", "False"], proc.stderr


def test_startup_hook_leaves_protobuf_3_alone(tmp_path: Path) -> None:
    # protobuf 3 imports the generated modules as they are: the hook must not load unity_sb3
    code = (
        "import sys, google.protobuf; google.protobuf.__version__ = '3.20.3'\n"
        "import mlagents_envs\n"
        "print('compat' if 'unity_sb3.unity.compat' in sys.modules else 'untouched')"
    )
    proc = _run_fresh(code, cwd=tmp_path)
    assert proc.stdout.split() == ["untouched"], proc.stderr


def test_startup_hook_failure_warns_and_lets_mlagents_import(tmp_path: Path) -> None:
    code = (
        "import sys, warnings\n"
        "sys.modules['unity_sb3'] = None  # unity_sb3 cannot be imported\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import mlagents_envs\n"
        "print(mlagents_envs.__version__, '|', ' '.join(str(w.message) for w in caught))"
    )
    proc = _run_fresh(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    version, _, message = proc.stdout.partition("|")
    assert version.strip() == "0.28.0"
    assert "could not prepare mlagents_envs" in message and "import unity_sb3" in message


def test_broken_hook_module_does_not_break_python_startup(tmp_path: Path) -> None:
    # a module of that name that raises (half-deleted install) must leave start-up silent
    (tmp_path / "_unity_sb3_hook.py").write_text("raise RuntimeError('broken')\n")
    proc = _run_fresh("print('started')", cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0 and proc.stdout.split() == ["started"]
    assert proc.stderr == ""


@pytest.mark.parametrize("kind", ["wheel", "editable"])
def test_wheels_ship_the_startup_hook(tmp_path: Path, kind: str) -> None:
    import shutil
    import zipfile

    source = tmp_path / "src"
    source.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "_unity_sb3_hook.py"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "unity_sb3", source / "unity_sb3", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    hook = "build_editable" if kind == "editable" else "build_wheel"
    proc = _run_fresh(
        f"from setuptools import build_meta; print('WHEEL', build_meta.{hook}({str(out)!r}))", cwd=source
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheel = out / proc.stdout.splitlines()[-1].removeprefix("WHEEL ")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        pth = archive.read("unity_sb3_mlagents.pth").decode()
        finders = [archive.read(n).decode() for n in names if n.endswith("_finder.py")]
    assert "unity_sb3_mlagents.pth" in names  # at the root: installs into site-packages itself
    assert pth.startswith("import ") and "_unity_sb3_hook" in pth and pth.count("\n") == 1
    if kind == "wheel":
        assert "_unity_sb3_hook.py" in names
    else:  # the editable finder maps the top-level hook module to the checkout
        assert len(finders) == 1 and "'_unity_sb3_hook'" in finders[0]
