"""The in-memory demonstration: record arrays, per-agent episodes, transitions, conversions.

See :mod:`unity_sb3.demos.reader` for the pairing rule and :func:`~unity_sb3.demos.reader.load_demo`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import numpy as np
from mlagents_envs.base_env import BehaviorSpec

from unity_sb3.demos.format import DemoMeta
from unity_sb3.demos.layouts import (
    Layout,
    as_rows,
    continues,
    layout_converter,
    unity_actions,
    unity_observations,
)

__all__ = ["DemoSpecError", "DemoTrajectory", "DemoTransitions", "Demonstration", "check_demo_spec"]


class DemoSpecError(ValueError):
    """A demonstration does not fit an environment's ``BehaviorSpec``."""


# ---------------------------------------------------------------------------------- dataset
@dataclass
class DemoTrajectory:
    """One agent's episode (or the unfinished part of one) from a demonstration.

    Field names follow ``imitation``'s ``TrajectoryWithRew`` (``obs``, ``acts``, ``infos``,
    ``terminal``, ``rews``) so one can be built from ``traj.as_imitation()``.

    :param obs: ``T + 1`` observations (the last is the terminal / last recorded one); an array
        for a single observation spec, else a list of arrays (Unity layout) or the observation
        space's batch (space layout).
    :param acts: ``T`` actions: ``(T, c)`` float32 continuous, ``(T, branches)`` int32 discrete,
        a dict ``{"continuous", "discrete"}`` for hybrid actions, or the action space's batch.
    :param rewards: ``(T,)`` float32, reward received after each action.
    :param terminal: True when the episode ended in the environment (done and not interrupted).
    :param interrupted: True when it ended by reaching the max step (a truncation).
    :param agent_id: Unity's agent id; ``file_index`` the file it came from.
    :param records: ``(T + 1,)`` indices of the records in :class:`Demonstration`.
    """

    obs: Any
    acts: Any
    rewards: np.ndarray
    terminal: bool
    interrupted: bool
    agent_id: int
    file_index: int
    records: np.ndarray
    infos: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def rews(self) -> np.ndarray:
        return self.rewards

    def as_imitation(self) -> dict[str, Any]:
        """Keyword arguments for ``imitation.data.types.TrajectoryWithRew``."""
        return {
            "obs": self.obs,
            "acts": self.acts,
            "infos": self.infos,
            "terminal": self.terminal,
            "rews": self.rewards,
        }


@dataclass
class DemoTransitions:
    """Flat ``(obs, act, next_obs, reward, done)`` transitions of a demonstration.

    :param obs: ``M`` observations before acting (layout as in :class:`DemoTrajectory`).
    :param acts: ``M`` actions.
    :param next_obs: ``M`` observations after acting (the terminal one when ``dones``).
    :param rewards: ``(M,)`` float32.
    :param dones: ``(M,)`` bool, the episode ended with this transition (terminal or interrupted).
    :param interrupted: ``(M,)`` bool, it ended by reaching the max step.
    :param infos: ``(M,)`` object array of dicts: ``agent_id``, ``record``, ``next_record``,
        ``file_index``, ``TimeLimit.truncated``, ``group_id``, ``group_reward``.
    :param records: ``(M,)`` record index of ``obs``; ``next_records`` of ``next_obs``.
    """

    obs: Any
    acts: Any
    next_obs: Any
    rewards: np.ndarray
    dones: np.ndarray
    interrupted: np.ndarray
    infos: np.ndarray
    records: np.ndarray
    next_records: np.ndarray

    def __len__(self) -> int:
        return len(self.rewards)

    def as_imitation(self) -> dict[str, Any]:
        """Keyword arguments for ``imitation.data.types.Transitions``."""
        return {
            "obs": self.obs,
            "acts": self.acts,
            "infos": self.infos,
            "next_obs": self.next_obs,
            "dones": self.dones,
        }


@dataclass
class Demonstration:
    """All records of one or more ``.demo`` files of one behavior, as arrays (first axis = record,
    file order).

    :param behavior_spec: the behavior's ``BehaviorSpec`` (shapes from the first record).
    :param behavior_name: the full behavior name as recorded, e.g. ``"Pyramids?team=0"``.
    :param meta: the file's metadata; for several files their sum (``mean_reward`` weighted by
        episodes, names joined with ``"+"``). ``metas`` holds one per file.
    :param observations: one float32 array per observation spec, ``(N, *shape)``; visual
        observations in the spec's shape (HWC or CHW) in [0, 1], as ``mlagents_envs`` gives them.
    :param continuous_actions: ``(N, c)`` float32.
    :param discrete_actions: ``(N, branches)`` int32.
    :param has_action: ``(N,)`` bool; False where the record carries no action (Unity leaves the
        last record of a recording without one); those rows of the action arrays are 0.
    :param rewards: ``(N,)`` float32, reward since the agent's previous record.
    :param dones: ``(N,)`` bool, the record is the terminal observation of an episode.
    :param interrupted: ``(N,)`` bool, that episode ended by reaching the max step.
    :param agent_ids: ``(N,)`` int32 Unity agent (episode) ids.
    :param action_masks: ``(N, sum(branches))`` bool with True = action NOT allowed (ML-Agents'
        convention, see :attr:`allowed_actions`), or None when no record has a mask.
    :param group_ids: ``(N,)`` int32 (0: no group); ``group_rewards`` ``(N,)`` float32.
    :param file_index: ``(N,)`` int32 index into ``paths``.
    """

    behavior_spec: BehaviorSpec
    behavior_name: str
    meta: DemoMeta
    observations: list[np.ndarray]
    continuous_actions: np.ndarray
    discrete_actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    interrupted: np.ndarray
    agent_ids: np.ndarray
    has_action: np.ndarray
    group_ids: np.ndarray
    group_rewards: np.ndarray
    action_masks: np.ndarray | None = None
    file_index: np.ndarray | None = None
    paths: list[str] = field(default_factory=list)
    metas: list[DemoMeta] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.rewards)
        if self.file_index is None:
            self.file_index = np.zeros(n, dtype=np.int32)
        for name in (
            "continuous_actions",
            "discrete_actions",
            "dones",
            "interrupted",
            "agent_ids",
            "has_action",
        ):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Demonstration.{name} has {len(getattr(self, name))} rows, rewards has {n}")
        for i, obs in enumerate(self.observations):
            if len(obs) != n:
                raise ValueError(f"Demonstration.observations[{i}] has {len(obs)} rows, rewards has {n}")

    def __len__(self) -> int:
        return len(self.rewards)

    def __repr__(self) -> str:
        shapes = [tuple(s.shape) for s in self.behavior_spec.observation_specs]
        a = self.behavior_spec.action_spec
        return (
            f"Demonstration({self.behavior_name!r}, records={len(self)}, episodes={self.meta.number_episodes}, "
            f"obs={shapes}, continuous={a.continuous_size}, discrete={tuple(a.discrete_branches)})"
        )

    # ------------------------------------------------------------------ names
    @property
    def base_behavior_name(self) -> str:
        """The behavior name without the ``?team=...`` suffix (``"Pyramids"``)."""
        return self.behavior_name.partition("?")[0]

    @property
    def team_id(self) -> int | None:
        """The ``team`` of a ``"Name?team=N"`` behavior name, else None."""
        query = parse_qs(self.behavior_name.partition("?")[2])
        try:
            return int(query["team"][0])
        except (KeyError, ValueError):
            return None

    @property
    def allowed_actions(self) -> np.ndarray | None:
        """Action masks in sb3-contrib's convention: ``(N, sum(branches))``, True = allowed."""
        return None if self.action_masks is None else ~self.action_masks

    # ------------------------------------------------------------------ episodes
    def episode_records(self) -> list[np.ndarray]:
        """Record indices of each agent episode, in the order the episodes start.

        An episode runs over the records of one (file, agent id) up to and including a ``done``
        record. It is cut early at a record without an action (that record is its last).
        """
        open_episodes: dict[tuple[int, int], list[int]] = {}
        episodes: list[list[int]] = []
        for i, (f, agent, done, acted) in enumerate(
            zip(
                self.file_index.tolist(),
                self.agent_ids.tolist(),
                self.dones.tolist(),
                self.has_action.tolist(),
            )
        ):
            key = (f, agent)
            episode = open_episodes.get(key)
            if episode is None:
                episode = open_episodes[key] = []
                episodes.append(episode)
            episode.append(i)
            if done or not acted:
                del open_episodes[key]
        return [np.asarray(e, dtype=np.int64) for e in episodes]

    def trajectories(self, layout: Layout = "auto", spaces: Any = None) -> Iterator[DemoTrajectory]:
        """Yield per-agent episodes with at least one transition (see :class:`DemoTrajectory`).

        :param layout: ``"unity"``: observations in Unity's shapes (float32) and actions as Unity
            arrays; ``"space"``: as the environment's gymnasium spaces give them
            (``unity_sb3.spaces.BehaviorSpaces``); ``"auto"``: ``"space"`` when that module is
            available, else ``"unity"``.
        :param spaces: a ready ``BehaviorSpaces`` (for non-default options); implies ``"space"``.
        """
        converter = layout_converter(self.behavior_spec, layout, spaces)
        for records in self.episode_records():
            if len(records) < 2:
                continue
            last = int(records[-1])
            acted = records[:-1]
            yield DemoTrajectory(
                obs=converter.obs([o[records] for o in self.observations]),
                acts=converter.acts(self.continuous_actions[acted], self.discrete_actions[acted]),
                rewards=self.rewards[records[1:]].copy(),
                terminal=bool(self.dones[last] and not self.interrupted[last]),
                interrupted=bool(self.dones[last] and self.interrupted[last]),
                agent_id=int(self.agent_ids[last]),
                file_index=int(self.file_index[last]),
                records=records,
            )

    def transition_records(self) -> tuple[np.ndarray, np.ndarray]:
        """``(records, next_records)``: the index pairs that make the transitions."""
        pairs = [(e[:-1], e[1:]) for e in self.episode_records() if len(e) >= 2]
        if not pairs:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty.copy()
        return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])

    def transitions(self, layout: Layout = "auto", spaces: Any = None) -> DemoTransitions:
        """All transitions, episode by episode (see :class:`DemoTransitions`; ``layout`` and
        ``spaces`` as in :meth:`trajectories`)."""
        converter = layout_converter(self.behavior_spec, layout, spaces)
        cur, nxt = self.transition_records()
        dones = self.dones[nxt].copy()
        interrupted = self.interrupted[nxt] & dones
        infos = np.empty(len(cur), dtype=object)
        for k, (i, j) in enumerate(zip(cur.tolist(), nxt.tolist())):
            infos[k] = {
                "agent_id": int(self.agent_ids[i]),
                "record": i,
                "next_record": j,
                "file_index": int(self.file_index[i]),
                "TimeLimit.truncated": bool(interrupted[k]),
                "group_id": int(self.group_ids[j]),
                "group_reward": float(self.group_rewards[j]),
            }
        return DemoTransitions(
            obs=converter.obs([o[cur] for o in self.observations]),
            acts=converter.acts(self.continuous_actions[cur], self.discrete_actions[cur]),
            next_obs=converter.obs([o[nxt] for o in self.observations]),
            rewards=self.rewards[nxt].copy(),
            dones=dones,
            interrupted=interrupted,
            infos=infos,
            records=cur,
            next_records=nxt,
        )

    # ------------------------------------------------------------------ plain arrays
    def to_arrays(self) -> dict[str, np.ndarray]:
        """All record arrays in a flat dict (``np.savez``-friendly): ``obs_0``..., the action,
        reward, done, id, group and mask arrays. See :meth:`from_arrays`."""
        out = {f"obs_{i}": o for i, o in enumerate(self.observations)}
        for name in (
            "continuous_actions",
            "discrete_actions",
            "has_action",
            "rewards",
            "dones",
            "interrupted",
            "agent_ids",
            "group_ids",
            "group_rewards",
            "file_index",
        ):
            out[name] = getattr(self, name)
        if self.action_masks is not None:
            out["action_masks"] = self.action_masks
        return out

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, np.ndarray],
        behavior_spec: BehaviorSpec,
        behavior_name: str = "Demonstration",
        demonstration_name: str = "",
    ) -> Demonstration:
        """Build a demonstration from per-record arrays (the inverse of :meth:`to_arrays`).

        Required: ``obs_0``... (one per observation spec, Unity shapes) and ``rewards`` and
        ``dones``; the rest defaults to zeros / False / one agent with id 0. Actions are
        ``continuous_actions`` ``(N, c)`` and ``discrete_actions`` ``(N, branches)``.
        """
        if "rewards" not in arrays or "dones" not in arrays:
            raise ValueError(f"from_arrays needs 'rewards' and 'dones'; got keys {sorted(arrays)}")
        n = len(arrays["rewards"])
        spec = behavior_spec
        obs = []
        for i, o_spec in enumerate(spec.observation_specs):
            if f"obs_{i}" not in arrays:
                raise ValueError(
                    f"from_arrays needs 'obs_{i}' for observation {i} of shape {tuple(o_spec.shape)}"
                )
            obs.append(as_rows(arrays[f"obs_{i}"], (n, *o_spec.shape), np.float32, f"obs_{i}"))
        a = spec.action_spec
        masks = arrays.get("action_masks")
        demo = cls(
            behavior_spec=spec,
            behavior_name=behavior_name,
            meta=DemoMeta(1, demonstration_name, n, 0, 0.0),
            observations=obs,
            continuous_actions=as_rows(
                arrays.get("continuous_actions"), (n, a.continuous_size), np.float32, "continuous_actions"
            ),
            discrete_actions=as_rows(
                arrays.get("discrete_actions"), (n, a.discrete_size), np.int32, "discrete_actions"
            ),
            rewards=as_rows(arrays["rewards"], (n,), np.float32, "rewards"),
            dones=as_rows(arrays["dones"], (n,), bool, "dones"),
            interrupted=as_rows(arrays.get("interrupted"), (n,), bool, "interrupted"),
            agent_ids=as_rows(arrays.get("agent_ids"), (n,), np.int32, "agent_ids"),
            has_action=as_rows(arrays.get("has_action", np.ones(n, bool)), (n,), bool, "has_action"),
            group_ids=as_rows(arrays.get("group_ids"), (n,), np.int32, "group_ids"),
            group_rewards=as_rows(arrays.get("group_rewards"), (n,), np.float32, "group_rewards"),
            action_masks=None
            if masks is None
            else as_rows(masks, (n, int(sum(a.discrete_branches))), bool, "action_masks"),
            file_index=as_rows(arrays.get("file_index"), (n,), np.int32, "file_index"),
        )
        demo.meta = _summary_meta(demo, demonstration_name)
        demo.metas = [demo.meta]
        return demo

    @classmethod
    def from_transitions(
        cls,
        obs: Any,
        acts: Any,
        next_obs: Any,
        dones: Any,
        behavior_spec: BehaviorSpec,
        *,
        rewards: Any = None,
        infos: Sequence[Mapping[str, Any]] | None = None,
        behavior_name: str = "Demonstration",
        demonstration_name: str = "",
    ) -> Demonstration:
        """Build a demonstration from flat, episode-ordered transitions (``imitation`` style).

        Consecutive transitions continue one episode while ``next_obs[i]`` equals ``obs[i + 1]``
        and ``dones[i]`` is False; each episode becomes one agent (with its own id) whose last
        record holds the final ``next_obs``. ``infos[i]["TimeLimit.truncated"]`` marks
        truncation.

        :param obs: Unity layout (an array for one spec, a list of arrays) or the observation
            space's layout (a dict keyed like ``BehaviorSpaces``; uint8 channel-first images).
        :param acts: ``(M, c)`` floats, ``(M,)`` / ``(M, branches)`` ints, or for hybrid
            actions a dict ``{"continuous", "discrete"}`` or a tuple ``(continuous, discrete)``.
        :param rewards: ``(M,)``; zeros when None.
        """
        spec = behavior_spec
        obs_list = unity_observations(obs, spec, "obs")
        next_list = unity_observations(next_obs, spec, "next_obs")
        m = len(obs_list[0]) if obs_list else len(np.asarray(dones))
        cont, disc = unity_actions(acts, spec.action_spec, m)
        dones = as_rows(dones, (m,), bool, "dones")
        rewards = as_rows(rewards, (m,), np.float32, "rewards")
        truncated = np.array(
            [bool((infos[i] or {}).get("TimeLimit.truncated", False)) for i in range(m)]
            if infos is not None
            else np.zeros(m, bool)
        )
        rows: dict[str, list] = {
            k: [] for k in ("reward", "done", "interrupted", "agent", "acted", "src", "cont", "disc")
        }
        agent = 0
        continued = False  # whether transition i - 1 continues into transition i
        for i in range(m):
            # the record of obs[i] carries the previous transition's reward when it continues
            rows["reward"].append(rewards[i - 1] if continued else 0.0)
            rows["done"].append(False)
            rows["interrupted"].append(False)
            rows["agent"].append(agent)
            rows["acted"].append(True)
            rows["src"].append(("obs", i))
            rows["cont"].append(cont[i])
            rows["disc"].append(disc[i])
            continued = continues(i, obs_list, next_list, dones)
            if not continued:
                rows["reward"].append(rewards[i])
                rows["done"].append(bool(dones[i]))
                rows["interrupted"].append(bool(dones[i] and truncated[i]))
                rows["agent"].append(agent)
                rows["acted"].append(False)
                rows["src"].append(("next_obs", i))
                rows["cont"].append(np.zeros_like(cont[i]))
                rows["disc"].append(np.zeros_like(disc[i]))
                agent += 1
        sources = {"obs": obs_list, "next_obs": next_list}
        n = len(rows["reward"])
        arrays = {
            f"obs_{k}": np.stack([sources[s][k][i] for s, i in rows["src"]])
            if n
            else np.zeros((0, *spec.observation_specs[k].shape), np.float32)
            for k in range(len(spec.observation_specs))
        }
        arrays.update(
            continuous_actions=np.array(rows["cont"], np.float32).reshape(
                n, spec.action_spec.continuous_size
            ),
            discrete_actions=np.array(rows["disc"], np.int32).reshape(n, spec.action_spec.discrete_size),
            has_action=np.array(rows["acted"], bool),
            rewards=np.array(rows["reward"], np.float32),
            dones=np.array(rows["done"], bool),
            interrupted=np.array(rows["interrupted"], bool),
            agent_ids=np.array(rows["agent"], np.int32),
        )
        return cls.from_arrays(arrays, spec, behavior_name, demonstration_name)

    def save(
        self, path: str | os.PathLike, demonstration_name: str | None = None, **writer_kwargs: Any
    ) -> DemoMeta:
        """Write all records, in their order, to a ``.demo`` file (see :class:`DemoWriter`).

        :return: the metadata written.
        """
        from unity_sb3.demos.writer import DemoWriter

        name = (
            demonstration_name
            if demonstration_name is not None
            else (self.meta.demonstration_name or Path(path).stem)
        )
        writer_kwargs.setdefault("group_episodes", False)
        with DemoWriter(path, self.behavior_name, self.behavior_spec, name, **writer_kwargs) as writer:
            masks = self.action_masks
            a = self.behavior_spec.action_spec
            for i in range(len(self)):
                acted = bool(self.has_action[i])
                writer.add_record(
                    [o[i] for o in self.observations],
                    reward=float(self.rewards[i]),
                    done=bool(self.dones[i]),
                    interrupted=bool(self.interrupted[i]),
                    agent_id=int(self.agent_ids[i]),
                    continuous_action=self.continuous_actions[i] if acted and a.continuous_size else None,
                    discrete_action=self.discrete_actions[i] if acted and a.discrete_size else None,
                    action_mask=None if masks is None else masks[i],
                    group_id=int(self.group_ids[i]),
                    group_reward=float(self.group_rewards[i]),
                )
        return writer.meta


# ---------------------------------------------------------------------------------- spec check
def check_demo_spec(demo: Demonstration | BehaviorSpec, spec: BehaviorSpec) -> None:
    """Raise :class:`DemoSpecError` listing every way ``demo`` does not fit ``spec``
    (observation count, each observation's shape, continuous size, discrete branches)."""
    have = demo.behavior_spec if isinstance(demo, Demonstration) else demo
    problems = []
    demo_shapes = [tuple(s.shape) for s in have.observation_specs]
    env_shapes = [tuple(s.shape) for s in spec.observation_specs]
    if len(demo_shapes) != len(env_shapes):
        problems.append(
            f"the demo has {len(demo_shapes)} observations {demo_shapes}, the env has {len(env_shapes)} {env_shapes}"
        )
    else:
        for i, (d, e) in enumerate(zip(demo_shapes, env_shapes)):
            if d != e:
                hint = ""
                if len(d) == 3 and sorted(d) == sorted(e):
                    hint = " (the same image in the other channel order: HWC vs CHW)"
                problems.append(f"observation {i}: the demo's shape is {d}, the env's is {e}{hint}")
    a, b = have.action_spec, spec.action_spec
    if a.continuous_size != b.continuous_size:
        problems.append(
            f"continuous actions: the demo has {a.continuous_size}, the env has {b.continuous_size}"
        )
    if tuple(a.discrete_branches) != tuple(b.discrete_branches):
        problems.append(
            f"discrete action branches: the demo has {tuple(a.discrete_branches)}, the env has {tuple(b.discrete_branches)}"
        )
    if problems:
        name = f" {demo.behavior_name!r}" if isinstance(demo, Demonstration) else ""
        raise DemoSpecError(
            f"demonstration{name} does not fit the environment's behavior spec: " + "; ".join(problems)
        )


def _summary_meta(demo: Demonstration, name: str) -> DemoMeta:
    episodes = sum(1 for e in demo.episode_records() if len(e) >= 2)
    total = float(np.sum(demo.rewards, dtype=np.float64))
    return DemoMeta(1, name, len(demo), episodes, total / episodes if episodes else 0.0)
