"""Behavioral cloning from a ``.demo`` file, then PPO fine-tuning with a BC term, on Ball3D.

    python examples/bc_then_ppo.py                                   # record the scripted expert first
    python examples/bc_then_ppo.py --teacher path/to/3DBall.onnx     # or Unity's own trained policy
    python examples/bc_then_ppo.py --demo path/to/Expert3DBall.demo  # or use a Unity recording

Without ``--demo`` the script drives the embedded Ball3D scene with a teacher and records it
into a ``.demo`` file, in the format Unity's DemonstrationRecorder writes: the scene's scripted
expert, or with ``--teacher`` an ONNX model in Unity's format (the 3DBall.onnx Unity trained and
ships, say), run as Unity's inference runs it (``unity_sb3.OnnxPolicy``). Any ``.demo`` of a
behavior with 8 observations and 2 continuous actions fits ``--demo``, such as the
Expert3DBall.demo that ships with Unity's ML-Agents project. Then:

1. ``unity_sb3.pretrain_bc`` clones the demonstrations into PPO's actor (and, with
   ``critic_warmup``, fits the critic to the demo returns, so the first PPO updates keep the
   cloned policy);
2. ``unity_sb3.PPO(..., behavioral_cloning={...})`` fine-tunes with RL while a BC term, annealed
   to zero over the first half of training, keeps pulling towards the demonstrations.

3. the model is exported to ONNX (``unity_sb3.to_onnx``) and that file is run on the scene the way
   Unity would run it: the round trip back into Unity's format.

Episodes here last at most ``--max-steps`` physics steps (a decision every 5), so the perfect
score is ``0.1 * max_steps / 5`` (20 by default). The mean reward is printed after each stage.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecMonitor

import unity_sb3
from unity_sb3.demos import describe_demo, record_demo
from unity_sb3.scenes import make_scene


def record_teacher(path: Path, teacher: str, n_records: int, max_steps: int, seed: int) -> None:
    """Record ``n_records`` decisions of ``teacher`` (``"expert"``: Ball3D's scripted expert; else a
    Unity-format ``.onnx`` model) on Ball3D into ``path``."""
    scene = make_scene("Ball3D", seed=seed, max_steps=max_steps)
    behavior = next(iter(scene.behavior_specs))  # "3DBall?team=0"
    if teacher == "expert":
        policy = lambda steps: scene.expert_actions(behavior, steps)  # noqa: E731
    else:
        onnx = unity_sb3.OnnxPolicy(teacher, deterministic=True)  # as Unity's Deterministic Inference
        policy = lambda steps: onnx.act(steps, scene.behavior_specs[behavior])  # noqa: E731
    path.parent.mkdir(parents=True, exist_ok=True)
    record_demo(scene, behavior, policy, path, n_steps=n_records)
    scene.close()


def onnx_score(path: Path, episodes: int, max_steps: int, seed: int) -> float:
    """Mean episode return of an exported model on Ball3D, run as Unity's inference runs it."""
    from unity_sb3.export import onnx_episode_returns

    scene = make_scene("Ball3D", seed=seed, max_steps=max_steps)
    returns = onnx_episode_returns(scene, unity_sb3.OnnxPolicy(path, deterministic=True), episodes)
    scene.close()
    return sum(returns) / len(returns)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--demo", help="a .demo file or folder to learn from (default: record one)")
    parser.add_argument(
        "--teacher",
        default="expert",
        help="'expert' (the scene's scripted player) or a Unity-format .onnx to record",
    )
    parser.add_argument("--record-to", default="results/bc_then_ppo/ExpertBall3D.demo")
    parser.add_argument("--demo-records", type=int, default=6000, help="expert decisions to record")
    parser.add_argument("--pretrain-epochs", type=int, default=20)
    parser.add_argument("--timesteps", type=int, default=30_000, help="PPO fine-tuning, agent decisions")
    parser.add_argument("--n-steps", type=int, default=256, help="PPO rollout length per agent")
    parser.add_argument("--bc-strength", type=float, default=1.0, help="BC learning rate / PPO learning rate")
    parser.add_argument("--max-steps", type=int, default=1000, help="episode length in physics steps")
    parser.add_argument("--eval-episodes", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-path", default="results/bc_then_ppo/model")
    args = parser.parse_args(argv)

    demo = args.demo
    if demo is None:
        demo = args.record_to
        record_teacher(Path(demo), args.teacher, args.demo_records, args.max_steps, seed=args.seed + 1)
    print(describe_demo(demo))

    env = VecMonitor(
        unity_sb3.UnityVecEnv("Ball3D", open_kwargs={"max_steps": args.max_steps, "seed": args.seed})
    )
    model = unity_sb3.PPO(
        "MlpPolicy",
        env,
        behavioral_cloning={"demo_path": demo, "strength": args.bc_strength, "steps": args.timesteps // 2},
        n_steps=args.n_steps,
        batch_size=min(512, args.n_steps * env.num_envs),
        n_epochs=3,
        ent_coef=0.001,
        policy_kwargs=dict(net_arch=[64, 64]),
        seed=args.seed,
        verbose=1,
    )

    def score() -> float:
        return float(evaluate_policy(model, env, n_eval_episodes=args.eval_episodes)[0])

    scores = {"untrained": score()}
    history = unity_sb3.pretrain_bc(
        model, demo, epochs=args.pretrain_epochs, critic_warmup=True, seed=args.seed
    )
    print(f"BC loss {history['loss'][0]:.4f} -> {history['loss'][-1]:.4f} over {args.pretrain_epochs} epochs")
    scores["after BC"] = score()
    model.learn(total_timesteps=args.timesteps)
    scores["after PPO + BC"] = score()
    Path(args.save_path).parent.mkdir(parents=True, exist_ok=True)
    model.save(args.save_path)
    onnx = unity_sb3.to_onnx(model, f"{args.save_path}.onnx")
    scores["exported ONNX"] = onnx_score(onnx, args.eval_episodes, args.max_steps, seed=args.seed + 2)
    print(", ".join(f"{stage}: {value:.2f}" for stage, value in scores.items()), "(mean reward)")
    env.close()
    return scores


if __name__ == "__main__":
    main()
