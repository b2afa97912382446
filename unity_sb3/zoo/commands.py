"""The bridge's commands: ``train``, ``enjoy`` and ``main`` (``python -m unity_sb3.zoo``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unity_sb3.zoo.envs import is_unity_id, make_unity_vec_env
from unity_sb3.zoo.patching import argv_as, patched
from unity_sb3.zoo.registration import register
from unity_sb3.zoo.samplers import OFF_POLICY


def train(argv: Sequence[str]) -> None:
    """``rl_zoo3 train`` with the bridge (same arguments)."""
    register()
    import rl_zoo3.train as zoo_train

    from unity_sb3.zoo.experiment_manager import UnityExperimentManager as manager

    with argv_as(["unity_sb3.zoo train", *argv]), patched(zoo_train, "ExperimentManager", manager):
        zoo_train.train()


def _enjoy_parser() -> argparse.ArgumentParser:
    from rl_zoo3.utils import ALGOS, StoreDict

    p = argparse.ArgumentParser(
        prog="python -m unity_sb3.zoo enjoy", description="Run a trained agent on a Unity scene."
    )
    p.add_argument("--env", default="unity_sb3/Ball3D-v0", help="environment id")
    p.add_argument("-f", "--folder", default="logs", help="log folder (as given to train -f)")
    p.add_argument("--algo", default="ppo", choices=list(ALGOS))
    p.add_argument(
        "-n", "--n-timesteps", type=int, default=1000, help="VecEnv steps to run (each steps every slot)"
    )
    p.add_argument("--n-envs", type=int, default=1, help="Unity instances")
    p.add_argument("--exp-id", type=int, default=0, help="experiment id (0: latest)")
    p.add_argument("--verbose", type=int, default=1)
    p.add_argument(
        "--no-render", action="store_true", help="accepted for rl-zoo3 compatibility (Unity renders itself)"
    )
    p.add_argument("--deterministic", action="store_true", default=False)
    p.add_argument("--stochastic", action="store_true", default=False)
    p.add_argument("--device", default="auto")
    p.add_argument("--load-best", action="store_true", default=False)
    p.add_argument("--load-checkpoint", type=int)
    p.add_argument("--load-last-checkpoint", action="store_true", default=False)
    p.add_argument("--norm-reward", action="store_true", default=False)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-threads", type=int, default=-1)
    p.add_argument("--env-kwargs", type=str, nargs="+", action=StoreDict)
    p.add_argument(
        "--episodes", type=int, default=0, help="stop after this many finished episodes (0: run -n steps)"
    )
    return p


def enjoy(argv: Sequence[str]) -> tuple[float, int]:
    """``rl_zoo3 enjoy`` for Unity ids (other ids go to rl-zoo3's own ``enjoy``).

    :return: mean reward of the episodes that finished and their number (``nan, 0`` if none did).
    """
    register()
    argv = list(argv)
    env_id = _peek(argv, "--env", "CartPole-v1")
    if not is_unity_id(env_id):
        import rl_zoo3.enjoy as zoo_enjoy

        with argv_as(["unity_sb3.zoo enjoy", *argv]):
            zoo_enjoy.enjoy()
        return float("nan"), 0
    import numpy as np
    import torch as th
    import yaml
    from huggingface_sb3 import EnvironmentName
    from rl_zoo3.utils import ALGOS, get_model_path, get_saved_hyperparams
    from stable_baselines3.common.vec_env import VecNormalize

    from unity_sb3.callbacks.curriculum import CURRICULUM_FILE
    from unity_sb3.run_state import at_saved_lessons, curriculum_file_for

    args = _enjoy_parser().parse_args(argv)
    if args.num_threads > 0:
        th.set_num_threads(args.num_threads)
    env_name = EnvironmentName(args.env)
    _, model_path, log_path = get_model_path(
        args.exp_id,
        args.folder,
        args.algo,
        env_name,
        args.load_best,
        args.load_checkpoint,
        args.load_last_checkpoint,
    )
    stats_path = os.path.join(log_path, env_name)
    hyperparams, stats_dir = get_saved_hyperparams(stats_path, norm_reward=args.norm_reward, test_mode=True)
    env_kwargs: dict[str, Any] = {
        **(hyperparams.get("open_kwargs") or {}),
        **(hyperparams.get("env_kwargs") or {}),
    }
    args_file = Path(stats_path) / "args.yml"
    if args_file.is_file():
        saved_args = yaml.load(args_file.read_text(), Loader=yaml.UnsafeLoader)
        env_kwargs.update(saved_args.get("env_kwargs") or {})
    env_kwargs.update(args.env_kwargs or {})
    # the lessons saved with the model: a checkpoint's own, else those training ended at
    state_file = curriculum_file_for(Path(model_path), Path(stats_path) / CURRICULUM_FILE)
    announce = "Playing at the lessons saved with the model:"
    env_kwargs = at_saved_lessons(env_kwargs, args.seed, state_file, "enjoy: ", announce)
    env = make_unity_vec_env(args.env, n_instances=args.n_envs, seed=args.seed, env_kwargs=env_kwargs)
    if hyperparams.get("normalize") and stats_dir is not None:
        stats = os.path.join(stats_dir, "vecnormalize.pkl")
        if not os.path.exists(stats):
            env.close()
            raise FileNotFoundError(f"VecNormalize statistics {stats} not found")
        env = VecNormalize.load(stats, env)
        env.training = False
        env.norm_reward = args.norm_reward
    if hyperparams.get("frame_stack"):
        from stable_baselines3.common.vec_env import VecFrameStack

        env = VecFrameStack(env, hyperparams["frame_stack"])
    print(f"Loading {model_path}")
    custom_objects = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}
    kwargs: dict[str, Any] = {"seed": args.seed}
    if args.algo in OFF_POLICY:
        kwargs["buffer_size"] = 1
    model = ALGOS[args.algo].load(model_path, custom_objects=custom_objects, device=args.device, **kwargs)
    deterministic = not args.stochastic
    rewards: list[float] = []
    lengths: list[int] = []
    try:
        obs = env.reset()
        state = None
        starts = np.ones(env.num_envs, dtype=bool)
        for _ in range(args.n_timesteps):
            action, state = model.predict(obs, state=state, episode_start=starts, deterministic=deterministic)
            obs, _, dones, infos = env.step(action)
            starts = dones
            for info in infos:
                if "episode" in info:
                    rewards.append(float(info["episode"]["r"]))
                    lengths.append(int(info["episode"]["l"]))
                    if args.verbose > 1:
                        print(f"Episode Reward: {rewards[-1]:.2f}  Episode Length: {lengths[-1]}")
            if args.episodes and len(rewards) >= args.episodes:
                break
    except KeyboardInterrupt:
        pass
    finally:
        env.close()
    if not rewards:
        print("No episode finished; run more steps (-n).")
        return float("nan"), 0
    mean = float(np.mean(rewards))
    if args.verbose > 0:
        print(f"{len(rewards)} Episodes")
        print(f"Mean reward: {mean:.2f} +/- {np.std(rewards):.2f}")
        print(f"Mean episode length: {np.mean(lengths):.2f} +/- {np.std(lengths):.2f}")
    return mean, len(rewards)


def _peek(argv: Sequence[str], flag: str, default: str) -> str:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return default


USAGE = """usage: python -m unity_sb3.zoo {train,enjoy,plot_train,plot_from_file,all_plots} [rl-zoo3 arguments]

  train   rl-zoo3 train with the project's algorithms (poca, maskable_ppo, recurrent_ppo, ppo/sac with
          reward signals and BC) and Unity scenes as one UnityVecEnv, e.g.
            python -m unity_sb3.zoo train --algo poca --env unity_sb3/Escape-v0 -n 50000
            python -m unity_sb3.zoo train --algo ppo --env unity_sb3/Ball3D-v0 -optimize --n-trials 20
  enjoy   run a trained agent: python -m unity_sb3.zoo enjoy --algo poca --env unity_sb3/Escape-v0 -f logs
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m unity_sb3.zoo``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        train(rest)
        return 0
    if command == "enjoy":
        enjoy(rest)
        return 0
    if command in ("plot_train", "plot_from_file", "all_plots"):
        from rl_zoo3 import cli

        with argv_as(["unity_sb3.zoo", command, *rest]):
            cli.main()
        return 0
    print(f"Unknown command {command!r}.\n{USAGE}")
    return 2
