"""Unity ML-Agents ``.demo`` files: read them into arrays, check them, write them, record them.

Reading::

    demo = load_demo("ExpertPyramid.demo")          # a file, a directory, or a list of files
    demo.observations[0].shape                       # (N, 56): one array per observation spec
    demo.discrete_actions.shape                      # (N, 1)
    for traj in demo.trajectories(): ...             # per-agent episodes
    t = demo.transitions()                           # obs, acts, next_obs, rewards, dones, infos

The rule for pairing records (the README of the real recordings, and what Unity's recorder
does): the action stored with a record was taken after observing that record's observations;
the reward and done stored with the *next* record of the same agent belong to that transition.
A record with ``done`` is the episode's terminal observation; its stored action is not part of
any transition. Records are grouped by agent id (ids may change every episode, or stay the
same across episodes: both occur in real recordings) and by file.

Differences from ML-Agents' own ``demo_loader`` (on purpose): it pairs consecutive records
regardless of agent id and also pairs a terminal record with the next episode's first record;
here those pairs are not transitions.

Writing is in :mod:`unity_sb3.demos.writer` (:class:`DemoWriter`, :func:`record_demo`),
the byte format in :mod:`unity_sb3.demos.format`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mlagents_envs.base_env import BehaviorSpec

from unity_sb3.demos.dataset import (
    Demonstration,
    DemoSpecError,
    DemoTrajectory,
    DemoTransitions,
    check_demo_spec,
)
from unity_sb3.demos.format import (
    BRAIN_PARAMETERS_OFFSET,
    SUPPORTED_API_VERSIONS,
    DemoFormatError,
    DemoMeta,
    behavior_spec_from_protos,
    decode_observation,
    meta_from_proto,
    parse_message,
    read_frame,
)
from unity_sb3.demos.writer import DemoWriter, record_demo

__all__ = [
    "DemoFormatError",
    "DemoMeta",
    "DemoSpecError",
    "DemoTrajectory",
    "DemoTransitions",
    "DemoWriter",
    "Demonstration",
    "check_demo_spec",
    "describe_demo",
    "load_demo",
    "record_demo",
]


# ---------------------------------------------------------------------------------- reading
@dataclass
class _FileRecords:
    path: str
    meta: DemoMeta
    behavior_name: str
    brain: Any
    records: list[Any]
    offsets: list[int]


def _read_records(path: str) -> _FileRecords:
    """Parse the framing, metadata, brain parameters and records of one file."""
    data = Path(path).read_bytes()
    if not data:
        raise DemoFormatError("the file is empty", path=path, offset=0)
    from mlagents_envs.communicator_objects.agent_info_action_pair_pb2 import AgentInfoActionPairProto
    from mlagents_envs.communicator_objects.brain_parameters_pb2 import BrainParametersProto
    from mlagents_envs.communicator_objects.demonstration_meta_pb2 import DemonstrationMetaProto

    start, end = read_frame(data, 0, what="the metadata (DemonstrationMetaProto)", path=path)
    if end > BRAIN_PARAMETERS_OFFSET:
        raise DemoFormatError(
            f"the metadata runs to byte {end}, past byte {BRAIN_PARAMETERS_OFFSET} where the brain parameters "
            "start; this is not a .demo file, or its metadata overwrote the brain parameters",
            path=path,
            offset=0,
        )
    meta_raw = data[start:end]
    meta_proto = parse_message(DemonstrationMetaProto, meta_raw, what="the metadata", path=path, offset=0)
    if meta_proto.api_version not in SUPPORTED_API_VERSIONS:
        raise DemoFormatError(
            f"demonstration api_version {meta_proto.api_version} is not supported; supported versions: "
            f"{', '.join(map(str, SUPPORTED_API_VERSIONS))} (what Unity's DemonstrationRecorder writes)",
            path=path,
            offset=0,
        )
    if len(data) <= BRAIN_PARAMETERS_OFFSET:
        raise DemoFormatError(
            f"the file is {len(data)} bytes and ends before the brain parameters at byte {BRAIN_PARAMETERS_OFFSET}; "
            "it is truncated",
            path=path,
            offset=len(data),
        )
    b_start, b_end = read_frame(
        data, BRAIN_PARAMETERS_OFFSET, what="the brain parameters (BrainParametersProto)", path=path
    )
    brain = parse_message(
        BrainParametersProto,
        data[b_start:b_end],
        what="the brain parameters",
        path=path,
        offset=BRAIN_PARAMETERS_OFFSET,
    )
    expected = int(meta_proto.number_steps)
    records, offsets = [], []
    pos = b_end
    while True:
        if expected:
            if len(records) == expected:
                break
            if pos >= len(data):
                raise DemoFormatError(
                    f"the metadata says {expected} records but the file ends after {len(records)} "
                    f"(file size {len(data)} bytes); the file is truncated",
                    path=path,
                    offset=pos,
                )
        # number_steps == 0: a recording that was never closed; read to the end. A closed
        # recording with no records ends with Unity's unprefixed copy of the metadata.
        elif pos >= len(data) or data[pos:] == meta_raw:
            break
        what = f"record {len(records)}"
        r_start, r_end = read_frame(data, pos, what=what, path=path)
        records.append(
            parse_message(AgentInfoActionPairProto, data[r_start:r_end], what=what, path=path, offset=pos)
        )
        offsets.append(pos)
        pos = r_end
    meta = meta_from_proto(meta_proto, trailing_bytes=len(data) - pos)
    return _FileRecords(path, meta, str(brain.brain_name), brain, records, offsets)


def _decode_file(raw: _FileRecords, spec: BehaviorSpec, file_index: int) -> dict[str, Any]:
    """Arrays of one file's records, checked against ``spec``."""
    n = len(raw.records)
    obs_specs = spec.observation_specs
    a = spec.action_spec
    c, nb = a.continuous_size, a.discrete_size
    mask_size = int(sum(a.discrete_branches))
    branches = np.asarray(a.discrete_branches, dtype=np.int64)
    out: dict[str, Any] = {
        # lists, stacked at the end: allocate only what the file really holds
        "observations": [[] for _ in obs_specs],
        "continuous_actions": np.zeros((n, c), np.float32),
        "discrete_actions": np.zeros((n, nb), np.int32),
        "has_action": np.zeros(n, bool),
        "rewards": np.zeros(n, np.float32),
        "dones": np.zeros(n, bool),
        "interrupted": np.zeros(n, bool),
        "agent_ids": np.zeros(n, np.int32),
        "group_ids": np.zeros(n, np.int32),
        "group_rewards": np.zeros(n, np.float32),
        "action_masks": None,
        "file_index": np.full(n, file_index, np.int32),
    }
    for r, (record, offset) in enumerate(zip(raw.records, raw.offsets)):

        def fail(message: str, r: int = r, offset: int = offset) -> DemoFormatError:
            return DemoFormatError(f"record {r}: {message}", path=raw.path, offset=offset)

        info = record.agent_info
        if len(info.observations) != len(obs_specs):
            raise fail(f"{len(info.observations)} observations, the first record has {len(obs_specs)}")
        for k, (obs, o_spec) in enumerate(zip(info.observations, obs_specs)):
            try:
                out["observations"][k].append(
                    decode_observation(obs, tuple(o_spec.shape), o_spec.dimension_property)
                )
            except ValueError as exc:
                raise fail(f"observation {k}: {exc}") from exc
        out["rewards"][r] = info.reward
        out["dones"][r] = info.done
        out["interrupted"][r] = info.max_step_reached
        out["agent_ids"][r] = info.id
        out["group_ids"][r] = info.group_id
        out["group_rewards"][r] = info.group_reward
        if len(info.action_mask):
            if len(info.action_mask) != mask_size:
                raise fail(
                    f"action mask of {len(info.action_mask)} entries for discrete branches {tuple(a.discrete_branches)}"
                )
            if out["action_masks"] is None:
                out["action_masks"] = np.zeros((n, mask_size), bool)
            out["action_masks"][r] = list(info.action_mask)
        action = record.action_info
        cont, disc, legacy = (
            action.continuous_actions,
            action.discrete_actions,
            action.vector_actions_deprecated,
        )
        if len(cont) or len(disc):
            if len(cont) != c or len(disc) != nb:
                raise fail(
                    f"action has {len(cont)} continuous and {len(disc)} discrete values; the spec has {c} and {nb}"
                )
            out["continuous_actions"][r] = list(cont)
            out["discrete_actions"][r] = list(disc)
            out["has_action"][r] = True
        elif len(legacy):
            if c and nb:
                raise fail("hybrid actions cannot be stored in the legacy vector_actions field")
            if len(legacy) != c + nb:
                raise fail(f"legacy action has {len(legacy)} values; the spec has {c + nb}")
            if c:
                out["continuous_actions"][r] = list(legacy)
            else:
                values = np.asarray(legacy, dtype=np.float64)
                if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
                    raise fail(f"legacy discrete action {values.tolist()} is not integral")
                if np.any((values < 0) | (values >= branches)):
                    raise fail(
                        f"legacy discrete action {values.tolist()} is outside the branch sizes {branches.tolist()}"
                    )
                out["discrete_actions"][r] = values.astype(np.int64)
            out["has_action"][r] = True
        if nb and np.any((out["discrete_actions"][r] < 0) | (out["discrete_actions"][r] >= branches)):
            raise fail(
                f"discrete action {out['discrete_actions'][r].tolist()} is outside the branch sizes {branches.tolist()}"
            )
    out["observations"] = [
        np.stack(obs) if obs else np.zeros((0, *s.shape), np.float32)
        for obs, s in zip(out["observations"], obs_specs)
    ]
    return out


def _demo_paths(path: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    if isinstance(path, (str, os.PathLike)):
        p = Path(path)
        if p.is_dir():
            files = sorted(str(f) for f in p.iterdir() if f.suffix == ".demo" and f.is_file())
            if not files:
                raise FileNotFoundError(f"no .demo files in the directory {p}")
            return files
        if not p.exists():
            raise FileNotFoundError(f"demonstration file or directory {p} does not exist")
        return [str(p)]
    paths = [str(p) for p in path]
    if not paths:
        raise ValueError("load_demo got an empty list of paths")
    out = []
    for p in paths:
        out.extend(_demo_paths(p))
    return out


def load_demo(
    path: str | os.PathLike | Sequence[str | os.PathLike], *, expected_spec: BehaviorSpec | None = None
) -> Demonstration:
    """Read one ``.demo`` file, every ``.demo`` file of a directory (sorted by name), or a list.

    :param path: a file, a directory, or a list of files / directories.
    :param expected_spec: the environment's ``BehaviorSpec``; when given, the demo must fit it
        (:func:`check_demo_spec`), and it supplies the spec of files without any record.
    :raises DemoFormatError: a file is truncated or corrupt (the message says where), or its
        ``api_version`` is not supported.
    :raises DemoSpecError: the files disagree with each other or with ``expected_spec``.
    """
    paths = _demo_paths(path)
    raws = [_read_records(p) for p in paths]
    spec = None
    for raw in raws:
        if raw.records:
            spec = behavior_spec_from_protos(
                raw.brain, raw.records[0].agent_info, path=raw.path, offset=raw.offsets[0]
            )
            break
    if spec is None:
        if expected_spec is None:
            raise DemoFormatError(
                f"{', '.join(paths)}: no records, so the observation shapes are unknown; pass expected_spec= "
                "to load an empty demonstration"
            )
        spec = expected_spec
    parts = []
    for i, raw in enumerate(raws):
        if raw.records:
            own = behavior_spec_from_protos(
                raw.brain, raw.records[0].agent_info, path=raw.path, offset=raw.offsets[0]
            )
            try:
                check_demo_spec(own, spec)
            except DemoSpecError as exc:
                raise DemoSpecError(f"{raw.path} does not match {raws[0].path}: {exc}") from None
        parts.append(_decode_file(raw, spec, i))

    def cat(key: str, dtype: Any) -> np.ndarray:
        return np.concatenate([p[key] for p in parts]).astype(dtype, copy=False)

    masks = None
    if any(p["action_masks"] is not None for p in parts):
        size = int(sum(spec.action_spec.discrete_branches))
        masks = np.concatenate(
            [
                p["action_masks"]
                if p["action_masks"] is not None
                else np.zeros((len(p["rewards"]), size), bool)
                for p in parts
            ]
        )
    metas = [raw.meta for raw in raws]
    if len(metas) == 1:
        meta = metas[0]
    else:
        episodes = sum(m.number_episodes for m in metas)
        meta = DemoMeta(
            api_version=metas[0].api_version,
            demonstration_name="+".join(m.demonstration_name for m in metas),
            number_steps=sum(m.number_steps for m in metas),
            number_episodes=episodes,
            mean_reward=sum(m.mean_reward * m.number_episodes for m in metas) / episodes if episodes else 0.0,
            trailing_bytes=sum(m.trailing_bytes for m in metas),
        )
    demo = Demonstration(
        behavior_spec=spec,
        behavior_name=raws[0].behavior_name,
        meta=meta,
        observations=[
            np.concatenate([p["observations"][k] for p in parts]) for k in range(len(spec.observation_specs))
        ],
        continuous_actions=cat("continuous_actions", np.float32),
        discrete_actions=cat("discrete_actions", np.int32),
        rewards=cat("rewards", np.float32),
        dones=cat("dones", bool),
        interrupted=cat("interrupted", bool),
        agent_ids=cat("agent_ids", np.int32),
        has_action=cat("has_action", bool),
        group_ids=cat("group_ids", np.int32),
        group_rewards=cat("group_rewards", np.float32),
        action_masks=masks,
        file_index=cat("file_index", np.int32),
        paths=paths,
        metas=metas,
    )
    if expected_spec is not None:
        check_demo_spec(demo, expected_spec)
    return demo


# ---------------------------------------------------------------------------------- summary
def _action_kind(spec: BehaviorSpec) -> str:
    a = spec.action_spec
    c, branches = a.continuous_size, tuple(a.discrete_branches)
    if c and branches:
        return f"hybrid: {c} continuous + discrete branches {branches}"
    if c:
        return f"continuous, {c} values"
    if branches:
        plural = "es" if len(branches) > 1 else ""
        return f"discrete, {len(branches)} branch{plural} of sizes {branches}"
    return "none"


def describe_demo(path: str | os.PathLike | Sequence[str | os.PathLike]) -> str:
    """A human summary of a ``.demo`` file (or of a directory / list of them, read together).

    Lists the file(s), metadata, behavior and team, each observation (name, shape, kind), the
    action kind, the records (with and without an action), agent episodes found (terminal,
    interrupted, unfinished), the mean episode return computed from the records next to the
    metadata's ``mean_reward``, distinct agent ids, masks, groups and trailing bytes.

    :param path: what :func:`load_demo` accepts.
    :raises DemoFormatError: the file is not a readable ``.demo`` file.
    """
    demo = load_demo(path)
    spec, meta = demo.behavior_spec, demo.meta
    lines = [f"Demonstration {meta.demonstration_name!r}: behavior {demo.behavior_name!r}"]
    for p, m in zip(demo.paths, demo.metas):
        size = os.path.getsize(p)
        lines.append(
            f"  file {p}: {size:,} bytes, api_version {m.api_version}, {m.number_steps} records and "
            f"{m.number_episodes} episodes in the metadata"
            + (f", {m.trailing_bytes} trailing bytes" if m.trailing_bytes else "")
        )
    if demo.team_id is not None:
        lines.append(f"  team: {demo.team_id} (base behavior {demo.base_behavior_name!r})")
    for i, o in enumerate(spec.observation_specs):
        kind = {1: "vector", 2: "variable-length (buffer)", 3: "visual"}.get(
            len(o.shape), f"{len(o.shape)}-D"
        )
        name = f" {o.name!r}" if o.name else ""
        lines.append(f"  observation {i}{name}: shape {tuple(o.shape)}, {kind}, {o.observation_type.name}")
    lines.append(f"  actions: {_action_kind(spec)}")
    acted = int(demo.has_action.sum())
    lines.append(f"  records: {len(demo)} ({acted} with an action)")
    episodes = [e for e in demo.episode_records() if len(e) >= 2]
    ends = [int(e[-1]) for e in episodes]
    terminal = sum(1 for j in ends if demo.dones[j] and not demo.interrupted[j])
    interrupted = sum(1 for j in ends if demo.dones[j] and demo.interrupted[j])
    unfinished = len(episodes) - terminal - interrupted
    lines.append(
        f"  agent episodes: {len(episodes)} ({terminal} terminal, {interrupted} interrupted at max step, "
        f"{unfinished} unfinished); transitions: {sum(len(e) - 1 for e in episodes)}"
    )
    if episodes:
        returns = np.array([float(demo.rewards[e[1:]].sum()) for e in episodes])
        lengths = np.array([len(e) - 1 for e in episodes])
        lines.append(
            f"  episode return: mean {returns.mean():.4g}, min {returns.min():.4g}, max {returns.max():.4g}; "
            f"length: mean {lengths.mean():.1f} steps"
        )
    lines.append(f"  mean reward (metadata): {meta.mean_reward:.4g}")
    lines.append(f"  agents: {len(np.unique(demo.agent_ids))} distinct agent ids")
    if demo.action_masks is not None:
        masked = int(demo.action_masks.any(axis=1).sum())
        lines.append(f"  action masks: present ({masked} records mask at least one action)")
    groups = np.unique(demo.group_ids[demo.group_ids != 0])
    if len(groups):
        lines.append(
            f"  groups: {len(groups)} group ids, group reward total {float(demo.group_rewards.sum()):.4g}"
        )
    return "\n".join(lines)
