"""A stand-in Unity player: serves any ``BaseEnv`` over the real ML-Agents gRPC protocol.

Run it as a Unity build is run::

    python -m unity_sb3.scenes.player Ball3D --mlagents-port 5005 [--seed 0] [--param key=value ...]
        [-logFile PATH] [-nographics] [-batchmode] [--timeout SECONDS]

or write a launcher (:func:`unity_sb3.scenes.player.launcher.write_launcher`) that
``mlagents_envs.environment.UnityEnvironment(file_name=...)`` starts exactly like a Unity executable::

    path = write_launcher("Ball3D", "/tmp/builds")      # /tmp/builds/Ball3D.x86_64
    env = UnityEnvironment(file_name=str(path), worker_id=1, seed=3, no_graphics=True)

``SCENE`` is an embedded scene name (``unity_sb3.scenes.list_scenes()``) or, to serve your own
environment, ``package.module:factory`` / ``path/to/file.py:factory`` where ``factory(seed=...,
**params)`` returns a ``BaseEnv``.

Protocol (communication version 1.5.0, as ``mlagents_envs`` 0.28 speaks it; Unity is the gRPC
client, Python the server, each ``Exchange`` reply is Python's next input):

1. The player sends ``rl_initialization_output`` (all capabilities, one ``brain_parameters``
   per behavior) together with one placeholder agent per behavior, so Python knows every
   ``BehaviorSpec`` right after the handshake. The reply's ``rl_initialization_input.seed``
   goes to the scene's ``reseed(seed)``. Its ``num_areas`` > 1 copies the training area as Unity's
   ``TrainingAreaReplicator`` does in a build: an embedded scene named on the command line is
   created again with ``num_agents`` times ``num_areas`` areas
   (:func:`unity_sb3.scenes.replicate_areas`, the rule ``open_unity`` uses in-process) before it is
   reseeded; your own ``module:factory`` scene cannot be copied, so it keeps its agents and the
   player logs a warning.
2. The player sends an empty message; the reply is Python's first input (a reset).
3. Each input is applied in Unity's order: side-channel bytes
   (``receive_side_channel_data``; training-analytics messages are consumed by the player,
   as by Unity's runtime), then the command (reset, or the actions followed by
   ``step()``); the next output carries every behavior's terminal agents (``done``,
   ``max_step_reached``) then its deciding agents (with action masks), plus the scene's
   outgoing side-channel bytes (``drain_side_channel_data``).
4. A reply with header status 400 (``UnityEnvironment.close()``) or the ``QUIT`` command
   ends the player with exit code 0; so does losing the connection to Python (as Unity quits
   when its ``Exchange`` fails). See :mod:`unity_sb3.scenes.player.codec` for how
   observations, masks and actions are encoded (visual observations are 8-bit PNG).

Differences from a Unity build: a build sends its ``brain_parameters`` with the first output
after the reset, so ``UnityEnvironment.behavior_specs`` is empty until ``reset()``; the player
sends them in the handshake already (``mlagents_envs`` accepts both; code that must also run
against builds should call ``reset()`` before reading specs). The copied areas of ``num_areas``
are one scene with more agents, not areas laid out on a grid. Without ``--timeout`` the player
waits for Python forever, as a build does.

Exit codes: 0 closed by Python or Python went away; 1 the scene raised (traceback in the log);
2 bad command line; 3 could not reach Python, or no answer within ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from mlagents_envs.base_env import BaseEnv
from mlagents_envs.communicator_objects.command_pb2 import QUIT, RESET
from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto
from mlagents_envs.communicator_objects.unity_rl_initialization_output_pb2 import (
    UnityRLInitializationOutputProto,
)
from mlagents_envs.communicator_objects.unity_to_external_pb2_grpc import UnityToExternalProtoStub

from unity_sb3.scenes.player.codec import (
    TRAINING_ANALYTICS_CHANNEL,
    BehaviorEncoder,
    ProtocolError,
    actions_from_message,
    behavior_specs_of,
    without_channels,
    write_steps,
)
from unity_sb3.scenes.player.launcher import is_factory, load_scene, parse_param
from unity_sb3.scenes.player.layouts import ActionLayout
from unity_sb3.unity import compat as _compat  # noqa: F401
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.unity.proto import brain_parameters_proto, capabilities_proto

__all__ = [
    "COMMUNICATION_VERSION",
    "EXIT_CLOSED",
    "EXIT_NO_PYTHON",
    "EXIT_SCENE_ERROR",
    "EXIT_USAGE",
    "StandInPlayer",
    "main",
]

COMMUNICATION_VERSION = "1.5.0"
#: Reported as the Unity package version (com.unity.ml-agents 3.0.0 speaks communication 1.5.0).
UNITY_PACKAGE_VERSION = "3.0.0"

EXIT_CLOSED = 0
EXIT_SCENE_ERROR = 1
EXIT_USAGE = 2
EXIT_NO_PYTHON = 3

#: Seconds to wait for Python's server on the first call when no ``--timeout`` is given.
DEFAULT_CONNECT_TIMEOUT = 60.0

logger = logging.getLogger("unity_sb3.player")


class _Terminated(Exception):
    """SIGTERM arrived."""


class StandInPlayer:
    """Plays the Unity side of the ML-Agents protocol for ``env`` against Python's server on ``port``.

    :param env: the environment to serve (any ``BaseEnv``; ``reseed``,
        ``receive_side_channel_data`` and ``drain_side_channel_data`` are used when present).
    :param port: Python's gRPC port (``--mlagents-port``).
    :param name: the scene's name, sent as the academy name.
    :param timeout: seconds to wait for each answer from Python; ``None`` waits forever, as
        Unity does (Python may legitimately be busy training for minutes between steps).
    :param connect_timeout: seconds to wait for Python's server on the first call.
    :param compress_visual: send rank-3 observations as PNG (default, like Unity) or raw floats.
    :param host: where Python listens.
    :param log_path: where this player logs, sent to Python in the handshake.
    :param replicate: ``replicate(num_areas)`` creates ``env`` again with its training areas copied
        ``num_areas`` times, for a handshake that asks for more than one; ``None``: ``env`` cannot be
        copied, and such a handshake gets a warning.
    """

    def __init__(
        self,
        env: BaseEnv,
        port: int,
        *,
        name: str = "",
        timeout: float | None = None,
        connect_timeout: float | None = None,
        compress_visual: bool = True,
        host: str = "localhost",
        log_path: str = "",
        replicate: Callable[[int], BaseEnv] | None = None,
    ) -> None:
        self.env = env
        self.replicate = replicate
        self.port = int(port)
        self.name = name
        self.timeout = timeout
        self.connect_timeout = (
            connect_timeout if connect_timeout is not None else (timeout or DEFAULT_CONNECT_TIMEOUT)
        )
        self.host = host
        self.log_path = log_path
        self.specs = behavior_specs_of(env)
        self.encoders = {name: BehaviorEncoder(spec, compress_visual) for name, spec in self.specs.items()}
        self.action_layouts = {
            name: ActionLayout(spec.action_spec.continuous_size, spec.action_spec.discrete_size)
            for name, spec in self.specs.items()
        }
        self.exchanges = 0
        self._n_decisions: dict[str, int] = {}
        self._has_reset = False

    # -- the conversation ------------------------------------------------------------------

    def run(self) -> int:
        """Connect, hand-shake and serve until Python closes. Returns the process exit code."""
        channel = grpc.insecure_channel(f"{self.host}:{self.port}")
        stub = UnityToExternalProtoStub(channel)
        stage = "connecting"
        try:
            reply = stub.Exchange(self.handshake_message(), timeout=self.connect_timeout, wait_for_ready=True)
            stage = "handshake"
            if not self._accept_initialization(reply):
                return EXIT_CLOSED
            reply = stub.Exchange(self._message(), timeout=self.timeout)
            started = time.perf_counter()
            stage = "running"
            while True:
                if reply.header.status != 200:
                    logger.info("Python closed the connection (header status %d).", reply.header.status)
                    return EXIT_CLOSED
                if not self._apply_input(reply):
                    logger.info("Python sent the QUIT command.")
                    return EXIT_CLOSED
                message = self.output_message()
                self.exchanges += 1
                reply = stub.Exchange(message, timeout=self.timeout)
        except grpc.RpcError as exc:
            return self._connection_lost(exc, stage)
        finally:
            if stage == "running":
                elapsed = time.perf_counter() - started
                logger.info("%d exchanges in %.1f s.", self.exchanges, elapsed)
            channel.close()

    def _connection_lost(self, exc: grpc.RpcError, stage: str) -> int:
        code = exc.code() if hasattr(exc, "code") else None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            limit = self.connect_timeout if stage == "connecting" else self.timeout
            logger.error("Python did not answer within %s s while %s; quitting.", limit, stage)
            return EXIT_NO_PYTHON
        if stage == "connecting":
            logger.error("Could not reach Python on %s:%d: %s", self.host, self.port, code)
            return EXIT_NO_PYTHON
        logger.warning("Lost the connection to Python while %s (%s); quitting as Unity does.", stage, code)
        return EXIT_CLOSED

    @staticmethod
    def _message(status: int = 200) -> UnityMessageProto:
        message = UnityMessageProto()
        message.header.status = status
        return message

    def handshake_message(self) -> UnityMessageProto:
        """The first message: initialization output (capabilities, brain parameters) and one
        placeholder agent per behavior."""
        message = self._message()
        output = message.unity_output
        output.rl_initialization_output.CopyFrom(
            UnityRLInitializationOutputProto(
                name=self.name,
                communication_version=COMMUNICATION_VERSION,
                package_version=UNITY_PACKAGE_VERSION,
                log_path=self.log_path,
                capabilities=capabilities_proto(),
                brain_parameters=[brain_parameters_proto(n, s) for n, s in self.specs.items()],
            )
        )
        for name, encoder in self.encoders.items():
            encoder.write_placeholder(output.rl_output.agentInfos[name].value)
        return message

    def _accept_initialization(self, reply: UnityMessageProto) -> bool:
        if reply.header.status != 200:
            logger.info("Python closed the connection during the handshake (status %d).", reply.header.status)
            return False
        init = reply.unity_input.rl_initialization_input
        logger.info(
            "Connected to Python mlagents_envs %s (communication %s); seed %d, num_areas %d.",
            init.package_version,
            init.communication_version,
            init.seed,
            init.num_areas,
        )
        python_major = init.communication_version.split(".")[0]
        if python_major and python_major != COMMUNICATION_VERSION.split(".")[0]:
            logger.warning(
                "Python speaks communication version %s, this player %s: expect failures.",
                init.communication_version,
                COMMUNICATION_VERSION,
            )
        if init.num_areas > 1:
            self._replicate_areas(int(init.num_areas))
        reseed = getattr(self.env, "reseed", None)
        if callable(reseed):
            reseed(int(init.seed))
        else:
            logger.warning(
                "%s has no reseed(seed); the handshake's seed %d is ignored.",
                type(self.env).__name__,
                init.seed,
            )
        return True

    def _replicate_areas(self, num_areas: int) -> None:
        """Serve the scene with its training area copied ``num_areas`` times, as Unity's
        ``TrainingAreaReplicator`` does after the handshake (or warn that it cannot be copied)."""
        if self.replicate is None:
            logger.warning(
                "num_areas=%d ignored: the player cannot copy the areas of %s (your own factory's scene), "
                "so it keeps its agents. Give the factory more agents with its own parameters "
                "(--param, or write_launcher(scene_params=...)) and open it with num_areas=1.",
                num_areas,
                self.name or type(self.env).__name__,
            )
            return
        env = self.replicate(num_areas)
        if behavior_specs_of(env) != self.specs:
            env.close()
            raise ProtocolError(f"num_areas={num_areas} changed the behavior specs sent in the handshake.")
        self.env.close()
        self.env = env
        logger.info("Training area copied %d times, as Unity's TrainingAreaReplicator does.", num_areas)

    def _apply_input(self, reply: UnityMessageProto) -> bool:
        """Apply side channels, then the command. Returns False on QUIT."""
        rl_input = reply.unity_input.rl_input
        if rl_input.side_channel:
            data = without_channels(rl_input.side_channel, {TRAINING_ANALYTICS_CHANNEL})
            receive = getattr(self.env, "receive_side_channel_data", None)
            if data and callable(receive):
                receive(data)
        if rl_input.command == QUIT:
            return False
        if rl_input.command == RESET or not self._has_reset:
            self.env.reset()
            self._has_reset = True
            return True
        for name, actions in rl_input.agent_actions.items():
            spec = self.specs.get(name)
            if spec is None:
                logger.warning("Actions for unknown behavior %r ignored.", name)
                continue
            n_agents = self._n_decisions.get(name, 0)
            if n_agents == 0 or len(actions.value) == 0:  # Unity applies nothing (zeros)
                continue
            layout = self.action_layouts[name]
            self.env.set_actions(name, actions_from_message(actions, spec, n_agents, name, layout))
        self.env.step()
        return True

    def output_message(self) -> UnityMessageProto:
        """The scene's current steps (every behavior) and outgoing side-channel bytes as a message.

        Also records how many agents of each behavior now wait for an action.
        """
        message = self._message()
        rl_output = message.unity_output.rl_output
        for name, encoder in self.encoders.items():
            decision_steps, terminal_steps = self.env.get_steps(name)
            write_steps(rl_output, name, encoder, decision_steps, terminal_steps)
            self._n_decisions[name] = len(decision_steps)
        drain = getattr(self.env, "drain_side_channel_data", None)
        if callable(drain):
            data = drain()
            if data:
                rl_output.side_channel = bytes(data)
        return message


# -- scenes and parameters ---------------------------------------------------------------------


# -- command line ------------------------------------------------------------------------------


def _port(text: str) -> int:
    """``--mlagents-port``: an int in 1-65535 (a bad one would wait for Python forever)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range 1-65535")
    return port


def _argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m unity_sb3.scenes.player",
        description="Serve an embedded scene (or any BaseEnv) to Python over the Unity ML-Agents protocol.",
        allow_abbrev=False,
    )
    parser.add_argument("scene", help="embedded scene name, or module:factory / file.py:factory")
    parser.add_argument("--mlagents-port", type=_port, required=True, help="Python's gRPC port")
    parser.add_argument("--seed", type=int, default=0, help="seed before the handshake's seed arrives")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="scene parameter")
    parser.add_argument("--timeout", type=float, default=None, help="seconds to wait for each answer")
    parser.add_argument("--host", default="localhost", help="where Python listens")
    parser.add_argument(
        "--raw-visual", action="store_true", help="send visual observations as floats instead of PNG"
    )
    parser.add_argument(
        "-logFile", "-logfile", dest="log_file", default=None, help="log file; '-' for stdout"
    )
    parser.add_argument("-nographics", action="store_true", help="accepted and ignored (never renders)")
    parser.add_argument("-batchmode", action="store_true", help="accepted and ignored")
    return parser


def _configure_logging(log_file: str | None) -> logging.Handler:
    if log_file == "-":
        handler: logging.Handler = logging.StreamHandler(sys.stdout)
    elif log_file:
        Path(log_file).expanduser().parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file, mode="w", encoding="utf-8")
    else:  # no -logFile: only warnings and errors, on stderr (Unity would write ~/.config/unity3d/.../Player.log)
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return handler


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit code (see the module docstring)."""
    parser = _argument_parser()
    args, unknown = parser.parse_known_args(argv)
    handler = _configure_logging(args.log_file)
    logger.info("unity_sb3 stand-in player for %s; arguments %s", args.scene, list(argv or sys.argv[1:]))
    if unknown:
        logger.info("Ignoring arguments a Unity player would ignore: %s", unknown)
    previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = _serve(args)
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        logger.removeHandler(handler)
        handler.close()
    return code


def _serve(args: argparse.Namespace) -> int:
    env: BaseEnv | None = None
    player: StandInPlayer | None = None
    try:
        try:
            params = dict(parse_param(p) for p in args.param)
        except ValueError as exc:
            logger.error("%s", exc)
            code = EXIT_USAGE
        else:
            env = load_scene(args.scene, seed=args.seed, params=params)

            def replicate(num_areas: int) -> BaseEnv:
                return load_scene(args.scene, seed=args.seed, params=params, num_areas=num_areas)

            player = StandInPlayer(
                env,
                args.mlagents_port,
                name=args.scene,
                timeout=args.timeout,
                compress_visual=not args.raw_visual,
                host=args.host,
                log_path=str(Path(args.log_file).resolve()) if args.log_file and args.log_file != "-" else "",
                replicate=None if is_factory(args.scene) else replicate,
            )
            logger.info(
                "Behaviors: %s; connecting to %s:%d.", list(player.specs), args.host, args.mlagents_port
            )
            code = player.run()
    except _Terminated:
        logger.info("Stopped by SIGTERM.")
        code = EXIT_CLOSED
    except KeyboardInterrupt:
        logger.info("Interrupted.")
        code = EXIT_CLOSED
    except (ProtocolError, UnityConfigurationError) as exc:
        logger.error("%s", exc)
        code = EXIT_SCENE_ERROR
    except Exception:
        logger.exception("The scene failed.")
        code = EXIT_SCENE_ERROR
    finally:
        if player is not None:
            env = player.env  # the scene with its areas copied, when the handshake asked for that
        if env is not None:
            try:
                env.close()
            except Exception:
                logger.exception("Closing the scene failed.")
    logger.info("Exit code %d.", code)
    return code


if __name__ == "__main__":
    sys.exit(main())
