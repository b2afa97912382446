"""Unity's own 3DBall policy on the embedded Ball3D scene: is the re-creation faithful?

``../shared/data/models/3DBall.onnx`` is the policy Unity trained on its 3DBall example (it
keeps every ball up there: mean episode reward about 100). This script runs it unchanged
(``deterministic_continuous_actions``, with onnxruntime, through ``unity_sb3.OnnxPolicy``) on
the embedded scene, in-process, for several seeds, and reports the mean reward of the agent
episodes that ended (ball lost or ``max_steps`` reached), next to random play and the scene's
scripted expert.

Usage::

    python benchmarks/unity_model_ball3d.py [--seeds 0 1 2] [--steps 3000] [--model PATH]

Writes ``benchmarks/results/unity_model_ball3d.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results

from unity_sb3.export.onnx_policy import OnnxPolicy
from unity_sb3.scenes import make_scene

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT.parent / "shared" / "data" / "models" / "3DBall.onnx"
BEHAVIOR = "3DBall?team=0"


def episode_returns(policy: str, seed: int, steps: int, model: Path) -> tuple[list[float], int]:
    """Returns of the agent episodes that end within ``steps`` environment steps of a 12-agent scene.

    :param policy: ``"unity"`` (the ONNX model), ``"expert"`` (scripted) or ``"random"``.
    :param seed: scene seed.
    :param steps: ``BaseEnv.step`` calls (one decision each: 5 physics steps).
    :param model: path of the ONNX model.
    :return: the returns, and how many of those episodes ended with the ball lost.
    """
    from mlagents_envs.base_env import ActionTuple

    env = make_scene("Ball3D", seed=seed)
    rng = np.random.default_rng(seed)
    unity = (
        OnnxPolicy(model, deterministic=True) if policy == "unity" else None
    )  # as Unity's inference runs it
    env.reset()
    running: dict[int, float] = {}
    done: list[float] = []
    lost = 0
    for _ in range(steps):
        decision, terminal = env.get_steps(BEHAVIOR)
        for agent, reward in zip(terminal.agent_id.tolist(), terminal.reward.tolist()):
            done.append(running.pop(agent, 0.0) + reward)
        lost += int((~terminal.interrupted).sum())
        for agent, reward in zip(decision.agent_id.tolist(), decision.reward.tolist()):
            running[agent] = running.get(agent, 0.0) + reward
        if len(decision):
            if unity is not None:
                action = unity.act(decision, env.behavior_specs[BEHAVIOR])
            elif policy == "expert":
                action = env.expert_actions(BEHAVIOR, decision)
            else:
                action = ActionTuple(continuous=rng.uniform(-1, 1, (len(decision), 2)).astype(np.float32))
            env.set_actions(BEHAVIOR, action)
        env.step()
    env.close()
    return done, lost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--steps", type=int, default=3000, help="decisions per seed (1000 = one full episode)"
    )
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--policies", nargs="+", default=["unity", "expert", "random"])
    args = parser.parse_args(argv)
    if "unity" in args.policies and not args.model.is_file():
        print(
            f"Unity's model not found at {args.model} (shared/ must sit beside the checkout)", file=sys.stderr
        )
        return 2
    rows = []
    for policy in args.policies:
        for seed in args.seeds:
            start = time.perf_counter()
            returns, lost = episode_returns(policy, seed, args.steps, args.model)
            rows.append(
                {
                    "policy": policy,
                    "seed": seed,
                    "episodes": len(returns),
                    "mean_reward": float(np.mean(returns)) if returns else float("nan"),
                    "balls_lost": lost,
                    "seconds": round(time.perf_counter() - start, 1),
                }
            )
            print_table(rows[-1:], list(rows[-1]))
    columns = ["policy", "seed", "episodes", "mean_reward", "balls_lost", "seconds"]
    print_table(rows, columns, title=f"Ball3D, {args.steps} decisions x 12 agents per seed")
    path = write_results("unity_model_ball3d", rows, steps=args.steps, model=str(args.model))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
