"""``unity-sb3 record``: demonstrations written as a Unity ``.demo`` file, as Unity's ``DemonstrationRecorder`` does.

The player whose actions are recorded is the embedded scene's scripted ``expert``, ``random`` play, an
ONNX model in Unity's format (Unity's own trained policy, or one ``unity-sb3 export`` wrote) run as
Unity's inference runs it, or a trained model (a ``.zip``, a checkpoint or a run's behavior folder)::

    unity-sb3 record expert --env Ball3D --episodes 20 --output Expert3DBall.demo
    unity-sb3 record 3DBall.onnx --env Ball3D --steps 5000 --output Unity3DBall.demo
    unity-sb3 record results/Basic_ppo --env Basic --episodes 50 --output Basic.demo

The file feeds GAIL and behavioral cloning (``demo_path``) here and in ML-Agents.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from mlagents_envs.base_env import ActionTuple, BaseEnv, DecisionSteps

from unity_sb3.run import RunConfig, unity_open_kwargs
from unity_sb3.unity.errors import UnityConfigurationError

__all__ = ["record_from_args", "recording_policy"]


def recording_policy(
    player: str, env: BaseEnv, behavior_name: str, *, deterministic: bool = True, seed: int = 0
) -> Callable[[DecisionSteps], ActionTuple]:
    """The ``policy`` of :func:`~unity_sb3.demos.writer.record_demo` that ``player`` names.

    :param player: ``"expert"``, ``"random"``, an ``.onnx`` model, or a trained model (``.zip``,
        checkpoint or behavior folder).
    :param env: the environment recorded.
    :param behavior_name: the behavior recorded.
    :param deterministic: models take their most likely action (``False``: they sample).
    :param seed: seed of random play.
    """
    from unity_sb3.selfplay.matches import policy_player, random_player, scripted_player, view_spec

    spec = env.behavior_specs[behavior_name]
    answer: Any
    if player == "expert":
        answer = scripted_player(env)
    elif player == "random":
        answer = random_player(spec, seed)
    elif player.lower().endswith(".onnx"):
        from unity_sb3.export.onnx_policy import OnnxPolicy

        answer = OnnxPolicy(player, deterministic=deterministic).player(env)
    else:
        from unity_sb3.run_eval import load_player_model

        model, normalize, _ = load_player_model(player)
        answer = policy_player(
            model, view_spec(env, behavior_name), vec_normalize=normalize, deterministic=deterministic
        )
    return lambda steps: answer(behavior_name, steps)


def record_from_args(args: argparse.Namespace) -> int:
    """``unity-sb3 record PLAYER --env ENV --output FILE (--episodes N | --steps N)``: prints the file's summary."""
    from unity_sb3.demos.reader import describe_demo
    from unity_sb3.demos.writer import record_demo
    from unity_sb3.open import open_unity
    from unity_sb3.wrappers.behavior import choose_behavior

    if (args.episodes is None) == (args.steps is None):
        raise UnityConfigurationError("give exactly one of --episodes or --steps")
    config = RunConfig(env=args.env, seed=args.seed, transport=args.transport)
    env = open_unity(config.env, **unity_open_kwargs(config))
    try:
        env.reset()
        name = choose_behavior(env.behavior_specs, args.behavior, "to record", option="--behavior NAME")
        policy = recording_policy(args.player, env, name, deterministic=not args.stochastic, seed=args.seed)
        record_demo(
            env,
            name,
            policy,
            args.output,
            n_episodes=args.episodes,
            n_steps=args.steps,
            demonstration_name=args.name,
            reset=False,
        )
    finally:
        env.close()
    print(describe_demo(args.output))
    return 0
