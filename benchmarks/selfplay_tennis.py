"""Tennis, PPO + self-play: the ELO rises and the final policy beats random play and its earlier self.

One PPO model plays both teams of the embedded Tennis scene (``LockstepUnity`` + ``SelfPlayCallback``,
ML-Agents' ghost trainer): the learning team's rackets are its view's slots, the other team is
answered by snapshots of it. The settings are the shipped ``unity_sb3/Tennis-v0`` ones
(``config/ppo/Tennis.yaml``: normalized observations, 3 epochs, learning rate 3e-4, beta 0.005,
gamma 0.99, lambda 0.95) scaled down to what a shared 2-core machine trains in minutes: fewer
courts, a smaller network and rollout, and the self-play steps (``save_steps``, ``team_change``)
divided by the same factor as the budget.

After training the final policy (frozen, sampling its actions as ML-Agents' policies do) plays
``--games`` points against uniform random play and against the policy as it was at
``--early-fraction`` of training, half of them on each side of the net
(``unity_sb3.selfplay.matches.play_matches``, as ``unity-sb3 eval --opponent`` plays them). A point is won or lost
as ML-Agents' ghost trainer reads it: the sign of the final reward (+1 / -1, Tennis has no draw).

    python benchmarks/selfplay_tennis.py --seeds 0 1 2 --timesteps 800000 --learning-rate 1e-3 --n-steps 128 --games 400 --jobs 3

(benchmarks/RESULTS.md's run: every seed of 3 beats random play and its 160k self; the defaults are
Unity's learning rate and rollout, which did not learn at 150k.)

Writes ``benchmarks/results/<name>.{json,png}`` (the ELO curves) and prints a table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results
from _curves import plot_curves, run_tasks, windowed_mean
from _selfplay import EloRecorder, final_matches, policy_weights, scaled_self_play

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = (
    "seed",
    "steps",
    "final ELO",
    "max ELO",
    "vs random",
    "vs early",
    "early step",
    "random vs random",
    "train s",
)


def settings(timesteps: int) -> dict:
    """Unity's Tennis ``self_play`` section (save 50k, team change 100k of 50M steps), scaled so a
    run of ``timesteps`` still saves about 15 snapshots and changes team about 7 times."""
    return scaled_self_play(timesteps, snapshots=15, saves_per_team_change=2)


def run(
    seed: int,
    timesteps: int,
    courts: int,
    n_steps: int,
    learning_rate: float,
    scale: float,
    games: int,
    early: float,
    threads: int,
) -> dict:
    import torch as th
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    from unity_sb3 import PPO
    from unity_sb3.callbacks.self_play import SelfPlayCallback
    from unity_sb3.scenes import make_scene
    from unity_sb3.selfplay.matches import policy_player, view_spec
    from unity_sb3.wrappers.lockstep import LockstepUnity

    th.set_num_threads(threads)
    # seeded with set_random_seed, not PPO(seed=...), which would reseed the shared scene through one view
    set_random_seed(seed)
    unity = LockstepUnity(make_scene("Tennis", seed=seed, num_agents=courts, scale=scale))
    view = unity.vec_env("Tennis")
    env = VecNormalize(VecMonitor(view), norm_reward=False)
    self_play = SelfPlayCallback(unity, "Tennis", settings(timesteps), seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=n_steps,
        batch_size=min(512, n_steps * view.num_envs),
        n_epochs=3,
        learning_rate=learning_rate,
        gamma=0.99,
        gae_lambda=0.95,
        ent_coef=0.005,
        clip_range=0.2,
        policy_kwargs=dict(net_arch=[128, 128]),
        device="cpu",
    )
    recorder = EloRecorder(
        self_play,
        every=max(timesteps // 30, 1),
        snapshot_at=int(early * timesteps),
        vec_normalize=env,
        verbose=1,
        label=f"seed {seed}: ",
    )
    start = time.perf_counter()
    model.learn(timesteps, callback=[self_play, recorder])
    seconds = time.perf_counter() - start
    print(
        f"seed {seed}: trained {model.num_timesteps} steps in {seconds:.0f} s, playing the games", flush=True
    )
    spec = view_spec(unity.unity_envs[0], "Tennis")
    final = policy_player(model, spec, weights=policy_weights(model, env), deterministic=False)
    earlier = policy_player(model, spec, weights=recorder.snapshot, deterministic=False)
    arena = {"num_agents": 8, "scale": scale}
    matches = final_matches("Tennis", final, earlier, games, 10_000 + 10 * seed, **arena)
    vs_random, vs_early, baseline = matches["random"], matches["early"], matches["random_vs_random"]
    unity.close()
    return {
        "seed": seed,
        "steps": int(model.num_timesteps),
        "final ELO": self_play.elo,
        "max ELO": max([e for _, e in recorder.points] + [self_play.elo]),
        "vs random": vs_random["win_rate"],
        "vs early": vs_early["win_rate"],
        "early step": recorder.snapshot_step,
        "random vs random": baseline["win_rate"],
        "train s": seconds,
        "team changes": self_play.controller.team_changes,
        "elo_curve": recorder.points,
        "matches": matches,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--timesteps", type=int, default=150_000, help="learner steps (rackets of the learning team)"
    )
    parser.add_argument("--courts", type=int, default=8, help="Tennis areas: slots of the learning team")
    parser.add_argument("--n-steps", type=int, default=256, help="rollout length per slot")
    parser.add_argument(
        "--games", type=int, default=200, help="points of each evaluation (half on each side)"
    )
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--scale", type=float, default=0.5, help="the ball's diameter (scene parameter)")
    parser.add_argument("--early-fraction", type=float, default=0.2, help="when the earlier policy is kept")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run in parallel processes")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--name", default="selfplay_tennis")
    args = parser.parse_args(argv)
    tasks = [
        (
            seed,
            args.timesteps,
            args.courts,
            args.n_steps,
            args.learning_rate,
            args.scale,
            args.games,
            args.early_fraction,
            args.threads,
        )
        for seed in args.seeds
    ]
    rows = run_tasks(run, tasks, args.jobs)
    print_table(rows, COLUMNS, title=f"Tennis PPO + self-play, {args.timesteps} steps, {args.courts} courts")
    window = max(args.timesteps // 30, 1)
    curves = {"ELO": [windowed_mean(row["elo_curve"], args.timesteps, window) for row in rows]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot_curves(curves, window, RESULTS / f"{args.name}.png", "ELO", "Tennis self-play: ELO", hline=1200.0)
    print(f"wrote {write_results(args.name, rows, settings=vars(args), self_play=settings(args.timesteps))}")
    return rows


if __name__ == "__main__":
    main()
