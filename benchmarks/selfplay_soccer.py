"""SoccerTwos, POCA + self-play: the ELO over training and the final team against a random team.

One POCA model plays both teams of the embedded SoccerTwos scene (``LockstepUnity`` +
``SelfPlayCallback``, ML-Agents' ghost trainer; each team of a field is a group of two, POCA's
centralised critic sees the group): the learning team's agents are its view's slots, the other team
is answered by snapshots of the model. The settings are the shipped ``unity_sb3/SoccerTwos-v0``
ones (``config/poca/SoccerTwos.yaml``: 3 epochs, learning rate 3e-4 constant, beta 0.005, gamma
0.99, lambda 0.95, not normalized; ``self_play`` save 50k, team change 200k, swap 2000, window 10,
latest ratio 0.5) scaled down to what a shared 2-core machine trains in tens of minutes: fewer
fields, shorter episodes (``--max-steps``), a smaller network and rollout, and the self-play steps
divided by the same factor as the budget.

``--ball-touch`` sets the scene's ``ball_touch`` environment parameter (``AgentSoccer`` rewards
``0.2 * ball_touch`` per touch; ML-Agents' early soccer curriculum started it at 1). Unity's
SoccerTwos.yaml leaves it at 0: a goal is the only reward, which the budgets here do not learn from
(see benchmarks/RESULTS.md).

After training the final team (frozen, sampling its actions) plays ``--games`` games against a team
that acts uniformly at random, half on each side, with Unity's ``MaxEnvironmentSteps`` (5000
academy steps: a game not decided by then is a draw; ``unity_sb3.selfplay.matches.play_matches``, as
``unity-sb3 eval --opponent`` plays them). A game is won or lost as ML-Agents' ghost
trainer reads it: the sign of the final reward plus the group reward. ``--evals K`` also plays the
current team (frozen, sampling) against a random team at ``K - 1`` evenly spaced points during training
(same games, same seed as the final evaluation; printed as they come, so a run cut short still has
them; the evaluations draw from torch's RNG, so a run with them is not step-for-step the run without),
and ``--save-dir`` keeps the model at each of those points.

    python benchmarks/selfplay_soccer.py --seeds 0 1 2 --timesteps 1000000 --fields 8 --ball-touch 1 --n-steps 128 --evals 8 --jobs 3

Writes ``benchmarks/results/<name>.{json,png}`` (the ELO curves) and prints a table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results
from _curves import plot_curves, run_tasks, windowed_mean
from _selfplay import (
    EloRecorder,
    add_soccer_arguments,
    final_matches,
    play_both_sides,
    policy_weights,
    scaled_self_play,
    soccer_poca,
)
from stable_baselines3.common.callbacks import BaseCallback

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = (
    "seed",
    "steps",
    "final ELO",
    "max ELO",
    "vs random",
    "W/L/D",
    "vs early",
    "random vs random",
    "train s",
)
EVAL_FIELDS = 8


def settings(timesteps: int) -> dict:
    """Unity's SoccerTwos ``self_play`` section (save 50k, team change 200k), scaled so a run of
    ``timesteps`` still saves about 12 snapshots and changes team about 3 times."""
    return scaled_self_play(timesteps, snapshots=12, saves_per_team_change=4)


class ProgressEvaluator(BaseCallback):
    """Plays the current team (frozen, sampling) against a random team at ``evals - 1`` evenly spaced
    points of a run of ``timesteps`` (``_selfplay.play_both_sides``, the final evaluation's games and
    seed), prints each result at once and keeps it in ``rows``; saves the model there when ``prefix``
    is given (``<prefix>_<steps>.zip``)."""

    def __init__(
        self,
        self_play: Any,
        spec: Any,
        timesteps: int,
        evals: int,
        games: int,
        seed: int,
        arena: dict,
        prefix: Path | None,
        label: str,
    ) -> None:
        super().__init__()
        self.self_play, self.spec, self.games, self.seed = self_play, spec, games, seed
        self.arena, self.prefix, self.label = arena, prefix, label
        self.points = [timesteps * k // evals for k in range(1, evals)]
        self.rows: list[dict] = []
        self._start = time.perf_counter()

    def _on_step(self) -> bool:
        if self.points and self.num_timesteps >= self.points[0]:
            self.points.pop(0)
            self.evaluate()
        return True

    def evaluate(self) -> None:
        from unity_sb3.selfplay.matches import policy_player

        steps = int(self.num_timesteps)
        if self.prefix is not None:
            self.prefix.parent.mkdir(parents=True, exist_ok=True)
            self.model.save(f"{self.prefix}_{steps}")
        player = policy_player(self.model, self.spec, weights=policy_weights(self.model), deterministic=False)
        result = play_both_sides("SoccerTwos", player, "random", self.games, self.seed, **self.arena)
        row = {
            "steps": steps,
            "ELO": float(self.self_play.elo),
            "vs random": result["win_rate"],
            "W/L/D": f"{result['wins']}/{result['losses']}/{result['draws']}",
            "s": time.perf_counter() - self._start,
        }
        self.rows.append(row)
        print(
            f"{self.label} step {steps}: ELO {row['ELO']:.1f}, vs random {row['vs random']:.3f} "
            f"({row['W/L/D']}), {row['s']:.0f} s",
            flush=True,
        )


def run(
    seed: int,
    timesteps: int,
    fields: int,
    max_steps: int,
    ball_touch: float,
    n_steps: int,
    learning_rate: float,
    games: int,
    eval_max_steps: int,
    early: float,
    threads: int,
    evals: int = 1,
    save_dir: str | None = None,
) -> dict:
    import torch as th
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.common.vec_env import VecMonitor

    from unity_sb3.callbacks.self_play import SelfPlayCallback
    from unity_sb3.scenes import make_scene
    from unity_sb3.selfplay.matches import policy_player, view_spec
    from unity_sb3.wrappers.lockstep import LockstepUnity

    th.set_num_threads(threads)
    set_random_seed(seed)
    scene = make_scene("SoccerTwos", seed=seed, num_agents=fields, max_steps=max_steps, ball_touch=ball_touch)
    unity = LockstepUnity(scene)
    view = unity.vec_env("SoccerTwos")
    env = VecMonitor(view)
    self_play = SelfPlayCallback(unity, "SoccerTwos", settings(timesteps), seed=seed)
    model = soccer_poca(env, n_steps, learning_rate)
    recorder = EloRecorder(self_play, every=max(timesteps // 30, 1), snapshot_at=int(early * timesteps))
    spec = view_spec(scene, "SoccerTwos")
    arena = {"num_agents": EVAL_FIELDS, "max_steps": eval_max_steps}  # goals only: no ball_touch
    prefix = None if save_dir is None else Path(save_dir) / f"selfplay_soccer_seed{seed}"
    progress = ProgressEvaluator(
        self_play, spec, timesteps, evals, games, 10_000 + 10 * seed, arena, prefix, label=f"seed {seed}"
    )
    start = time.perf_counter()
    model.learn(timesteps, callback=[self_play, recorder, progress])
    seconds = time.perf_counter() - start
    if prefix is not None:
        model.save(f"{prefix}_{model.num_timesteps}")
    final = policy_player(model, spec, weights=policy_weights(model), deterministic=False)
    earlier = policy_player(model, spec, weights=recorder.snapshot, deterministic=False)
    unity.close()
    matches = final_matches("SoccerTwos", final, earlier, games, 10_000 + 10 * seed, **arena)
    vs_random, vs_early, baseline = matches["random"], matches["early"], matches["random_vs_random"]
    return {
        "seed": seed,
        "steps": int(model.num_timesteps),
        "final ELO": self_play.elo,
        "max ELO": max([e for _, e in recorder.points] + [self_play.elo]),
        "vs random": vs_random["win_rate"],
        "W/L/D": f"{vs_random['wins']}/{vs_random['losses']}/{vs_random['draws']}",
        "vs early": vs_early["win_rate"],
        "random vs random": baseline["win_rate"],
        "train s": seconds,
        "team changes": self_play.controller.team_changes,
        "elo_curve": recorder.points,
        "progress": progress.rows,
        "matches": matches,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--timesteps", type=int, default=60_000, help="learner steps (agents of the learning team)"
    )
    add_soccer_arguments(parser)
    parser.add_argument("--early-fraction", type=float, default=0.2, help="when the earlier policy is kept")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument(
        "--evals", type=int, default=1, help="evaluations against a random team, the last at the end"
    )
    parser.add_argument("--save-dir", default=None, help="keep the model at each evaluation here")
    parser.add_argument("--name", default="selfplay_soccer")
    args = parser.parse_args(argv)
    tasks = [
        (
            seed,
            args.timesteps,
            args.fields,
            args.max_steps,
            args.ball_touch,
            args.n_steps,
            args.learning_rate,
            args.games,
            args.eval_max_steps,
            args.early_fraction,
            args.threads,
            args.evals,
            args.save_dir,
        )
        for seed in args.seeds
    ]
    rows = run_tasks(run, tasks, args.jobs)
    title = f"SoccerTwos POCA + self-play, {args.timesteps} steps, {args.fields} fields, ball_touch {args.ball_touch}"
    print_table(rows, COLUMNS, title=title)
    progress = [{"seed": row["seed"], **point} for row in rows for point in row["progress"]]
    if progress:
        print_table(progress, ("seed", "steps", "ELO", "vs random", "W/L/D", "s"), title="during training")
    window = max(args.timesteps // 30, 1)
    curves = {"ELO": [windowed_mean(row["elo_curve"], args.timesteps, window) for row in rows]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot_curves(
        curves, window, RESULTS / f"{args.name}.png", "ELO", "SoccerTwos self-play: ELO", hline=1200.0
    )
    print(f"wrote {write_results(args.name, rows, settings=vars(args), self_play=settings(args.timesteps))}")
    return rows


if __name__ == "__main__":
    main()
