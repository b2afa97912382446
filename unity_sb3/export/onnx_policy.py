"""Unity's inference in Python: an ONNX model acting for the agents of a ``BaseEnv``.

:class:`OnnxPolicy` runs a model in Unity's format (one that ``mlagents-learn`` trained and
Unity ships, or one :func:`~unity_sb3.export.to_onnx` wrote) the way Unity's ``ModelRunner``
does for an agent whose behavior type is *Inference Only*:

- the inputs are the agents' observations in the order of the behavior's sensors (``obs_i``),
  visual ones NCHW, buffer sensors as Unity's inference writes them; ``action_masks`` with 1 for
  an allowed action; ``recurrent_in`` with each agent's memory, zeros at its first decision;
- the actions come from ``continuous_actions`` / ``discrete_actions`` (sampled inside the graph),
  or from ``deterministic_*`` when *Deterministic Inference* is on (``deterministic=True``);
- ``recurrent_out`` becomes the agent's memory until its episode ends.

It answers ``(behavior_name, decision_steps) -> ActionTuple``, the player form
:func:`~unity_sb3.selfplay.matches.play_matches` takes, and :func:`onnx_episode_returns`
plays whole episodes with it::

    from unity_sb3.export.onnx_policy import OnnxPolicy, onnx_episode_returns
    from unity_sb3.scenes import make_scene

    returns = onnx_episode_returns(make_scene("Ball3D"), OnnxPolicy("3DBall.onnx"), episodes=12)
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from mlagents_envs.base_env import ActionTuple, BaseEnv, BehaviorSpec, DecisionSteps

from unity_sb3.export.names import (
    ACTION_MASKS,
    CONTINUOUS_ACTIONS,
    DETERMINISTIC_CONTINUOUS_ACTIONS,
    DETERMINISTIC_DISCRETE_ACTIONS,
    DISCRETE_ACTIONS,
    MODEL_EXPORT_VERSION,
    OBSERVATION_PREFIX,
    RECURRENT_IN,
    RECURRENT_OUT,
)
from unity_sb3.export.runtime import check_onnx, inspect_onnx, ort_session
from unity_sb3.export.specs import entities_to_onnx
from unity_sb3.spaces import is_visual
from unity_sb3.unity.compat import channel_axis
from unity_sb3.unity.errors import UnityConfigurationError

__all__ = ["OnnxPlayer", "OnnxPolicy", "onnx_episode_returns"]

#: ML-Agents' model API versions by the ``version_number`` a file holds.
_EXPORTERS = {2: "ML-Agents 1.x (Barracuda)", 3: "ML-Agents 2.0 or later"}


class OnnxPolicy:
    """An ONNX model in Unity's format answering decision requests, as Unity's ``ModelRunner`` does.

    :param path: the ``.onnx`` file.
    :param deterministic: read the ``deterministic_*`` outputs (Unity's *Deterministic Inference*);
        ``False`` reads the actions the graph samples, as Unity does by default. A model exported
        before ML-Agents wrote deterministic outputs falls back to the sampled ones, with a warning.
    :raises FileNotFoundError: no such file.
    :raises UnityConfigurationError: the file is not a model Unity's current inference runs.
    """

    def __init__(self, path: str | Path, *, deterministic: bool = False) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no ONNX model at {self.path}")
        self.info = inspect_onnx(self.path)
        if self.info.version != MODEL_EXPORT_VERSION:
            made_by = _EXPORTERS.get(self.info.version, "an unknown exporter")
            raise UnityConfigurationError(
                f"{self.path} has model API version {self.info.version} ({made_by}); Unity's current "
                f"inference, and this runner, read version {MODEL_EXPORT_VERSION} (ML-Agents 2.0 or "
                "later): export the model again with a current mlagents-learn or unity_sb3.to_onnx."
            )
        self.deterministic = deterministic
        self._session = ort_session(self.path)
        self._inputs = {i.name: i for i in self._session.get_inputs()}
        self.continuous_output = self._action_output(
            self.info.continuous_size, CONTINUOUS_ACTIONS, DETERMINISTIC_CONTINUOUS_ACTIONS
        )
        self.discrete_output = self._action_output(
            len(self.info.discrete_branches), DISCRETE_ACTIONS, DETERMINISTIC_DISCRETE_ACTIONS
        )
        self._outputs = [name for name in (self.continuous_output, self.discrete_output) if name is not None]
        if self.memory_size:
            self._outputs.append(RECURRENT_OUT)
        #: agent id -> its memory, ``(memory_size,)`` float32, for the agents that decided this episode
        self.memories: dict[int, np.ndarray] = {}
        self._checked: dict[str, BehaviorSpec] = {}

    @property
    def memory_size(self) -> int:
        """Floats of memory per agent (0: the model has none)."""
        return self.info.memory_size

    def _action_output(self, size: int, sampled: str, deterministic: str) -> str | None:
        """The output the actions of one kind (``size`` values or branches) are read from, or ``None``."""
        if size == 0:
            return None
        if not self.deterministic or deterministic in self.info.outputs:
            return deterministic if self.deterministic else sampled
        warnings.warn(
            f"{self.path.name} has no {deterministic} output (exported before ML-Agents wrote one); "
            f"acting with the sampled {sampled} instead",
            stacklevel=3,
        )
        return sampled

    def fits(self, behavior_spec: BehaviorSpec) -> list[str]:
        """What Unity's loader would refuse in this model for ``behavior_spec``; empty when it fits.

        The outputs' element types are not held against it: discrete actions written as floats (older
        exporters) are rounded to integers here, as Unity's older inference read them.
        """
        return check_onnx(self.path, behavior_spec, output_types=False)

    def check(self, behavior_name: str, behavior_spec: BehaviorSpec) -> None:
        """Raise :class:`UnityConfigurationError` naming every mismatch if the model does not fit."""
        if self._checked.get(behavior_name) == behavior_spec:
            return
        problems = "; ".join(self.fits(behavior_spec))
        if problems:
            raise UnityConfigurationError(
                f"{self.path.name} does not fit behavior {behavior_name!r}: {problems}. Give the model "
                "trained for this behavior (Unity checks the same when it loads a model)."
            )
        self._checked[behavior_name] = behavior_spec

    def inputs(self, decision_steps: DecisionSteps, behavior_spec: BehaviorSpec) -> dict[str, np.ndarray]:
        """The tensors Unity's ``TensorGenerator`` feeds the model for these agents."""
        n = len(decision_steps)
        feeds: dict[str, np.ndarray] = {}
        for i, (obs, spec) in enumerate(zip(decision_steps.obs, behavior_spec.observation_specs)):
            obs = np.asarray(obs, dtype=np.float32)
            if is_visual(spec) and channel_axis(tuple(spec.shape), tuple(spec.dimension_property)) == 2:
                obs = np.moveaxis(obs, -1, 1)  # HWC -> NCHW
            elif len(spec.shape) == 2:
                obs = entities_to_onnx(obs)
            feeds[f"{OBSERVATION_PREFIX}{i}"] = np.ascontiguousarray(obs)
        if ACTION_MASKS in self._inputs:
            branches = behavior_spec.action_spec.discrete_branches
            masks = decision_steps.action_mask
            allowed = [
                np.ones((n, size), np.float32) if masks is None or masks[b] is None else 1.0 - masks[b]
                for b, size in enumerate(branches)
            ]
            feeds[ACTION_MASKS] = np.concatenate(allowed, axis=1).astype(np.float32)
        if self.memory_size:
            zeros = np.zeros(self.memory_size, np.float32)
            memories = [self.memories.get(int(agent), zeros) for agent in decision_steps.agent_id]
            feeds[RECURRENT_IN] = np.stack(memories)[:, None, :] if n else np.zeros((0, 1, self.memory_size))
        return feeds

    def act(self, decision_steps: DecisionSteps, behavior_spec: BehaviorSpec) -> ActionTuple:
        """Actions for every agent of ``decision_steps``; the memories of those agents move on one step.

        :param decision_steps: the agents that request a decision (one behavior).
        :param behavior_spec: their behavior's spec.
        :return: continuous actions ``(n, c)`` float32 and discrete ones ``(n, branches)`` int32.
        """
        n = len(decision_steps)
        action_spec = behavior_spec.action_spec
        if n == 0:
            return action_spec.empty_action(0)
        values = dict(
            zip(self._outputs, self._session.run(self._outputs, self.inputs(decision_steps, behavior_spec)))
        )
        if self.memory_size:
            for agent, memory in zip(decision_steps.agent_id.tolist(), values[RECURRENT_OUT][:, 0]):
                self.memories[agent] = memory
        continuous = np.zeros((n, action_spec.continuous_size), np.float32)
        discrete = np.zeros((n, action_spec.discrete_size), np.int32)
        if self.continuous_output is not None:
            continuous[...] = values[self.continuous_output]
        if self.discrete_output is not None:
            discrete[...] = np.rint(values[self.discrete_output])  # integers, or floats from older exporters
        return ActionTuple(continuous=continuous, discrete=discrete)

    def end_episodes(self, agent_ids: Iterable[int]) -> None:
        """Forget the memories of agents whose episodes ended (Unity drops them at the agent's done)."""
        for agent in agent_ids:
            self.memories.pop(int(agent), None)

    def player(self, env: BaseEnv) -> OnnxPlayer:
        """This policy as a player of :func:`~unity_sb3.selfplay.matches.play_matches` on ``env``."""
        return OnnxPlayer(self, env)


class OnnxPlayer:
    """An :class:`OnnxPolicy` answering ``(behavior_name, decision_steps) -> ActionTuple`` on one env.

    Each behavior it answers is checked against the model once. ``end_episodes`` forgets the memories
    of agents whose episodes ended (:func:`~unity_sb3.selfplay.matches.play_matches` calls it).

    :param policy: the model.
    :param env: the environment whose behavior specs the answers follow.
    """

    def __init__(self, policy: OnnxPolicy, env: BaseEnv) -> None:
        self.policy = policy
        self.env = env

    def __call__(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        spec = self.env.behavior_specs[behavior_name]
        self.policy.check(behavior_name, spec)
        return self.policy.act(decision_steps, spec)

    def end_episodes(self, agent_ids: Iterable[int]) -> None:
        self.policy.end_episodes(agent_ids)


def onnx_episode_returns(
    env: BaseEnv,
    policy: OnnxPolicy,
    episodes: int,
    *,
    behaviors: Iterable[str] | None = None,
    max_unity_steps: int | None = None,
) -> list[float]:
    """Play ``env`` with ``policy`` until ``episodes`` agent episodes have ended; their returns
    (:func:`~unity_sb3.episodes.episode_returns`: each agent's own rewards over its episode).

    :param env: a build, the Editor or an embedded scene; reset once here, never closed.
    :param policy: the model.
    :param episodes: episodes to count (> 0), over every agent of the behaviors played.
    :param behaviors: the behaviors the model plays (default: every behavior of ``env``; each is
        checked against the model first). Agents of other behaviors get zero actions.
    :param max_unity_steps: give up with a ``RuntimeError`` after this many Unity steps.
    :return: the first ``episodes`` returns, in the order the episodes ended.
    """
    from unity_sb3.episodes import episode_returns

    env.reset()  # a build sends its behaviors with the first reset
    played = list(env.behavior_specs) if behaviors is None else list(behaviors)
    for name in played:
        if name not in env.behavior_specs:
            raise UnityConfigurationError(
                f"the environment has no behavior {name!r}; it has {list(env.behavior_specs)}"
            )
        policy.check(name, env.behavior_specs[name])
    player = policy.player(env)
    answers = dict.fromkeys(played, player)
    played_together = episode_returns(
        env, answers, episodes, group=lambda name: "played", max_unity_steps=max_unity_steps, reset=False
    )
    return played_together["played"]
