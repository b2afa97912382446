"""PPO with self-play on Tennis: one model plays both rackets, its past selves play the other one.

    python examples/selfplay_tennis.py
    python examples/selfplay_tennis.py --timesteps 100000   # a few minutes: the machinery, the ELO moving

ML-Agents' ghost trainer in SB3 style. ``LockstepUnity`` opens the scene once; its ``vec_env("Tennis")``
view gives the model the rackets of the *learning team* as slots (a ``UnityVecEnv``), and
``SelfPlayCallback`` answers the other team's rackets with frozen snapshots of the model, saves a
snapshot every ``save_steps``, draws a new opponent every ``swap_steps`` and changes the learning team
every ``team_change`` steps, as Unity's ``self_play`` section says. The ELO of the learning policy is
printed at the end of ``mlagents-learn``'s summary line (``SummaryCallback``). After training the
model plays points against uniform random play (``unity_sb3.selfplay.matches.play_matches``, a point
won or lost by the sign of its final reward, as ML-Agents scores a game).

Tennis' reward is only +-1 per point, and ML-Agents trains it for 50M steps. The defaults are the
settings of benchmarks/RESULTS.md's 800k run (learning rate 1e-3, 128 steps per slot, ``save_steps``
1/15 of the run, ``team_change`` 2x that): there every seed of 3 won 0.63-0.64 of 400 points against
random play and 0.56-0.58 against itself at 160k steps, about 12 min of training per seed with three
seeds sharing a 2-core machine.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

import unity_sb3
from unity_sb3.callbacks.checkpoint import SummaryCallback
from unity_sb3.scenes import make_scene
from unity_sb3.selfplay.matches import play_matches, policy_player, view_spec


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--timesteps", type=int, default=800_000, help="learner steps (rackets of the learning team)"
    )
    parser.add_argument("--courts", type=int, default=8, help="Tennis areas: one racket per team each")
    parser.add_argument("--n-steps", type=int, default=128, help="rollout length per slot")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--save-steps",
        type=int,
        default=None,
        help="self_play save_steps (team_change is 2x); default: 1/15 of --timesteps",
    )
    parser.add_argument("--summary-freq", type=int, default=10_000, help="steps between summary lines")
    parser.add_argument("--games", type=int, default=100, help="points played against random play at the end")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-path", default="results/selfplay_tennis/model")
    args = parser.parse_args(argv)
    save_steps = args.save_steps or max(args.timesteps // 15, 1000)

    # seeded as benchmarks/selfplay_tennis.py: PPO(seed=...) would reseed the shared scene through its view
    set_random_seed(args.seed)
    unity = unity_sb3.LockstepUnity(make_scene("Tennis", seed=args.seed, num_agents=args.courts))
    env = VecNormalize(VecMonitor(unity.vec_env("Tennis")), norm_reward=False)
    self_play = unity_sb3.SelfPlayCallback(
        unity,
        "Tennis",
        {"save_steps": save_steps, "team_change": 2 * save_steps, "swap_steps": 2000, "window": 10},
        seed=args.seed,
    )
    model = unity_sb3.PPO(
        "MlpPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=min(512, args.n_steps * args.courts),
        n_epochs=3,
        learning_rate=args.learning_rate,
        ent_coef=0.005,
        policy_kwargs=dict(net_arch=[128, 128]),
    )
    summary = SummaryCallback(args.summary_freq, name="Tennis", elo=self_play.summary_elo)
    model.learn(args.timesteps, callback=[self_play, summary])
    print(f"ELO after {model.num_timesteps} steps: {self_play.elo:.1f} (initial 1200)")
    Path(args.save_path).parent.mkdir(parents=True, exist_ok=True)
    model.save(args.save_path)
    env.save(f"{args.save_path}_vecnormalize.pkl")

    arena = make_scene("Tennis", seed=args.seed + 1, num_agents=args.courts)
    spec = view_spec(arena, "Tennis")
    player = policy_player(model, spec, vec_normalize=env, deterministic=False)
    results = {}
    for team in (0, 1):  # the model on each side of the net
        players = {team: player, 1 - team: "random"}
        result = play_matches(arena, players, max(args.games // 2, 1), team=team, seed=args.seed)
        print(f"against random play, {result}")
        results[f"team {team}"] = result.win_rate
    arena.close()
    unity.close()
    return {"elo": self_play.elo, **results}


if __name__ == "__main__":
    main()
