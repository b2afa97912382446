"""How Sorter episodes end under a trained policy, the scene's scripted expert and random play.

For each policy, ``--episodes`` episodes of the embedded Sorter scene (8 arenas, 1 to
``--num-tiles`` tiles per episode) are played to their end and sorted by how they ended: every
tile touched, a wrong tile touched (-1, the episode ends) or the step limit (150 decisions). Also
the mean return, the tiles touched per episode, the share of an episode's tiles touched, and the
decisions per touched tile. A model saved by ``sorter_attention.py --save-dir`` plays with its
actions sampled and deterministic.

    python benchmarks/sorter_episodes.py --num-tiles 20 --models /tmp/sorter/sorter_attention_s0.zip

Writes ``benchmarks/results/sorter_episodes.json`` (``--name`` to change it).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

from unity_sb3 import PPO
from unity_sb3.scenes import make_scene

Policy = Callable[[Any, Any], np.ndarray]


def _model_policy(path: str, deterministic: bool) -> Policy:
    model = PPO.load(path, device="cpu")
    keys = list(model.observation_space.spaces)

    def act(env: Any, decision: Any) -> np.ndarray:
        spec = env.behavior_specs[env.behavior_name]
        obs = {
            spec.observation_specs[i].name: np.asarray(o, dtype=np.float32)
            for i, o in enumerate(decision.obs)
        }
        actions, _ = model.predict({k: obs[k] for k in keys}, deterministic=deterministic)
        return np.asarray(actions, dtype=np.int32).reshape(len(decision), -1)

    return act


def _expert(env: Any, decision: Any) -> np.ndarray:
    return env.expert_actions(env.behavior_name, decision).discrete


def _random(rng: np.random.Generator) -> Policy:
    return lambda env, decision: rng.integers(0, 3, (len(decision), 3), dtype=np.int32)


def play(
    policy: Policy, num_tiles: int, episodes: int, seed: int, scene_params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Play until ``episodes`` episodes have ended; how they ended and what they scored.

    :param scene_params: more parameters of the Sorter scene (e.g. ``max_steps``).
    """
    from mlagents_envs.base_env import ActionTuple

    env = make_scene("Sorter", seed=seed, num_tiles=num_tiles, **(scene_params or {}))
    env.reset()
    name = env.behavior_name
    running: dict[int, dict[str, float]] = {}
    ended: list[dict[str, float]] = []

    def record(agent: int, reward: float) -> dict[str, float]:
        ep = running.setdefault(agent, {"return": 0.0, "touched": 0, "steps": 0})
        ep["return"] += reward
        ep["touched"] += reward > 0.5
        return ep

    while len(ended) < episodes:
        decision, terminal = env.get_steps(name)
        for agent, reward, interrupted in zip(terminal.agent_id, terminal.reward, terminal.interrupted):
            ep = record(int(agent), float(reward))
            ep["end"] = "time" if interrupted else ("wrong" if reward < -0.5 else "all")
            ep["tiles"] = ep.pop("tiles_now", 0)
            ended.append(running.pop(int(agent)))
        if len(decision):
            counts = (np.sum(np.asarray(decision.obs[1]) ** 2, axis=2) >= 0.01).sum(axis=1)
            for agent, reward, count in zip(decision.agent_id, decision.reward, counts):
                ep = record(int(agent), float(reward))
                ep["steps"] += 1
                ep["tiles_now"] = int(count)
            env.set_actions(name, ActionTuple(discrete=policy(env, decision)))
        env.step()
    env.close()
    ended = ended[:episodes]
    touched = np.array([e["touched"] for e in ended], dtype=float)
    tiles = np.array([e["tiles"] for e in ended], dtype=float)
    steps = np.array([e["steps"] for e in ended], dtype=float)
    ends = [e["end"] for e in ended]
    return {
        "episodes": len(ended),
        "return": float(np.mean([e["return"] for e in ended])),
        "tiles": float(tiles.mean()),
        "touched": float(touched.mean()),
        "share touched": float(np.mean(touched / np.maximum(tiles, 1))),
        "all": ends.count("all") / len(ends),
        "wrong": ends.count("wrong") / len(ends),
        "time": ends.count("time") / len(ends),
        "decisions per touch": float(steps.sum() / max(touched.sum(), 1)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-tiles", type=int, default=20, help="most tiles per episode (1-20)")
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--models", nargs="*", default=[], help="models saved by sorter_attention.py --save-dir"
    )
    parser.add_argument(
        "--scene-params",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="parameters of the Sorter scene, e.g. max_steps=300",
    )
    parser.add_argument("--name", default="sorter_episodes")
    args = parser.parse_args(argv)
    scene_params = {
        key: ast.literal_eval(value) for key, _, value in (pair.partition("=") for pair in args.scene_params)
    }
    policies: list[tuple[str, Policy]] = [
        ("expert", _expert),
        ("random", _random(np.random.default_rng(args.seed))),
    ]
    for path in args.models:
        policies.append((f"{Path(path).stem}, sampled", _model_policy(path, False)))
        policies.append((f"{Path(path).stem}, deterministic", _model_policy(path, True)))
    rows = []
    for label, policy in policies:
        rows.append({"policy": label, **play(policy, args.num_tiles, args.episodes, args.seed, scene_params)})
        print(rows[-1], flush=True)
    columns = ["policy", "episodes", "return", "tiles", "touched", "share touched", "all", "wrong", "time"]
    columns.append("decisions per touch")
    print_table(rows, columns, title=f"Sorter, 1-{args.num_tiles} tiles: how episodes end")
    path = write_results(args.name, rows, num_tiles=args.num_tiles, seed=args.seed, scene_params=scene_params)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
