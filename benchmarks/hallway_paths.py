"""What a trained Hallway policy does, per shown symbol: where it walks, which goal tags its rays saw,
which side it ends on.

Plays a model saved by ``hallway_memory.py --save-dir`` (``unity_sb3.RecurrentPPO``), or with
``--onnx`` a model in Unity's ONNX contract (e.g. one ``mlagents-learn`` exported: memory carried
through ``recurrent_in`` / ``recurrent_out``, its sampled ``discrete_actions``), on a fresh
embedded Hallway with Unity's shuffled goals and records, for each ended episode, the shown symbol,
the success, whether the rays ever showed the right and the wrong goal's tag, the side (x) it ended
on, and its x where it first passed z = 10 (the scene's state, read through its hooks). A plateau
where one symbol is guessed shows up as that symbol's episodes ending on one fixed side.

    python benchmarks/hallway_paths.py /tmp/models/ppo_memory_seed0.zip --episodes 1500
    python benchmarks/hallway_paths.py results/run/Hallway/Hallway-2000000.onnx --onnx
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results
from hallway_memory import hallway_scene, hook_scene
from mlagents_envs.base_env import ActionTuple

from unity_sb3 import RecurrentPPO, UnityVecEnv
from unity_sb3.export.names import DISCRETE_ACTIONS, RECURRENT_OUT
from unity_sb3.export.runtime import ort_session, run_onnx
from unity_sb3.scenes.hallway import MOTIONS, O_GOAL, X_GOAL

#: z (Unity units) where the walk's x is recorded: past the symbols, before the goals (z = 22.29)
CROSSING_Z = 10.0


class PathRecorder:
    """Per ended episode: symbol, outcome, goal tags seen, end side and crossing x (:func:`hook_scene`).

    :param scene: the embedded Hallway scene.
    """

    def __init__(self, scene: Any) -> None:
        n = scene.num_agents
        self.tags_seen = np.zeros((n, 2), dtype=bool)  # the O goal's tag, the X goal's tag
        self.cross_x = np.full(n, np.nan)
        self.ends: list[dict[str, Any]] = []

        def observed(idx: np.ndarray, rays: np.ndarray) -> None:
            self.tags_seen[idx] |= rays[:, :, [O_GOAL, X_GOAL]].any(axis=1)
            first = (scene._pos[idx, 1] > CROSSING_Z) & np.isnan(self.cross_x[idx])
            self.cross_x[idx[first]] = scene._pos[idx[first], 0]

        def began(idx: np.ndarray) -> None:
            self.tags_seen[idx] = False
            self.cross_x[idx] = np.nan

        def ending(idx: np.ndarray) -> None:
            for i in idx.tolist():
                symbol = int(scene._selection[i])
                right_goal_x = scene._o_goal_x[i] if symbol == 0 else -scene._o_goal_x[i]
                self.ends.append(
                    {
                        "symbol": "OX"[symbol],
                        "right": bool(scene._right[i]),
                        "at_goal": bool(scene._right[i] or scene._wrong[i]),
                        "ends_at_x_above_0": bool(scene._pos[i, 0] > 0),
                        "right_goal_at_x_above_0": bool(right_goal_x > 0),
                        "saw_right_tag": bool(self.tags_seen[i, symbol]),
                        "saw_wrong_tag": bool(self.tags_seen[i, 1 - symbol]),
                        "cross_x": float(self.cross_x[i]),
                        "decisions": int(scene._step_count[i]) // scene.decision_period,
                    }
                )

        hook_scene(scene, observed, began, ending)


def summarise(ends: list[dict[str, Any]], symbol: str) -> dict[str, Any]:
    """One table row: the episodes that showed ``symbol``."""
    mine = [e for e in ends if e["symbol"] == symbol]
    at_goal = [e for e in mine if e["at_goal"]]
    saw_wrong = [e for e in at_goal if e["saw_wrong_tag"]]

    def share(rows: list[dict[str, Any]], key: str) -> float:
        return float(np.mean([r[key] for r in rows])) if rows else float("nan")

    return {
        "symbol": symbol,
        "episodes": len(mine),
        "success": share(mine, "right"),
        "saw right tag": share(mine, "saw_right_tag"),
        "saw wrong tag": share(mine, "saw_wrong_tag"),
        "success after seeing the wrong tag": share(saw_wrong, "right"),
        "ends at x > 0": share(at_goal, "ends_at_x_above_0"),
        "success, right goal at x > 0": share([e for e in at_goal if e["right_goal_at_x_above_0"]], "right"),
        "success, right goal at x < 0": share(
            [e for e in at_goal if not e["right_goal_at_x_above_0"]], "right"
        ),
        "x at z=10 (mean)": float(np.nanmean([e["cross_x"] for e in mine])) if mine else float("nan"),
        "x at z=10 (sd)": float(np.nanstd([e["cross_x"] for e in mine])) if mine else float("nan"),
        "decisions (mean)": share(mine, "decisions"),
    }


def play_sb3(scene: Any, path: str, recorder: PathRecorder, episodes: int, deterministic: bool) -> None:
    """Play a saved ``unity_sb3.RecurrentPPO`` through ``UnityVecEnv`` until ``episodes`` ended."""
    env = UnityVecEnv(scene)
    model = RecurrentPPO.load(path, env=env)
    obs, state, starts = env.reset(), None, np.ones(env.num_envs)
    while len(recorder.ends) < episodes:
        actions, state = model.predict(obs, state, starts, deterministic=deterministic)
        obs, _, dones, _ = env.step(actions)
        starts = dones.astype(np.float32)
    env.close()


def play_onnx(scene: Any, path: str, recorder: PathRecorder, episodes: int) -> None:
    """Play a Unity-contract ONNX model on the scene's ``BaseEnv`` as Unity's ``ModelRunner`` does: a
    memory per agent id (zeros for a new id), the model's sampled ``discrete_actions``."""
    session = ort_session(path)
    sizes = [int(i.shape[-1]) for i in session.get_inputs() if i.name == "recurrent_in"]
    memory_size = sizes[0] if sizes else 0  # 0: a model without memory
    behavior = scene.behavior_name
    memories: dict[int, np.ndarray] = {}
    scene.reset()
    while len(recorder.ends) < episodes:
        decisions, terminals = scene.get_steps(behavior)
        for agent in terminals.agent_id.tolist():
            memories.pop(agent, None)
        if len(decisions):
            ids = decisions.agent_id.tolist()
            held = np.stack([memories.get(a, np.zeros((1, memory_size), np.float32)) for a in ids])
            masks = None if decisions.action_mask is None else ~np.concatenate(decisions.action_mask, axis=1)
            out = run_onnx(
                path,
                decisions.obs,
                action_masks=masks,
                memories=held if memory_size else None,
                session=session,
            )
            if memory_size:
                memories.update(zip(ids, out[RECURRENT_OUT]))
            scene.set_actions(behavior, ActionTuple(discrete=out[DISCRETE_ACTIONS].astype(np.int32)))
        scene.step()
    scene.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "model",
        help="a RecurrentPPO model saved by hallway_memory.py --save-dir, or an ONNX file with --onnx",
    )
    parser.add_argument("--onnx", action="store_true", help="the model is an ONNX file in Unity's contract")
    parser.add_argument("--episodes", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=123, help="the scene's seed")
    parser.add_argument("--move-step", type=float, default=3.0, help="as the model was trained")
    parser.add_argument("--max-steps", type=int, default=600, help="as the model was trained")
    parser.add_argument(
        "--stacks", type=int, default=1, help="Hallway observation_stacks, as the model was trained"
    )
    parser.add_argument(
        "--motion",
        choices=MOTIONS,
        default="kinematic",
        help="Hallway motion, as the model was trained (rigid_body ignores --move-step)",
    )
    parser.add_argument("--deterministic", action="store_true", help="the policy's mode, not samples")
    parser.add_argument("--name", default="hallway_paths", help="stem of the results JSON")
    args = parser.parse_args(argv)

    scene = hallway_scene(
        args.seed,
        args.motion,
        args.move_step,
        max_steps=args.max_steps,
        shuffle_goals=True,
        observation_stacks=args.stacks,
    )
    recorder = PathRecorder(scene)
    if args.onnx:
        if args.deterministic:
            parser.error(
                "--deterministic applies to RecurrentPPO models; an ONNX model's sampled actions are played"
            )
        play_onnx(scene, args.model, recorder, args.episodes)
    else:
        play_sb3(scene, args.model, recorder, args.episodes, args.deterministic)
    rows = [summarise(recorder.ends, symbol) for symbol in "OX"]
    print_table(rows, list(rows[0]), title=f"{args.model}: {len(recorder.ends)} episodes")
    path = write_results(args.name, rows, settings=vars(args))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
