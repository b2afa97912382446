"""Write ``.demo`` files that Unity's own loader accepts, and record them from any ``BaseEnv``.

The file layout follows Unity's ``DemonstrationWriter``: metadata at byte 0 (rewritten with the
final counts on close), brain parameters at byte 33, then one length-prefixed
``AgentInfoActionPairProto`` per agent step. Files are written to a temporary file beside the
target and moved into place with ``os.replace`` on close, so an exception or a crash never
leaves a half-written file at the target path.

By default the records of each agent episode are written together when the episode ends
(``group_episodes=True``): a Unity recording holds one agent, and ML-Agents' loader pairs
consecutive records, so grouping keeps files from multi-agent scenes correct for it too.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from mlagents_envs.base_env import ActionTuple, BaseEnv, BehaviorSpec, DecisionSteps, TerminalSteps

from unity_sb3.demos.format import (
    BRAIN_PARAMETERS_OFFSET,
    WRITER_API_VERSION,
    DemoMeta,
    encode_varint,
    fit_demonstration_name,
    is_uint8_representable,
    make_record,
    meta_to_proto,
    write_delimited,
)
from unity_sb3.unity.proto import brain_parameters_proto

__all__ = ["DemoWriter", "record_demo"]

CompressVisual = Literal["auto", "png", "none"]


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class DemoWriter:
    """Write one behavior's agent steps to a ``.demo`` file.

    Use it as a context manager: the file appears at ``path`` when the block exits normally,
    and nothing is written there when it raises::

        with DemoWriter("expert.demo", "Ball3D", spec) as writer:
            decision_steps, terminal_steps = env.get_steps("Ball3D")
            actions = policy(decision_steps)
            writer.record_steps(decision_steps, terminal_steps, actions)

    :param path: the target file (its directory is created when missing).
    :param behavior_name: the behavior name stored in the brain parameters (may include a
        ``?team=N`` suffix).
    :param behavior_spec: the behavior's spec; every record is checked against it.
    :param demonstration_name: stored in the metadata (default: the file name without suffix);
        shortened when needed so the metadata fits in the 33 bytes Unity reserves for it.
    :param compress_visual: 3-D observations as PNG (Unity's camera sensors do this):
        ``"auto"``: when every value is exactly ``k / 255`` (lossless), else floats;
        ``"png"``: always (values are rounded to ``k / 255``); ``"none"``: never.
    :param group_episodes: write each agent episode's records together when it ends (see the
        module docstring); False writes every record at once, in call order.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        behavior_name: str,
        behavior_spec: BehaviorSpec,
        demonstration_name: str | None = None,
        *,
        compress_visual: CompressVisual = "auto",
        group_episodes: bool = True,
    ) -> None:
        if not isinstance(behavior_name, str) or not behavior_name:
            raise ValueError(f"behavior_name must be a non-empty string, got {behavior_name!r}")
        if not isinstance(behavior_spec, BehaviorSpec):
            raise TypeError(
                f"behavior_spec must be an mlagents_envs BehaviorSpec, got {type(behavior_spec).__name__}"
            )
        if compress_visual not in ("auto", "png", "none"):
            raise ValueError(f"compress_visual must be 'auto', 'png' or 'none', got {compress_visual!r}")
        self.path = Path(path)
        self.behavior_name = behavior_name
        self.behavior_spec = behavior_spec
        self.demonstration_name = self.path.stem if demonstration_name is None else str(demonstration_name)
        self.compress_visual = compress_visual
        self.group_episodes = group_episodes
        self._obs_shapes = [tuple(int(d) for d in s.shape) for s in behavior_spec.observation_specs]
        self._branches = np.asarray(behavior_spec.action_spec.discrete_branches, dtype=np.int64)
        self._pending: dict[int, list[tuple[bytes, float]]] = {}
        self._open: set[int] = set()  # agents whose current episode has records but no done yet
        self._last_action: dict[int, tuple[np.ndarray | None, np.ndarray | None]] = {}
        self._written = 0
        self._episodes = 0
        self._reward_sum = 0.0
        self.meta: DemoMeta | None = None

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp_path = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
        )
        self._file = os.fdopen(fd, "w+b")
        # nothing of a writer that is dropped without close() stays on disk
        self._finalizer = weakref.finalize(self, _remove_quietly, self._tmp_path)
        try:
            self._file.write(b"\0" * BRAIN_PARAMETERS_OFFSET)
            write_delimited(
                self._file, brain_parameters_proto(behavior_name, behavior_spec, is_training=False)
            )
        except BaseException:
            self.abort()
            raise

    # ------------------------------------------------------------------ state
    @property
    def closed(self) -> bool:
        return self._file is None

    @property
    def number_steps(self) -> int:
        """Records added so far (written or waiting for their episode to end)."""
        return self._written + sum(len(v) for v in self._pending.values())

    @property
    def number_episodes(self) -> int:
        """Episodes completed so far (``done`` records)."""
        return self._episodes

    def __enter__(self) -> DemoWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        return f"DemoWriter({str(self.path)!r}, {self.behavior_name!r}, steps={self.number_steps}, episodes={self._episodes})"

    # ------------------------------------------------------------------ records
    def _check_open(self) -> None:
        if self._file is None:
            raise RuntimeError(f"DemoWriter for {self.path} is closed")

    def _compress(self, k: int, obs: np.ndarray) -> bool:
        if len(self._obs_shapes[k]) != 3 or self.compress_visual == "none":
            return False
        return self.compress_visual == "png" or is_uint8_representable(obs)

    def add_record(
        self,
        observations: Sequence[np.ndarray],
        *,
        reward: float = 0.0,
        done: bool = False,
        interrupted: bool = False,
        agent_id: int = 0,
        continuous_action: np.ndarray | None = None,
        discrete_action: np.ndarray | None = None,
        action_mask: np.ndarray | None = None,
        group_id: int = 0,
        group_reward: float = 0.0,
    ) -> None:
        """Add one agent step.

        :param observations: one array per observation spec, in the spec's shape (no batch axis).
        :param reward: reward since the agent's previous record.
        :param done: this is the episode's terminal observation; ``interrupted``: it ended by
            reaching the max step.
        :param agent_id: Unity's agent id (records of one id form that agent's episodes).
        :param continuous_action: ``(c,)`` action taken after this observation (None: no action
            recorded; the reader reports ``has_action=False``).
        :param discrete_action: ``(branches,)`` ints in ``[0, branch size)``.
        :param action_mask: ``(sum(branches),)`` bool, True = action NOT allowed (ML-Agents).
        """
        self._check_open()
        if len(observations) != len(self._obs_shapes):
            raise ValueError(
                f"got {len(observations)} observations, the spec has {len(self._obs_shapes)} {self._obs_shapes}"
            )
        arrays = []
        for k, (obs, shape) in enumerate(zip(observations, self._obs_shapes)):
            array = np.asarray(obs, dtype=np.float32)
            if array.shape != shape:
                raise ValueError(
                    f"observation {k} has shape {array.shape}, the spec says {shape} (one agent, no batch axis)"
                )
            arrays.append(array)
        a = self.behavior_spec.action_spec
        cont = disc = None
        if continuous_action is not None and a.continuous_size:
            cont = np.asarray(continuous_action, dtype=np.float32).reshape(-1)
            if cont.shape != (a.continuous_size,):
                raise ValueError(
                    f"continuous action has {cont.size} values, the spec has {a.continuous_size}"
                )
        if discrete_action is not None and a.discrete_size:
            disc = np.asarray(discrete_action).reshape(-1)
            if disc.shape != (a.discrete_size,) or not np.all(np.equal(np.mod(disc, 1), 0)):
                raise ValueError(f"discrete action {disc.tolist()} must be {a.discrete_size} integers")
            disc = disc.astype(np.int64)
            if np.any(disc < 0) or np.any(disc >= self._branches):
                raise ValueError(
                    f"discrete action {disc.tolist()} is outside the branch sizes {self._branches.tolist()}"
                )
        if action_mask is not None:
            action_mask = np.asarray(action_mask, dtype=bool).reshape(-1)
            if action_mask.size != int(self._branches.sum()):
                raise ValueError(
                    f"action mask has {action_mask.size} entries, the branches {self._branches.tolist()} need {int(self._branches.sum())}"
                )
        record = make_record(
            arrays,
            self.behavior_spec,
            [self._compress(k, o) for k, o in enumerate(arrays)],
            reward=reward,
            done=done,
            interrupted=interrupted,
            agent_id=agent_id,
            continuous=cont,
            discrete=disc,
            action_mask=action_mask,
            group_id=group_id,
            group_reward=group_reward,
        )
        payload = record.SerializeToString()
        if not self.group_episodes:
            self._write(payload, float(reward))
        else:
            self._pending.setdefault(int(agent_id), []).append((payload, float(reward)))
        if not done:
            self._open.add(int(agent_id))
        else:
            self._open.discard(int(agent_id))
            self._episodes += 1
            if self.group_episodes:
                for item in self._pending.pop(int(agent_id)):
                    self._write(*item)

    def _write(self, payload: bytes, reward: float) -> None:
        self._file.write(encode_varint(len(payload)))
        self._file.write(payload)
        self._written += 1
        self._reward_sum += reward

    def terminal_records(self, terminal_steps: TerminalSteps) -> Iterator[dict[str, Any]]:
        """:meth:`add_record` keyword arguments for each agent of ``terminal_steps``. The terminal
        record carries the agent's last action (as Unity stores it; readers ignore it)."""
        for i, agent in enumerate(terminal_steps.agent_id.tolist()):
            cont, disc = self._last_action.pop(agent, (None, None))
            yield {
                "observations": [o[i] for o in terminal_steps.obs],
                "reward": float(terminal_steps.reward[i]),
                "done": True,
                "interrupted": bool(terminal_steps.interrupted[i]),
                "agent_id": agent,
                "continuous_action": cont
                if cont is not None
                else np.zeros(self.behavior_spec.action_spec.continuous_size),
                "discrete_action": disc
                if disc is not None
                else np.zeros(self.behavior_spec.action_spec.discrete_size, int),
                "group_id": int(terminal_steps.group_id[i]),
                "group_reward": float(terminal_steps.group_reward[i]),
            }

    def decision_records(
        self, decision_steps: DecisionSteps, actions: ActionTuple
    ) -> Iterator[dict[str, Any]]:
        """:meth:`add_record` keyword arguments for each agent of ``decision_steps`` with the
        row of ``actions`` it was given."""
        n = len(decision_steps)
        a = self.behavior_spec.action_spec
        cont = np.asarray(actions.continuous) if a.continuous_size else None
        disc = np.asarray(actions.discrete) if a.discrete_size else None
        for name, arr, size in (("continuous", cont, a.continuous_size), ("discrete", disc, a.discrete_size)):
            if arr is not None and arr.shape != (n, size):
                raise ValueError(
                    f"{name} actions have shape {arr.shape}, expected ({n}, {size}) for {n} deciding agents"
                )
        masks = decision_steps.action_mask
        mask = np.concatenate(masks, axis=1) if masks is not None and len(masks) else None
        for i, agent in enumerate(decision_steps.agent_id.tolist()):
            c_i = None if cont is None else cont[i]
            d_i = None if disc is None else disc[i]
            self._last_action[agent] = (c_i, d_i)
            yield {
                "observations": [o[i] for o in decision_steps.obs],
                "reward": float(decision_steps.reward[i]),
                "agent_id": agent,
                "continuous_action": c_i,
                "discrete_action": d_i,
                "action_mask": None if mask is None else mask[i],
                "group_id": int(decision_steps.group_id[i]),
                "group_reward": float(decision_steps.group_reward[i]),
            }

    def record_steps(
        self, decision_steps: DecisionSteps, terminal_steps: TerminalSteps, actions: ActionTuple | None
    ) -> None:
        """Record one environment step: terminal records first (an agent can end an episode and
        start the next in the same step), then each deciding agent with its row of ``actions``.

        :param actions: the actions given to ``decision_steps`` (rows in its order); may be
            None only when no agent decides.
        """
        self._check_open()
        for kwargs in self.terminal_records(terminal_steps):
            self.add_record(**kwargs)
        if len(decision_steps):
            if actions is None:
                raise ValueError(f"{len(decision_steps)} agents decided but actions is None")
            for kwargs in self.decision_records(decision_steps, actions):
                self.add_record(**kwargs)

    # ------------------------------------------------------------------ closing
    def close(self, *, discard_incomplete: bool = False) -> DemoMeta:
        """Write the metadata and move the file into place.

        :param discard_incomplete: drop the records of episodes that have not ended (they are
            written otherwise, and count as episodes like Unity's final one).
        :return: the metadata written.
        """
        if self._file is None:
            if self.meta is None:
                raise RuntimeError(f"DemoWriter for {self.path} was aborted")
            return self.meta
        if discard_incomplete and not self.group_episodes:
            raise ValueError("discard_incomplete needs group_episodes=True (the records are already written)")
        try:
            incomplete = len(self._open)
            for records in self._pending.values():
                if not discard_incomplete:
                    for item in records:
                        self._write(*item)
            self._pending.clear()
            episodes = self._episodes + (0 if discard_incomplete else incomplete)
            meta = DemoMeta(
                api_version=WRITER_API_VERSION,
                demonstration_name=self.demonstration_name,
                number_steps=self._written,
                number_episodes=episodes,
                mean_reward=self._reward_sum / episodes if episodes else 0.0,
            )
            name = fit_demonstration_name(meta.demonstration_name, meta)
            if name != meta.demonstration_name:
                warnings.warn(
                    f"demonstration name {meta.demonstration_name!r} shortened to {name!r} so the metadata fits "
                    f"in the {BRAIN_PARAMETERS_OFFSET} bytes before the brain parameters",
                    stacklevel=2,
                )
                meta = DemoMeta(
                    meta.api_version, name, meta.number_steps, meta.number_episodes, meta.mean_reward
                )
            self._file.seek(0)
            write_delimited(self._file, meta_to_proto(meta))
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            os.replace(self._tmp_path, self.path)
            self._finalizer.detach()
        except BaseException:
            self.abort()
            raise
        self.meta = meta
        return meta

    def abort(self) -> None:
        """Stop without writing anything at the target path (removes the temporary file)."""
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None
        self._finalizer()


def record_demo(
    env: BaseEnv,
    behavior_name: str,
    policy: Callable[[DecisionSteps], ActionTuple],
    path: str | os.PathLike,
    n_episodes: int | None = None,
    n_steps: int | None = None,
    *,
    demonstration_name: str | None = None,
    compress_visual: CompressVisual = "auto",
    reset: bool = True,
    max_env_steps: int | None = None,
) -> DemoMeta:
    """Drive ``env`` with ``policy`` and record one behavior into a ``.demo`` file.

    Other behaviors of the scene get no actions (Unity applies zeros). The environment is not
    closed. For an embedded scene's scripted expert:
    ``policy=lambda steps: scene.expert_actions(name, steps)``.

    :param env: any ``mlagents_envs`` ``BaseEnv``.
    :param behavior_name: the behavior to record (a key of ``env.behavior_specs``).
    :param policy: maps the behavior's ``DecisionSteps`` to an ``ActionTuple`` (one row per agent).
    :param path: the ``.demo`` file to write (atomically).
    :param n_episodes: stop after this many completed agent episodes (episodes still running
        then are not written). Give exactly one of ``n_episodes`` / ``n_steps``.
    :param n_steps: stop after this many records (agent steps; Unity's ``NumStepsToRecord``);
        unfinished episodes are written.
    :param reset: call ``env.reset()`` first.
    :param max_env_steps: give up with ``RuntimeError`` (writing nothing) after this many
        ``env.step()`` calls; None: no limit.
    :return: the metadata written.
    """
    if (n_episodes is None) == (n_steps is None):
        raise ValueError("give exactly one of n_episodes or n_steps")
    target = n_episodes if n_episodes is not None else n_steps
    if not isinstance(target, (int, np.integer)) or target <= 0:
        raise ValueError(
            f"{'n_episodes' if n_episodes is not None else 'n_steps'} must be a positive int, got {target!r}"
        )
    if reset:
        env.reset()
    specs = env.behavior_specs
    if behavior_name not in specs:
        raise ValueError(f"behavior {behavior_name!r} is not in the environment; it has {sorted(specs)}")

    def reached(writer: DemoWriter) -> bool:
        return (
            writer.number_episodes >= n_episodes if n_episodes is not None else writer.number_steps >= n_steps
        )

    env_steps = 0
    with DemoWriter(
        path, behavior_name, specs[behavior_name], demonstration_name, compress_visual=compress_visual
    ) as writer:
        while True:
            decision_steps, terminal_steps = env.get_steps(behavior_name)
            actions = policy(decision_steps) if len(decision_steps) else None
            if len(decision_steps) and not isinstance(actions, ActionTuple):
                raise TypeError(
                    f"policy must return an mlagents_envs ActionTuple, got {type(actions).__name__}"
                )
            records = list(writer.terminal_records(terminal_steps))
            if actions is not None:
                records += list(writer.decision_records(decision_steps, actions))
            for kwargs in records:
                writer.add_record(**kwargs)
                if reached(writer):
                    return writer.close(discard_incomplete=n_episodes is not None)
            if actions is not None:
                env.set_actions(behavior_name, actions)
            env.step()
            env_steps += 1
            if max_env_steps is not None and env_steps >= max_env_steps:
                got = (
                    f"{writer.number_episodes} episodes"
                    if n_episodes is not None
                    else f"{writer.number_steps} steps"
                )
                raise RuntimeError(
                    f"record_demo: only {got} of {target} recorded after max_env_steps={max_env_steps} environment "
                    f"steps; nothing was written to {path}"
                )
