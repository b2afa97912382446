"""Speed of each embedded scene in-process and through the stand-in player (same run).

For every scene: ``--steps`` calls of ``step()`` with random actions (respecting action masks),
first on the scene object itself, then on a ``UnityEnvironment`` connected to the stand-in
player over gRPC, as a Unity build would be. Reports agent-steps per second (agents that
asked for a decision, summed over behaviors) and steps per second; through the player every
step is one ``Exchange``, so its steps/s are exchanges/s. Writes
``benchmarks/results/scenes.json``.

Usage::

    python benchmarks/scenes.py [--steps 500] [--scenes Ball3D GridWorld] [--protocol-scene]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from _common import print_table, this_tree_module, write_results
from mlagents_envs.base_env import BaseEnv
from mlagents_envs.environment import UnityEnvironment
from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

from unity_sb3.scenes.player.launcher import write_launcher

PROTOCOL_SCENE = "unity_sb3.scenes.protocol_test:make_protocol_test_scene"


#: the same random actions for this tree and a --baseline one (player_protocol.py imports it)
random_actions = this_tree_module("unity_sb3/scenes/random_play.py").random_actions


def run(env: BaseEnv, steps: int, seed: int) -> dict[str, float]:
    """Reset, then ``steps`` steps with random actions; returns counts and the time of the steps."""
    rng = np.random.default_rng(seed)
    env.reset()
    specs = dict(env.behavior_specs.items())
    agent_steps = 0
    started = time.perf_counter()
    for _ in range(steps):
        for name, spec in specs.items():
            decision, _ = env.get_steps(name)
            if len(decision):
                agent_steps += len(decision)
                env.set_actions(name, random_actions(spec, decision, rng))
        env.step()
    seconds = time.perf_counter() - started
    return {"agent_steps": agent_steps, "steps": steps, "seconds": seconds}


def make_reference(scene: str, seed: int) -> BaseEnv:
    if scene == PROTOCOL_SCENE:
        from unity_sb3.scenes.protocol_test import make_protocol_test_scene

        return make_protocol_test_scene(seed=seed)
    from unity_sb3.scenes import make_scene

    return make_scene(scene, seed=seed)


def measure(scene: str, steps: int, seed: int, base_port: int) -> dict[str, object]:
    reference = make_reference(scene, seed)
    inprocess = run(reference, steps, seed)
    reference.close()
    with tempfile.TemporaryDirectory(prefix="unity_sb3_bench_") as tmp:
        launcher = write_launcher(scene, tmp)
        started = time.perf_counter()
        env = UnityEnvironment(
            file_name=str(launcher),
            base_port=base_port,
            worker_id=0,
            seed=seed,
            no_graphics=True,
            timeout_wait=60,
            side_channels=[StatsSideChannel()],  # as mlagents-learn does; else every stat logs a warning
        )
        startup = time.perf_counter() - started
        try:
            player = run(env, steps, seed)
        finally:
            env.close()
    name = "ProtocolTestScene" if scene == PROTOCOL_SCENE else scene
    agents = inprocess["agent_steps"] / inprocess["steps"]
    return {
        "scene": name,
        "agents_per_step": round(agents, 2),
        "inprocess_agent_steps_per_s": inprocess["agent_steps"] / inprocess["seconds"],
        "player_agent_steps_per_s": player["agent_steps"] / player["seconds"],
        "inprocess_steps_per_s": inprocess["steps"] / inprocess["seconds"],
        "player_exchanges_per_s": player["steps"] / player["seconds"],
        "slowdown": (inprocess["agent_steps"] / inprocess["seconds"])
        / (player["agent_steps"] / player["seconds"]),
        "player_startup_s": startup,
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=500, help="step() calls per scene and transport")
    parser.add_argument("--scenes", nargs="*", default=None, help="scene names (default: all)")
    parser.add_argument("--protocol-scene", action="store_true", help="also measure the protocol test scene")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--base-port", type=int, default=6305)
    args = parser.parse_args(argv)

    from unity_sb3.scenes import list_scenes

    scenes = args.scenes or list_scenes()
    if args.protocol_scene:
        scenes = [*scenes, PROTOCOL_SCENE]
    rows = [measure(scene, args.steps, args.seed, args.base_port) for scene in scenes]
    columns = [
        "scene",
        "agents_per_step",
        "inprocess_agent_steps_per_s",
        "player_agent_steps_per_s",
        "slowdown",
        "inprocess_steps_per_s",
        "player_exchanges_per_s",
        "player_startup_s",
    ]
    print_table(rows, columns, title=f"Embedded scenes, {args.steps} steps each, random actions")
    path = write_results("scenes", rows, steps=args.steps, seed=args.seed)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
