"""MA-POCA with self-play on SoccerTwos: one team of two learns against snapshots of itself.

    python examples/soccer_poca_selfplay.py
    python examples/soccer_poca_selfplay.py --timesteps 500000 --ball-touch 0

How Unity trains SoccerTwos (``config/poca/SoccerTwos.yaml``), in SB3 style: each team of a field
is a group of two (``infos[i]["group_id"]``, the goal reward is a group reward), ``unity_sb3.POCA``
learns with a centralised critic over the group, and ``SelfPlayCallback`` runs ML-Agents' ghost
trainer: ``LockstepUnity``'s ``vec_env("SoccerTwos")`` view gives the model the agents of the
learning team (both teams' sensors are read by position, Blue and Purple name them apart), the other
team is answered by frozen snapshots of the model, and the learning team changes every
``team_change`` steps. The ELO is printed at the end of ``mlagents-learn``'s summary line. After
training the team plays games against a team acting at random
(``unity_sb3.selfplay.matches.play_matches``: a game won or lost by the sign of the final group
reward; a game still 0-0 at ``--max-steps`` is a draw).

A goal is the only reward of Unity's SoccerTwos, and ML-Agents trains it for 50 million steps.
``--ball-touch`` sets the scene's ``ball_touch`` parameter (``0.2 * ball_touch`` per touch, the start of
ML-Agents' early soccer curriculum; the default here) for budgets that small. The defaults are the
settings of benchmarks/RESULTS.md's 1M run (``save_steps`` 1/12 of the run, ``team_change`` 4x that;
there every seed of 3 beat a random team in 0.77-0.83 of 48 games, about 70 min per seed on a shared
2-core machine).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stable_baselines3.common.vec_env import VecMonitor

import unity_sb3
from unity_sb3.callbacks.checkpoint import SummaryCallback
from unity_sb3.scenes import make_scene
from unity_sb3.selfplay.matches import play_matches, policy_player, view_spec


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--timesteps", type=int, default=1_000_000, help="learner steps (agents of the learning team)"
    )
    parser.add_argument("--fields", type=int, default=8, help="SoccerTwos fields: two agents per team each")
    parser.add_argument("--max-steps", type=int, default=2000, help="academy steps before a game is a draw")
    parser.add_argument("--ball-touch", type=float, default=1.0, help="the scene's ball_touch parameter")
    parser.add_argument("--n-steps", type=int, default=128, help="rollout length per slot")
    parser.add_argument(
        "--save-steps",
        type=int,
        default=None,
        help="self_play save_steps (team_change is 4x); default: 1/12 of --timesteps",
    )
    parser.add_argument("--summary-freq", type=int, default=10_000, help="steps between summary lines")
    parser.add_argument("--games", type=int, default=32, help="games played against a random team at the end")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-path", default="results/soccer_poca_selfplay/model")
    args = parser.parse_args(argv)
    save_steps = args.save_steps or max(args.timesteps // 12, 1000)

    params = {"num_agents": args.fields, "max_steps": args.max_steps}
    unity = unity_sb3.LockstepUnity(
        make_scene("SoccerTwos", seed=args.seed, ball_touch=args.ball_touch, **params)
    )
    env = VecMonitor(unity.vec_env("SoccerTwos"))
    self_play = unity_sb3.SelfPlayCallback(
        unity,
        "SoccerTwos",
        {"save_steps": save_steps, "team_change": 4 * save_steps, "swap_steps": 2000, "window": 10},
        seed=args.seed,
    )
    model = unity_sb3.POCA(
        "MultiInputPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=min(1024, args.n_steps * env.num_envs),
        n_epochs=3,
        learning_rate=3e-4,
        ent_coef=0.005,
        policy_kwargs=dict(net_arch=[128, 128]),
        seed=args.seed,
    )
    summary = SummaryCallback(args.summary_freq, name="SoccerTwos", elo=self_play.summary_elo)
    model.learn(args.timesteps, callback=[self_play, summary])
    print(f"ELO after {model.num_timesteps} steps: {self_play.elo:.1f} (initial 1200)")
    Path(args.save_path).parent.mkdir(parents=True, exist_ok=True)
    model.save(args.save_path)
    unity.close()

    arena = make_scene("SoccerTwos", seed=args.seed + 1, **params)  # no ball_touch: goals only
    player = policy_player(model, view_spec(arena, "SoccerTwos"), deterministic=False)
    results = {}
    for team in (0, 1):  # the model as blue, then as purple
        players = {team: player, 1 - team: "random"}
        result = play_matches(arena, players, max(args.games // 2, 1), team=team, seed=args.seed)
        print(f"against a random team, {result}")
        results[f"team {team}"] = result.win_rate
    arena.close()
    return {"elo": self_play.elo, **results}


if __name__ == "__main__":
    main()
