"""What a run starts from: for ``--resume`` its own folder's model, curriculum state and replay buffer;
for ``--initialize-from`` another run's weights.

:func:`find_resume_point` picks the newest model or checkpoint that reads completely;
:func:`save_curriculum_files` / :func:`prepare_curriculum` write and read the curriculum lessons
saved with each model (``curriculum.json``, and a copy beside each checkpoint), and
:func:`load_replay_buffer_if_present` the replay buffer of an off-policy model;
:func:`initialization_source` and :func:`initialize_parameters` give a new model another run's
weights (mlagents-learn's ``--initialize-from``). Used by
:mod:`unity_sb3.run` (one behavior) and :mod:`unity_sb3.run_behaviors` (several).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from unity_sb3.callbacks.curriculum import (
    CHECKPOINT_CURRICULUM_SUFFIX,
    checkpoint_lessons_file,
    load_curriculum_state,
    save_curriculum_state,
)

__all__ = [
    "CHECKPOINT_CURRICULUM_SUFFIX",
    "MODEL_FILE",
    "NORMALIZE_FILE",
    "InitializeError",
    "ResumeError",
    "RunStartError",
    "at_saved_lessons",
    "behaviors_of_run",
    "curriculum_file_for",
    "curriculum_parameters",
    "find_resume_point",
    "initialization_source",
    "initialize_parameters",
    "load_lessons",
    "load_replay_buffer_if_present",
    "prepare_curriculum",
    "run_folder_of",
    "save_curriculum_files",
]

MODEL_FILE = "model.zip"
NORMALIZE_FILE = "vecnormalize.pkl"


class RunStartError(Exception):
    """A run cannot start from the saved state it was pointed at (the message says what to do)."""


class ResumeError(RunStartError, FileNotFoundError):
    """``--resume`` found nothing to start from: no model, or none that reads."""


class InitializeError(RunStartError):
    """``--initialize-from`` names no model, or one whose network does not fit the run's."""


def find_resume_point(run_dir: str | Path) -> Path:
    """The model ``--resume`` starts from: the newest of ``model.zip`` and the checkpoints that reads.

    Newest means most timesteps (``model.zip`` wins a tie: it is saved after the checkpoint of the
    same step). Every file tried is read completely; each unreadable one is skipped with a
    warning that names it and says why.

    :param run_dir: the run folder.
    :return: the path to load.
    :raises ResumeError: no model or checkpoint there, or none that reads (the message lists them).
    """
    from unity_sb3.callbacks.checkpoint import list_checkpoints, read_model_timesteps

    run_dir = Path(run_dir)
    final = run_dir / MODEL_FILE
    unreadable: list[tuple[Path, str]] = []

    def readable_steps(path: Path) -> int | None:
        try:
            return read_model_timesteps(path)
        except ValueError as error:
            unreadable.append((path, str(error)))
            warnings.warn(f"--resume: skipping {path}, which cannot be read ({error})", stacklevel=3)
            return None

    final_steps = readable_steps(final) if final.exists() else None
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    for steps, path in reversed(checkpoints):
        if final_steps is not None and final_steps >= steps:
            break
        if readable_steps(path) is not None:
            if unreadable:
                print(f"--resume: starting from the checkpoint {path} instead")
            return path
    if final_steps is not None:
        return final
    if not unreadable:
        raise ResumeError(
            f"--resume: no model or checkpoint found in {run_dir} (looked for {MODEL_FILE} and "
            "checkpoints/checkpoint_<steps>_steps.zip). Start a new run without --resume."
        )
    listing = "\n".join(f"  {path}: {why}" for path, why in unreadable)
    raise ResumeError(
        f"--resume: no model in {run_dir} can be read:\n{listing}\nThe files are damaged (a partial "
        "copy or a full disk?). Copy a good model.zip or checkpoint into the run folder (a checkpoint "
        "goes into checkpoints/), or start again without --resume (--force overwrites this folder)."
    )


def save_curriculum_files(
    curriculum: Any, run_file: Path, num_timesteps: int, checkpoint_path: Path | None = None
) -> None:
    """Write a ``CurriculumCallback``'s state to ``run_file`` and, for a checkpoint, beside it.

    :param curriculum: the run's ``CurriculumCallback``, or ``None`` (nothing is written).
    :param run_file: the run's (or behavior's) ``curriculum.json``.
    :param num_timesteps: the model's step count, checked against the model on ``--resume``.
    :param checkpoint_path: the checkpoint just saved: its own copy goes beside it, pruned with it.
    """
    if curriculum is None:
        return
    save_curriculum_state(curriculum, run_file, num_timesteps)
    if checkpoint_path is not None:
        save_curriculum_state(curriculum, checkpoint_lessons_file(checkpoint_path), num_timesteps)


def curriculum_file_for(start_from: Path, run_file: Path) -> Path:
    """The curriculum state saved with the model ``start_from``: a checkpoint's own copy when it
    has one, else the run's ``curriculum.json`` (saved with ``model.zip`` and every checkpoint)."""
    companion = checkpoint_lessons_file(start_from)
    return companion if companion.is_file() else run_file


def curriculum_parameters(config: Any) -> Any:
    """The run's ``environment_parameters`` as one ``EnvironmentParameters`` (parsed once, seeded as the
    run opens Unity), or ``None`` when it has none.

    :param config: the run's :class:`unity_sb3.run.RunConfig`.
    """
    return _parameters_of(config.open_kwargs, config.unity_seed)


def _parameters_of(open_kwargs: Mapping[str, Any], seed: int) -> Any:
    """``open_kwargs``' ``environment_parameters`` as one ``EnvironmentParameters``, or ``None``."""
    from unity_sb3.unity.parameters import EnvironmentParameters

    params = open_kwargs.get("environment_parameters")
    if not params:
        return None
    if isinstance(params, EnvironmentParameters):
        return params
    return EnvironmentParameters(params, seed=seed)


def at_saved_lessons(
    open_kwargs: Mapping[str, Any], seed: int, state_file: Path, prefix: str, announce: str
) -> dict[str, Any]:
    """``open_kwargs`` with their curricula at the lessons saved in ``state_file`` (a new dict).

    Without a curriculum or a saved state they are returned as they are (every curriculum at
    lesson 0, where Unity starts). Used to evaluate or play a model at the lessons it was trained at.

    :param open_kwargs: what Unity is opened with (not changed).
    :param seed: the seed the curricula's samplers take when ``environment_parameters`` is a mapping.
    :param state_file: a curriculum state written by :func:`save_curriculum_files`.
    :param prefix: what starts the error message if the state does not fit.
    :param announce: what the printed line starts with, before the lessons.
    """
    parameters = _parameters_of(open_kwargs, seed)
    if parameters is None or not parameters.has_curriculum or not state_file.is_file():
        return dict(open_kwargs)
    load_lessons(parameters, state_file, prefix, announce)
    return {**open_kwargs, "environment_parameters": parameters}


def load_lessons(parameters: Any, state_file: Path, prefix: str, announce: str) -> dict[str, Any]:
    """Load the lessons saved in ``state_file`` into ``parameters`` and say which they are.

    :param parameters: the run's ``EnvironmentParameters`` (changed in place).
    :param state_file: a curriculum state written by :func:`save_curriculum_files`.
    :param prefix: what starts the error message, e.g. ``"--resume: "``.
    :param announce: what the printed line starts with, before the lessons.
    :return: the saved state (the ``CurriculumCallback`` state, with its reward buffer).
    :raises UnityConfigurationError: the saved lessons do not fit ``parameters`` (what to do is said).
    """
    from unity_sb3.unity.errors import UnityConfigurationError

    state = load_curriculum_state(state_file)
    try:
        parameters.load_state_dict(state["parameters"])
    except UnityConfigurationError as error:
        raise UnityConfigurationError(
            f"{prefix}{state_file} does not fit this run's environment_parameters: {error} "
            f"To continue anyway, edit {state_file}, or delete it to restart every curriculum at "
            "lesson 0."
        ) from None
    lessons = {n: parameters.lesson_numbers[n] for n, p in parameters.parameters.items() if p.is_curriculum}
    print(f"{announce} {lessons} (from {state_file})")
    return state


def prepare_curriculum(config: Any, state_file: Path | None) -> tuple[Any, dict[str, Any] | None]:
    """The config to open Unity with, and the curriculum state read from ``state_file``.

    The ``environment_parameters`` are parsed once into one ``EnvironmentParameters`` that every
    Unity instance shares (a re-opened crashed instance gets the current lessons, not lesson 0)
    and the saved lessons are loaded into it *before* Unity opens, so that the first episodes
    already run with them.

    :param config: the run's :class:`unity_sb3.run.RunConfig` (not changed; a copy is returned).
    :param state_file: the curriculum state saved with the model the run resumes from
        (``curriculum.json`` or a checkpoint's copy), else ``None``.
    :return: ``(config for make_vec_env, the saved CurriculumCallback state or None)``.
    """
    parameters = curriculum_parameters(config)
    if parameters is None:
        return config, None
    state = None
    if state_file is not None and parameters.has_curriculum:
        if state_file.is_file():
            state = load_lessons(parameters, state_file, "--resume: ", "Curricula resume at lessons")
        else:
            warnings.warn(
                f"--resume: {state_file} is missing (a run from before curricula were saved?); every "
                "curriculum starts at lesson 0",
                stacklevel=3,
            )
    open_kwargs = {**config.open_kwargs, "environment_parameters": parameters}
    return replace(config, open_kwargs=open_kwargs), state


def load_replay_buffer_if_present(model: Any, path: str | Path) -> bool:
    """Load ``path`` into an off-policy ``model``'s replay buffer when the file is there.

    A buffer saved with a different number of ``VecEnv`` slots (``--num-envs`` changed) cannot
    be appended to, and one saved at another step than the model's belongs to another model (the
    run resumes from an older checkpoint because a newer model was unreadable); either is skipped
    with a warning and training starts with an empty buffer.

    :return: whether a buffer was loaded.
    """
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

    path = Path(path)
    if not isinstance(model, OffPolicyAlgorithm) or not path.is_file():
        return False
    from stable_baselines3.common.save_util import load_from_pkl

    from unity_sb3.callbacks.checkpoint import REPLAY_BUFFER_STEP

    buffer = load_from_pkl(path)
    if getattr(buffer, "n_envs", model.n_envs) != model.n_envs:
        warnings.warn(
            f"{path} was saved with {buffer.n_envs} environment slots but the run now has "
            f"{model.n_envs}; training continues with an empty replay buffer",
            stacklevel=2,
        )
        return False
    saved_at = getattr(buffer, REPLAY_BUFFER_STEP, None)
    if saved_at is not None and saved_at != model.num_timesteps:
        warnings.warn(
            f"{path} was saved at step {saved_at} but the model resumes from step {model.num_timesteps} "
            "(a newer model was unreadable?); training continues with an empty replay buffer",
            stacklevel=2,
        )
        return False
    model.replay_buffer = buffer
    model.replay_buffer.device = model.device
    print(f"Loaded the replay buffer {path} ({model.replay_buffer.size()} transitions per slot)")
    return True


def run_folder_of(model_path: Path) -> Path:
    """The folder whose ``config.yaml`` and ``vecnormalize.pkl`` belong to ``model_path`` (a model beside
    them, or a checkpoint in their ``checkpoints/``)."""
    return model_path.parent.parent if model_path.parent.name == "checkpoints" else model_path.parent


def behaviors_of_run(path: str | Path) -> list[str] | None:
    """The behaviors of a run folder that trained several at once (its ``config.yaml``), else ``None``."""
    saved = Path(path) / "config.yaml"
    if not (Path(path).is_dir() and saved.is_file()):
        return None
    behaviors = (yaml.safe_load(saved.read_text()) or {}).get("behaviors")
    return list(behaviors) if behaviors else None


def initialization_source(source: str | Path, behavior_dir: str | None = None) -> Path:
    """The model file ``--initialize-from source`` names for one behavior.

    :param source: a model ``.zip`` or checkpoint, a run's behavior folder, or a run folder (of one
        behavior, or of several: then ``behavior_dir`` picks its folder).
    :param behavior_dir: the folder name of the behavior being trained, in a run of several.
    :raises InitializeError: nothing to load there (the message lists what was looked for).
    """
    path = Path(source)
    if path.is_dir() and behavior_dir is not None and (path / behavior_dir).is_dir():
        path = path / behavior_dir
    if path.is_dir():
        path = path / MODEL_FILE
    if not path.is_file():
        where = f" or {Path(source) / behavior_dir / MODEL_FILE}" if behavior_dir else ""
        raise InitializeError(
            f"--initialize-from {source}: no model at {path}{where}. Give a model .zip, a checkpoint, or the "
            "folder of a finished run (a run id under --results-dir works too)."
        )
    return path


def initialize_parameters(model: Any, path: Path, env: Any) -> None:
    """Give a new ``model`` the weights (and optimizer state) of the model saved at ``path``, and ``env``
    the observation statistics saved beside it when both normalize, as mlagents-learn's
    ``--initialize-from`` carries a policy and its normalizer into a new run. The step count stays 0.

    :raises InitializeError: the saved network does not fit ``model``'s (another algorithm, behavior
        or network settings).
    """
    try:
        model.set_parameters(str(path), exact_match=True, device=model.device)
    except (RuntimeError, ValueError, KeyError) as error:
        first = str(error).strip().splitlines()[0]
        raise InitializeError(
            f"--initialize-from {path}: its network does not fit this run's {type(model).__name__} "
            f"({first}). Initialize from a model of the same algorithm, behavior and network settings."
        ) from error
    stats = run_folder_of(path) / NORMALIZE_FILE
    if not (stats.is_file() and hasattr(env, "obs_rms")):  # the run or its source does not normalize
        print(f"Initialized from {path}")
        return
    from stable_baselines3.common.vec_env import VecNormalize

    saved = VecNormalize.load(str(stats), env.venv)
    env.obs_rms, env.ret_rms = saved.obs_rms, saved.ret_rms
    print(f"Initialized from {path} and {stats}")
