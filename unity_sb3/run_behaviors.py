"""Training runs of several behaviors at once, and self-play: ``unity-sb3 train`` when one model is not enough.

``unity-sb3 train`` takes this path (instead of :func:`unity_sb3.run.train`) when

- an ML-Agents YAML names several behaviors the scene has and no ``--behavior`` is given: every
  one of them trains at once, each with its own ``trainer_type`` and hyperparameters (mapped by the
  single-behavior path's own functions), as ``mlagents-learn`` does;
- a behavior to train has a ``self_play`` section (Unity's ``Tennis.yaml``, ``SoccerTwos.yaml``,
  ``StrikersVsGoalie.yaml``, or the shipped hyperparameters of those scenes): symmetric self-play
  when its name has several teams (``Tennis?team=0/1``: one model plays every team through
  :class:`~unity_sb3.callbacks.self_play.SelfPlayCallback`), asymmetric when several one-team
  behaviors have it (``Striker?team=0`` vs ``Goalie?team=1``: one callback each, sharing one
  controller, so one behavior learns while the other is answered by its snapshots).

A run lives in ``results/<run>/``::

    config.yaml                   the whole run: {env, algo, behaviors: {name: its RunConfig}}
    <behavior_dir>/               one per behavior ("Striker", "Tennis"; ?team= becomes _team=)
        config.yaml               its RunConfig (unity-sb3 eval / export read it)
        model.zip  model.onnx     the final model, and its ONNX when the export supports the algorithm
        selfplay.pt               self-play: snapshot pool, ELO and counters saved with model.zip
        curriculum.json           with a curriculum: the lessons and this behavior's recent returns
        checkpoints/              checkpoint_<n>_steps.zip (+ .selfplay.pt, .curriculum.json beside each)
        monitor.csv  tb/  vecnormalize.pkl  learning_curve.png

``--resume`` resumes every behavior from its newest readable model (``find_resume_point``) with
the self-play and curriculum state saved with it (the lessons of the first behavior's, shared by
all; each behavior's own recent returns). Ctrl-C checkpoints every behavior. A crash in one learner
stops the others and the error names the behavior.

From Python::

    from unity_sb3.run import RunConfig
    from unity_sb3.run_behaviors import train_behaviors

    tennis = RunConfig(env="Tennis", n_timesteps=200_000, behavior="Tennis",
                       self_play={"save_steps": 10_000, "team_change": 40_000})
    train_behaviors({"Tennis": tennis}, "results/tennis")
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import yaml

from unity_sb3.callbacks.curriculum import CURRICULUM_FILE
from unity_sb3.config.hyperparams import HYPERPARAMS_DIR, gym_id, read_yaml
from unity_sb3.config.mlagents_legacy import is_legacy_config, upgrade_legacy_config
from unity_sb3.run import (
    CONFIG_FILE,
    RunConfig,
    config_from_args,
    default_env_and_algo,
    monitor_files,
    plain,
    resumed_config,
    run_dir_from_args,
    saved_run_config,
    unity_open_kwargs,
    wrap_normalize,
)
from unity_sb3.run_state import (
    MODEL_FILE,
    NORMALIZE_FILE,
    curriculum_file_for,
    find_resume_point,
    initialization_source,
    initialize_parameters,
    prepare_curriculum,
    save_curriculum_files,
)
from unity_sb3.selfplay.settings import SELF_PLAY_KEYS, SelfPlaySettings

__all__ = ["SELF_PLAY_FILE", "plan_behaviors", "self_play_for", "train_behaviors", "train_from_args"]

#: the self-play state saved with a behavior's ``model.zip`` (checkpoints keep their own copy)
SELF_PLAY_FILE = "selfplay.pt"


def self_play_for(section: Mapping[str, Any] | None, behavior: str) -> SelfPlaySettings | None:
    """The self-play settings of ``behavior`` in a ``self_play`` run setting.

    :param section: one ``self_play`` section for every behavior (ML-Agents' keys), or behavior
        name (without ``?team=``) -> section, as the shipped StrikersVsGoalie entry gives it; ``None``
        or a behavior left out: no self-play.
    :param behavior: the behavior (``?team=`` is ignored).
    :raises SelfPlayConfigError: unknown keys or bad values (the message names where).
    """
    if section is None:
        return None
    base = behavior.partition("?")[0]
    if not section or all(key in SELF_PLAY_KEYS for key in section):
        return SelfPlaySettings.from_mapping(section, where="self_play")
    if base not in section:
        return None
    return SelfPlaySettings.from_mapping(section[base], where=f"self_play.{base}")


# --------------------------------------------------------------------------------------- planning
def _scene_base_names(env: str) -> list[str] | None:
    """The behaviors (``?team=`` stripped) of an embedded scene, or ``None`` for a build (unknown
    before Unity opens)."""
    from unity_sb3.scenes import list_scenes, scene_class

    if env.lower() not in {s.lower() for s in list_scenes()}:
        return None
    return list(dict.fromkeys(name.partition("?")[0] for name in scene_class(env).behavior_names_of()))


def _default_algo(args: argparse.Namespace) -> None:
    """``--algo`` left out on an embedded scene without an ML-Agents YAML: the algorithm whose shipped
    file has the scene, PPO first (``--env SoccerTwos`` trains POCA, as Unity's config does)."""
    if args.algo is not None or args.config is not None or args.env is None or (args.resume and args.run_id):
        return  # (resuming a named run: its config.yaml names the algorithm)
    for algo in ("ppo", *sorted(p.stem for p in HYPERPARAMS_DIR.glob("*.yml") if p.stem != "ppo")):
        shipped = HYPERPARAMS_DIR / f"{algo}.yml"
        if shipped.is_file() and gym_id(args.env) in (yaml.safe_load(shipped.read_text()) or {}):
            args.algo = algo
            return


def plan_behaviors(args: argparse.Namespace) -> dict[str, RunConfig] | None:
    """The behaviors ``unity-sb3 train`` trains at once, each with its :class:`RunConfig`, or ``None``
    when the run is an ordinary single-behavior run (:func:`unity_sb3.run.train`).

    The configs come from :func:`unity_sb3.run.config_from_args` with ``--behavior`` set to each
    name, so each behavior's hyperparameters are mapped exactly as a single-behavior run maps them;
    ``self_play`` is resolved per behavior (:func:`self_play_for`). With ``--resume`` and no
    ``--config`` they are the run's own, from its ``config.yaml``.
    """
    _default_algo(args)
    default_env_and_algo(args)
    saved = saved_run_config(args)
    data = read_yaml(args.config) if args.config else None
    if data is not None and is_legacy_config(data):
        data = upgrade_legacy_config(data)[0]  # (its mapping, with what it drops, is printed per behavior)
    if saved is not None and args.config is None:
        if "behaviors" not in saved:
            return None  # a single-behavior run: unity_sb3.run resumes it with its own settings
        # --resume: every behavior with the settings it ran with, the command line's on top
        configs = {n: resumed_config(c, args) for n, c in (saved["behaviors"] or {}).items()}
    elif data is not None and "behaviors" in data:
        behaviors = data.get("behaviors") or {}
        defaults = data.get("default_settings") or {}
        if args.behavior:
            names = [args.behavior.partition("?")[0]]
        else:
            names = list(behaviors)
            scene = _scene_base_names(args.env)
            if scene is not None:
                names = [n for n in names if n in scene]
        with_self_play = [n for n in names if "self_play" in {**defaults, **(behaviors.get(n) or {})}]
        if len(names) < 2 and not with_self_play:
            return None  # one behavior (or none the scene has: the single path says so)
        configs = {n: config_from_args(argparse.Namespace(**{**vars(args), "behavior": n})) for n in names}
    else:
        config = config_from_args(argparse.Namespace(**vars(args)))
        if config.self_play is None:
            return None
        if args.behavior:
            names = [args.behavior.partition("?")[0]]
        else:
            names = _scene_base_names(args.env) or []
            if not names:
                raise ValueError(
                    f"{args.env}: self_play needs the behaviors to train; pass --behavior NAME (a build's "
                    "behaviors are known only once it runs) or an ML-Agents YAML that names them"
                )
        configs = {n: replace(config, behavior=n) for n in names}
    for name, config in configs.items():
        settings = self_play_for(config.self_play, name)
        config.behavior = name
        config.self_play = None if settings is None else settings.as_dict()
    return configs


def train_from_args(args: argparse.Namespace) -> int:
    """``unity-sb3 train``: several behaviors / self-play here, anything else in :mod:`unity_sb3.run`."""
    from unity_sb3 import run

    _default_algo(args)
    if args.resume:
        default_env_and_algo(args)
    configs = plan_behaviors(argparse.Namespace(**vars(args)))
    if configs is None:
        return run.train_from_args(args)
    if not args.run_id and not args.resume:
        first = next(iter(configs.values()))
        args.algo = first.algo  # the default run folder names the trained algorithm
    run_dir = run_dir_from_args(args)
    if run_dir is None:
        return 2
    train_behaviors(
        configs,
        run_dir,
        resume=args.resume,
        progress=not args.no_progress,
        device=args.device,
        verbose=args.verbose,
        num_threads=args.num_threads or None,
    )
    return 0


# --------------------------------------------------------------------------------------- training
class _Behavior:
    """One trained behavior's files, config, model and callbacks during :func:`train_behaviors`."""

    def __init__(self, name: str, config: RunConfig, run_dir: Path) -> None:
        from unity_sb3.wrappers.lockstep import behavior_dir

        self.name = name
        self.config = config
        self.dir = run_dir / behavior_dir(name)
        self.start_from: Path | None = None
        self.self_play: Any = None
        self.checkpoint: Any = None
        self.curriculum: Any = None
        self.env: Any = None

    def monitor_file(self) -> Path:
        segment = len(monitor_files(self.dir))  # SB3 keeps only names ending in monitor.csv
        return self.dir / ("monitor.csv" if segment == 0 else f"resume-{segment}.monitor.csv")

    def curriculum_state(self) -> Path:
        """The curriculum state saved with the model the run resumes from (a checkpoint's own copy, else
        the behavior's ``curriculum.json``)."""
        assert self.start_from is not None
        return curriculum_file_for(self.start_from, self.dir / CURRICULUM_FILE)

    def save_curriculum(self, num_timesteps: int, checkpoint_path: Path | None = None) -> None:
        """Write the curriculum state to ``curriculum.json`` (and beside ``checkpoint_path``)."""
        save_curriculum_files(self.curriculum, self.dir / CURRICULUM_FILE, num_timesteps, checkpoint_path)

    def self_play_state(self) -> Path:
        """The state saved with the model the run resumes from (a checkpoint's own copy)."""
        from unity_sb3.callbacks.self_play import self_play_state_path

        assert self.start_from is not None
        if self.start_from.name == MODEL_FILE:
            return self.dir / SELF_PLAY_FILE
        return self_play_state_path(self.start_from)


def train_behaviors(
    configs: Mapping[str, RunConfig],
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    device: str = "auto",
    verbose: int = 0,
    num_threads: int | None = 1,
) -> dict[str, Path]:
    """Train several behaviors of one scene at once, with self-play where their config has it.

    :param configs: behavior name (base name, e.g. ``"Tennis"`` for all its teams, or a real name)
        -> its :class:`RunConfig`. ``env``, ``seed``, ``num_envs``, ``transport``, ``open_kwargs``
        and the restart settings of the first are the run's; algorithm, hyperparameters,
        ``n_timesteps``, normalization, checkpoint cadence and ``self_play`` (one section in
        ML-Agents' keys, or ``None``) are each behavior's own.
    :param run_dir: the run folder (layout in the module doc).
    :param resume: continue every behavior from its newest readable model, with its self-play state.
    :param progress: one progress bar (the first behavior's steps) with every self-play ELO.
    :param device: torch device of every model.
    :param verbose: SB3 verbosity.
    :param num_threads: torch CPU threads, process-wide (``None``: torch's default).
    :return: behavior -> path of its saved ``model.zip``.
    :raises ResumeError: ``resume`` and a behavior has no readable model.
    """
    from unity_sb3.multi_behavior import MultiBehaviorTrainer
    from unity_sb3.wrappers.lockstep import LockstepUnity

    if not configs:
        raise ValueError("train_behaviors needs at least one behavior -> RunConfig")
    run_dir = Path(run_dir)
    runs = {name: _Behavior(name, config, run_dir) for name, config in configs.items()}
    if resume:
        for run in runs.values():
            run.start_from = find_resume_point(run.dir)
    first = next(iter(configs.values()))
    # the lessons of the first behavior's saved state, loaded before Unity opens (shared by every behavior)
    lead = next(iter(runs.values()))
    open_config, _ = prepare_curriculum(first, lead.curriculum_state() if lead.start_from else None)
    run_dir.mkdir(parents=True, exist_ok=True)
    whole = {"env": first.env, "algo": first.algo, "behaviors": {n: asdict(c) for n, c in configs.items()}}
    (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(plain(whole), sort_keys=False))
    for run in runs.values():
        run.dir.mkdir(parents=True, exist_ok=True)
        (run.dir / CONFIG_FILE).write_text(yaml.safe_dump(plain(asdict(run.config)), sort_keys=False))

    lockstep = LockstepUnity(
        [first.env] * first.num_envs, open_kwargs=unity_open_kwargs(open_config), step_timeout=600.0
    )
    try:
        _drop_behaviors_not_in_scene(runs, lockstep)
        restarts = {
            "restart_on_crash": first.restart_on_crash,
            "max_restarts": first.max_restarts,
            "restarts_rate_limit_n": first.restarts_rate_limit_n,
            "restarts_rate_limit_period_s": first.restarts_rate_limit_period_s,
        }
        _make_self_play(runs, lockstep, first.seed)
        trainer = MultiBehaviorTrainer(
            lockstep,
            {name: _factory(run, resume, device, verbose) for name, run in runs.items()},
            view_kwargs={name: restarts for name in runs},
            monitor=False,
        )
        for name, run in runs.items():
            run.env = trainer.models[name].get_env()
        return _learn_and_save(trainer, runs, open_config, progress, num_threads)
    finally:
        lockstep.close()


def _drop_behaviors_not_in_scene(runs: dict[str, _Behavior], lockstep: Any) -> None:
    names = set(lockstep.behavior_names) | set(lockstep.base_names)
    missing = [name for name in runs if name not in names]
    for name in missing:
        warnings.warn(
            f"the scene has no behavior {name!r} (it has {lockstep.behavior_names}); it is not trained",
            stacklevel=3,
        )
        del runs[name]
    if not runs:
        raise ValueError(f"none of the behaviors to train is in the scene; it has {lockstep.behavior_names}")
    covered = {n for n in lockstep.behavior_names if n in runs or n.partition("?")[0] in runs}
    idle = sorted(set(lockstep.behavior_names) - covered)
    if idle:
        warnings.warn(
            f"behavior(s) {idle} are not trained (the config has no entry for them): their agents get "
            "zero actions",
            stacklevel=3,
        )


def _make_self_play(runs: dict[str, _Behavior], lockstep: Any, seed: int) -> None:
    """A :class:`SelfPlayCallback` for each behavior with ``self_play``: its own for a behavior with
    several teams (symmetric), one shared controller for the one-team behaviors (asymmetric)."""
    from unity_sb3.callbacks.self_play import SelfPlayCallback, self_play_callbacks

    asymmetric = {}
    for name, run in runs.items():
        teams = [n for n in lockstep.behavior_names if n == name or n.partition("?")[0] == name]
        if run.config.self_play is None:
            if len(teams) > 1:  # no self-play: one model plays every team, as ML-Agents trains it
                lockstep.set_learning_team(name, None)
            continue
        if len(teams) > 1:  # symmetric: one model, the other teams answered by its snapshots
            run.self_play = SelfPlayCallback(lockstep, name, run.config.self_play, seed=seed)
        else:
            asymmetric[name] = run.config.self_play
    if asymmetric:
        for name, callback in self_play_callbacks(lockstep, asymmetric, seed=seed).items():
            runs[name].self_play = callback
    for run in runs.values():
        if run.self_play is not None and run.start_from is not None:
            state = run.self_play_state()
            if state.is_file():
                run.self_play.restore(state)
                print(f"{run.name}: self-play resumes at ELO {run.self_play.elo:.1f} (from {state})")
            else:
                warnings.warn(
                    f"--resume: {state} is missing; {run.name}'s self-play starts a new snapshot pool "
                    f"at initial_elo",
                    stacklevel=3,
                )


def _factory(run: _Behavior, resume: bool, device: str, verbose: int) -> Any:
    """The model factory of one behavior: its view in ``VecMonitor`` (and ``VecNormalize``), then a
    new model or the one it resumes from."""

    def make(view: Any) -> Any:
        from stable_baselines3.common.vec_env import VecMonitor

        from unity_sb3.algorithms.registry import algorithm_class
        from unity_sb3.config.model_args import prepare_model_args

        config = run.config
        env = VecMonitor(view, filename=str(run.monitor_file()))
        env = wrap_normalize(env, config, run.dir / NORMALIZE_FILE if resume else None)
        algo_cls = algorithm_class(config.algo)
        tensorboard = str(run.dir / "tb")
        if run.start_from is not None:
            model = algo_cls.load(run.start_from, env=env, device=device, tensorboard_log=tensorboard)
            print(f"{run.name}: resuming from {run.start_from} at {model.num_timesteps} steps")
            return model
        policy, hyperparams = prepare_model_args(config.algo, config.policy, config.hyperparams, env)
        model = algo_cls(
            policy,
            env,
            seed=config.seed,
            verbose=verbose,
            device=device,
            tensorboard_log=tensorboard,
            **hyperparams,
        )
        if config.initialize_from:
            source = initialization_source(config.initialize_from, run.dir.name)
            initialize_parameters(model, source, env)
        return model

    return make


def _callbacks(run: _Behavior, open_kwargs: Mapping[str, Any], bar: Any) -> list[Any]:
    from unity_sb3.callbacks.checkpoint import AtomicCheckpointCallback, SummaryCallback
    from unity_sb3.callbacks.curriculum import CurriculumCallback, load_curriculum_state, mlagents_callbacks

    config = run.config
    callbacks = [*mlagents_callbacks(open_kwargs, run.name)]
    run.curriculum = next((c for c in callbacks if isinstance(c, CurriculumCallback)), None)
    if run.curriculum is not None and run.start_from is not None and run.curriculum_state().is_file():
        # this behavior's recent returns; the lessons are the shared ones loaded before Unity opened
        own = load_curriculum_state(run.curriculum_state())
        run.curriculum.load_state_dict(
            {
                "parameters": run.curriculum.parameters.state_dict(),
                "reward_buffer": own.get("reward_buffer", []),
            }
        )
    if run.self_play is not None:
        callbacks.append(run.self_play)

    def on_save(path: Path) -> None:
        if run.self_play is not None:
            run.self_play.on_checkpoint(path)
        run.save_curriculum(run.checkpoint.model.num_timesteps, path)

    run.checkpoint = AtomicCheckpointCallback(
        config.checkpoint_every,
        run.dir / "checkpoints",
        keep_last=config.keep_checkpoints,
        save_replay_buffer=config.save_replay_buffer,
        on_save=on_save,
    )
    callbacks.append(run.checkpoint)
    if config.summary_freq:
        elo = getattr(run.self_play, "summary_elo", None)
        extra = {"elo": elo} if elo is not None else {}
        callbacks.append(SummaryCallback(config.summary_freq, name=run.name, **extra))
    if bar is not None:
        callbacks.append(bar)
    return callbacks


def _learn_and_save(
    trainer: Any, runs: dict[str, _Behavior], open_config: RunConfig, progress: bool, num_threads: int | None
) -> dict[str, Path]:
    from unity_sb3.callbacks.checkpoint import save_atomic, save_replay_buffer_atomic
    from unity_sb3.callbacks.progress import LiveProgressCallback

    remaining = {
        name: run.config.n_timesteps - (trainer.models[name].num_timesteps if run.start_from else 0)
        for name, run in runs.items()
    }
    steps = {name: n for name, n in remaining.items() if n > 0}
    playing = [run for run in runs.values() if run.self_play is not None]

    def postfix() -> str:
        return "  ".join(f"{run.name} {run.self_play.progress_text()}" for run in playing)

    lead = next(iter(steps), None)
    callbacks = {}
    for name, run in runs.items():
        bar = None
        if progress and name == lead:
            bar = LiveProgressCallback(max(steps[name], 0), postfix=postfix if playing else None)
        callbacks[name] = _callbacks(run, open_config.open_kwargs, bar)
    interrupted = False
    started = time.monotonic()
    if steps:
        resumed = any(run.start_from is not None for run in runs.values())
        try:
            trainer.learn(
                steps, callback=callbacks, reset_num_timesteps=not resumed, torch_threads=num_threads
            )
        except KeyboardInterrupt:
            interrupted = True
            trainer.lockstep.abort(KeyboardInterrupt("Ctrl-C"))
            _join_learners()
            for run in runs.values():
                run.checkpoint.init_callback(trainer.models[run.name])
                path = run.checkpoint.save_now()
                print(f"\nInterrupted: saved checkpoint {path}")
            print("Continue with --resume")
    saved = {}
    for name, run in runs.items():
        model = trainer.models[name]
        saved[name] = save_atomic(model, run.dir / MODEL_FILE)
        run.save_curriculum(model.num_timesteps)
        if run.self_play is not None:
            run.self_play.save(run.dir / SELF_PLAY_FILE)
        if run.config.save_replay_buffer and not interrupted:
            save_replay_buffer_atomic(model, run.dir / "checkpoints" / "replay_buffer.pkl")
        if run.config.normalize and hasattr(run.env, "save"):
            run.env.save(str(run.dir / NORMALIZE_FILE))
        _export_onnx(run, model, trainer.views[name])
        _plot(run)
    state = "stopped early" if interrupted else "finished"
    elapsed = time.monotonic() - started
    listing = ", ".join(f"{name}: {path}" for name, path in saved.items())
    print(f"Training {state} after {elapsed:.0f} s. Models: {listing}")
    return saved


def _join_learners(timeout: float = 60.0) -> None:
    """Wait for the learner threads that ``abort`` woke (named ``learner-<behavior>``)."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread.name.startswith("learner-") and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def _export_onnx(run: _Behavior, model: Any, view: Any) -> None:
    """``model.onnx`` beside ``model.zip``, or a warning when the export does not support the model."""
    from stable_baselines3.common.vec_env import VecNormalize

    from unity_sb3.export.command import export_beside

    normalize = run.env if isinstance(run.env, VecNormalize) else None
    export_beside(model, run.dir, view.spaces.spec, normalize, run.name)


def _plot(run: _Behavior) -> None:
    from unity_sb3.plotting import plot_learning_curve

    with contextlib.suppress(Exception):  # a curve is a convenience; never fail a finished run on it
        plot_learning_curve(
            monitor_files(run.dir),
            run.dir / "learning_curve.png",
            title=f"{run.config.algo.upper()} on {run.config.env}: {run.name}",
            concatenate=True,
        )
