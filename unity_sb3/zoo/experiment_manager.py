"""``UnityExperimentManager``: RL Zoo's ``ExperimentManager`` for Unity scenes, built lazily (rl_zoo3 imports optuna)."""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path
from typing import Any

from unity_sb3.config.hyperparams import HYPERPARAMS_DIR
from unity_sb3.zoo.envs import is_unity_id, make_unity_vec_env
from unity_sb3.zoo.patching import patched, patched_item
from unity_sb3.zoo.samplers import unity_sampler


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

        Non-Unity ids behave exactly as in rl-zoo3. See the docstring of :mod:`unity_sb3.zoo`.
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

            sampler = unity_sampler(self.algo)
            # the trial env has the same slots per instance as any env of this scene and kwargs
            probe = self.create_envs(1, no_log=True)
            _SlotAwareTrialEvalCallback.per_instance_slots = probe.num_envs
            probe.close()
            with (
                patched(zoo_exp, "TrialEvalCallback", _SlotAwareTrialEvalCallback),
                patched_item(hyperparams_opt.HYPERPARAMS_SAMPLER, self.algo, sampler),
            ):
                return super().objective(trial)

        def hyperparameters_optimization(self) -> None:
            import importlib.util

            import optuna

            if importlib.util.find_spec("pandas") is not None:
                return super().hyperparameters_optimization()
            # rl-zoo3 writes its report with pandas; without it, write the same CSV with the csv module
            with patched(optuna.study.Study, "trials_dataframe", lambda study: _TrialsTable(study)):
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


def __getattr__(name: str) -> Any:
    if name == "UnityExperimentManager":
        cls = _experiment_manager_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'unity_sb3.zoo.experiment_manager' has no attribute {name!r}")
