"""Training runs: what ``unity-sb3 train`` does for one behavior, usable from Python
(``unity-sb3 eval`` is :mod:`unity_sb3.run_eval`; several behaviors and self-play :mod:`unity_sb3.run_behaviors`).

A run lives in ``results/<run-id>/``:

- ``config.yaml``: the algorithm, environment and hyperparameters it ran with;
- ``monitor.csv`` (``resume-<k>.monitor.csv`` for each resumed segment): episode rewards/lengths;
- ``tb/``: TensorBoard logs; ``checkpoints/``: periodic atomic checkpoints (and
  ``replay_buffer.pkl`` with ``--save-replay-buffer``);
- ``model.zip``: the final model (also written on Ctrl-C); ``learning_curve.png``;
- ``curriculum.json`` (runs with a curriculum): each parameter's lesson, written atomically with
  every checkpoint, on Ctrl-C and at the end; ``--resume`` continues at those lessons. Each
  checkpoint also keeps its own copy (``checkpoints/checkpoint_<steps>_steps.curriculum.json``).

``--resume`` starts from the newest of ``model.zip`` and the checkpoints that reads completely; an
unreadable one (a partial copy, a full disk) is skipped with a warning naming it. The replay
buffer and the curriculum state it loads are the ones saved with the model it starts from.

Crash restarts follow ``mlagents-learn``: ``--restart-on-crash`` re-opens a crashed Unity
instance at most ``--max-restarts`` times over its lifetime (ML-Agents'
``max_lifetime_restarts``, default 10, -1 for no limit) and at most
``--restarts-rate-limit-n`` times (default 1, -1 for no limit) within any
``--restarts-rate-limit-period-s`` seconds (default 60).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from unity_sb3.callbacks.curriculum import CURRICULUM_FILE, check_curriculum_step
from unity_sb3.config.hyperparams import load_hyperparams
from unity_sb3.run_state import (
    MODEL_FILE,
    NORMALIZE_FILE,
    InitializeError,
    curriculum_file_for,
    find_resume_point,
    initialization_source,
    initialize_parameters,
    load_replay_buffer_if_present,
    prepare_curriculum,
    save_curriculum_files,
)
from unity_sb3.validation import flag
from unity_sb3.wrappers.restarts import RESTART_SETTINGS, RestartPolicy

CONFIG_FILE = "config.yaml"
REPLAY_BUFFER_FILE = "replay_buffer.pkl"  # in checkpoints/, as AtomicCheckpointCallback writes it


# run settings a hyperparameter file (an ML-Agents YAML's env_settings, or a flat/RL Zoo file) may
# give beside the algorithm's arguments; the command line overrides them
#: checkpoint and summary cadence: ML-Agents' checkpoint_interval, keep_checkpoints, summary_freq
CADENCE_SETTINGS = ("checkpoint_every", "keep_checkpoints", "summary_freq")
RUN_SETTINGS = ("restart_on_crash", *RESTART_SETTINGS, "save_replay_buffer", *CADENCE_SETTINGS)


@dataclass
class RunConfig:
    """Everything that defines a training run (saved as ``config.yaml``).

    The restart settings have ML-Agents' meaning and defaults (``mlagents-learn``'s
    ``--max-lifetime-restarts 10``, ``--restarts-rate-limit-n 1``,
    ``--restarts-rate-limit-period-s 60``); they apply only with ``restart_on_crash``.
    ``save_replay_buffer`` (off-policy algorithms only) writes ``checkpoints/replay_buffer.pkl``
    with each checkpoint and the final model; ``resume`` loads it when it is there.
    ``checkpoint_every`` (agent steps), ``keep_checkpoints`` (0 keeps all) and ``summary_freq``
    (agent steps between ML-Agents-style summary lines; ``None``: none) are ML-Agents'
    ``checkpoint_interval``, ``keep_checkpoints`` and ``summary_freq``.
    """

    env: str = "Ball3D"
    algo: str = "ppo"
    n_timesteps: int = 100_000
    seed: int = 0
    num_envs: int = 1
    behavior: str | None = None
    transport: str = "player"
    time_scale: float = 20.0
    no_graphics: bool = False
    normalize: bool | dict = False
    policy: str = "MlpPolicy"
    hyperparams: dict[str, Any] = field(default_factory=dict)
    open_kwargs: dict[str, Any] = field(default_factory=dict)
    restart_on_crash: bool = False
    max_restarts: int = RestartPolicy.max_restarts
    restarts_rate_limit_n: int = RestartPolicy.rate_limit_n
    restarts_rate_limit_period_s: float = RestartPolicy.rate_limit_period_s
    save_replay_buffer: bool = False
    checkpoint_every: int = 50_000
    keep_checkpoints: int = 5
    summary_freq: int | None = None
    #: a ``self_play`` section for every behavior, or behavior -> section (unity_sb3.run_behaviors)
    self_play: dict[str, Any] | None = None
    #: the model a new run starts from (``--initialize-from``): a model file or a run / behavior folder
    initialize_from: str | None = None

    @property
    def unity_seed(self) -> int:
        """The seed Unity opens with: the file's ``open_kwargs`` seed, else the run's."""
        return self.open_kwargs.get("seed", self.seed)


def plain(value: Any) -> Any:
    """``value`` with anything YAML cannot represent safely (classes, callables) as readable text."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def unity_open_kwargs(config: RunConfig) -> dict[str, Any]:
    """``open_unity`` keyword arguments of a run: seed, graphics, time scale, the file's ``open_kwargs``."""
    from unity_sb3.scenes import list_scenes
    from unity_sb3.unity.channels import EngineSettings

    open_kwargs: dict[str, Any] = {
        "seed": config.seed,
        "no_graphics": config.no_graphics,
        "engine_settings": EngineSettings(time_scale=config.time_scale),
        **config.open_kwargs,
    }
    if config.env in list_scenes():
        open_kwargs.setdefault("transport", config.transport)
        # our own player can take any port; a real build may have been started for a known one
        open_kwargs.setdefault("find_free_port", True)
    return open_kwargs


#: algorithms that take a hybrid behavior's ``Tuple(Box, MultiDiscrete)`` actions
HYBRID_ALGOS = ("ppo", "ppo_memory", "poca", "poca_memory", "sac")


def make_vec_env(config: RunConfig, monitor_file: str | Path | None = None):
    """Open the run's Unity instances as one ``UnityVecEnv`` (wrapped in VecMonitor)."""
    from stable_baselines3.common.vec_env import VecMonitor

    from unity_sb3.wrappers.vec_env import UnityVecEnv

    open_kwargs = unity_open_kwargs(config)
    targets = [config.env] * config.num_envs
    env = UnityVecEnv(
        targets,
        behavior_name=config.behavior,
        # the project's PPO, POCA and SAC train hybrid behaviors as hybrid; others get SB3's Box
        hybrid="tuple" if config.algo in HYBRID_ALGOS else "box",
        open_kwargs=open_kwargs,
        restart_on_crash=config.restart_on_crash,
        max_restarts=config.max_restarts,
        restarts_rate_limit_n=config.restarts_rate_limit_n,
        restarts_rate_limit_period_s=config.restarts_rate_limit_period_s,
    )
    return VecMonitor(env, filename=str(monitor_file) if monitor_file else None)


def wrap_normalize(env, config: RunConfig, stats_file: Path | None):
    """``env`` in a ``VecNormalize`` when ``config.normalize`` asks for one, resuming its statistics.

    :param config: the run's settings (``normalize``: ``True`` or ``VecNormalize``'s keyword arguments)
    :param stats_file: the saved statistics to resume from when it exists, else ``None``
    """
    from stable_baselines3.common.vec_env import VecNormalize

    if not config.normalize:
        return env
    kwargs = config.normalize if isinstance(config.normalize, dict) else {}
    if stats_file is not None and stats_file.exists():
        env = VecNormalize.load(str(stats_file), env)
        env.training = True
        return env
    return VecNormalize(env, **kwargs)


def train(
    config: RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    checkpoint_every: int | None = None,
    keep_checkpoints: int | None = None,
    device: str = "auto",
    verbose: int = 0,
    num_threads: int | None = 1,
) -> Path:
    """Train as ``unity-sb3 train`` does and return the path of the saved model.

    :param config: what to train.
    :param run_dir: the run folder (created).
    :param resume: continue from the newest loadable checkpoint (or the final model) in it, with
        the replay buffer saved beside the checkpoints when there is one (off-policy algorithms).
    :param progress: show a progress bar with the live mean reward.
    :param checkpoint_every: agent-steps between checkpoints (default: ``config.checkpoint_every``).
    :param keep_checkpoints: how many checkpoints to keep, 0 for all (default:
        ``config.keep_checkpoints``).
    :param device: torch device.
    :param verbose: SB3 verbosity.
    :param num_threads: torch CPU threads (``None``: torch's default). One is fastest for the
        small networks these scenes use and leaves the other cores to Unity; more threads on a
        busy machine make every update wait for the slowest.
    """
    import torch
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

    from unity_sb3.algorithms.registry import algorithm_class

    algo_cls = algorithm_class(config.algo)
    if config.save_replay_buffer and not issubclass(algo_cls, OffPolicyAlgorithm):
        raise ValueError(
            f"save_replay_buffer (--save-replay-buffer) needs an off-policy algorithm (sac, td3, tqc, ...); "
            f"{config.algo} is on-policy and has no replay buffer. Drop the option."
        )
    if num_threads is not None:
        torch.set_num_threads(num_threads)

    from unity_sb3.callbacks.checkpoint import (
        AtomicCheckpointCallback,
        SummaryCallback,
        save_atomic,
        save_replay_buffer_atomic,
    )
    from unity_sb3.callbacks.curriculum import CurriculumCallback, mlagents_callbacks
    from unity_sb3.callbacks.progress import LiveProgressCallback
    from unity_sb3.config.model_args import prepare_model_args
    from unity_sb3.export.command import ONNX_FILE, export_beside
    from unity_sb3.plotting import plot_learning_curve

    run_dir = Path(run_dir)
    checkpoints = run_dir / "checkpoints"
    curriculum_file = run_dir / CURRICULUM_FILE
    start_from = find_resume_point(run_dir) if resume else None
    # before anything is written or opened: a saved curriculum that no longer fits is an error
    open_config, curriculum_state = prepare_curriculum(
        config, curriculum_file_for(start_from, curriculum_file) if start_from else None
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    segment = len(monitor_files(run_dir))
    # SB3's monitor writer only keeps names that end in "monitor.csv"
    monitor_file = run_dir / ("monitor.csv" if segment == 0 else f"resume-{segment}.monitor.csv")
    (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(plain(asdict(config)), sort_keys=False))

    env = make_vec_env(open_config, monitor_file)
    stats_file = run_dir / NORMALIZE_FILE
    env = wrap_normalize(env, config, stats_file if resume else None)
    try:
        if start_from is not None:
            model = algo_cls.load(start_from, env=env, device=device, tensorboard_log=str(run_dir / "tb"))
            print(f"Resuming from {start_from} at {model.num_timesteps} steps")
            load_replay_buffer_if_present(model, checkpoints / REPLAY_BUFFER_FILE)
        else:
            policy, hyperparams = prepare_model_args(config.algo, config.policy, config.hyperparams, env)
            model = algo_cls(
                policy,
                env,
                seed=config.seed,
                verbose=verbose,
                device=device,
                tensorboard_log=str(run_dir / "tb"),
                **hyperparams,
            )
            if config.initialize_from:
                initialize_parameters(model, initialization_source(config.initialize_from), env)
        remaining = config.n_timesteps - (model.num_timesteps if start_from else 0)
        extra = mlagents_callbacks(open_config.open_kwargs, config.behavior)
        curriculum = next((c for c in extra if isinstance(c, CurriculumCallback)), None)

        def save_curriculum(checkpoint_path: Path | None = None) -> None:
            save_curriculum_files(curriculum, curriculum_file, model.num_timesteps, checkpoint_path)

        if curriculum is not None and curriculum_state is not None:
            check_curriculum_step(curriculum_state, model.num_timesteps, curriculum_file)
            curriculum.load_state_dict(curriculum_state)  # lessons are loaded already; adds the reward buffer
        checkpoint = AtomicCheckpointCallback(
            config.checkpoint_every if checkpoint_every is None else checkpoint_every,
            checkpoints,
            keep_last=config.keep_checkpoints if keep_checkpoints is None else keep_checkpoints,
            save_replay_buffer=config.save_replay_buffer,
            on_save=save_curriculum,
        )
        # the curriculum sees each step before the checkpoint of that step saves its state
        callbacks = [*extra, checkpoint]
        if config.summary_freq:
            behavior = (
                getattr(env.unwrapped, "behavior_name", None) or config.behavior or Path(config.env).name
            )
            callbacks.append(SummaryCallback(config.summary_freq, name=str(behavior).split("?")[0]))
        if progress:
            callbacks.append(LiveProgressCallback(max(remaining, 0)))
        interrupted = False
        started = time.monotonic()
        try:
            if remaining > 0:
                model.learn(
                    remaining,
                    callback=CallbackList(callbacks),
                    reset_num_timesteps=start_from is None,
                    tb_log_name="run",
                )
        except KeyboardInterrupt:
            interrupted = True
            checkpoint.init_callback(model)
            path = checkpoint.save_now()
            print(f"\nInterrupted: saved checkpoint {path}; continue with --resume")
        model_path = save_atomic(model, run_dir / MODEL_FILE)
        spec = getattr(getattr(env.unwrapped, "spaces", None), "spec", None)  # None: from the model's spaces
        export_beside(model, run_dir, spec, env if config.normalize else None, str(run_dir))
        save_curriculum()
        if config.save_replay_buffer and not interrupted:  # an interrupt's checkpoint saved it already
            # --resume may start from model.zip: keep the buffer as new as the newest model
            save_replay_buffer_atomic(model, checkpoints / REPLAY_BUFFER_FILE)
        if hasattr(env, "save") and config.normalize:
            env.save(str(stats_file))
        elapsed = time.monotonic() - started
    finally:
        env.close()
    curve = run_dir / "learning_curve.png"
    plot_learning_curve(
        monitor_files(run_dir), curve, title=f"{config.algo.upper()} on {config.env}", concatenate=True
    )
    state = "stopped early" if interrupted else "finished"
    onnx = run_dir / ONNX_FILE
    exported = f"  ONNX for Unity: {onnx}" if onnx.is_file() else ""
    print(f"Training {state} after {elapsed:.0f} s. Model: {model_path}{exported}  Learning curve: {curve}")
    return model_path


def _run_settings(
    from_file: dict[str, Any], args: argparse.Namespace, where: str = "the config file"
) -> dict[str, Any]:
    """Restart, replay-buffer, checkpoint and summary settings: the file's, then the command line's on top.

    ``restart_on_crash`` is the command line's ``--restart-on-crash`` / ``--no-restart-on-crash``
    when given, else the file's own ``restart_on_crash``; without either, giving any restart
    limit (in the file or on the command line) turns restarts on unless ``max_restarts`` is 0,
    as ML-Agents restarts crashed instances whenever its limits allow.
    """
    out: dict[str, Any] = {}
    for key in (*RESTART_SETTINGS, "save_replay_buffer", *CADENCE_SETTINGS):
        if key in from_file:
            out[key] = check_run_setting(key, from_file[key], f"{key} in {where}")
    file_restart = from_file.get("restart_on_crash")
    if file_restart is not None:
        check_run_setting("restart_on_crash", file_restart, f"restart_on_crash in {where}")
    cli_limits = False
    for key in RESTART_SETTINGS:
        value = getattr(args, key, None)
        if value is not None:
            out[key], cli_limits = value, True
    for key in ("save_replay_buffer", *CADENCE_SETTINGS):
        if getattr(args, key, None) is not None:
            out[key] = getattr(args, key)
    if getattr(args, "restart_on_crash", None) is not None:
        out["restart_on_crash"] = args.restart_on_crash
    elif file_restart is not None and not cli_limits:
        out["restart_on_crash"] = file_restart
    elif any(key in out for key in RESTART_SETTINGS):
        out["restart_on_crash"] = out.get("max_restarts", RunConfig.max_restarts) != 0
    return out


def check_run_setting(key: str, value: Any, where: str) -> Any:
    """``value`` of a run setting (``RUN_SETTINGS``), converted, or a ``ValueError`` naming ``where``."""
    if key in ("restart_on_crash", "save_replay_buffer"):
        return flag(value, where, ValueError)
    if key in RESTART_SETTINGS:
        return RestartPolicy.check_setting(key, value, where, ValueError)
    if key in ("checkpoint_every", "summary_freq"):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{where} must be a whole number of agent steps > 0, got {value!r}")
        return value
    if key == "keep_checkpoints":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where} must be a whole number >= 0 (0 keeps every checkpoint), got {value!r}")
        return value
    raise ValueError(f"{key!r} is not a run setting ({', '.join(RUN_SETTINGS)}).")


def default_env_and_algo(args: argparse.Namespace) -> None:
    """Fill ``args.env`` / ``args.algo`` left unset: from the run's ``config.yaml`` when resuming a
    named run (so ``--resume --run-id X`` continues X's algorithm on X's scene), else Ball3D / ppo."""
    if args.resume and args.run_id and (args.env is None or args.algo is None):
        saved = Path(args.results_dir) / args.run_id / CONFIG_FILE
        if saved.exists():
            previous = yaml.safe_load(saved.read_text()) or {}
            args.env = args.env or previous.get("env")
            args.algo = args.algo or previous.get("algo")
    args.env = args.env or "Ball3D"
    args.algo = args.algo or "ppo"


#: ``unity-sb3 train`` flags that set a field of the run, and the field's value when neither the
#: command line nor (with ``--resume``) the run's own ``config.yaml`` gives it
_FLAG_DEFAULTS: dict[str, Any] = {"seed": 0, "transport": "player", "time_scale": 20.0, "no_graphics": False}
#: ``RunConfig`` fields that a ``--resume`` command line may still change (the run's others stay)
_RESUME_OVERRIDES = ("n_timesteps", "num_envs", "behavior", *_FLAG_DEFAULTS)


def _flag(args: argparse.Namespace, key: str) -> Any:
    value = getattr(args, key, None)
    return _FLAG_DEFAULTS[key] if value is None else value


def saved_run_config(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``config.yaml`` of the run that ``--resume`` continues, or ``None`` (no ``--resume``, or no file).

    ``args.env`` and ``args.algo`` must be filled (:func:`default_env_and_algo`): they name the
    run folder when ``--run-id`` does not.
    """
    if not getattr(args, "resume", False):
        return None
    run_id = args.run_id or f"{Path(args.env).name}_{args.algo}"
    path = Path(args.results_dir) / run_id / CONFIG_FILE
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else None


def resumed_config(saved: dict[str, Any], args: argparse.Namespace) -> RunConfig:
    """The run's own :class:`RunConfig` (from its ``config.yaml``), with what the command line gives on top.

    Only the step budget, the instances, the behavior, the seed, the transport, the time scale,
    graphics and the run settings (restarts, checkpoints, summaries) may change; ``--env`` or
    ``--algo`` naming something else than the run's is an error.
    """
    known = {f.name for f in fields(RunConfig)}
    config = RunConfig(**{key: value for key, value in saved.items() if key in known})
    for key in ("env", "algo"):
        given = getattr(args, key, None)
        if given is not None and given != getattr(config, key):
            raise ValueError(
                f"--resume continues a run of {key} {getattr(config, key)!r}, not {given!r}; leave --{key} out, "
                "or start a new run with --run-id NAME."
            )
    for key in _RESUME_OVERRIDES:
        value = getattr(args, key, None)
        if value is not None:
            setattr(config, key, value)
    for key, value in _run_settings({}, args, where="the command line").items():
        setattr(config, key, value)
    return config


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """:func:`run_config_from_args` with the flags that only say how Unity opens on top (new and resumed
    runs alike): ``--base-port``, ``--num-areas``, ``--env-args``, ``--no-graphics-monitor``,
    ``--timeout-wait`` and the engine settings (``--width``, ``--height``, ``--quality-level``,
    ``--target-frame-rate``, ``--capture-frame-rate``)."""
    from dataclasses import fields

    from unity_sb3.unity.channels import EngineSettings

    config = run_config_from_args(args)
    given = {key: getattr(args, key, None) for key in ("base_port", "num_areas", "timeout_wait")}
    opening: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
    if getattr(args, "env_args", None):
        opening["additional_args"] = list(args.env_args)
    if getattr(args, "no_graphics_monitor", None):
        opening["no_graphics_monitor"] = True
    # the engine settings the command has flags for; time scale and graphics are run settings of their own
    engine_keys = [f.name for f in fields(EngineSettings) if f.name not in ("time_scale", "no_graphics")]
    engine = {key: getattr(args, key) for key in engine_keys if getattr(args, key, None) is not None}
    if engine:  # on top of the file's engine settings, else of the run's time scale and Unity's defaults
        base = config.open_kwargs.get("engine_settings") or {"time_scale": config.time_scale}
        opening["engine_settings"] = {**dict(base), **engine}
    config.open_kwargs = {**config.open_kwargs, **opening}
    return config


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    """Build a :class:`RunConfig` from ``unity-sb3 train`` arguments and the hyperparameter files.

    Restart limits, ``save_replay_buffer``, ``checkpoint_every``, ``keep_checkpoints`` and
    ``summary_freq`` may come from the file (an ML-Agents YAML's ``env_settings``, SAC
    ``hyperparameters.save_replay_buffer``, ``checkpoint_interval``, ``keep_checkpoints`` and
    ``summary_freq``, or top-level keys of a flat file); the command-line flags override them.

    With ``--resume`` and no ``--config``, the run continues with its own settings, those of its
    ``config.yaml`` (:func:`resumed_config`); with ``--config`` too, that file's hyperparameters
    replace them and the fields the command line leaves out still come from the run.
    """
    default_env_and_algo(args)
    saved = saved_run_config(args)
    if saved is not None:
        if args.config is None and "behaviors" not in saved:
            return resumed_config(saved, args)
        behaviors = saved.get("behaviors") or {}
        own = (behaviors.get(args.behavior) or next(iter(behaviors.values()), {})) if behaviors else saved
        for key in _FLAG_DEFAULTS:  # new hyperparameters; the run is opened as before
            if getattr(args, key, None) is None and key in own:
                setattr(args, key, own[key])
    hyper = load_hyperparams(
        args.algo, args.env, args.config, behavior=args.behavior, demo_path=getattr(args, "demo_path", None)
    )
    algo = hyper.pop("algo", args.algo)  # an ML-Agents config names its trainer_type
    if algo != args.algo:
        print(f"The ML-Agents config's trainer_type selects {algo} (instead of --algo {args.algo}).")
    config = RunConfig(
        env=args.env,
        algo=algo,
        seed=_flag(args, "seed"),
        num_envs=args.num_envs if args.num_envs is not None else hyper.get("num_envs", 1),
        behavior=args.behavior,
        transport=_flag(args, "transport"),
        time_scale=_flag(args, "time_scale"),
        no_graphics=_flag(args, "no_graphics"),
    )
    hyper.pop("num_envs", None)  # an ML-Agents config's env_settings.num_envs; --num-envs wins
    config.n_timesteps = int(hyper.pop("n_timesteps", config.n_timesteps))
    config.policy = hyper.pop("policy", config.policy)
    config.normalize = hyper.pop("normalize", False)
    config.open_kwargs = hyper.pop("open_kwargs", {})
    config.self_play = hyper.pop("self_play", None)
    from_file = {key: hyper.pop(key) for key in RUN_SETTINGS if key in hyper}
    for key, value in _run_settings(from_file, args, where=args.config or "the config file").items():
        setattr(config, key, value)
    config.hyperparams = hyper
    if args.n_timesteps is not None:
        config.n_timesteps = args.n_timesteps
    config.initialize_from = _initialize_from(args)
    return config


def _initialize_from(args: argparse.Namespace) -> str | None:
    """``--initialize-from``: a path as given, or a run id under ``--results-dir`` (as mlagents-learn's)."""
    source = getattr(args, "initialize_from", None)
    if not source:
        return None
    for path in (Path(source), Path(args.results_dir) / source):
        if path.exists():  # checked before the run folder is made (or emptied by --force)
            return str(path.resolve())
    raise InitializeError(
        f"--initialize-from {source}: no such model file or run folder, and no run {source!r} under "
        f"{args.results_dir}. Give a model .zip, a checkpoint, a run folder or a run id."
    )


def monitor_files(run_dir: Path) -> list[Path]:
    """The run's monitor files in training order: ``monitor.csv``, then each resumed segment."""

    def order(path: Path) -> int:
        return 0 if path.name == "monitor.csv" else int(path.name.split("-")[1].split(".")[0])

    return sorted(run_dir.glob("*monitor.csv"), key=order)


def _free_run_dir(results: Path, base: str) -> Path:
    """``results/base``, or ``results/base-2``, ``-3``, ... when earlier runs hold those."""
    candidate, k = results / base, 1
    while candidate.exists() and any(candidate.iterdir()):
        k += 1
        candidate = results / f"{base}-{k}"
    return candidate


def run_dir_from_args(args: argparse.Namespace) -> Path | None:
    """The run folder of ``unity-sb3 train`` (emptied with ``--force``), or ``None`` (message printed)
    when it holds a run and neither ``--resume`` nor ``--force`` was given."""
    default_env_and_algo(args)
    results = Path(args.results_dir)
    default_id = f"{Path(args.env).name}_{args.algo}"
    if args.run_id is None and not (args.resume or args.force):
        run_dir = _free_run_dir(results, default_id)  # never overwrite an earlier run silently
    else:
        run_dir = results / (args.run_id or default_id)
    if run_dir.exists() and any(run_dir.iterdir()) and not (args.resume or args.force):
        print(
            f"{run_dir} already holds a run. Use --resume to continue it, --force to overwrite it, "
            "or --run-id NAME for a new one."
        )
        return None
    if args.force and not args.resume and run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    print(f"Run folder: {run_dir}")
    return run_dir


def train_from_args(args: argparse.Namespace) -> int:
    run_dir = run_dir_from_args(args)
    if run_dir is None:
        return 2
    config = config_from_args(args)
    train(
        config,
        run_dir,
        resume=args.resume,
        progress=not args.no_progress,
        device=args.device,
        verbose=args.verbose,
        num_threads=args.num_threads or None,
    )
    return 0
