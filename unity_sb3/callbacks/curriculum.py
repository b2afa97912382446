"""The curriculum during training: advancing lessons, and saving them with the run."""

from __future__ import annotations

import json
import warnings
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.channels import UnityChannels, as_channel_list, find_channels, logger
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.unity.parameters import EnvironmentParameters, brain_name
from unity_sb3.validation import finite_float, short_repr

__all__: list[str] = []


# --------------------------------------------------------------------------------------------
# SB3 callbacks
# --------------------------------------------------------------------------------------------
class CurriculumCallback(BaseCallback):
    """Advance environment-parameter curricula during SB3 training, like ``mlagents-learn``.

    After every environment step the callback collects the cumulative reward of each episode
    that ended (``infos[i]["episode"]["r"]`` from a ``Monitor``/``VecMonitor`` when present,
    else the sum of the step rewards it saw), keeps the last ``min_lesson_length`` of them,
    and asks each parameter's current lesson whether it is complete (see
    :meth:`CompletionCriteria.need_increment`). When a lesson changes, the reward buffer is
    cleared, every parameter's current value is sent to every Unity instance, and
    ``curriculum/<parameter>`` in the logger holds the lesson number. A finished lesson with
    ``require_reset: true`` resets the environments at the end of the current rollout
    (episodes in progress are dropped, as ``mlagents-learn`` does). When an instance was
    restarted after a crash (``infos[i]["restarted"]``), the current values are sent again.

    :meth:`state_dict` / :meth:`load_state_dict` save and restore the curricula's progress
    (lessons, smoothed rewards, the recent episode returns) so that a resumed run continues at
    the saved lessons; ``unity-sb3 train`` keeps it in the run folder's ``curriculum.json``.

    :param environment_parameters: the ``environment_parameters`` mapping, or an
        :class:`EnvironmentParameters`; ``None`` takes the one ``open_unity`` stored in the
        channels.
    :param channels: the channels to send to; ``None`` finds them on the training env.
    :param behavior_name: the behavior this model trains; criteria naming another behavior
        are not evaluated. ``None`` asks the training env (``get_attr("behavior_name")``) and,
        if it does not say, evaluates every criterion on this model's episodes.
    :param max_steps: total steps for the ``progress`` measure; ``None`` uses the
        ``total_timesteps`` given to ``learn``.
    :param seed: seeds unseeded samplers when ``environment_parameters`` is a mapping.
    :param verbose: 1 prints lesson changes.
    """

    def __init__(
        self,
        environment_parameters: Mapping[str, Any] | EnvironmentParameters | None = None,
        channels: UnityChannels | Sequence[UnityChannels] | None = None,
        behavior_name: str | None = None,
        max_steps: int | None = None,
        seed: int = 0,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        if environment_parameters is None or isinstance(environment_parameters, EnvironmentParameters):
            self.parameters = environment_parameters
        else:
            self.parameters = EnvironmentParameters(environment_parameters, seed=seed)
        self._given_channels = as_channel_list(channels)
        self.channels: list[UnityChannels] = []
        self.behavior_name = behavior_name
        if max_steps is not None and max_steps <= 0:
            raise UnityConfigurationError(f"max_steps must be positive, got {max_steps}.")
        self.max_steps = max_steps
        self.reward_buffer: deque[float] = deque()  # bounded by _init_callback, once the criteria are known
        self._running_returns: np.ndarray | None = None
        self._reset_pending = False
        self._initialized = False
        self._pending_state: tuple[Mapping[str, Any], bool] | None = None  # loaded once parameters are known
        self._reset_on_start = False

    def _init_callback(self) -> None:
        self.channels = self._given_channels or find_channels(self.training_env)
        if self.parameters is None:
            stored = [c.parameters for c in self.channels if c.parameters]
            if not stored:
                raise UnityConfigurationError(
                    "CurriculumCallback has no environment parameters: pass environment_parameters=..., "
                    "or open the environment with open_unity(..., environment_parameters=...)."
                )
            self.parameters = stored[0]
        self._share_parameters()
        if self.behavior_name is None:
            self.behavior_name = self._env_behavior_name()
        self.behavior_name = brain_name(self.behavior_name)
        # keeps the returns loaded before training, or counted by an earlier learn() on this callback
        self.reward_buffer = deque(
            self.reward_buffer, maxlen=self.parameters.reward_buffer_size(self.behavior_name)
        )
        if self._pending_state is not None:
            state, strict = self._pending_state
            self._pending_state = None
            self._load_parameters(state["parameters"], strict)
        self._running_returns = np.zeros(self.training_env.num_envs, dtype=np.float64)
        self._initialized = True
        if self.behavior_name is not None:
            other = sorted(self.parameters.behaviors() - {self.behavior_name})
            if other:
                logger.warning(
                    "Curriculum criteria for behavior(s) %s are not evaluated: this model trains %r.",
                    other,
                    self.behavior_name,
                )

    def _env_behavior_name(self) -> str | None:
        try:
            names = {n for n in self.training_env.get_attr("behavior_name") if isinstance(n, str)}
        except Exception:  # a VecEnv without the attribute raises AttributeError (or worse)
            return None
        return names.pop() if len(names) == 1 else None

    def _on_training_start(self) -> None:
        for channels in self.channels:
            self.parameters.apply(channels.environment_parameters)
        if self._reset_on_start:
            # a loaded state changed lessons after SB3's first reset ran with the old values
            self._reset_on_start = False
            self._reset_training_env()
        self._record_lessons()

    def state_dict(self) -> dict[str, Any]:
        """The curricula's progress, as plain JSON-able data.

        :return: ``{"parameters": EnvironmentParameters.state_dict(), "reward_buffer": [...]}``;
            the reward buffer holds the returns of the episodes finished in the current lessons
            that the completion check still counts (at most the largest ``min_lesson_length``).
        """
        if self.parameters is None:
            raise UnityConfigurationError(
                "CurriculumCallback.state_dict(): the callback has no environment parameters yet; pass "
                "environment_parameters=... or call it after training started."
            )
        return {
            "parameters": self.parameters.state_dict(),
            "reward_buffer": [float(r) for r in self.reward_buffer],
        }

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Continue the curricula from a :meth:`state_dict`.

        The lessons are loaded at once when the callback has its parameters (else when training
        starts) and their values are queued on the channels the callback knows. If the load
        changes a lesson before training starts, the environments are reset when it starts (SB3
        has already reset them with the old values); during training, at the end of the rollout.

        :param state: a :meth:`state_dict` (possibly read back from JSON).
        :param strict: a parameter or lesson that no longer fits is an error; ``False`` warns and
            continues (see :meth:`EnvironmentParameters.load_state_dict`).
        :raises UnityConfigurationError: for a malformed state, or a mismatch with ``strict``.
        """
        if not isinstance(state, Mapping) or not isinstance(state.get("parameters"), Mapping):
            raise UnityConfigurationError(
                "a CurriculumCallback state is a mapping with 'parameters' (and 'reward_buffer'), as "
                f"CurriculumCallback.state_dict() returns; got {short_repr(state)}."
            )
        raw = state.get("reward_buffer", [])
        if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Sequence):
            raise UnityConfigurationError(
                f"curriculum state: reward_buffer must be a list of episode returns, got {short_repr(raw)}."
            )
        rewards = [finite_float(r, "curriculum state: a reward_buffer entry") for r in raw]
        if self.parameters is None:
            EnvironmentParameters._check_state(state["parameters"])
            self._pending_state = (state, strict)
        else:
            self._load_parameters(state["parameters"], strict)
        self.reward_buffer.clear()
        self.reward_buffer.extend(rewards)

    def _load_parameters(self, state: Mapping[str, Any], strict: bool) -> None:
        before = dict(self.parameters.lesson_numbers)
        self.parameters.load_state_dict(state, strict=strict)
        for channels in self.channels or self._given_channels or []:
            self.parameters.apply(channels.environment_parameters)
        if self.parameters.lesson_numbers != before:
            if self._initialized:
                self._reset_pending = True
            else:
                self._reset_on_start = True

    def _progress(self) -> float:
        total = self.max_steps or getattr(self.model, "_total_timesteps", 0) or 0
        return float(self.num_timesteps) / float(total) if total > 0 else 0.0

    def _finished_episode_returns(self) -> list[float]:
        infos = self.locals.get("infos") or []
        dones = self.locals.get("dones")
        rewards = self.locals.get("rewards")
        returns: list[float] = []
        if self._running_returns is None or len(self._running_returns) != len(infos):
            self._running_returns = np.zeros(len(infos), dtype=np.float64)
        if rewards is not None:
            self._running_returns += np.asarray(rewards, dtype=np.float64).reshape(-1)[: len(infos)]
        for i, info in enumerate(infos):
            name = brain_name(info.get("behavior_name"))
            episode = info.get("episode")
            done = bool(dones[i]) if dones is not None else episode is not None
            if done or episode is not None:
                if name is None or self.behavior_name is None or name == self.behavior_name:
                    returns.append(
                        float(episode["r"]) if episode is not None else float(self._running_returns[i])
                    )
                self._running_returns[i] = 0.0
        return returns

    def _share_parameters(self) -> None:
        """Make every instance's channels record the lessons this callback advances (each Unity
        instance opened from a config has its own copy, which would otherwise stay at lesson 0)."""
        for channels in self.channels:
            channels.parameters = self.parameters

    def _on_step(self) -> bool:
        if any(info.get("restarted") for info in self.locals.get("infos") or []):
            # a re-opened Unity instance has new channels and got lesson-0 values when it opened
            if not self._given_channels:
                self.channels = find_channels(self.training_env)
                self._share_parameters()
            for channels in self.channels:
                self.parameters.apply(channels.environment_parameters)
        self.reward_buffer.extend(self._finished_episode_returns())
        key = self.behavior_name or ""
        progress: Any = self._progress()
        rewards: Any = list(self.reward_buffer)
        if self.behavior_name is not None:  # evaluate only this behavior's criteria
            progress, rewards = {key: progress}, {key: rewards}
        updated, must_reset = self.parameters.update_lessons(progress, rewards)
        if updated:
            self.reward_buffer.clear()
            for channels in self.channels:
                self.parameters.apply(channels.environment_parameters)
            if self.verbose:
                print(
                    f"Curriculum: lessons now {self.parameters.lesson_numbers} at step {self.num_timesteps}"
                )
            self._reset_pending = self._reset_pending or must_reset
        self._record_lessons()
        return True

    def _on_rollout_end(self) -> None:
        if not self._reset_pending:
            return
        self._reset_pending = False
        self._reset_training_env()

    def _reset_training_env(self) -> None:
        # Same effect as mlagents-learn's reset on a lesson change: restart every episode so
        # that the whole scene starts over with the new values.
        model = self.model
        obs = self.training_env.reset()
        model._last_obs = obs
        model._last_episode_starts = np.ones((self.training_env.num_envs,), dtype=bool)
        normalizer = getattr(model, "_vec_normalize_env", None)
        if normalizer is not None and hasattr(model, "_last_original_obs"):
            model._last_original_obs = normalizer.get_original_obs()
        elif hasattr(model, "_last_original_obs") and model._last_original_obs is not None:
            model._last_original_obs = obs
        if self._running_returns is not None:
            self._running_returns[:] = 0.0

    def _record_lessons(self) -> None:
        for name, parameter in self.parameters.parameters.items():
            if parameter.is_curriculum:
                self.logger.record(f"curriculum/{name}", self.parameters.lesson_numbers[name])


CURRICULUM_FILE = "curriculum.json"
#: a checkpoint's own lessons: ``checkpoint_<steps>_steps.curriculum.json`` beside its ``.zip``
CHECKPOINT_CURRICULUM_SUFFIX = ".curriculum.json"


def checkpoint_lessons_file(checkpoint_path: Path) -> Path:
    """Where a checkpoint's own lessons are kept: beside it, ``<its stem>.curriculum.json``."""
    return checkpoint_path.with_name(checkpoint_path.stem + CHECKPOINT_CURRICULUM_SUFFIX)


CURRICULUM_FORMAT = 1


class CheckpointLessonsCallback(BaseCallback):
    """Write a curriculum's lessons beside each checkpoint of SB3's ``CheckpointCallback``.

    ``unity-sb3 train`` keeps a checkpoint's lessons beside it; this does the same for a plain
    ``CheckpointCallback`` (the RL Zoo bridge's): ``<prefix>_<steps>_steps.curriculum.json``. Put it
    after the ``CheckpointCallback`` and the ``CurriculumCallback`` in the callback list, so that it
    sees the checkpoint's own count of calls and the lessons after this step's update.

    :param checkpoint: the callback that saves the checkpoints.
    :param curriculum: the run's ``CurriculumCallback``.
    """

    def __init__(self, checkpoint: Any, curriculum: CurriculumCallback) -> None:
        super().__init__()
        self.checkpoint, self.curriculum = checkpoint, curriculum

    def _on_step(self) -> bool:
        saved = self.checkpoint
        if saved.n_calls % saved.save_freq == 0:  # SB3's checkpoint name, then its companion's
            model = Path(saved.save_path) / f"{saved.name_prefix}_{self.num_timesteps}_steps.zip"
            save_curriculum_state(self.curriculum, checkpoint_lessons_file(model), self.num_timesteps)
        return True


def save_curriculum_state(callback: Any, path: str | Path, num_timesteps: int) -> Path:
    """Write ``callback.state_dict()`` (a ``CurriculumCallback``) to ``path`` as JSON, atomically.

    :param callback: the run's ``CurriculumCallback``.
    :param path: the file (``curriculum.json`` in the run folder).
    :param num_timesteps: the model's step count, stored to check it against the resumed model.
    :return: ``path``.
    """
    from unity_sb3.callbacks.checkpoint import write_json_atomic

    state = {"format": CURRICULUM_FORMAT, "num_timesteps": int(num_timesteps), **callback.state_dict()}
    return write_json_atomic(state, path)


def load_curriculum_state(path: str | Path) -> dict[str, Any]:
    """Read a file written by :func:`save_curriculum_state`.

    :raises ValueError: if it is not such a file (naming the file).
    """
    path = Path(path)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{path} is not a readable curriculum state ({error}); delete it to restart "
            "every curriculum at lesson 0"
        ) from None
    if not isinstance(state, dict) or state.get("format") != CURRICULUM_FORMAT or "parameters" not in state:
        raise ValueError(
            f"{path} is not a curriculum state of format {CURRICULUM_FORMAT} (written by unity-sb3 train); "
            "delete it to restart every curriculum at lesson 0"
        )
    return state


def check_curriculum_step(state: dict[str, Any], num_timesteps: int, path: Path) -> None:
    """Warn when the saved curriculum state is of another step than the model it resumes with.

    :param state: the curriculum state read from ``path``
    :param num_timesteps: the step the model resumes from
    :param path: the curriculum file, for the warning
    """
    saved = state.get("num_timesteps")
    if saved != num_timesteps:
        warnings.warn(
            f"{path} was saved at step {saved} but the model resumes from step {num_timesteps} (an older "
            "checkpoint?); the curricula continue at the saved lessons",
            stacklevel=3,
        )


def mlagents_callbacks(open_kwargs: Mapping[str, Any], behavior: str | None = None) -> list[Any]:
    """Callbacks a run needs for its ``open_kwargs``: a ``CurriculumCallback`` when there is a curriculum.

    An ``EnvironmentParameters`` object in ``open_kwargs["environment_parameters"]`` (the one the
    Unity instances were opened with) is the one the callback advances; a mapping lets the
    callback take the parameters ``open_unity`` stored on the environment.
    """
    params = open_kwargs.get("environment_parameters")
    if not params:
        return []
    from unity_sb3.unity.parameters import EnvironmentParameters

    given = params if isinstance(params, EnvironmentParameters) else None
    if not (given or EnvironmentParameters(params)).has_curriculum:
        return []
    return [CurriculumCallback(given, behavior_name=behavior)]
