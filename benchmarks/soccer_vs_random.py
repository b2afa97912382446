"""SoccerTwos, POCA against a fixed random team (no self-play): is there a learning signal, and how many steps.

The sanity check before self-play (``benchmarks/selfplay_soccer.py``): the blue team of every field
learns (``LockstepUnity.set_learning_team``), the purple team acts uniformly at random
(``set_answerer``), so the opponent never improves. Every ``--timesteps / --evals`` learner steps the
team (frozen, sampling its actions) plays ``--games`` games against a random team, half on each side,
goals only with Unity's ``MaxEnvironmentSteps`` (``_selfplay.play_both_sides``, as the self-play
benchmark plays them). ``--ball-touch`` sets the training scene's ``ball_touch`` parameter (0.2 reward
per touch, the start of ML-Agents' old soccer curriculum).

    python benchmarks/soccer_vs_random.py --seeds 0 --timesteps 300000 --evals 5 --learning-rate 3e-4 --n-steps 128

Writes ``benchmarks/results/<name>.json`` and prints a table (one row per seed and evaluation).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results
from _curves import run_tasks
from _selfplay import add_soccer_arguments, play_both_sides, policy_weights, soccer_poca

COLUMNS = ("seed", "steps", "vs random", "W/L/D", "train reward", "s")
EVAL_FIELDS = 8
LEARNER, RANDOM = "SoccerTwos?team=0", "SoccerTwos?team=1"


def run(
    seed: int,
    timesteps: int,
    evals: int,
    fields: int,
    max_steps: int,
    ball_touch: float,
    n_steps: int,
    learning_rate: float,
    games: int,
    eval_max_steps: int,
) -> list[dict]:
    import torch as th
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.common.vec_env import VecMonitor

    from unity_sb3.scenes import make_scene
    from unity_sb3.selfplay.matches import policy_player, random_player, view_spec
    from unity_sb3.wrappers.lockstep import LockstepUnity

    th.set_num_threads(1)
    set_random_seed(seed)
    scene = make_scene("SoccerTwos", seed=seed, num_agents=fields, max_steps=max_steps, ball_touch=ball_touch)
    unity = LockstepUnity(scene)
    unity.set_learning_team("SoccerTwos", 0)
    unity.set_answerer(RANDOM, random_player(scene.behavior_specs[RANDOM], seed))
    view = unity.vec_env("SoccerTwos")
    model = soccer_poca(VecMonitor(view), n_steps, learning_rate, seed)
    spec = view_spec(scene, "SoccerTwos")
    rows = []
    start = time.perf_counter()
    for _ in range(evals):
        model.learn(timesteps // evals, reset_num_timesteps=False)
        player = policy_player(model, spec, weights=policy_weights(model), deterministic=False)
        arena = {"num_agents": EVAL_FIELDS, "max_steps": eval_max_steps}  # goals only: no ball_touch
        result = play_both_sides("SoccerTwos", player, "random", games, 10_000 + seed, **arena)
        returns = [float(info["r"]) for info in model.ep_info_buffer]
        rows.append(
            {
                "seed": seed,
                "steps": int(model.num_timesteps),
                "vs random": result["win_rate"],
                "W/L/D": f"{result['wins']}/{result['losses']}/{result['draws']}",
                "train reward": sum(returns) / max(len(returns), 1),
                "s": time.perf_counter() - start,
            }
        )
    unity.close()
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--timesteps", type=int, default=300_000, help="learner steps (blue agents)")
    parser.add_argument("--evals", type=int, default=5, help="evaluations, evenly spaced over the run")
    add_soccer_arguments(parser)
    parser.set_defaults(fields=8, ball_touch=1.0, n_steps=128, games=32)
    parser.add_argument("--name", default="soccer_vs_random")
    args = parser.parse_args(argv)
    if args.evals < 1 or args.timesteps < args.evals:
        parser.error(f"--evals must be between 1 and --timesteps ({args.timesteps}), got {args.evals}")
    tasks = [
        (
            seed,
            args.timesteps,
            args.evals,
            args.fields,
            args.max_steps,
            args.ball_touch,
            args.n_steps,
            args.learning_rate,
            args.games,
            args.eval_max_steps,
        )
        for seed in args.seeds
    ]
    rows = [row for rows in run_tasks(run, tasks, args.jobs) for row in rows]
    title = (
        f"SoccerTwos POCA vs a random team, lr {args.learning_rate}, {args.n_steps} steps per slot, "
        f"ball_touch {args.ball_touch}"
    )
    print_table(rows, COLUMNS, title=title)
    print(f"wrote {write_results(args.name, rows, settings=vars(args))}")
    return rows


if __name__ == "__main__":
    main()
