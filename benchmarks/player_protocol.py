"""The stand-in player's exchange rate against the bare protocol's, side by side in one run.

Both sides run the same Python loop (``benchmarks/scenes.py``'s ``run``: random actions through
``mlagents_envs.UnityEnvironment``, whose gRPC server is the one every trainer uses) against a
separate process playing Unity:

- **bare**: a do-nothing gRPC client. It sends the scene's real handshake, then answers every
  input with one pre-serialized output of the scene (the reset's agents: every agent deciding,
  the same observations, PNGs and masks; no side-channel bytes), never parsing the actions nor
  stepping anything. Its rate is what the protocol and ``mlagents_envs`` carry.
- **player**: ``python -m unity_sb3.scenes.player SCENE``, which parses the actions, steps the
  scene and encodes its output every exchange.
- **baseline** (with ``--baseline DIR``): the same player from another source tree, for a
  before/after comparison in the same run.

Rounds alternate the sides; the table shows the median exchange rates and their ratios to the
bare rate (target >= 0.7), and the CPU milliseconds per exchange of each Unity-side process (what
it spends on itself; other jobs on the cores disturb it less than the rates). ``--profile DIR``
also writes cProfile files of the Python side and of the Unity-side process
(``DIR/<scene>-<side>-{python,unity}.prof``). ``--own-work`` measures instead the player's own CPU
time per exchange in-process (:func:`own_work`). Writes ``benchmarks/results/player_protocol.json``
(``player_own_work.json`` with ``--own-work``).

Usage::

    python benchmarks/player_protocol.py [--steps 1000] [--rounds 3] [--scenes Ball3D GridWorld Escape]
        [--baseline DIR] [--profile DIR] [--param num_agents=64 ...]
    python benchmarks/player_protocol.py --own-work [--baseline DIR] [--param ...]
"""

from __future__ import annotations

import argparse
import cProfile
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# where unity_sb3 is imported from (ROOT_VARIABLE: ``--own-work`` points it at the ``--baseline`` tree)
sys.path.insert(0, os.environ.get("PLAYER_PROTOCOL_ROOT", str(Path(__file__).resolve().parents[1])))

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
import numpy as np
from _common import free_base_port, print_table, write_results
from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel
from scenes import random_actions, run

SCENES = ("Ball3D", "GridWorld", "Escape")
ROOT_VARIABLE = "PLAYER_PROTOCOL_ROOT"
#: The full name of the one RPC Unity calls (``unity_to_external.proto``).
EXCHANGE_METHOD = "/communicator_objects.UnityToExternalProto/Exchange"


def _player_api() -> tuple[Any, Any, Any]:
    """``StandInPlayer``, ``load_scene`` and ``parse_param`` of the imported tree (``--baseline`` trees
    before the player's ``launcher`` module kept all three in ``server``)."""
    from unity_sb3.scenes.player import server

    try:
        from unity_sb3.scenes.player import launcher
    except ImportError:
        launcher = server
    return server.StandInPlayer, launcher.load_scene, launcher.parse_param


def _scene_params(params: list[str]) -> dict[str, object]:
    parse_param = _player_api()[2]
    return dict(parse_param(p) for p in params)


def serve_bare(scene: str, port: int, seed: int, params: list[str] = ()) -> int:
    """The do-nothing Unity side: the scene's handshake, then one pre-serialized output forever.

    :param scene: embedded scene name; only its handshake and its reset's output are used.
    :param port: Python's gRPC port.
    :param seed: scene seed.
    :param params: ``key=value`` scene parameters.
    :return: exit code, 0 when Python closed.
    """
    import grpc
    from mlagents_envs.communicator_objects.command_pb2 import QUIT
    from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto

    StandInPlayer, load_scene, _ = _player_api()

    env = load_scene(scene, seed=seed, params=_scene_params(params))
    player = StandInPlayer(env, port, name=scene)
    handshake = player.handshake_message().SerializeToString()
    env.reset()
    message = player.output_message()
    message.unity_output.rl_output.side_channel = b""  # the reset's statistics, not sent every step
    output = message.SerializeToString()
    empty = UnityMessageProto(header={"status": 200}).SerializeToString()
    with grpc.insecure_channel(f"localhost:{port}") as channel:
        # No request serializer: the bytes go out as they are.
        exchange = channel.unary_unary(EXCHANGE_METHOD, response_deserializer=UnityMessageProto.FromString)
        exchange(handshake, wait_for_ready=True, timeout=60)
        reply = exchange(empty)
        while reply.header.status == 200 and reply.unity_input.rl_input.command != QUIT:
            try:
                reply = exchange(output)
            except grpc.RpcError:  # Python closed its server
                break
    return 0


def _unity_side(
    side: str,
    scene: str,
    port: int,
    seed: int,
    profile: Path | None,
    baseline: Path | None,
    params: list[str] = (),
) -> subprocess.Popen:
    """Start the process that plays Unity for ``side`` (optionally under cProfile).

    ``side`` is ``"bare"``, ``"player"`` or ``"baseline"`` (the player of the source tree
    ``baseline``, e.g. an exported older commit).
    """
    python = [sys.executable]
    if profile is not None:
        python += ["-m", "cProfile", "-o", str(profile)]
    if side == "bare":
        args = [*python, __file__, "--serve-bare", scene, "--port", str(port), "--seed", str(seed)]
    else:  # cProfile takes -m too
        args = [*python, "-m", "unity_sb3.scenes.player", scene, "--mlagents-port", str(port)]
    for param in params:
        args += ["--param", param]
    root = baseline if side == "baseline" else Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(args, cwd=root, env=env)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def measure(
    side: str,
    scene: str,
    steps: int,
    seed: int,
    profile_dir: Path | None,
    baseline: Path | None = None,
    params: list[str] = (),
) -> dict[str, float]:
    """One round: start ``side``'s Unity process, run ``steps`` random steps, close.

    :return: exchanges per second and agent-steps per second of the Python loop, and the CPU
        milliseconds per exchange of each process during the loop (Python's includes its gRPC
        threads). CPU time barely moves when other jobs share the cores; wall time does.
    """
    port = free_base_port(1)
    stem = f"{scene}-{side}"
    unity_profile = profile_dir / f"{stem}-unity.prof" if profile_dir else None
    process = _unity_side(side, scene, port, seed, unity_profile, baseline, params)
    env = UnityEnvironment(
        file_name=None,
        base_port=port,
        worker_id=0,
        seed=seed,
        timeout_wait=60,
        side_channels=[StatsSideChannel()],
    )
    profiler = cProfile.Profile() if profile_dir else None
    try:
        if profiler:
            profiler.enable()
        unity_cpu, python_cpu = _cpu_seconds(process.pid), time.process_time()
        counts = run(env, steps, seed)
        unity_cpu, python_cpu = _cpu_seconds(process.pid) - unity_cpu, time.process_time() - python_cpu
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile_dir / f"{stem}-python.prof")
    finally:
        env.close()
        process.wait(timeout=60)
    return {
        "exchanges_per_s": counts["steps"] / counts["seconds"],
        "agent_steps_per_s": counts["agent_steps"] / counts["seconds"],
        "unity_cpu_ms": 1000 * unity_cpu / counts["steps"],
        "python_cpu_ms": 1000 * python_cpu / counts["steps"],
    }


def own_work(scene: str, exchanges: int, repeats: int, seed: int, params: list[str] = ()) -> float:
    """CPU microseconds per exchange that the player spends on itself, measured in-process.

    What the player does between two ``Exchange`` calls: parse Python's input (built as
    ``UnityEnvironment._generate_step_input`` builds it), apply it (the actions, the scene step),
    build and serialize the output. Random actions, as in the rounds; the minimum over ``repeats``
    runs of ``exchanges`` each (CPU time, so other jobs on the cores matter less).
    """
    from mlagents_envs.communicator_objects.command_pb2 import STEP
    from mlagents_envs.communicator_objects.unity_message_pb2 import UnityMessageProto

    StandInPlayer, load_scene, _ = _player_api()

    best = math.inf
    for _ in range(repeats):
        env = load_scene(scene, seed=seed, params=_scene_params(params))
        player = StandInPlayer(env, 1, name=scene)
        output = getattr(player, "output_message", None) or player._output_message  # its name before ec43297
        rng = np.random.default_rng(seed)
        env.reset()
        player._has_reset = True
        spent = 0.0
        for _ in range(exchanges):
            message = UnityMessageProto()
            message.header.status = 200
            rl_input = message.unity_input.rl_input
            rl_input.command = STEP
            for name, spec in player.specs.items():
                actions = random_actions(spec, env.get_steps(name)[0], rng)
                for c, d in zip(actions.continuous, actions.discrete):
                    proto = rl_input.agent_actions[name].value.add()
                    proto.vector_actions_deprecated.extend(c)
                    proto.continuous_actions.extend(c)
                    proto.vector_actions_deprecated.extend(d)
                    proto.discrete_actions.extend(d)
            data = message.SerializeToString()
            started = time.process_time()
            player._apply_input(UnityMessageProto.FromString(data))
            output().SerializeToString()
            spent += time.process_time() - started
        best = min(best, spent / exchanges)
    return 1e6 * best


def _own_work_of(root: Path, scene: str, seed: int, params: list[str] = ()) -> float:
    """:func:`own_work` in a process importing unity_sb3 from ``root``."""
    args = [sys.executable, __file__, "--own-work-of", scene, "--seed", str(seed)]
    for param in params:
        args += ["--param", param]
    result = subprocess.run(
        args, env={**os.environ, ROOT_VARIABLE: str(root)}, capture_output=True, text=True
    )
    if result.returncode:
        raise RuntimeError(f"own work of {scene} from {root} failed:\n{result.stderr}")
    return float(result.stdout.split()[-1])


def compare_own_work(
    scenes: list[str], baseline: Path | None, seed: int, alternations: int = 3, params: list[str] = ()
) -> int:
    """Print and write the player's own work per exchange, this tree's and the baseline's.

    Each value is the median of ``alternations`` processes, the trees alternating.
    """
    roots = {"player": Path(__file__).resolve().parents[1]}
    if baseline:
        roots["baseline"] = baseline
    rows = []
    for scene in scenes:
        runs: dict[str, list[float]] = {side: [] for side in roots}
        for _ in range(alternations):
            for side, root in roots.items():
                runs[side].append(_own_work_of(root, scene, seed, params))
        row: dict[str, object] = {"scene": scene}
        for side in roots:
            row[f"{side}_own_us"] = statistics.median(runs[side])
            row[f"{side}_own_us_runs"] = runs[side]
        rows.append(row)
    print_table(
        rows, ["scene", *(f"{side}_own_us" for side in roots)], title="Player's own CPU us per exchange"
    )
    print(
        f"wrote {write_results('player_own_work', rows, seed=seed, baseline=baseline, params=list(params))}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="step() calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side and scene (median reported)")
    parser.add_argument("--scenes", nargs="*", default=list(SCENES), help="embedded scene names")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="scene parameter for every side, e.g. num_agents=64 (repeatable)",
    )
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR", help="write cProfile files here")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="DIR",
        help="also measure the player of this source tree (e.g. `git archive COMMIT unity_sb3 | tar -x -C DIR`)",
    )
    parser.add_argument(
        "--own-work",
        action="store_true",
        help="instead of the rounds: the player's own CPU time per exchange, in-process (with --baseline too)",
    )
    parser.add_argument("--own-work-of", metavar="SCENE", help=argparse.SUPPRESS)
    parser.add_argument("--serve-bare", metavar="SCENE", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_bare:
        return serve_bare(args.serve_bare, args.port, args.seed, args.param)
    if args.own_work_of:
        print(own_work(args.own_work_of, exchanges=400, repeats=5, seed=args.seed, params=args.param))
        return 0
    if args.own_work:
        return compare_own_work(args.scenes, args.baseline, args.seed, params=args.param)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)

    sides = ("bare", "player", "baseline") if args.baseline else ("bare", "player")
    rows = []
    for scene in args.scenes:
        rates: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side in sides:
                rates[side].append(
                    measure(side, scene, args.steps, args.seed, args.profile, args.baseline, args.param)
                )
        median = {side: statistics.median(r["exchanges_per_s"] for r in rates[side]) for side in sides}
        cpu = {
            side: {
                key: statistics.median(r[key] for r in rates[side])
                for key in ("unity_cpu_ms", "python_cpu_ms")
            }
            for side in sides
        }
        row = {
            "scene": scene,
            "bare_exchanges_per_s": median["bare"],
            "player_exchanges_per_s": median["player"],
            "ratio": median["player"] / median["bare"],
            "player_agent_steps_per_s": statistics.median(r["agent_steps_per_s"] for r in rates["player"]),
            "bare_unity_cpu_ms": cpu["bare"]["unity_cpu_ms"],
            "player_unity_cpu_ms": cpu["player"]["unity_cpu_ms"],
            "rounds": rates,
        }
        if args.baseline:
            row["baseline_exchanges_per_s"] = median["baseline"]
            row["baseline_ratio"] = median["baseline"] / median["bare"]
            row["baseline_unity_cpu_ms"] = cpu["baseline"]["unity_cpu_ms"]
        rows.append(row)
    columns = ["scene", "bare_exchanges_per_s", "player_exchanges_per_s", "ratio"]
    if args.baseline:
        columns += ["baseline_exchanges_per_s", "baseline_ratio"]
    columns += ["bare_unity_cpu_ms", "player_unity_cpu_ms"]
    if args.baseline:
        columns.append("baseline_unity_cpu_ms")
    print_table(
        rows,
        columns,
        title=f"Player vs bare protocol, {args.steps} steps x {args.rounds} rounds, median (target ratio >= 0.7)",
    )
    path = write_results(
        "player_protocol",
        rows,
        steps=args.steps,
        rounds=args.rounds,
        seed=args.seed,
        baseline=args.baseline,
        params=args.param,
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
