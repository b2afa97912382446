"""Escape under the PettingZoo API: random and scripted-expert play, then POCA through an adapter.

    python examples/pettingzoo_escape.py
    python examples/pettingzoo_escape.py --episodes 20 --seed 1

``unity_sb3.UnityParallelEnv`` presents every Unity agent as a PettingZoo agent with a stable
name (``DungeonEscape_0``, ...). Discrete behaviors get ``{"observation", "action_mask"}``
observations; ``infos[name]`` carries Unity's ``agent_id``, ``group_id`` and ``group_reward``.
An agent that dies (the one sacrificed to the guard) leaves ``env.agents``; the episode ends
when every agent is done.

1. A random policy (respecting the action masks) and the scene's scripted expert each play
   ``--episodes`` episodes; the expert shows the intended solution: one agent dies, the others
   escape with the group reward.
2. ``PettingZooVecEnv`` turns the ParallelEnv into the VecEnv (one slot per agent) that
   ``unity_sb3.POCA`` trains on; the trained shared actor then plays the PettingZoo episodes.

One room (3 agents, one group) keeps the adapter's default grouping (all agents in group 1) right.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

import unity_sb3
from unity_sb3.scenes import make_scene
from unity_sb3.wrappers.pettingzoo_vec_env import PettingZooVecEnv

Policy = Callable[[dict, dict], dict]  # (observations, infos) -> {agent name: action}


def play(env: unity_sb3.UnityParallelEnv, policy: Policy, episodes: int, seed: int) -> tuple[int, int]:
    """Play ``episodes`` episodes; return ``(escapes, agents killed by the guard)``."""
    escapes = sacrifices = 0
    for episode in range(episodes):
        observations, infos = env.reset(seed=seed + episode)
        group_reward = dict.fromkeys(env.agents, 0.0)
        while env.agents:
            actions = policy(observations, infos)
            observations, _rewards, terminations, _truncations, infos = env.step(actions)
            for agent, info in infos.items():
                group_reward[agent] += info["group_reward"]
                sacrifices += bool(terminations[agent] and info["group_reward"] == 0)
        escapes += any(value > 0 for value in group_reward.values())
    return escapes, sacrifices


def main(argv: list[str] | None = None) -> dict[str, tuple[int, int]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=10, help="episodes each policy plays")
    parser.add_argument("--timesteps", type=int, default=300_000, help="POCA training, agent decisions")
    parser.add_argument("--n-steps", type=int, default=512, help="POCA rollout length per agent")
    parser.add_argument("--max-steps", type=int, default=100, help="steps before an episode times out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    # Keep a handle on the scene: its scripted expert reads Unity's DecisionSteps.
    scene = make_scene("Escape", seed=args.seed, max_steps=args.max_steps)
    behavior = next(iter(scene.behavior_specs))  # "DungeonEscape?team=0"
    env = unity_sb3.UnityParallelEnv(scene)

    def random_policy(observations: dict, infos: dict) -> dict:
        return {a: env.action_space(a).sample(mask=observations[a]["action_mask"]) for a in env.agents}

    def expert_policy(observations: dict, infos: dict) -> dict:
        decision_steps, _ = scene.get_steps(behavior)
        expert = scene.expert_actions(behavior, decision_steps)
        row = decision_steps.agent_id_to_index  # Unity agent id -> row of the expert's actions
        return {a: int(expert.discrete[row[infos[a]["agent_id"]], 0]) for a in env.agents}

    results = {
        "random": play(env, random_policy, args.episodes, args.seed),
        "expert": play(env, expert_policy, args.episodes, args.seed),
    }

    # POCA trains on a VecEnv whose slots are the agents; the adapter resets the ParallelEnv itself.
    open_kwargs = {"seed": args.seed + 1, "max_steps": args.max_steps}
    venv = PettingZooVecEnv(unity_sb3.UnityParallelEnv("Escape", open_kwargs=open_kwargs))
    batch_size = min(512, args.n_steps * venv.num_envs)
    model = unity_sb3.POCA(
        "MlpPolicy", venv, n_steps=args.n_steps, batch_size=batch_size, seed=args.seed, verbose=1
    )
    model.learn(total_timesteps=args.timesteps)
    venv.close()

    def poca_policy(observations: dict, infos: dict) -> dict:
        batch = np.stack([observations[a]["observation"] for a in env.agents])
        actions, _ = model.predict(batch)
        return dict(zip(env.agents, actions.tolist()))

    results["POCA"] = play(env, poca_policy, args.episodes, args.seed)
    env.close()
    for name, (escapes, sacrifices) in results.items():
        print(
            f"{name:>6}: {escapes}/{args.episodes} episodes escaped, {sacrifices} agents killed by the guard"
        )
    return results


if __name__ == "__main__":
    main()
