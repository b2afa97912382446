"""Train on a real Unity scene: a standalone build, or the Unity Editor in Play mode.

    python examples/connect_unity_build.py builds/3DBall.x86_64          # launch a build
    python examples/connect_unity_build.py builds/3DBall --time-scale 20 --env-param mass=2.0
    python examples/connect_unity_build.py editor                        # then press Play in Unity

The target is a build's executable, its path without the platform suffix (``.x86_64``, ``.exe``,
``.app``), or the folder holding it; ``editor`` waits up to ``--timeout`` seconds for you to press
Play in the Editor (which connects to port 5004). The names of the embedded scenes (``Ball3D``,
...) work too, so the script can be tried without Unity.

The build is started with ``-nographics -batchmode`` unless you pass ``--graphics`` (visual
observations need graphics). ``--time-scale`` and the other engine settings are sent before the
first reset, like ``mlagents-learn``'s ``engine_settings``; ``--env-param KEY=VALUE`` sets an
environment parameter the scene reads with ``Academy.Instance.EnvironmentParameters``. Run two
builds at once with different ``--worker-id`` values (each uses port 5005 + worker id).

The scene's agents of one behavior become the slots of a UnityVecEnv, and SB3's PPO trains on
them for ``--timesteps`` decisions (0: only connect, print the spaces and close).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gymnasium import spaces
from mlagents_envs.exception import UnityException
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecMonitor

import unity_sb3


def parse_env_param(text: str) -> tuple[str, float]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"the value of {key!r} must be a number, got {value!r}") from None


def policy_for(space: spaces.Space) -> str:
    """SB3's policy for an observation space: several observations, one image, or one vector."""
    if isinstance(space, spaces.Dict):
        return "MultiInputPolicy"
    return "CnnPolicy" if len(space.shape) == 3 else "MlpPolicy"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("target", help='path to a Unity build, "editor", or an embedded scene name')
    parser.add_argument("--behavior", help="the behavior to train (default: the scene's only one)")
    parser.add_argument("--timesteps", type=int, default=50_000, help="agent decisions to train on (0: none)")
    parser.add_argument(
        "--time-scale", type=float, default=20.0, help="simulation speed (Editor: at most 100)"
    )
    parser.add_argument("--graphics", action="store_true", help="render (needed for camera observations)")
    parser.add_argument("--env-param", type=parse_env_param, action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--n-steps", type=int, default=1024, help="PPO rollout length per agent")
    parser.add_argument("--worker-id", type=int, default=0, help="port offset, one per Unity instance")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for Unity to connect")
    parser.add_argument("--save-path", default="results/connect_unity_build/model")
    args = parser.parse_args(argv)

    open_kwargs = {  # the keyword arguments of unity_sb3.open_unity
        "worker_id": args.worker_id,
        "no_graphics": not args.graphics,
        "timeout_wait": args.timeout,
        "engine_settings": {"time_scale": args.time_scale},
        "environment_parameters": dict(args.env_param),
    }
    try:
        env = unity_sb3.UnityVecEnv(args.target, behavior_name=args.behavior, open_kwargs=open_kwargs)
    except UnityException as error:  # missing build, timeout, port in use, unknown behavior...
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(f"behavior {env.behavior_name!r}: {env.num_envs} agents -> {env.num_envs} slots")
    print(f"observations {env.observation_space}\nactions {env.action_space}")

    if args.timesteps > 0:
        model = PPO(policy_for(env.observation_space), VecMonitor(env), n_steps=args.n_steps, verbose=1)
        model.learn(total_timesteps=args.timesteps)
        Path(args.save_path).parent.mkdir(parents=True, exist_ok=True)
        model.save(args.save_path)
        print(f"saved to {args.save_path}.zip")
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
