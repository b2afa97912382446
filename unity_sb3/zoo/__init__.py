"""RL Zoo bridge: ``python -m unity_sb3.zoo train|enjoy ...`` runs rl-zoo3 on Unity scenes.

It is rl-zoo3's own ``train`` / ``enjoy`` (same flags, same ``logs/<algo>/<env>_<n>/`` layout)
with three additions:

- **Algorithms.** ``rl_zoo3.utils.ALGOS`` gains ``poca``, ``maskable_ppo`` and
  ``recurrent_ppo`` (an alias of RL Zoo's ``ppo_lstm``); ``ppo`` and ``sac`` become the
  project's classes, so ``reward_signals:`` and ``behavioral_cloning:`` keys in a
  hyperparameter file work. ``-optimize`` has samplers for all of them.
- **Environments.** For ``unity_sb3/<Scene>-v0`` ids (and ``unity_sb3/Unity-v0`` with
  ``--env-kwargs target:"'path/to/build'"`` for a Unity build or ``"'editor'"``), the
  environment is ONE :class:`~unity_sb3.wrappers.vec_env.UnityVecEnv` whose slots are all
  agents of the behavior, instead of ``n_envs`` copies of a single-agent gym env. ``n_envs``
  in a hyperparameter file is the number of Unity instances. ``--env-kwargs`` go to
  ``UnityVecEnv`` (``behavior_name``, ``num_slots``, ``visual``, ``flatten_obs``, ``hybrid``,
  ``add_group_reward``, ``restart_on_crash``, ...) or else to
  :func:`~unity_sb3.open.open_unity` (``transport``, ``time_scale`` via
  ``engine_settings``, ``environment_parameters``, scene parameters such as ``num_agents``).
  ``open_kwargs:`` in a hyperparameter file (the key ``unity-sb3 train`` reads) is merged
  into them. A curriculum in ``environment_parameters`` advances during training, as with
  ``unity-sb3 train`` (a ``CurriculumCallback``), and the evaluation envs follow its lessons;
  the lessons training ended at are saved as ``curriculum.json`` beside ``config.yml``, those of
  each checkpoint beside it (``rl_model_<steps>_steps.curriculum.json``), and ``enjoy`` opens the
  scene at the lessons of the model it loads.
- **Hyperparameters.** For Unity ids the default ``--conf-file`` is
  ``unity_sb3/config/hyperparams/<algo>.yml``. Frequencies RL Zoo counts in ``VecEnv`` steps
  (``--eval-freq``, ``--save-freq``, optimisation evaluations) are converted back to agent
  steps, the unit of ``n_timesteps``.

Everything else (``--eval-freq``, ``-optimize``, ``--storage``, ``plot_train``, ...) is
rl-zoo3's. ``enjoy`` runs the saved model on a fresh ``UnityVecEnv`` and reports the mean
episode reward over all slots (Unity draws its own window; there is no Python viewer).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import unity_sb3  # noqa: F401  (protobuf compat and gymnasium ids)

UNITY_PREFIX = "unity_sb3/"
#: gymnasium id for a Unity build or the Editor (``--env-kwargs target:"'path'"``)
BUILD_ID = "unity_sb3/Unity-v0"
HYPERPARAMS_DIR = Path(__file__).resolve().parent / "config" / "hyperparams"
#: ``--env-kwargs`` keys that configure :class:`UnityVecEnv`; the rest go to ``open_unity``
VEC_ENV_KEYS = (
    "behavior_name",
    "num_slots",
    "visual",
    "flatten_obs",
    "hybrid",
    "add_group_reward",
    "restart_on_crash",
    "max_restarts",
    "max_idle_steps",
    "restart_backoff",
)
#: the project's algorithms under the names RL Zoo's ``--algo`` takes
ZOO_ALGORITHMS = ("ppo", "sac", "poca", "maskable_ppo", "recurrent_ppo", "a2c", "td3", "tqc")

__all__ = [
    "BUILD_ID",
    "UnityExperimentManager",  # noqa: F822  (built lazily by __getattr__: rl_zoo3 imports optuna)
    "enjoy",
    "is_unity_id",
    "main",
    "make_unity_vec_env",
    "register",
    "sample_unity_params",
    "train",
]


def is_unity_id(env_id: Any) -> bool:
    """Whether a gymnasium id names a Unity scene (``unity_sb3/...``)."""
    return str(getattr(env_id, "gym_id", env_id)).startswith(UNITY_PREFIX)


def _scene_target(env_id: str, env_kwargs: dict[str, Any]) -> str:
    gym_id = str(env_id)
    if gym_id == BUILD_ID:
        target = env_kwargs.pop("target", None)
        if not target:
            raise ValueError(
                f"{BUILD_ID} needs the Unity build: --env-kwargs target:\"'path/to/build'\" "
                "(or target:\"'editor'\" to connect to the Editor's Play button)."
            )
        return str(target)
    if "target" in env_kwargs:
        raise ValueError(f"target= is only for {BUILD_ID}; {gym_id} is an embedded scene.")
    return gym_id[len(UNITY_PREFIX) :].rsplit("-v", 1)[0]


def make_unity_vec_env(
    env_id: str,
    n_instances: int = 1,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    first_worker_id: int = 0,
    monitor_file: str | None = None,
    monitor_kwargs: dict[str, Any] | None = None,
):
    """One ``UnityVecEnv`` (in a ``VecMonitor``) over ``n_instances`` Unity instances of ``env_id``.

    :param env_id: ``unity_sb3/<Scene>-v0``, or :data:`BUILD_ID` with ``target`` in ``env_kwargs``.
    :param n_instances: Unity instances; each contributes all its agents as slots.
    :param seed: instance ``i`` is opened with seed ``seed + i``.
    :param env_kwargs: ``UnityVecEnv`` keywords (:data:`VEC_ENV_KEYS`) and ``open_unity`` keywords.
    :param first_worker_id: worker id of the first instance (ports of builds and players).
    :param monitor_file: VecMonitor file prefix (``.monitor.csv`` is appended), or None.
    :param monitor_kwargs: more ``VecMonitor`` keywords (``info_keywords``).
    """
    from stable_baselines3.common.vec_env import VecMonitor

    from unity_sb3.open import open_unity
    from unity_sb3.wrappers.vec_env import UnityVecEnv

    if n_instances < 1:
        raise ValueError(f"n_envs (Unity instances) must be >= 1, got {n_instances}.")
    kwargs = dict(env_kwargs or {})
    kwargs.pop("render_mode", None)  # RL Zoo adds it for enjoy; Unity renders its own window
    target = _scene_target(env_id, kwargs)
    vec_kwargs = {key: kwargs.pop(key) for key in VEC_ENV_KEYS if key in kwargs}
    open_kwargs = kwargs

    def factory(i: int):
        def open_instance():
            return open_unity(target, worker_id=first_worker_id + i, **{"seed": seed + i, **open_kwargs})

        return open_instance

    env = UnityVecEnv([factory(i) for i in range(n_instances)], **vec_kwargs)
    return VecMonitor(env, filename=monitor_file, **(monitor_kwargs or {}))


# --------------------------------------------------------------------------------------------
# Hyperparameter samplers for -optimize on Unity scenes
# --------------------------------------------------------------------------------------------
ON_POLICY = ("ppo", "maskable_ppo", "recurrent_ppo", "poca", "a2c")
OFF_POLICY = ("sac", "td3", "tqc")


def sample_unity_params(algo: str, trial: Any) -> dict[str, Any]:
    """Suggest hyperparameters for ``algo`` on a Unity scene (raw trial params, see :func:`convert_unity_params`).

    Unity scenes put many agents in one ``VecEnv``, so ``n_steps`` (per slot) is sampled small:
    12 agents x 128 steps is already ML-Agents' 3DBall buffer of 1536 agent steps.
    """
    params: dict[str, Any] = {
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 3e-3, log=True),
        "one_minus_gamma": trial.suggest_float("one_minus_gamma", 1e-3, 0.05, log=True),
        "net_arch": trial.suggest_categorical("net_arch", ["small", "medium", "large"]),
    }
    if algo in ON_POLICY:
        params["n_steps"] = trial.suggest_categorical("n_steps", [16, 32, 64, 128, 256])
        params["gae_lambda"] = trial.suggest_categorical("gae_lambda", [0.9, 0.95, 0.99])
        params["ent_coef"] = trial.suggest_float("ent_coef", 1e-5, 0.05, log=True)
        if algo != "a2c":
            params["batch_size"] = trial.suggest_categorical("batch_size", [64, 128, 256, 512])
            params["n_epochs"] = trial.suggest_categorical("n_epochs", [3, 5, 10])
            params["clip_range"] = trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3])
        if algo == "recurrent_ppo":
            params["lstm_hidden_size"] = trial.suggest_categorical("lstm_hidden_size", [32, 64, 128])
    elif algo in OFF_POLICY:
        params["batch_size"] = trial.suggest_categorical("batch_size", [64, 128, 256])
        params["buffer_size"] = trial.suggest_categorical("buffer_size", [10_000, 100_000, 1_000_000])
        params["learning_starts"] = trial.suggest_categorical("learning_starts", [0, 1000, 10_000])
        params["tau"] = trial.suggest_categorical("tau", [0.005, 0.01, 0.02])
        params["gradient_steps"] = trial.suggest_categorical("gradient_steps", [1, 2, 4])
    else:
        raise ValueError(
            f"No Unity hyperparameter sampler for {algo!r}; known: {', '.join(ON_POLICY + OFF_POLICY)}."
        )
    return convert_unity_params(params)


def convert_unity_params(params: dict[str, Any]) -> dict[str, Any]:
    """Raw trial params -> constructor arguments (also used to reload a trial from storage)."""
    out = dict(params)
    if "one_minus_gamma" in out:
        out["gamma"] = 1.0 - out.pop("one_minus_gamma")
    policy_kwargs = dict(out.get("policy_kwargs") or {})
    if "net_arch" in out:
        size = {"small": 64, "medium": 128, "large": 256}[out.pop("net_arch")]
        policy_kwargs["net_arch"] = [size, size]
    if "lstm_hidden_size" in out:
        policy_kwargs["lstm_hidden_size"] = out.pop("lstm_hidden_size")
    if policy_kwargs:
        out["policy_kwargs"] = policy_kwargs
    return out


def _unity_sampler(algo: str):
    def sample(trial: Any, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
        return sample_unity_params(algo, trial)

    return sample


@contextlib.contextmanager
def _patched(target: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, old)


# --------------------------------------------------------------------------------------------
# Registration with rl-zoo3
# --------------------------------------------------------------------------------------------
def register() -> None:
    """Add the project's algorithms, samplers and the build id to rl-zoo3 and gymnasium (idempotent)."""
    import gymnasium
    from rl_zoo3 import hyperparams_opt, utils

    from unity_sb3.algorithms.registry import algorithm_class

    for name in ZOO_ALGORITHMS:
        utils.ALGOS[name] = algorithm_class(name)
    hyperparams_opt.HYPERPARAMS_SAMPLER.setdefault("maskable_ppo", hyperparams_opt.sample_ppo_params)
    hyperparams_opt.HYPERPARAMS_SAMPLER.setdefault("recurrent_ppo", hyperparams_opt.sample_ppo_lstm_params)
    hyperparams_opt.HYPERPARAMS_SAMPLER.setdefault("poca", _unity_sampler("poca"))
    for name in ("maskable_ppo", "recurrent_ppo"):
        hyperparams_opt.HYPERPARAMS_CONVERTER.setdefault(name, hyperparams_opt.convert_onpolicy_params)
    hyperparams_opt.HYPERPARAMS_CONVERTER.setdefault("poca", convert_unity_params)
    if BUILD_ID not in gymnasium.registry:
        # only so that RL Zoo's registry check passes; the bridge builds a UnityVecEnv itself
        gymnasium.register(id=BUILD_ID, entry_point="unity_sb3.wrappers.gym_env:UnityGymEnv")


def _experiment_manager_class():
    from rl_zoo3 import exp_manager as zoo_exp
    from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback
    from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
    from stable_baselines3.common.vec_env import VecFrameStack, VecTransposeImage, is_vecenv_wrapped

    class _SlotAwareTrialEvalCallback(zoo_exp.TrialEvalCallback):
        """RL Zoo's pruning callback with ``eval_freq`` turned from agent steps into VecEnv steps."""

        per_instance_slots = 1

        def _init_callback(self) -> None:
            self.eval_freq = max(1, self.eval_freq // self.per_instance_slots)
            super()._init_callback()

    class UnityExperimentManager(zoo_exp.ExperimentManager):
        """RL Zoo's ``ExperimentManager`` that builds Unity scenes as one ``UnityVecEnv``.

        Non-Unity ids behave exactly as in rl-zoo3. See the module docstring.
        """

        def __init__(
            self, args: argparse.Namespace, algo: str, env_id: str, *pos: Any, **kwargs: Any
        ) -> None:
            self.is_unity = is_unity_id(env_id)
            if self.is_unity:
                shipped = HYPERPARAMS_DIR / f"{algo}.yml"
                if kwargs.get("config") is None and shipped.is_file():
                    kwargs["config"] = str(shipped)
            self._next_worker_id = 0
            super().__init__(args, algo, env_id, *pos, **kwargs)

        def _preprocess_schedules(self, hyperparams: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
            if not self.is_unity:
                return super()._preprocess_schedules(hyperparams)
            # Keep numbers as numbers: POCA's `schedule: linear` needs a float learning rate
            # (RL Zoo wraps numbers in ConstantSchedule, which POCA would use as given).
            for key in ("learning_rate", "clip_range", "clip_range_vf"):
                value = hyperparams.get(key)
                if isinstance(value, str):
                    hyperparams[key] = zoo_exp.SimpleLinearSchedule(float(value.split("_", 1)[1]))
            return hyperparams

        def _preprocess_hyperparams(self, hyperparams: dict[str, Any]):
            open_kwargs = hyperparams.pop("open_kwargs", None)
            if hyperparams.pop("self_play", None) is not None:  # a run setting of unity-sb3 train
                warnings.warn(
                    "RL Zoo trains one behavior without self-play; the entry's self_play section is "
                    "ignored (self-play runs with unity-sb3 train or unity_sb3.run_behaviors)",
                    stacklevel=2,
                )
            from unity_sb3.run import RUN_SETTINGS

            dropped = [key for key in RUN_SETTINGS if hyperparams.pop(key, None) is not None]
            if dropped:  # unity-sb3 train's run settings: RL Zoo has its own flags for these
                warnings.warn(
                    f"RL Zoo ignores the entry's unity-sb3 train run settings {dropped} "
                    "(use RL Zoo's own flags, e.g. --save-freq, for checkpoints)",
                    stacklevel=2,
                )
            if self.is_unity and isinstance(hyperparams.get("policy_kwargs"), str):
                # rl-zoo3's own eval() cannot see unity_sb3.networks.extractors' extractors that our YAML names
                from unity_sb3.config.model_args import parse_policy_kwargs

                hyperparams["policy_kwargs"] = parse_policy_kwargs(hyperparams["policy_kwargs"])
            if open_kwargs:
                self.env_kwargs = {**open_kwargs, **self.env_kwargs}
                if self._eval_env_kwargs_args is None:
                    self.eval_env_kwargs = self.env_kwargs
            return super()._preprocess_hyperparams(hyperparams)

        def create_envs(self, n_envs: int, eval_env: bool = False, no_log: bool = False):
            if not self.is_unity:
                return super().create_envs(n_envs, eval_env=eval_env, no_log=no_log)
            if self.env_wrapper is not None:
                raise ValueError(
                    "env_wrapper (a gymnasium wrapper per env) cannot wrap a UnityVecEnv; use vec_env_wrapper "
                    "for VecEnv wrappers."
                )
            log_dir = None if eval_env or no_log else self.save_path
            env = make_unity_vec_env(
                self.env_name.gym_id,
                n_instances=n_envs,
                seed=self.seed + (1000 if eval_env else 0),
                env_kwargs=dict(self.eval_env_kwargs if eval_env else self.env_kwargs),
                first_worker_id=self._next_worker_id,
                monitor_file=os.path.join(log_dir, "0") if log_dir else None,
                monitor_kwargs=self.monitor_kwargs,
            )
            self._next_worker_id += n_envs
            if self.vec_env_wrapper is not None:
                env = self.vec_env_wrapper(env)
            env = self._maybe_normalize(env, eval_env)
            if self.frame_stack is not None:
                env = VecFrameStack(env, self.frame_stack)
            space = env.observation_space
            spaces_ = (
                space.spaces.values()
                if hasattr(space, "spaces") and isinstance(space.spaces, dict)
                else [space]
            )
            if not is_vecenv_wrapped(env, VecTransposeImage) and any(
                is_image_space(s) and not is_image_space_channels_first(s) for s in spaces_
            ):
                env = VecTransposeImage(env)
            return env

        def _per_instance_slots(self, env: Any) -> int:
            return max(1, env.num_envs // max(1, self.n_envs))

        def learn(self, model: Any) -> None:
            from unity_sb3.callbacks.curriculum import (
                CURRICULUM_FILE,
                CheckpointLessonsCallback,
                CurriculumCallback,
            )
            from unity_sb3.run_state import save_curriculum_files

            curricula: list[Any] = []
            if self.is_unity:
                slots = self._per_instance_slots(model.get_env())
                for callback in self.callbacks:
                    if isinstance(callback, EvalCallback):
                        callback.eval_freq = max(1, callback.eval_freq // slots)
                    elif isinstance(callback, CheckpointCallback):
                        callback.save_freq = max(1, callback.save_freq // slots)
                curricula = self._curriculum_callbacks(model)
                self.callbacks.extend(curricula)
                lessons = [c for c in curricula if isinstance(c, CurriculumCallback)]
                checkpoints = [c for c in self.callbacks if isinstance(c, CheckpointCallback)]
                if lessons:  # after the curriculum: each checkpoint's lessons beside it
                    self.callbacks.extend(CheckpointLessonsCallback(c, lessons[0]) for c in checkpoints)
            super().learn(model)
            for callback in curricula:
                if isinstance(callback, CurriculumCallback):  # enjoy opens the scene at these lessons
                    save_curriculum_files(
                        callback, Path(self.params_path) / CURRICULUM_FILE, model.num_timesteps
                    )

        def _curriculum_callbacks(self, model: Any) -> list[Any]:
            """A ``CurriculumCallback`` when the env kwargs hold a curriculum, as ``unity-sb3 train`` adds.

            It advances the lessons of the training env's instances and of every evaluation env's,
            so that evaluations run at the lesson being trained.
            """
            from unity_sb3.callbacks.curriculum import CurriculumCallback, mlagents_callbacks
            from unity_sb3.unity.channels import find_channels

            behavior = self.env_kwargs.get("behavior_name")
            callbacks = mlagents_callbacks(self.env_kwargs, behavior)
            evaluation = [c.eval_env for c in self.callbacks if isinstance(c, EvalCallback)]
            if (
                not callbacks or not evaluation
            ):  # it finds (and after a crash restart finds again) the channels
                return callbacks
            channels = [c for env in [model.get_env(), *evaluation] for c in find_channels(env)]
            return [CurriculumCallback(channels=channels, behavior_name=behavior)]

        def objective(self, trial: Any) -> float:
            if not self.is_unity:
                return super().objective(trial)
            from rl_zoo3 import hyperparams_opt

            sampler = _unity_sampler(self.algo)
            # the trial env has the same slots per instance as any env of this scene and kwargs
            probe = self.create_envs(1, no_log=True)
            _SlotAwareTrialEvalCallback.per_instance_slots = probe.num_envs
            probe.close()
            with (
                _patched(zoo_exp, "TrialEvalCallback", _SlotAwareTrialEvalCallback),
                _patched_item(hyperparams_opt.HYPERPARAMS_SAMPLER, self.algo, sampler),
            ):
                return super().objective(trial)

        def hyperparameters_optimization(self) -> None:
            import importlib.util

            import optuna

            if importlib.util.find_spec("pandas") is not None:
                return super().hyperparameters_optimization()
            # rl-zoo3 writes its report with pandas; without it, write the same CSV with the csv module
            with _patched(optuna.study.Study, "trials_dataframe", lambda study: _TrialsTable(study)):
                return super().hyperparameters_optimization()

    return UnityExperimentManager


class _TrialsTable:
    """The part of ``Study.trials_dataframe()`` rl-zoo3 uses (``to_csv``), without pandas."""

    def __init__(self, study: Any) -> None:
        self.study = study

    def to_csv(self, path: str) -> None:
        import csv

        trials = self.study.trials
        params = sorted({key for trial in trials for key in trial.params})
        attrs = sorted({key for trial in trials for key in trial.user_attrs})
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(
                [
                    "number",
                    "value",
                    "state",
                    *(f"params_{k}" for k in params),
                    *(f"user_attrs_{k}" for k in attrs),
                ]
            )
            for trial in trials:
                writer.writerow(
                    [
                        trial.number,
                        trial.value,
                        trial.state.name,
                        *(trial.params.get(k) for k in params),
                        *(trial.user_attrs.get(k) for k in attrs),
                    ]
                )


@contextlib.contextmanager
def _patched_item(mapping: dict, key: Any, value: Any) -> Iterator[None]:
    missing = object()
    old = mapping.get(key, missing)
    mapping[key] = value
    try:
        yield
    finally:
        if old is missing:
            del mapping[key]
        else:
            mapping[key] = old


def __getattr__(name: str) -> Any:
    if name == "UnityExperimentManager":
        cls = _experiment_manager_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'unity_sb3.zoo' has no attribute {name!r}")


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _argv(argv: Sequence[str]) -> Iterator[None]:
    old = sys.argv
    sys.argv = list(argv)
    try:
        yield
    finally:
        sys.argv = old


def train(argv: Sequence[str]) -> None:
    """``rl_zoo3 train`` with the bridge (same arguments)."""
    register()
    import rl_zoo3.train as zoo_train

    manager = __getattr__("UnityExperimentManager")
    with _argv(["unity_sb3.zoo train", *argv]), _patched(zoo_train, "ExperimentManager", manager):
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

        with _argv(["unity_sb3.zoo enjoy", *argv]):
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

        with _argv(["unity_sb3.zoo", command, *rest]):
            cli.main()
        return 0
    print(f"Unknown command {command!r}.\n{USAGE}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
