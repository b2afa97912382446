"""Restarts under fire: PPO on Ball3D over stand-in players that are killed, hung and stopped.

Two (by default) players feed one ``UnityVecEnv(restart_on_crash=True)``; a callback hits the
player of a random worker at random vector steps with one of:

- ``SIGKILL``: a crash (the process vanishes);
- ``SIGSTOP``: a hang (the process stays but never answers; found by ``timeout_wait``);
- ``SIGTERM``: a clean exit in the middle of the run.

Training must finish and the model must be saved. For each fault the table gives how long the
vector step that met it took (detection + restart + reset), and the run reports the restarts
survived, the slots whose episodes were cut (reported as truncated), and the throughput compared
with a fault-free run of the same length.

Writes ``benchmarks/results/restarts.json`` (a generated file: do not commit it).

Usage::

    python benchmarks/restarts.py [--faults 12] [--timesteps 60000] [--instances 2] [--agents 6]
        [--timeout-wait 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)
from _common import free_base_port, print_table, write_results
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecMonitor
from unity_sb3.wrappers.vec_env import UnityVecEnv
# isort: on

SIGNALS = (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM)


class Faults(BaseCallback):
    """Signals worker ``k``'s player at planned vector steps and times the step that follows."""

    def __init__(self, plan: dict[int, tuple[int, signal.Signals]]) -> None:
        super().__init__()
        self.plan = plan
        self.pending: dict | None = None
        self.rows: list[dict] = []
        self.truncated_slots = 0
        self._last = time.perf_counter()

    def _on_step(self) -> bool:
        now = time.perf_counter()
        infos = self.locals["infos"]
        self.truncated_slots += sum(bool(i.get("restarted")) for i in infos)
        if self.pending is not None:
            self.pending["step_seconds"] = round(now - self._last, 2)
            self.pending["restarted_slots"] = sum(bool(i.get("restarted")) for i in infos)
            self.rows.append(self.pending)
            self.pending = None
        if self.n_calls in self.plan:
            worker, sig = self.plan[self.n_calls]
            process = self.training_env.unwrapped.unity_envs[worker].process
            os.kill(process.pid, sig)
            self.pending = {"vector_step": self.n_calls, "worker": worker, "signal": sig.name}
        self._last = time.perf_counter()
        return True


def run(args: argparse.Namespace, faults: int, log_dir: str) -> dict:
    torch.set_num_threads(1)
    open_kwargs = {
        "transport": "player",
        "num_agents": args.agents,
        "base_port": free_base_port(4 * args.instances + 16),
        "find_free_port": True,
        "timeout_wait": args.timeout_wait,
        "log_folder": log_dir,
        "seed": args.seed,
    }
    venv = UnityVecEnv(
        ["Ball3D"] * args.instances,
        open_kwargs=open_kwargs,
        restart_on_crash=True,
        max_restarts=-1,
        restart_backoff=0.0,
        restarts_rate_limit_n=-1,
    )
    rng = np.random.default_rng(args.seed)
    vector_steps = args.timesteps // venv.num_envs
    steps = sorted(rng.choice(np.arange(10, vector_steps - 10), size=faults, replace=False).tolist())
    plan = {
        int(s): (int(rng.integers(0, args.instances)), SIGNALS[i % len(SIGNALS)]) for i, s in enumerate(steps)
    }
    callback = Faults(plan)
    model = PPO(
        "MlpPolicy", VecMonitor(venv), n_steps=64, batch_size=128, n_epochs=3, seed=args.seed, device="cpu"
    )
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.learn(args.timesteps, callback=callback)
        seconds = time.perf_counter() - started
        path = Path(log_dir) / "model.zip"
        model.save(path)
        loaded = PPO.load(path, device="cpu")
        restarts = venv.restart_counts
    finally:
        venv.close()
    rewards = [e["r"] for e in model.ep_info_buffer]
    return {
        "faults": faults,
        "restarts": sum(restarts),
        "restarts_per_instance": restarts,
        "timesteps": model.num_timesteps,
        "saved_model_timesteps": loaded.num_timesteps,
        "seconds": round(seconds, 1),
        "agent_steps_per_s": round(model.num_timesteps / seconds),
        "truncated_slots": callback.truncated_slots,
        "mean_episode_reward_last_100": round(float(np.mean(rewards)), 2) if rewards else None,
        "players_left": [env.process.pid for env in venv.unity_envs if env.process.poll() is None],
        "fault_rows": callback.rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--faults", type=int, default=12)
    parser.add_argument("--timesteps", type=int, default=60_000)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--agents", type=int, default=6)
    parser.add_argument(
        "--timeout-wait", type=float, default=5.0, help="seconds before a hung player counts as lost"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="unity_sb3-restarts-") as log_dir:
        print(f"Fault-free run of {args.timesteps:,} agent-steps ...", flush=True)
        clean = run(args, 0, log_dir)
        print(f"Run with {args.faults} faults ...", flush=True)
        faulty = run(args, args.faults, log_dir)
    print_table(
        faulty["fault_rows"],
        ["vector_step", "worker", "signal", "step_seconds", "restarted_slots"],
        title="\nFaults (step_seconds: the vector step that met the fault: detection + restart + reset)",
    )
    summary_rows = [{"run": "fault-free", **clean}, {"run": "with faults", **faulty}]
    print_table(
        summary_rows,
        [
            "run",
            "faults",
            "restarts",
            "timesteps",
            "saved_model_timesteps",
            "seconds",
            "agent_steps_per_s",
            "truncated_slots",
        ],
        title="\nRuns",
    )
    for signame in ("SIGKILL", "SIGSTOP", "SIGTERM"):
        times = [r["step_seconds"] for r in faulty["fault_rows"] if r["signal"] == signame]
        if times:
            print(
                f"{signame}: {len(times)} faults, recovery step {np.median(times):.2f} s median, {max(times):.2f} s max"
            )
    for row in summary_rows:
        row.pop("fault_rows")
    path = write_results("restarts", summary_rows, settings=vars(args), faults=faulty_rows(faulty))
    print(f"\nWrote {path}")
    ok = faulty["restarts"] == args.faults and faulty["saved_model_timesteps"] >= args.timesteps
    ok = ok and not faulty["players_left"] and not clean["players_left"]
    if not ok:
        print("FAILED: not every fault was survived, or something was left running")
        raise SystemExit(1)


def faulty_rows(result: dict) -> list[dict]:
    return list(result.get("fault_rows", []))


if __name__ == "__main__":
    main()
