"""What do curiosity and RND reward on PyramidsLite? Intrinsic reward vs how often a cell is visited.

Trains ``unity_sb3.PPO`` with one signal (the settings of ``curiosity_pyramids.py``) for
``--steps``, then collects ``--collect`` steps per agent with the trained stochastic policy and
scores every transition with the signal. Prints, per signal, the mean intrinsic reward (before
``strength``) of transitions into cells the collection visited at most k times, on switch
presses, on moves into a wall (the position does not change) and on the other transitions, and
the rank correlation between reward and visit count (negative: rewards novelty).
Writes ``benchmarks/results/intrinsic_reward_map.json``.

    python benchmarks/intrinsic_reward_map.py            # curiosity and RND, 60k steps, seed 0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results
from curiosity_pyramids import make_model

from unity_sb3 import PPO, UnityVecEnv
from unity_sb3.scenes import make_scene
from unity_sb3.scenes._grid import STAY
from unity_sb3.scenes.pyramids import POS_X, POS_Y, SWITCH_STATE

BUCKETS = (1, 5, 20, 100)


def _ranks(values: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(values, kind="stable"), kind="stable").astype(float)


def collect(model: PPO, env: UnityVecEnv, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``steps`` steps of every slot: observations, actions and true next observations."""
    obs = env.reset()
    rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for _ in range(steps):
        actions, _ = model.predict(obs)
        new_obs, _, dones, infos = env.step(actions)
        next_obs = new_obs.copy()
        for i in np.flatnonzero(dones):
            next_obs[i] = infos[i]["terminal_observation"]
        rows.append((obs, actions, next_obs))
        obs = new_obs
    return tuple(np.concatenate(part) for part in zip(*rows))  # type: ignore[return-value]


def measure(signal: str, seed: int, steps: int, collect_steps: int, room_size: int) -> dict[str, Any]:
    th.set_num_threads(1)
    env = UnityVecEnv(make_scene("PyramidsLite", seed=seed, room_size=room_size))
    model = make_model(signal, env, seed)
    model.learn(steps)
    obs, actions, next_obs = collect(model, env, collect_steps)
    env.close()
    rewards = model.signals[signal].reward(obs, actions.reshape(len(actions), -1), next_obs)
    cells = np.rint(next_obs[:, [POS_X, POS_Y]] * (room_size - 1)).astype(int)
    flat = cells[:, 0] * room_size + cells[:, 1]
    visits = np.bincount(flat, minlength=room_size * room_size)[flat]
    presses = (obs[:, SWITCH_STATE] < 0.5) & (next_obs[:, SWITCH_STATE] > 0.5)
    before = np.rint(obs[:, [POS_X, POS_Y]] * (room_size - 1)).astype(int)
    bumps = (actions.reshape(-1) != STAY) & (before == cells).all(axis=1)  # a move into a wall
    row: dict[str, Any] = {"signal": signal, "mean": float(rewards.mean())}
    for k in BUCKETS:
        chosen = visits <= k
        row[f"visits <= {k}"] = float(rewards[chosen].mean()) if chosen.any() else None
    row["switch presses"] = float(rewards[presses].mean()) if presses.any() else None
    row["n presses"] = int(presses.sum())
    row["wall bumps"] = float(rewards[bumps].mean()) if bumps.any() else None
    row["other moves"] = float(rewards[~bumps & ~presses].mean())
    row["rank corr. with visits"] = float(np.corrcoef(_ranks(rewards), _ranks(visits))[0, 1])
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--signals", nargs="+", default=["curiosity", "rnd"], choices=["curiosity", "rnd"])
    parser.add_argument("--steps", type=int, default=60_000, help="training steps (all agents)")
    parser.add_argument("--collect", type=int, default=2_000, help="steps per agent scored after training")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--room-size", type=int, default=25)
    args = parser.parse_args(argv)
    rows = [measure(s, args.seed, args.steps, args.collect, args.room_size) for s in args.signals]
    print_table(
        rows,
        list(rows[0]),
        title=f"PyramidsLite room {args.room_size}: mean intrinsic reward (before strength) after {args.steps} steps",
    )
    print(f"wrote {write_results('intrinsic_reward_map', rows, settings=vars(args))}")


if __name__ == "__main__":
    main()
