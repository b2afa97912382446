"""``unity-sb3 eval``: a trained model's mean episode reward, or its games against another player.

``unity-sb3 eval MODEL`` runs complete episodes and reports the mean reward (:func:`evaluate`).
With ``--opponent``, the model plays against another player on a competitive scene::

    unity-sb3 eval results/Tennis_ppo/Tennis --opponent random --episodes 100
    unity-sb3 eval results/Tennis_ppo/Tennis --opponent results/Tennis_ppo/Tennis/checkpoints/checkpoint_100000_steps.zip
    unity-sb3 eval results/Tennis_ppo/Tennis --opponent results/Tennis_ppo/Tennis/selfplay.pt#3
    unity-sb3 eval results/StrikersVsGoalie_poca/Striker --opponent results/StrikersVsGoalie_poca/Goalie

The model (a ``model.zip``, a checkpoint, or a behavior folder of a run) plays its behavior's team
(``--team`` picks one when the behavior has several, default 0) and the opponent every other
team. The opponent is ``random``, ``expert`` (the embedded scene's scripted player), another
model (``.zip`` or behavior folder: the algorithm and ``VecNormalize`` statistics come from its
folder) or a self-play snapshot (``<state>.selfplay.pt#k``: slot ``k`` of the pool, default the
newest; it must be a snapshot of a policy like the model's). The games are counted by
:func:`unity_sb3.selfplay.matches.play_matches`.

The model and the opponent may also be ONNX files in Unity's format (``mlagents-learn``'s, or
``unity-sb3 export``'s), run by :class:`~unity_sb3.export.onnx_policy.OnnxPolicy` as Unity's inference
runs them; an ONNX model carries no run folder, so ``--env`` names the scene or build::

    unity-sb3 eval 3DBall.onnx --env Ball3D --episodes 12
    unity-sb3 eval results/Tennis_ppo/Tennis --opponent Tennis.onnx
"""

from __future__ import annotations

import argparse
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from unity_sb3.callbacks.curriculum import CURRICULUM_FILE
from unity_sb3.run import (
    CONFIG_FILE,
    RunConfig,
    make_vec_env,
    unity_open_kwargs,
)
from unity_sb3.run_state import (
    MODEL_FILE,
    NORMALIZE_FILE,
    at_saved_lessons,
    behaviors_of_run,
    curriculum_file_for,
    run_folder_of,
)
from unity_sb3.slots import predict_masks
from unity_sb3.unity.errors import UnityConfigurationError

__all__ = ["at_trained_lessons", "evaluate_matches_from_args", "load_player_model"]


def _model_and_folder(path: str | Path) -> tuple[Path, Path]:
    """``(model zip, its behavior folder)`` of a model file, a checkpoint or a behavior folder."""
    path = Path(path)
    if path.is_dir():
        _saved_config(path)  # a run of several behaviors: says which folders hold models
        path = path / MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist; give a model .zip, a checkpoint, or a run's behavior folder (with model.zip)"
        )
    return path, run_folder_of(path)


def _saved_config(folder: Path) -> RunConfig:
    saved = folder / CONFIG_FILE
    if not saved.is_file():
        return RunConfig()
    data = yaml.safe_load(saved.read_text()) or {}
    if "behaviors" in data:
        raise UnityConfigurationError(
            f"{folder} is the folder of a run with several behaviors ({', '.join(data['behaviors'])}); "
            "give one behavior's folder, e.g. "
            f"{folder / next(iter(data['behaviors']))}"
        )
    known = set(RunConfig.__dataclass_fields__)
    return RunConfig(**{k: v for k, v in data.items() if k in known})


def load_player_model(path: str | Path, algo: str | None = None) -> tuple[Any, Any, RunConfig]:
    """A saved model, the ``VecNormalize`` it was trained under (or ``None``) and its run's config.

    :param path: a model ``.zip``, a checkpoint, or a behavior folder.
    :param algo: the algorithm (default: the one in the folder's ``config.yaml``).
    """
    from unity_sb3.algorithms.registry import algorithm_class

    model_path, folder = _model_and_folder(path)
    config = _saved_config(folder)
    model = algorithm_class(algo or config.algo).load(model_path, device="cpu")
    normalize = None
    stats = folder / NORMALIZE_FILE
    if config.normalize and stats.is_file():
        with stats.open("rb") as file:
            normalize = pickle.load(file)
    return model, normalize, config


def _snapshot(spec: str) -> dict[str, Any]:
    """The weights of ``<state>.selfplay.pt#k`` (``#k`` left out: the newest snapshot)."""
    import torch as th

    file, _, index = spec.partition("#")
    state = th.load(file, map_location="cpu", weights_only=True)
    behaviors = state.get("behaviors", {})
    if len(behaviors) != 1:
        raise UnityConfigurationError(
            f"{file} holds the pools of {sorted(behaviors)}; a snapshot opponent needs a symmetric run's "
            "state (one behavior). Use the other behavior's model or checkpoint instead"
        )
    pool = next(iter(behaviors.values()))["pool"]
    snapshots = pool["snapshots"]
    k = int(index) if index else (int(pool["snapshot_counter"]) - 1) % len(snapshots)
    if not 0 <= k < len(snapshots) or not snapshots[k]:
        filled = [i for i, s in enumerate(snapshots) if s]
        raise UnityConfigurationError(f"{file} has no snapshot #{k}; its pool holds snapshots {filled}")
    return dict(snapshots[k])


def _team_of_model(names: list[str], behavior: str | None, team: int | None) -> tuple[list[str], int]:
    from unity_sb3.wrappers.behavior import split_behavior_name

    base = (behavior or "").partition("?")[0]
    mine = [n for n in names if split_behavior_name(n)[0] == base or n == behavior]
    if not mine:
        raise UnityConfigurationError(
            f"the scene has no behavior {behavior!r}, the model's; its behaviors are {names}. "
            "Pass --env with the scene the model was trained on"
        )
    return mine, _chosen_team(
        sorted(split_behavior_name(n)[1] for n in mine), team, f"behavior {base!r} plays teams"
    )


def _chosen_team(teams: list[int], team: int | None, whose: str) -> int:
    """``--team``, checked against ``teams`` (``whose`` begins the error), else the first of them."""
    chosen = teams[0] if team is None else int(team)
    if chosen not in teams:
        raise UnityConfigurationError(f"{whose} {teams}; --team {team} is not one of them")
    return chosen


def evaluate_matches_from_args(args: argparse.Namespace) -> int:
    """``unity-sb3 eval MODEL --opponent OPPONENT [--episodes N] [--team T]``: prints the results.

    ``MODEL`` and ``OPPONENT`` may be ONNX models in Unity's format (then ``--env`` names the scene);
    an ONNX model plays every behavior of its team.
    """
    from unity_sb3.open import open_unity
    from unity_sb3.selfplay.matches import play_matches, policy_player, view_spec
    from unity_sb3.wrappers.behavior import split_behavior_name

    if _is_onnx(args.model):
        model, normalize, config = None, None, _onnx_config(args)
    else:
        model, normalize, config = load_player_model(args.model, args.algo)
        if args.env:
            config.env = args.env
        config.seed = args.seed
        config.transport = args.transport
    deterministic = not args.stochastic
    env = open_unity(config.env, **unity_open_kwargs(config))
    try:
        names = list(env.behavior_specs)
        if model is None:
            team = _team_of_onnx(names, getattr(args, "team", None))
            players: dict[int, Any] = {team: _onnx_player(args.model, env, deterministic)}
        else:
            mine, team = _team_of_model(names, config.behavior, getattr(args, "team", None))
            spec = view_spec(env, mine[0])
            players = {team: policy_player(model, spec, vec_normalize=normalize, deterministic=deterministic)}
        opponent = _opponent(args.opponent, model, env, deterministic)
        for name in names:
            other = split_behavior_name(name)[1]
            if other not in players:
                players[other] = opponent(name)
        result = play_matches(
            env, players, args.episodes, team=team, seed=args.seed, deterministic=deterministic
        )
    finally:
        env.close()
    who = Path(args.model).name if model is None else f"{config.behavior or config.env} ({config.algo})"
    print(f"{who} vs {args.opponent} on {config.env}: {result}")
    return 0


def _team_of_onnx(names: list[str], team: int | None) -> int:
    """The team an ONNX model plays: ``--team``, else the scene's first."""
    from unity_sb3.wrappers.behavior import split_behavior_name

    return _chosen_team(sorted({split_behavior_name(n)[1] for n in names}), team, "the scene's teams are")


def _onnx_player(path: str, env: Any, deterministic: bool) -> Any:
    from unity_sb3.export.onnx_policy import OnnxPolicy

    return OnnxPolicy(path, deterministic=deterministic).player(env)


def _opponent(spec: str, model: Any, env: Any, deterministic: bool) -> Any:
    """A function behavior name -> the opponent's player for that behavior."""
    from unity_sb3.selfplay.matches import policy_player, view_spec

    if spec in ("random", "expert"):
        return lambda name: spec
    if _is_onnx(spec):
        player = _onnx_player(spec, env, deterministic)  # one model, its memories shared by its behaviors
        return lambda name: player
    if ".selfplay.pt" in spec or spec.partition("#")[0].endswith("selfplay.pt"):
        if model is None:
            raise UnityConfigurationError(
                f"a self-play snapshot ({spec}) holds weights only; play it against the .zip model of the "
                "run that saved it, not an ONNX model"
            )
        weights = _snapshot(spec)
        return lambda name: policy_player(
            model, view_spec(env, name), weights=weights, deterministic=deterministic
        )
    other, normalize, _ = load_player_model(spec)
    return lambda name: policy_player(
        other, view_spec(env, name), vec_normalize=normalize, deterministic=deterministic
    )


def evaluate(
    model_path: str | Path,
    config: RunConfig,
    episodes: int = 20,
    deterministic: bool = True,
    gif: str | Path | None = None,
) -> tuple[float, float]:
    """Run ``episodes`` complete episodes (over all slots) and return mean and std episode reward."""
    import numpy as np

    from unity_sb3.algorithms.registry import algorithm_class

    model = algorithm_class(config.algo).load(model_path, device="cpu")
    env = make_vec_env(config)
    frames = []
    try:
        stats = Path(model_path).parent / NORMALIZE_FILE
        if config.normalize and stats.exists():
            from stable_baselines3.common.vec_env import VecNormalize

            env = VecNormalize.load(str(stats), env)
            env.training = False
            env.norm_reward = False
        obs = env.reset()
        returns: list[float] = []
        state = None
        starts = np.ones(env.num_envs, dtype=bool)
        while len(returns) < episodes:
            action, state = model.predict(obs, state, starts, deterministic, **predict_masks(model, env))
            obs, _, dones, infos = env.step(action)
            starts = dones
            if gif is not None and len(frames) < 300:
                frame = env.render(mode="rgb_array") if hasattr(env, "render") else None
                if frame is not None:
                    frames.append(frame)
            returns.extend(info["episode"]["r"] for info in infos if "episode" in info)
    finally:
        env.close()
    if gif is not None and frames:
        from PIL import Image

        images = [Image.fromarray(f) for f in frames]
        images[0].save(gif, save_all=True, append_images=images[1:], duration=50, loop=0)
    values = np.asarray(returns[:episodes])
    return float(values.mean()), float(values.std())


def at_trained_lessons(config: RunConfig, model_path: Path, folder: Path) -> RunConfig:
    """``config`` with its curricula at the lessons ``model_path`` was last trained at.

    The lessons are the state saved with the model (a checkpoint's own copy, else the run's
    ``curriculum.json``); without a curriculum or a saved state, the copy keeps them as they are
    (every curriculum at lesson 0, where Unity starts).

    :param config: the run's configuration (not changed).
    :param model_path: the model or checkpoint evaluated.
    :param folder: its run folder.
    :raises UnityConfigurationError: the saved state does not fit the run's curricula.
    """
    state_file = curriculum_file_for(model_path, folder / CURRICULUM_FILE)
    announce = "Evaluating at the lessons the model was trained at:"
    return replace(
        config,
        open_kwargs=at_saved_lessons(config.open_kwargs, config.unity_seed, state_file, "", announce),
    )


def _is_onnx(path: str | Path) -> bool:
    return str(path).partition("#")[0].lower().endswith(".onnx")


def _onnx_config(args: argparse.Namespace) -> RunConfig:
    """The run settings of an ONNX model's evaluation: it has no run folder, so ``--env`` names the scene."""
    if not args.env:
        raise UnityConfigurationError(
            f"{args.model} is an ONNX model, which does not say which scene it was trained on; "
            "name the scene or build with --env"
        )
    return RunConfig(env=args.env, seed=args.seed, transport=args.transport)


def _print_mean_reward(who: str, env: str, returns: Any) -> None:
    """``WHO on ENV: mean reward M +/- S over N episodes`` for the episode returns of an evaluation."""
    import numpy as np

    print(
        f"{who} on {env}: mean reward {np.mean(returns):.2f} +/- {np.std(returns):.2f} over {len(returns)} episodes"
    )


def evaluate_onnx_from_args(args: argparse.Namespace) -> int:
    """``unity-sb3 eval MODEL.onnx --env ENV``: Unity's inference of the model, as :class:`OnnxPolicy` runs it."""
    from unity_sb3.export.onnx_policy import OnnxPolicy, onnx_episode_returns
    from unity_sb3.open import open_unity

    config = _onnx_config(args)
    policy = OnnxPolicy(args.model, deterministic=not args.stochastic)
    env = open_unity(config.env, **unity_open_kwargs(config))
    try:
        returns = onnx_episode_returns(env, policy, args.episodes)
    finally:
        env.close()
    _print_mean_reward(Path(args.model).name, config.env, returns)
    return 0


def evaluate_behaviors_from_args(args: argparse.Namespace, behaviors: list[str]) -> int:
    """``unity-sb3 eval RUN`` of a run of several behaviors: every behavior played by its own model at
    once (``mlagents-learn --inference``), each one's mean episode reward printed."""
    from unity_sb3.episodes import episode_returns
    from unity_sb3.open import open_unity
    from unity_sb3.selfplay.matches import policy_player, view_spec
    from unity_sb3.wrappers.behavior import split_behavior_name
    from unity_sb3.wrappers.lockstep import behavior_dir

    run = Path(args.model)
    loaded = {name: load_player_model(run / behavior_dir(name)) for name in behaviors}
    config = replace(next(iter(loaded.values()))[2], seed=args.seed, transport=args.transport)
    if args.env:
        config.env = args.env
    deterministic = not args.stochastic
    env = open_unity(config.env, **unity_open_kwargs(config))
    try:
        env.reset()  # a build sends its behaviors with the first reset
        answers = {}
        for unity_name in env.behavior_specs:
            base = split_behavior_name(unity_name)[0]
            if base in loaded:
                model, normalize, _ = loaded[base]
                spec = view_spec(env, unity_name)
                answers[unity_name] = policy_player(
                    model, spec, vec_normalize=normalize, deterministic=deterministic
                )
        missing = sorted(set(loaded) - {split_behavior_name(n)[0] for n in answers})
        if missing:
            raise UnityConfigurationError(
                f"{config.env} has no behavior {missing}; its behaviors are {list(env.behavior_specs)}"
            )
        returns = episode_returns(
            env, answers, args.episodes, group=lambda name: split_behavior_name(name)[0], reset=False
        )
    finally:
        env.close()
    for name, values in returns.items():
        algo = loaded[name][2].algo
        _print_mean_reward(f"{name} ({algo})", config.env, values)
    return 0


def evaluate_from_args(args: argparse.Namespace) -> int:
    if _is_onnx(args.model):
        return evaluate_onnx_from_args(args)
    behaviors = behaviors_of_run(args.model)
    if behaviors is not None:
        return evaluate_behaviors_from_args(args, behaviors)
    model_path, folder = _model_and_folder(args.model)
    config = at_trained_lessons(_saved_config(folder), model_path, folder)
    if args.env:
        config.env = args.env
    if args.algo:
        config.algo = args.algo
    config.seed = args.seed
    config.num_envs = 1
    config.transport = args.transport
    mean, std = evaluate(model_path, config, args.episodes, deterministic=not args.stochastic, gif=args.gif)
    print(
        f"{config.algo} on {config.env}: mean reward {mean:.2f} +/- {std:.2f} over {args.episodes} episodes"
    )
    return 0
