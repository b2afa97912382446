"""Soak run: ``UnityVecEnv`` over the stand-in player for a million agent-steps, then ``close()``.

Steps Ball3D (64 agents by default) through the real gRPC path with random actions and checks
what a run of many hours needs:

- memory stays flat: resident memory (RSS) of this process and of the player process, sampled
  every ``--report-every`` agent-steps, plus this process's peak (``VmHWM``); "growth" is the
  change from the first sample after warm-up (10 % of the run) to the last;
- ``close()`` leaves nothing behind: no extra threads, no child processes (the player is gone,
  not a zombie), the gRPC port is free again, no extra open file descriptors; a second
  ``close()`` does nothing.

Writes ``benchmarks/results/soak.json`` (a generated file: do not commit it).

Usage::

    python benchmarks/soak.py [--agent-steps 1000000] [--agents 64] [--instances 1]
        [--report-every 50000] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)
from _common import free_base_port, print_table, write_results
from unity_sb3.wrappers.vec_env import UnityVecEnv
# isort: on


def _status_kb(pid: int | str, field: str) -> int | None:
    """A ``VmRSS``/``VmHWM`` line of ``/proc/<pid>/status`` in KiB (``None`` if unavailable)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mib(pid: int | str = "self") -> float | None:
    """Resident memory of ``pid`` in MiB; ``resource``'s peak where ``/proc`` is missing."""
    kb = _status_kb(pid, "VmRSS")
    if kb is None and pid == "self":
        import resource

        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux (bytes on macOS)
    return None if kb is None else kb / 1024


def peak_mib() -> float | None:
    kb = _status_kb("self", "VmHWM")
    return None if kb is None else kb / 1024


def child_pids() -> list[int]:
    """Processes whose parent is this one (zombies included)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                found.append(int(entry))
    return found


def open_fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--agent-steps", type=int, default=1_000_000, help="agent-steps to run (active slots)"
    )
    parser.add_argument("--agents", type=int, default=64, help="Ball3D agents per player")
    parser.add_argument("--instances", type=int, default=1, help="players stepped in parallel")
    parser.add_argument("--report-every", type=int, default=50_000, help="agent-steps between samples")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    threads_before = threading.active_count()
    fds_before = open_fds()
    rss_before = rss_mib()
    open_kwargs = {
        "transport": "player",
        "num_agents": args.agents,
        "base_port": free_base_port(args.instances + 8),
        "find_free_port": True,
        "timeout_wait": 120,
        "seed": args.seed,
    }
    started = time.perf_counter()
    venv = UnityVecEnv(["Ball3D"] * args.instances, open_kwargs=open_kwargs)
    ports = [env.port for env in venv.unity_envs]
    players = [env.process.pid for env in venv.unity_envs]
    rng = np.random.default_rng(args.seed)
    actions = [
        rng.uniform(-1, 1, (venv.num_envs, *venv.action_space.shape)).astype(np.float32) for _ in range(16)
    ]
    print(
        f"Soak: {venv.num_envs} slots over {args.instances} player(s) on port(s) {ports}, "
        f"{args.agent_steps:,} agent-steps; RSS before open {rss_before:.1f} MiB",
        flush=True,
    )
    venv.reset()
    rows: list[dict] = []
    agent_steps = vector_steps = episodes = 0
    next_report = args.report_every
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="UnityVecEnv: .* slots have no agent")
        while agent_steps < args.agent_steps:
            _, _, dones, _ = venv.step(actions[vector_steps % len(actions)])
            vector_steps += 1
            agent_steps += int(venv.active_mask.sum())
            episodes += int(dones.sum())
            if agent_steps >= next_report or agent_steps >= args.agent_steps:
                next_report += args.report_every
                elapsed = time.perf_counter() - t0
                row = {
                    "agent_steps": agent_steps,
                    "vector_steps": vector_steps,
                    "episodes": episodes,
                    "seconds": round(elapsed, 1),
                    "agent_steps_per_s": round(agent_steps / elapsed),
                    "rss_mib": round(rss_mib(), 1),
                    "player_rss_mib": round(sum(rss_mib(p) or 0.0 for p in players), 1),
                    "threads": threading.active_count(),
                }
                rows.append(row)
                print(
                    f"{agent_steps:>10,} agent-steps  {elapsed:7.1f} s  {row['agent_steps_per_s']:>7,}/s  "
                    f"RSS {row['rss_mib']:.1f} MiB  player RSS {row['player_rss_mib']:.1f} MiB  "
                    f"episodes {episodes:,}",
                    flush=True,
                )
    run_seconds = time.perf_counter() - t0
    rss_end_open = rss_mib()
    venv.close()
    venv.close()  # idempotent: must do nothing
    time.sleep(0.5)  # let gRPC's own threads wind down
    threads_after = threading.active_count()
    leftovers = {
        "threads_before": threads_before,
        "threads_after_close": threads_after,
        "thread_names_after_close": sorted(t.name for t in threading.enumerate()),
        "child_processes_after_close": child_pids(),
        "players_alive_after_close": [p for p in players if os.path.exists(f"/proc/{p}")],
        "ports_free_after_close": all(port_is_free(p) for p in ports),
        "open_fds_before": fds_before,
        "open_fds_after_close": open_fds(),
    }
    warm = rows[max(0, len(rows) // 10)] if rows else {}
    summary = {
        "agent_steps": agent_steps,
        "vector_steps": vector_steps,
        "episodes": episodes,
        "run_seconds": round(run_seconds, 1),
        "total_seconds": round(time.perf_counter() - started, 1),
        "rss_before_open_mib": round(rss_before, 1),
        "rss_start_mib": rows[0]["rss_mib"] if rows else None,
        "rss_after_warmup_mib": warm.get("rss_mib"),
        "rss_end_mib": round(rss_end_open, 1),
        "rss_peak_mib": peak_mib(),
        "rss_growth_after_warmup_mib": round(rss_end_open - warm.get("rss_mib", rss_end_open), 1),
        "player_rss_start_mib": rows[0]["player_rss_mib"] if rows else None,
        "player_rss_end_mib": rows[-1]["player_rss_mib"] if rows else None,
        **leftovers,
    }
    print_table(
        rows,
        ["agent_steps", "seconds", "agent_steps_per_s", "rss_mib", "player_rss_mib", "threads"],
        title="\nSoak samples",
    )
    print()
    for key, value in summary.items():
        print(f"{key:32s} {value}")
    path = write_results(
        "soak",
        rows,
        settings={"agents": args.agents, "instances": args.instances, "agent_steps": args.agent_steps},
        summary=summary,
    )
    print(f"\nWrote {path}")
    clean = (
        not leftovers["child_processes_after_close"]
        and not leftovers["players_alive_after_close"]
        and leftovers["ports_free_after_close"]
        and threads_after <= threads_before
    )
    if not clean:
        print("LEAK: something was left behind after close() (see above)")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
