"""Scale-out: agent-steps per second vs number of Unity instances, threads vs Ray actors.

For 1, 2 and 4 instances of Ball3D (12 agents each) behind the stand-in player (the real
Unity gRPC protocol, a separate process per instance, as a build), random actions are
stepped through

- ``UnityVecEnv`` (threads): the instances' gRPC exchanges overlap in a thread pool of the
  learner process;
- ``RayUnityVecEnv``: each instance's ``UnityEnvironment`` lives in a Ray actor (here all on
  this machine, one local Ray instance); one actor call per instance per step, all started
  before any is collected.

Both env kinds of one instance count are open at once and measured in alternating rounds
(median), so machine load hits both alike. Agent-steps = active slots stepped (all slots are
active in Ball3D). ``learner_cpu_us_per_agent_step`` is the learner process's own CPU time
per agent-step: with Ray the players, the ``UnityEnvironment`` protocol work and the scene
all run elsewhere, so this is what the learner pays for every sample, wherever the
simulation runs.

Then it measures what SB3 PPO costs per sample on the learner (policy forward during
collection + the update; ML-Agents' 3DBall settings: 2x128 MLP, batch 64, 3 epochs) and
prints a paper estimate of cluster throughput:

    vector step  = max(L, N * A * c)          L: one instance step (Ray round trip included),
                                              c: learner CPU per agent-step taken in, A: agents
    per sample   = vector step / (N * A) + f + u   f: PPO forward + buffer, u: PPO update
    throughput   = 1 / per sample  ->  at most 1 / (c + f + u) from one learner, however large N

Writes ``benchmarks/results/scale_out.json``. On a 2-core machine shared with other work
the absolute numbers are noisy; the load average is recorded with them.

Usage::

    python benchmarks/scale_out.py [--instances 1 2 4] [--seconds 2] [--rounds 3]
        [--transport player|inprocess] [--agents 12] [--ppo-steps 24000]
        [--ray-address auto]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
import torch
from _common import print_table, write_results

from unity_sb3.wrappers.vec_env import UnityVecEnv

SCENE = "Ball3D"


def step_loop(venv: UnityVecEnv, seconds: float, rng: np.random.Generator) -> tuple[float, float]:
    """Agent-steps per second (wall) and learner CPU microseconds per agent-step."""
    shape = (venv.num_envs, *venv.action_space.shape)
    agent_steps = 0
    wall, cpu = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall < seconds:
        for _ in range(10):
            venv.step(rng.uniform(-1, 1, shape).astype(np.float32))
            agent_steps += int(venv.active_mask.sum())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return agent_steps / wall, 1e6 * cpu / agent_steps


def open_envs(kind: str, n: int, transport: str, agents: int, base_port: int) -> UnityVecEnv:
    open_kwargs: dict[str, Any] = {"transport": transport, "num_agents": agents}
    if transport == "player":
        open_kwargs.update(base_port=base_port, find_free_port=True)
    if kind == "threads":
        return UnityVecEnv([SCENE] * n, open_kwargs=open_kwargs)
    from unity_sb3.wrappers.ray_vec_env import RayUnityVecEnv

    return RayUnityVecEnv(SCENE, num_instances=n, num_cpus=1, open_kwargs=open_kwargs)


def measure_instances(n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    envs = {
        "threads": open_envs("threads", n, args.transport, args.agents, 6100),
        "ray": open_envs("ray", n, args.transport, args.agents, 6200),
    }
    try:
        rng = np.random.default_rng(0)
        speeds: dict[str, list[float]] = {k: [] for k in envs}
        cpus: dict[str, list[float]] = {k: [] for k in envs}
        for venv in envs.values():
            venv.warn_inactive = False
            venv.reset()
            step_loop(venv, 0.3, rng)  # warm-up
        for _ in range(args.rounds):
            for kind, venv in envs.items():
                speed, cpu = step_loop(venv, args.seconds, rng)
                speeds[kind].append(speed)
                cpus[kind].append(cpu)
        rows = []
        for kind, venv in envs.items():
            rows.append(
                {
                    "env": "UnityVecEnv (threads)" if kind == "threads" else "RayUnityVecEnv",
                    "instances": n,
                    "slots": venv.num_envs,
                    "agent_steps_per_s": statistics.median(speeds[kind]),
                    "learner_cpu_us_per_agent_step": statistics.median(cpus[kind]),
                    "per_round": speeds[kind],
                }
            )
        return rows
    finally:
        for venv in envs.values():
            venv.close()


def measure_ppo(agents: int, steps: int) -> dict[str, float]:
    """PPO learner cost per sample on an in-process Ball3D (policy forward + update)."""
    from stable_baselines3 import PPO

    venv = UnityVecEnv(SCENE, open_kwargs={"transport": "inprocess", "num_agents": agents})
    timers = {"env": 0.0, "train": 0.0}
    step_wait = venv.step_wait

    def timed_step_wait():
        start = time.process_time()
        try:
            return step_wait()
        finally:
            timers["env"] += time.process_time() - start

    venv.step_wait = timed_step_wait  # type: ignore[method-assign]
    n_steps = max(1, 12_000 // agents)  # 12k samples per update, ML-Agents' 3DBall buffer_size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 12,000 is not a multiple of 64: one short minibatch per epoch
        model = PPO(
            "MlpPolicy",
            venv,
            n_steps=n_steps,
            batch_size=64,
            n_epochs=3,
            policy_kwargs={"net_arch": [128, 128]},
            device="cpu",
            seed=0,
        )
    train = model.train

    def timed_train() -> None:
        start = time.process_time()
        train()
        timers["train"] += time.process_time() - start

    model.train = timed_train  # type: ignore[method-assign]
    start = time.process_time()
    model.learn(total_timesteps=steps)
    total = time.process_time() - start
    venv.close()
    samples = model.num_timesteps
    collect = total - timers["train"] - timers["env"]
    return {
        "samples": samples,
        "ppo_update_us_per_sample": 1e6 * timers["train"] / samples,
        "ppo_collect_us_per_sample": 1e6 * collect / samples,
        "env_inprocess_us_per_sample": 1e6 * timers["env"] / samples,
    }


def paper_estimate(rows: list[dict[str, Any]], ppo: dict[str, float] | None, agents: int) -> dict[str, Any]:
    """SB3 PPO throughput with N instances on other nodes (see the module docstring's model)."""
    one = next(r for r in rows if r["env"] == "RayUnityVecEnv" and r["instances"] == 1)
    consume = statistics.median(
        r["learner_cpu_us_per_agent_step"] for r in rows if r["env"] == "RayUnityVecEnv"
    )
    latency_us = 1e6 * agents / one["agent_steps_per_s"]  # one instance step, Ray round trip included
    out: dict[str, Any] = {
        "instance_step_latency_us": latency_us,
        "learner_env_us_per_sample": consume,
        "table": [],
    }
    if ppo is None:
        return out
    forward, update = ppo["ppo_collect_us_per_sample"], ppo["ppo_update_us_per_sample"]
    out["learner_limit_samples_per_s"] = 1e6 / (consume + forward + update)
    for slowdown in (1, 10):
        for n in (1, 4, 16, 64):
            step_us = max(slowdown * latency_us, n * agents * consume)  # slowest instance vs learner's share
            per_sample = step_us / (n * agents) + forward + update
            out["table"].append(
                {
                    "scene_cost": f"{slowdown}x",
                    "instances": n,
                    "samples_per_s": 1e6 / per_sample,
                    "bound": "learner" if n * agents * consume >= slowdown * latency_us else "simulation",
                }
            )
    return out


def print_estimate(est: dict[str, Any], agents: int) -> None:
    print(
        f"\nPaper estimate: SB3 PPO with N instances of {agents} agents on other nodes, one learner process.\n"
        f"  one instance step takes {est['instance_step_latency_us'] / 1e3:.1f} ms (Ray round trip included);\n"
        f"  the learner pays {est['learner_env_us_per_sample']:.0f} us CPU per sample to take it in (serial)"
    )
    if not est["table"]:
        return
    print(
        "  per vector step: max(slowest instance, N x agents x learner share); PPO then adds its forward\n"
        "  pass and update per sample (collection and update alternate in SB3). A '10x' scene is a\n"
        "  physics-heavy build ten times slower per instance than the stand-in player."
    )
    print_table(est["table"], ["scene_cost", "instances", "samples_per_s", "bound"])
    print(
        f"  => one learner tops out at ~{est['learner_limit_samples_per_s']:,.0f} samples/s with these PPO "
        "settings,\n     whatever the cluster size; more instances help until the learner is the bound, and the\n"
        "     slower the scene, the more instances that takes. Past it: larger batches (fewer minibatch\n"
        "     steps per sample), more agents per instance (the Ray round trip per instance step is\n"
        "     shared by all its agents), or a GPU learner."
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--agents", type=int, default=12, help="agents per instance")
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating threads/Ray rounds (median)")
    parser.add_argument("--transport", default="player", choices=["player", "inprocess"])
    parser.add_argument("--ppo-steps", type=int, default=24_000, help="PPO samples to time (0: skip)")
    parser.add_argument(
        "--ray-address", default=None, help="join a running Ray cluster instead of a local one"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    torch.set_num_threads(1)
    import ray

    if args.ray_address:
        ray.init(address=args.ray_address, log_to_driver=False)
    else:  # enough logical CPUs for one actor per instance (num_cpus=1 each)
        ray.init(num_cpus=max(args.instances), include_dashboard=False, log_to_driver=False)
    rows: list[dict[str, Any]] = []
    try:
        for n in args.instances:
            for row in measure_instances(n, args):
                rows.append(row)
                print(
                    f"{row['env']:22s} {n} instance(s): {row['agent_steps_per_s']:8.0f} agent-steps/s, "
                    f"learner {row['learner_cpu_us_per_agent_step']:.1f} us CPU per agent-step",
                    flush=True,
                )
    finally:
        ray.shutdown()
    print_table(
        rows,
        ["env", "instances", "slots", "agent_steps_per_s", "learner_cpu_us_per_agent_step"],
        title=f"{SCENE} ({args.agents} agents per instance, transport={args.transport}, "
        f"{os.cpu_count()} CPUs, random actions)",
    )
    ppo = measure_ppo(args.agents, args.ppo_steps) if args.ppo_steps > 0 else None
    if ppo is not None:
        print(
            f"\nPPO (2x128, batch 64, 3 epochs): update {ppo['ppo_update_us_per_sample']:.0f} us/sample, "
            f"collection (policy forward, buffer) {ppo['ppo_collect_us_per_sample']:.0f} us/sample"
        )
    has_one = any(r["instances"] == 1 and r["env"] == "RayUnityVecEnv" for r in rows)
    estimate = paper_estimate(rows, ppo, args.agents) if has_one else {}
    if estimate:
        print_estimate(estimate, args.agents)
    path = write_results(
        "scale_out",
        rows,
        scene=SCENE,
        agents_per_instance=args.agents,
        transport=args.transport,
        seconds=args.seconds,
        rounds=args.rounds,
        ppo=ppo,
        estimate=estimate,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
