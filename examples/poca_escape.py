"""MA-POCA on Escape: a group of three must sacrifice one member to open the door.

    python examples/poca_escape.py
    python examples/poca_escape.py --timesteps 300000 --num-agents 12

Each room holds one group of 3 agents, a guard and a locked door. The key drops only where an
agent touches the guard, which kills that agent; then another agent carries the key to the door,
and every *living* member gets the group reward (+1). The agent that died never sees a reward,
so independent learners rarely learn to sacrifice; POCA's centralised critic and per-agent
counterfactual baseline credit it anyway (posthumous credit assignment).

UnityVecEnv gives each agent a slot, ``infos[i]["group_id"]`` and ``infos[i]["group_reward"]``;
POCA reads the group reward from the infos and counts it once per agent per step
(``UnityVecEnv(add_group_reward=True)`` would change nothing for POCA: it takes the group reward
back out of the rewards; independent learners need it). The script prints the group success
rate (escapes / (escapes + time-outs)) of the untrained and the trained policy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import unity_sb3


def group_outcomes(model: unity_sb3.POCA, env: unity_sb3.UnityVecEnv, steps: int) -> tuple[int, int]:
    """``(escapes, group episodes ended)`` during ``steps`` steps of every slot."""
    escapes = timeouts = 0
    obs = env.reset()
    for _ in range(steps):
        actions, _ = model.predict(obs, deterministic=False)
        obs, _, dones, infos = env.step(actions)
        escaped = {info["group_id"] for info in infos if info["group_reward"] > 0}
        timed_out = {
            info["group_id"] for done, info in zip(dones, infos) if done and info["TimeLimit.truncated"]
        }
        escapes += len(escaped)
        timeouts += len(timed_out - escaped)
    return escapes, escapes + timeouts


def rate(outcomes: tuple[int, int]) -> str:
    escapes, episodes = outcomes
    return f"{escapes / episodes:.2f} ({escapes}/{episodes})" if episodes else "n/a (no group episode ended)"


def main(argv: list[str] | None = None) -> dict[str, tuple[int, int]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--timesteps", type=int, default=300_000, help="agent decisions to train on, all agents"
    )
    parser.add_argument("--num-agents", type=int, default=12, help="a multiple of 3: one group per room")
    parser.add_argument("--n-steps", type=int, default=256, help="rollout length per agent")
    parser.add_argument("--eval-steps", type=int, default=500, help="steps of every slot to measure success")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-path", default="results/poca_escape/model")
    args = parser.parse_args(argv)

    def make_env(seed: int) -> unity_sb3.UnityVecEnv:
        open_kwargs = {"num_agents": args.num_agents, "seed": seed}
        return unity_sb3.UnityVecEnv("Escape", open_kwargs=open_kwargs)

    env = make_env(args.seed)
    model = unity_sb3.POCA(
        "MlpPolicy",
        env,
        n_steps=args.n_steps,
        batch_size=min(512, args.n_steps * env.num_envs),
        n_epochs=3,
        learning_rate=3e-4,
        seed=args.seed,
        verbose=1,
    )
    eval_env = make_env(args.seed + 10_000)  # a separately seeded scene for the measurements
    before = group_outcomes(model, eval_env, args.eval_steps)
    model.learn(total_timesteps=args.timesteps)
    Path(args.save_path).parent.mkdir(parents=True, exist_ok=True)
    model.save(args.save_path)
    after = group_outcomes(model, eval_env, args.eval_steps)
    print(f"group success rate: {rate(before)} untrained -> {rate(after)} after {args.timesteps} steps")
    env.close()
    eval_env.close()
    return {"before": before, "after": after}


if __name__ == "__main__":
    main()
