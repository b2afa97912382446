"""Tests for unity_sb3.demos.reader: reading real Unity recordings, corrupt files, writing, recording."""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BaseEnv,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
    TerminalSteps,
)

import unity_sb3

# protos through our module: it makes mlagents_envs' generated code import on protobuf 7 first
from unity_sb3.demos.format import (
    AgentInfoActionPairProto,
    BrainParametersProto,
    DemonstrationMetaProto,
    decode_varint,
    encode_varint,
    split_pngs,
)
from unity_sb3.demos.reader import (
    DemoFormatError,
    Demonstration,
    DemoSpecError,
    DemoWriter,
    check_demo_spec,
    load_demo,
    record_demo,
)

# name: (behavior name, records, episodes, obs shapes, continuous, branches, distinct ids, trailing bytes, new fields)
REAL = {
    "Expert3DBall": ("3DBallLearning", 549, 1, [(8,)], 2, (), 1, 0, False),
    "ExpertBasic": ("BasicLearning", 73, 11, [(20,)], 0, (3,), 1, 0, False),
    "ExpertPyramid": ("Pyramids?team=0", 1751, 10, [(56,), (56,), (56,), (4,)], 0, (5,), 10, 27, False),
    "testdcvis": ("VisualFoodCollectorLearning", 38, 1, [(84, 84, 3), (0,)], 0, (3, 3, 3, 2), 1, 0, False),
    "testhybridvis": ("VisualFoodCollector?team=0", 25, 1, [(3, 84, 84), (1,)], 3, (2,), 1, 26, True),
}

NONE, TE = DimensionProperty.NONE, DimensionProperty.TRANSLATIONAL_EQUIVARIANCE


def obs_spec(shape, props=None, name=""):
    props = props or (DimensionProperty.UNSPECIFIED,) * len(shape)
    return ObservationSpec(tuple(shape), tuple(props), ObservationType.DEFAULT, name)


def real(demo_dir: Path, name: str) -> Path:
    return demo_dir / f"{name}.demo"


def frames(data: bytes) -> tuple[int, list[int]]:
    """Offset of the brain parameters' end and of every record (independent varint walk)."""
    n, pos = decode_varint(data, 33, what="brain")
    pos += n
    starts = []
    meta_len, meta_start = decode_varint(data, 0, what="meta")
    expected = DemonstrationMetaProto.FromString(data[meta_start : meta_start + meta_len]).number_steps
    while len(starts) < expected:
        starts.append(pos)
        n, p = decode_varint(data, pos, what="record")
        pos = p + n
    return pos, starts


def unity_style_load(path: Path):
    """What ML-Agents' demo_loader does, on top of mlagents_envs' own parsing: varint frames,
    meta at 0, brain parameters at 33, records until number_steps, the spec from the first
    record, each record through ``steps_from_proto`` and the actions as its loader reads them."""
    from google.protobuf.internal.decoder import _DecodeVarint32
    from mlagents_envs.rpc_utils import behavior_spec_from_proto, steps_from_proto

    data = path.read_bytes()
    size, pos = _DecodeVarint32(data, 0)
    meta = DemonstrationMetaProto.FromString(data[pos : pos + size])
    assert meta.api_version in (0, 1)
    size, pos = _DecodeVarint32(data, 33)
    brain = BrainParametersProto.FromString(data[pos : pos + size])
    pos += size
    pairs = []
    while pos < len(data) and (meta.number_steps == 0 or len(pairs) < meta.number_steps):
        size, pos = _DecodeVarint32(data, pos)
        pairs.append(AgentInfoActionPairProto.FromString(data[pos : pos + size]))
        pos += size
    spec = behavior_spec_from_proto(brain, pairs[0].agent_info)
    steps = [steps_from_proto([p.agent_info], spec) for p in pairs]
    actions = []
    for p in pairs:
        a = p.action_info
        if len(a.continuous_actions) == 0 and len(a.discrete_actions) == 0:
            actions.append((list(a.vector_actions_deprecated), []))
        else:
            actions.append((list(a.continuous_actions), list(a.discrete_actions)))
    return meta, brain, spec, steps, actions


# ---------------------------------------------------------------------------------- real files
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_file_matches_readme(demo_dir, name):
    behavior, records, episodes, shapes, cont, branches, ids, trailing, new_fields = REAL[name]
    demo = load_demo(real(demo_dir, name))
    assert demo.behavior_name == behavior
    assert len(demo) == records == demo.meta.number_steps
    assert demo.meta.number_episodes == episodes
    assert len(list(demo.trajectories(layout="unity"))) == episodes
    assert [tuple(s.shape) for s in demo.behavior_spec.observation_specs] == shapes
    assert [o.shape[1:] for o in demo.observations] == shapes
    assert all(o.dtype == np.float32 and len(o) == records for o in demo.observations)
    assert demo.behavior_spec.action_spec.continuous_size == cont
    assert tuple(demo.behavior_spec.action_spec.discrete_branches) == branches
    assert demo.continuous_actions.shape == (records, cont) and demo.continuous_actions.dtype == np.float32
    assert demo.discrete_actions.shape == (records, len(branches)) and demo.discrete_actions.dtype == np.int32
    assert len(set(demo.agent_ids.tolist())) == ids
    assert demo.meta.trailing_bytes == trailing
    assert demo.meta.api_version == 1
    if branches:
        assert np.all(demo.discrete_actions >= 0) and np.all(demo.discrete_actions < np.array(branches))
    # legacy files store actions in vector_actions_deprecated, the hybrid one in the new fields
    data = real(demo_dir, name).read_bytes()
    _, starts = frames(data)
    n, p = decode_varint(data, starts[0], what="record")
    first = AgentInfoActionPairProto.FromString(data[p : p + n])
    assert bool(len(first.action_info.vector_actions_deprecated)) != new_fields


def test_team_suffix_kept_and_stripped(demo_dir):
    demo = load_demo(real(demo_dir, "ExpertPyramid"))
    assert demo.behavior_name == "Pyramids?team=0"
    assert demo.base_behavior_name == "Pyramids"
    assert demo.team_id == 0
    basic = load_demo(real(demo_dir, "ExpertBasic"))
    assert basic.base_behavior_name == "BasicLearning" and basic.team_id is None


@pytest.mark.parametrize("name", ["Expert3DBall", "ExpertPyramid", "testdcvis"])
def test_observations_equal_mlagents_envs_parsing(demo_dir, name):
    demo = load_demo(real(demo_dir, name))
    _, _, spec, steps, _actions = unity_style_load(real(demo_dir, name))
    assert spec == demo.behavior_spec
    for i in range(0, len(demo), max(1, len(demo) // 25)):
        decision, terminal = steps[i]
        step = terminal if len(terminal) else decision
        for k, obs in enumerate(step.obs):
            np.testing.assert_array_equal(obs[0], demo.observations[k][i])
        assert step.reward[0] == demo.rewards[i]
        assert int(step.agent_id[0]) == demo.agent_ids[i]


def test_visual_obs_png_hwc(demo_dir):
    demo = load_demo(real(demo_dir, "testdcvis"))
    vis = demo.observations[0]
    assert vis.shape == (38, 84, 84, 3)
    assert vis.min() >= 0.0 and vis.max() <= 1.0
    assert np.array_equal(np.round(vis * 255) / np.float32(255), vis)  # exactly k / 255
    assert demo.observations[1].shape == (38, 0)  # the empty float vector


def test_visual_obs_png_chw_with_dimension_properties(demo_dir):
    from io import BytesIO

    from PIL import Image

    demo = load_demo(real(demo_dir, "testhybridvis"))
    spec = demo.behavior_spec.observation_specs[0]
    assert tuple(spec.dimension_property) == (NONE, TE, TE)
    assert spec.name == "CameraSensor"
    data = real(demo_dir, "testhybridvis").read_bytes()
    _, starts = frames(data)
    n, p = decode_varint(data, starts[3], what="record")
    record = AgentInfoActionPairProto.FromString(data[p : p + n])
    (png,) = split_pngs(record.agent_info.observations[0].compressed_data)
    hwc = np.asarray(Image.open(BytesIO(png)), dtype=np.float32) / 255.0
    np.testing.assert_array_equal(demo.observations[0][3], hwc.transpose(2, 0, 1))
    # hybrid actions from the new fields
    assert demo.continuous_actions.shape == (25, 3) and demo.discrete_actions.shape == (25, 1)
    assert np.all(np.abs(demo.continuous_actions) <= 1.0)
    assert set(np.unique(demo.discrete_actions)) <= {0, 1}


def test_ids_change_per_episode_and_transitions_never_cross(demo_dir):
    demo = load_demo(real(demo_dir, "ExpertPyramid"))
    episodes = demo.episode_records()
    assert len(episodes) == 10
    for records in episodes:
        assert len(set(demo.agent_ids[records].tolist())) == 1
        assert not demo.dones[records[:-1]].any()
    assert int(demo.dones.sum()) == 9  # the last episode is unfinished
    t = demo.transitions(layout="unity")
    assert len(t) == len(demo) - 10
    assert np.all(demo.agent_ids[t.records] == demo.agent_ids[t.next_records])
    assert int(t.dones.sum()) == 9


def test_same_id_across_episodes_is_split_at_done(demo_dir):
    demo = load_demo(real(demo_dir, "ExpertBasic"))
    assert len(set(demo.agent_ids.tolist())) == 1 and int(demo.dones.sum()) == 10
    trajs = list(demo.trajectories(layout="unity"))
    assert len(trajs) == 11
    assert [t.terminal for t in trajs] == [True] * 10 + [False]
    first = trajs[0]
    assert first.records.tolist() == list(range(8))  # records 0..7, record 7 is done
    np.testing.assert_array_equal(first.obs, demo.observations[0][:8])
    np.testing.assert_array_equal(first.acts, demo.discrete_actions[:7])
    np.testing.assert_array_equal(first.rewards, demo.rewards[1:8])
    assert first.rewards[-1] == pytest.approx(0.99)


def test_transition_rule(demo_dir):
    """The action of a record is taken after observing it; the next record's reward/done belong to it."""
    demo = load_demo(real(demo_dir, "ExpertBasic"))
    t = demo.transitions(layout="unity")
    assert len(t) == 73 - 11
    np.testing.assert_array_equal(t.obs, demo.observations[0][t.records])
    np.testing.assert_array_equal(t.next_obs, demo.observations[0][t.next_records])
    np.testing.assert_array_equal(t.acts, demo.discrete_actions[t.records])
    np.testing.assert_array_equal(t.rewards, demo.rewards[t.next_records])
    np.testing.assert_array_equal(t.dones, demo.dones[t.next_records])
    assert np.all(t.next_records == t.records + 1)
    assert not demo.dones[t.records].any()  # a terminal record never starts a transition
    assert int(t.dones.sum()) == 10
    info = t.infos[0]
    assert info["record"] == 0 and info["next_record"] == 1 and info["TimeLimit.truncated"] is False
    assert set(t.as_imitation()) == {"obs", "acts", "infos", "next_obs", "dones"}


def test_missing_last_action_is_flagged(demo_dir):
    demo = load_demo(real(demo_dir, "Expert3DBall"))
    assert demo.has_action[:-1].all() and not demo.has_action[-1]
    np.testing.assert_array_equal(demo.continuous_actions[-1], [0.0, 0.0])


def test_directory_and_list(demo_dir, tmp_path):
    with pytest.raises(DemoSpecError, match="does not match"):
        load_demo(demo_dir)
    one = load_demo(real(demo_dir, "ExpertBasic"))
    both = load_demo([real(demo_dir, "ExpertBasic")] * 2)
    assert len(both) == 2 * len(one)
    assert both.file_index.tolist() == [0] * 73 + [1] * 73
    assert len(list(both.trajectories(layout="unity"))) == 22  # same ids, not merged across files
    assert both.meta.number_steps == 146 and both.meta.number_episodes == 22
    assert both.meta.mean_reward == pytest.approx(one.meta.mean_reward)
    folder = tmp_path / "demos"
    folder.mkdir()
    (folder / "a.demo").write_bytes(real(demo_dir, "ExpertBasic").read_bytes())
    (folder / "notes.txt").write_text("not a demo")
    assert len(load_demo(folder)) == 73


def test_bad_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_demo(tmp_path / "missing.demo")
    with pytest.raises(FileNotFoundError, match=r"no \.demo files"):
        load_demo(tmp_path)
    with pytest.raises(ValueError, match="empty list"):
        load_demo([])


def test_top_level_export():
    assert unity_sb3.load_demo is load_demo
    assert unity_sb3.Demonstration is Demonstration


# ---------------------------------------------------------------------------------- corrupt files
@pytest.mark.parametrize(
    "cut", ["inside_meta", "before_brain", "inside_brain", "inside_record", "between_records"]
)
def test_truncated_file_names_offset(demo_dir, tmp_path, cut):
    data = real(demo_dir, "ExpertBasic").read_bytes()
    _, starts = frames(data)
    brain_len, brain_start = decode_varint(data, 33, what="brain")
    at = {
        "inside_meta": 10,
        "before_brain": 33,
        "inside_brain": brain_start + brain_len // 2,
        "inside_record": starts[40] + 7,
        "between_records": starts[40],
    }[cut]
    path = tmp_path / "cut.demo"
    path.write_bytes(data[:at])
    with pytest.raises(DemoFormatError, match=r"at byte \d+") as info:
        load_demo(path)
    err = info.value
    assert isinstance(err, ValueError) and err.path == str(path)
    expected = {
        "inside_meta": 0,
        "before_brain": 33,
        "inside_brain": 33,
        "inside_record": starts[40],
        "between_records": starts[40],
    }[cut]
    assert err.offset == expected
    assert "truncated" in str(err)


def test_corrupt_record_names_record_and_offset(demo_dir, tmp_path):
    data = bytearray(real(demo_dir, "ExpertBasic").read_bytes())
    _, starts = frames(bytes(data))
    n, p = decode_varint(bytes(data), starts[5], what="record")
    data[p : p + n] = b"\xff" * n  # same length, garbage payload
    path = tmp_path / "corrupt.demo"
    path.write_bytes(bytes(data))
    with pytest.raises(DemoFormatError, match="record 5") as info:
        load_demo(path)
    assert info.value.offset == starts[5]


def test_record_with_wrong_observation_size(demo_dir, tmp_path):
    data = real(demo_dir, "ExpertBasic").read_bytes()
    _end, starts = frames(data)
    n, p = decode_varint(data, starts[2], what="record")
    record = AgentInfoActionPairProto.FromString(data[p : p + n])
    del record.agent_info.observations[0].float_data.data[-1]
    payload = record.SerializeToString()
    patched = data[: starts[2]] + encode_varint(len(payload)) + payload + data[p + n :]
    path = tmp_path / "short_obs.demo"
    path.write_bytes(patched)
    with pytest.raises(DemoFormatError, match="record 2: observation 0: 19 float values") as info:
        load_demo(path)
    assert info.value.offset == starts[2]


def _with_meta(data: bytes, **fields) -> bytes:
    n, p = decode_varint(data, 0, what="meta")
    meta = DemonstrationMetaProto.FromString(data[p : p + n])
    for key, value in fields.items():
        setattr(meta, key, value)
    payload = meta.SerializeToString()
    head = encode_varint(len(payload)) + payload
    assert len(head) <= 33
    return head + b"\0" * (33 - len(head)) + data[33:]


def test_unsupported_api_version(demo_dir, tmp_path):
    path = tmp_path / "v7.demo"
    path.write_bytes(_with_meta(real(demo_dir, "ExpertBasic").read_bytes(), api_version=7))
    with pytest.raises(DemoFormatError, match=r"api_version 7 is not supported; supported versions: 0, 1"):
        load_demo(path)


def test_api_version_0_is_read(demo_dir, tmp_path):
    path = tmp_path / "v0.demo"
    path.write_bytes(_with_meta(real(demo_dir, "ExpertBasic").read_bytes(), api_version=0))
    assert len(load_demo(path)) == 73


def test_number_steps_zero_reads_to_the_end(demo_dir, tmp_path):
    path = tmp_path / "unclosed.demo"
    path.write_bytes(_with_meta(real(demo_dir, "ExpertBasic").read_bytes(), number_steps=0))
    demo = load_demo(path)
    assert len(demo) == 73 and demo.meta.number_steps == 0 and demo.meta.trailing_bytes == 0
    np.testing.assert_array_equal(
        demo.observations[0], load_demo(real(demo_dir, "ExpertBasic")).observations[0]
    )
    # a record cut short at the end of an unclosed file is still an error
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(DemoFormatError, match="record 72"):
        load_demo(path)


def test_trailing_bytes_after_counted_records(demo_dir, tmp_path):
    path = tmp_path / "trailing.demo"
    path.write_bytes(real(demo_dir, "ExpertBasic").read_bytes() + b"\x01\x02\x03garbage")
    demo = load_demo(path)
    assert len(demo) == 73 and demo.meta.trailing_bytes == 10


def test_closed_empty_recording(tmp_path):
    spec = BehaviorSpec([obs_spec((3,))], ActionSpec(2, ()))
    path = tmp_path / "empty.demo"
    with DemoWriter(path, "Empty", spec):
        pass
    # Unity appends an unprefixed copy of the metadata when it closes: read_to_end must stop there
    data = path.read_bytes()
    n, p = decode_varint(data, 0, what="meta")
    path.write_bytes(data + data[p : p + n])
    with pytest.raises(DemoFormatError, match="expected_spec"):
        load_demo(path)
    demo = load_demo(path, expected_spec=spec)
    assert len(demo) == 0 and demo.observations[0].shape == (0, 3)
    assert len(demo.transitions(layout="unity")) == 0


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", "empty"),
        (b"\x80", "length prefix"),
        (b"\x30" + b"\0" * 60, "past byte 33"),
        (b"\x02\x08\x01" + b"\0" * 10, "ends before the brain parameters"),
    ],
    ids=["empty", "bad_varint", "meta_overflow", "no_brain"],
)
def test_tiny_files(tmp_path, data, match):
    path = tmp_path / "tiny.demo"
    path.write_bytes(data)
    with pytest.raises(DemoFormatError, match=match):
        load_demo(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400))
def test_random_bytes_only_raise_demo_format_error(tmp_path, data):
    path = tmp_path / "random.demo"
    path.write_bytes(data)
    with contextlib.suppress(DemoFormatError):
        load_demo(path)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    position=st.integers(min_value=0, max_value=8534),
    value=st.integers(min_value=0, max_value=255),
    cut=st.integers(min_value=0, max_value=8535),
)
def test_mutated_real_file_only_raises_demo_format_error(demo_dir, tmp_path, position, value, cut):
    data = bytearray(real(demo_dir, "ExpertBasic").read_bytes())
    data[position] = value
    path = tmp_path / "mutated.demo"
    path.write_bytes(bytes(data[:cut]))
    try:
        demo = load_demo(path)
    except DemoFormatError:
        return
    assert len(demo.rewards) == len(demo.observations[0])


# ---------------------------------------------------------------------------------- spec check
def test_check_demo_spec_messages(demo_dir):
    demo = load_demo(real(demo_dir, "testhybridvis"))
    check_demo_spec(demo, demo.behavior_spec)  # fits itself
    hwc = BehaviorSpec([obs_spec((84, 84, 3)), obs_spec((1,))], ActionSpec(3, (2,)))
    with pytest.raises(DemoSpecError, match=r"observation 0: the demo's shape is \(3, 84, 84\).*HWC vs CHW"):
        check_demo_spec(demo, hwc)
    other = BehaviorSpec([obs_spec((3, 84, 84))], ActionSpec(2, (3, 3)))
    with pytest.raises(DemoSpecError) as info:
        check_demo_spec(demo, other)
    message = str(info.value)
    assert "the demo has 2 observations" in message
    assert "continuous actions: the demo has 3, the env has 2" in message
    assert "discrete action branches: the demo has (2,), the env has (3, 3)" in message
    with pytest.raises(DemoSpecError):
        load_demo(real(demo_dir, "testhybridvis"), expected_spec=other)
    assert len(load_demo(real(demo_dir, "testhybridvis"), expected_spec=demo.behavior_spec)) == 25


# ---------------------------------------------------------------------------------- writing
VIS_HWC = obs_spec((6, 5, 3), (TE, TE, NONE), "camera")
VIS_CHW = obs_spec((4, 6, 5), (NONE, TE, TE), "stacked")
VIS_GREY = obs_spec((6, 5, 1))


def _random_record(rng, spec, agent_id, done=False):
    obs = []
    for s in spec.observation_specs:
        if len(s.shape) == 3:
            obs.append(rng.integers(0, 256, s.shape).astype(np.float32) / np.float32(255))
        else:
            obs.append(rng.normal(size=s.shape).astype(np.float32))
    a = spec.action_spec
    return {
        "observations": obs,
        "reward": float(rng.normal()),
        "done": done,
        "interrupted": bool(done and rng.random() < 0.5),
        "agent_id": agent_id,
        "continuous_action": rng.uniform(-1, 1, a.continuous_size).astype(np.float32)
        if a.continuous_size
        else None,
        "discrete_action": np.array([rng.integers(0, b) for b in a.discrete_branches])
        if a.discrete_size
        else None,
        "action_mask": rng.random(sum(a.discrete_branches)) < 0.3 if a.discrete_size else None,
        "group_id": int(agent_id % 2),
        "group_reward": float(rng.normal()),
    }


@pytest.mark.parametrize(
    "spec",
    [
        BehaviorSpec([obs_spec((7,)), VIS_HWC, VIS_CHW, VIS_GREY, obs_spec((0,))], ActionSpec(2, (3, 2))),
        BehaviorSpec([obs_spec((4,)), obs_spec((2, 3))], ActionSpec(3, ())),
        BehaviorSpec([VIS_HWC], ActionSpec(0, (4,))),
    ],
    ids=["hybrid_visual", "continuous_rank2", "discrete_visual"],
)
@pytest.mark.parametrize("group_episodes", [True, False])
def test_write_read_round_trip(tmp_path, spec, group_episodes):
    rng = np.random.default_rng(0)
    records = []
    for step in range(12):
        for agent in (3, 8):
            records.append(_random_record(rng, spec, agent, done=(step % 5 == 4 and agent == 3)))
    path = tmp_path / "round.demo"
    with DemoWriter(path, "Behavior?team=1", spec, "round", group_episodes=group_episodes) as writer:
        for r in records:
            writer.add_record(**r)
    demo = load_demo(path)
    assert demo.behavior_spec == spec
    assert demo.behavior_name == "Behavior?team=1" and demo.team_id == 1
    if group_episodes:  # each agent episode is contiguous, in the order the episodes ended / started
        order = []
        open_eps: dict[int, list[int]] = {}
        flushed = []
        for i, r in enumerate(records):
            open_eps.setdefault(r["agent_id"], []).append(i)
            if r["done"]:
                flushed.extend(open_eps.pop(r["agent_id"]))
        order = flushed + [i for ep in open_eps.values() for i in ep]
        records = [records[i] for i in order]
    assert len(demo) == len(records)
    for k in range(len(spec.observation_specs)):
        np.testing.assert_array_equal(demo.observations[k], np.stack([r["observations"][k] for r in records]))
    np.testing.assert_array_equal(demo.rewards, np.array([r["reward"] for r in records], np.float32))
    np.testing.assert_array_equal(demo.dones, [r["done"] for r in records])
    np.testing.assert_array_equal(demo.interrupted, [r["interrupted"] for r in records])
    np.testing.assert_array_equal(demo.agent_ids, [r["agent_id"] for r in records])
    np.testing.assert_array_equal(demo.group_ids, [r["group_id"] for r in records])
    np.testing.assert_array_equal(
        demo.group_rewards, np.array([r["group_reward"] for r in records], np.float32)
    )
    a = spec.action_spec
    if a.continuous_size:
        np.testing.assert_array_equal(
            demo.continuous_actions, np.stack([r["continuous_action"] for r in records])
        )
    if a.discrete_size:
        np.testing.assert_array_equal(
            demo.discrete_actions, np.stack([r["discrete_action"] for r in records])
        )
        np.testing.assert_array_equal(demo.action_masks, np.stack([r["action_mask"] for r in records]))
        np.testing.assert_array_equal(demo.allowed_actions, ~demo.action_masks)
    assert demo.meta.number_steps == len(records)
    assert demo.meta.number_episodes == 2 + 2  # two done records + the two unfinished episodes
    assert demo.meta.mean_reward == pytest.approx(sum(r["reward"] for r in records) / 4, rel=1e-5)


def test_written_file_layout_and_unity_loader(tmp_path):
    spec = BehaviorSpec([obs_spec((5,)), VIS_HWC], ActionSpec(0, (3, 2)))
    rng = np.random.default_rng(1)
    path = tmp_path / "layout.demo"
    with DemoWriter(path, "Layout", spec, "layout") as writer:
        for step in range(6):
            writer.add_record(**_random_record(rng, spec, 0, done=step == 5))
    data = path.read_bytes()
    n, p = decode_varint(data, 0, what="meta")
    assert p + n <= 33
    meta = DemonstrationMetaProto.FromString(data[p : p + n])
    assert (meta.api_version, meta.demonstration_name, meta.number_steps, meta.number_episodes) == (
        1,
        "layout",
        6,
        1,
    )
    meta, brain, unity_spec, steps, actions = unity_style_load(path)
    assert brain.brain_name == "Layout"
    assert list(brain.vector_action_size_deprecated) == [3, 2]  # legacy fields filled for non-hybrid
    assert brain.vector_action_space_type_deprecated == 0
    assert list(brain.action_spec.discrete_branch_sizes) == [3, 2]
    assert unity_spec.action_spec == spec.action_spec
    assert [tuple(s.shape) for s in unity_spec.observation_specs] == [(5,), (6, 5, 3)]
    demo = load_demo(path)
    for i, (decision, terminal) in enumerate(steps):
        step = terminal if len(terminal) else decision
        np.testing.assert_array_equal(step.obs[1][0], demo.observations[1][i])  # PNG decoded by mlagents_envs
        assert actions[i][1] == demo.discrete_actions[i].tolist()
    assert len(steps[5][1]) == 1  # the done record is a terminal step


def test_hybrid_writes_no_legacy_fields(tmp_path):
    spec = BehaviorSpec([obs_spec((2,))], ActionSpec(1, (2,)))
    path = tmp_path / "hybrid.demo"
    with DemoWriter(path, "H", spec) as writer:
        writer.add_record([np.zeros(2)], continuous_action=[0.5], discrete_action=[1])
    data = path.read_bytes()
    n, p = decode_varint(data, 33, what="brain")
    brain = BrainParametersProto.FromString(data[p : p + n])
    assert list(brain.vector_action_size_deprecated) == []
    _, _, _, _, actions = unity_style_load(path)
    assert actions == [([0.5], [1])]


def test_float_visual_obs_stay_floats_unless_png_forced(tmp_path):
    spec = BehaviorSpec([VIS_CHW], ActionSpec(1, ()))
    obs = np.linspace(0, 1, 120, dtype=np.float32).reshape(4, 6, 5) * 0.999  # not k / 255
    for mode, exact in (("auto", True), ("none", True), ("png", False)):
        path = tmp_path / f"{mode}.demo"
        with DemoWriter(path, "V", spec, compress_visual=mode) as writer:
            writer.add_record([obs], continuous_action=[0.0])
        got = load_demo(path).observations[0][0]
        if exact:
            np.testing.assert_array_equal(got, obs)
        else:
            np.testing.assert_allclose(got, obs, atol=0.5 / 255 + 1e-7)


def test_long_demonstration_name_is_shortened(tmp_path):
    spec = BehaviorSpec([obs_spec((1,))], ActionSpec(1, ()))
    path = tmp_path / "long.demo"
    with (
        pytest.warns(UserWarning, match="shortened"),
        DemoWriter(path, "L", spec, "a-very-long-demonstration-name") as w,
    ):
        w.add_record([np.zeros(1)], reward=1.5, continuous_action=[0.1])
    demo = load_demo(path)
    assert "a-very-long-demonstration-name".startswith(demo.meta.demonstration_name)
    assert len(demo.meta.demonstration_name) >= 10 and len(demo) == 1


def test_failed_write_leaves_nothing(tmp_path):
    spec = BehaviorSpec([obs_spec((2,))], ActionSpec(1, ()))
    path = tmp_path / "atomic.demo"
    path.write_bytes(b"previous content")
    with pytest.raises(RuntimeError, match="boom"), DemoWriter(path, "A", spec) as writer:
        writer.add_record([np.zeros(2)], continuous_action=[0.0])
        raise RuntimeError("boom")
    assert path.read_bytes() == b"previous content"
    assert sorted(os.listdir(tmp_path)) == ["atomic.demo"]  # no temporary file left
    writer = DemoWriter(tmp_path / "dropped.demo", "A", spec)
    del writer
    assert sorted(os.listdir(tmp_path)) == ["atomic.demo"]


def test_writer_rejects_bad_input(tmp_path):
    spec = BehaviorSpec([obs_spec((2,))], ActionSpec(0, (3,)))
    with DemoWriter(tmp_path / "bad.demo", "B", spec) as writer:
        with pytest.raises(ValueError, match=r"observation 0 has shape \(3,\), the spec says \(2,\)"):
            writer.add_record([np.zeros(3)])
        with pytest.raises(ValueError, match="got 2 observations"):
            writer.add_record([np.zeros(2), np.zeros(2)])
        with pytest.raises(ValueError, match="outside the branch sizes"):
            writer.add_record([np.zeros(2)], discrete_action=[3])
        with pytest.raises(ValueError, match="action mask has 2 entries"):
            writer.add_record([np.zeros(2)], discrete_action=[0], action_mask=[True, False])
        with pytest.raises(ValueError, match="discard_incomplete needs group_episodes"):
            DemoWriter(tmp_path / "x.demo", "B", spec, group_episodes=False).close(discard_incomplete=True)
        writer.add_record([np.zeros(2)], discrete_action=[2])
    assert writer.closed and writer.close().number_steps == 1
    with pytest.raises(RuntimeError, match="closed"):
        writer.add_record([np.zeros(2)], discrete_action=[0])
    with pytest.raises(ValueError, match="compress_visual"):
        DemoWriter(tmp_path / "c.demo", "B", spec, compress_visual="jpeg")


# ---------------------------------------------------------------------------------- recording
class ToyEnv(BaseEnv):
    """A BaseEnv with several agents, one vector and one visual observation, hybrid actions,
    masks, groups, episodes of different lengths and a new agent id every episode."""

    NAME = "Toy?team=0"

    def __init__(self, n_agents: int = 3, seed: int = 0) -> None:
        self.spec = BehaviorSpec([obs_spec((3,), name="vec"), VIS_HWC], ActionSpec(1, (2,)))
        self.n_agents = n_agents
        self.rng = np.random.default_rng(seed)
        self.log: list[tuple[DecisionSteps, TerminalSteps]] = []
        self.actions_seen: list[ActionTuple] = []

    @property
    def behavior_specs(self):
        return {self.NAME: self.spec, "Other": self.spec}

    def reset(self) -> None:
        self.next_id = 0
        self.agents = []  # [id, steps left]
        for _ in range(self.n_agents):
            self._spawn()
        self.pending_terminal: list[tuple[int, bool]] = []
        self.actions = None

    def _spawn(self) -> None:
        self.agents.append([self.next_id, int(self.rng.integers(2, 6))])
        self.next_id += 1

    def _obs(self, ids):
        n = len(ids)
        vec = np.array([[i, i * 0.5, -1.0] for i in ids], np.float32).reshape(n, 3)
        vis = self.rng.integers(0, 256, (n, 6, 5, 3)).astype(np.float32) / np.float32(255)
        return [vec, vis]

    def get_steps(self, behavior_name):
        ids = [a[0] for a in self.agents]
        masks = [np.tile([False, True], (len(ids), 1)) if False else np.zeros((len(ids), 2), bool)]
        decision = DecisionSteps(
            self._obs(ids),
            np.full(len(ids), 0.1, np.float32),
            np.array(ids, np.int32),
            masks,
            np.array([i % 2 for i in ids], np.int32),
            np.zeros(len(ids), np.float32),
        )
        t_ids = [t[0] for t in self.pending_terminal]
        terminal = TerminalSteps(
            self._obs(t_ids),
            np.ones(len(t_ids), np.float32),
            np.array([t[1] for t in self.pending_terminal], bool),
            np.array(t_ids, np.int32),
            np.array([i % 2 for i in t_ids], np.int32),
            np.full(len(t_ids), 0.5, np.float32),
        )
        if behavior_name == self.NAME:
            self.log.append((decision, terminal))
        return decision, terminal

    def set_actions(self, behavior_name, action) -> None:
        self.actions_seen.append(action)

    def set_action_for_agent(self, behavior_name, agent_id, action) -> None:
        raise NotImplementedError

    def step(self) -> None:
        self.pending_terminal = []
        survivors = []
        for agent in self.agents:
            agent[1] -= 1
            if agent[1] == 0:
                self.pending_terminal.append((agent[0], agent[0] % 3 == 0))
            else:
                survivors.append(agent)
        self.agents = survivors
        while len(self.agents) < self.n_agents:
            self._spawn()

    def close(self) -> None:
        pass


def expert(steps: DecisionSteps) -> ActionTuple:
    n = len(steps)
    return ActionTuple(
        continuous=steps.obs[0][:, :1] / 10.0,
        discrete=(steps.agent_id % 2).reshape(n, 1).astype(np.int32),
    )


def test_record_demo_episodes(tmp_path):
    env = ToyEnv()
    path = tmp_path / "toy.demo"
    meta = record_demo(env, ToyEnv.NAME, expert, path, n_episodes=5)
    assert meta.number_episodes == 5
    demo = load_demo(path, expected_spec=env.spec)
    assert demo.behavior_name == ToyEnv.NAME and demo.base_behavior_name == "Toy"
    assert int(demo.dones.sum()) == 5 and len(demo) == meta.number_steps
    trajs = list(demo.trajectories(layout="unity"))
    assert len(trajs) == 5 and all(t.obs[0].shape[1:] == (3,) for t in trajs)
    # every recorded record matches what the env returned, and actions what the policy said
    by_id: dict[int, list] = {}
    for decision, terminal in env.log:
        for i, agent in enumerate(terminal.agent_id.tolist()):
            by_id.setdefault(agent, []).append(("t", [o[i] for o in terminal.obs], terminal.reward[i], None))
        acts = expert(decision)
        for i, agent in enumerate(decision.agent_id.tolist()):
            by_id.setdefault(agent, []).append(
                ("d", [o[i] for o in decision.obs], decision.reward[i], acts, i)
            )
    for t in trajs:
        expected = by_id[t.agent_id]
        assert len(expected) == len(t.records)
        for k, row in enumerate(expected):
            np.testing.assert_array_equal(demo.observations[1][t.records[k]], row[1][1])
            assert demo.rewards[t.records[k]] == row[2]
            if row[0] == "d":
                np.testing.assert_array_equal(
                    demo.continuous_actions[t.records[k]], row[3].continuous[row[4]]
                )
                assert demo.discrete_actions[t.records[k], 0] == row[3].discrete[row[4], 0]
        assert t.terminal != t.interrupted and t.interrupted == (t.agent_id % 3 == 0)
        np.testing.assert_array_equal(t.rewards[-1], 1.0)
    assert demo.group_rewards[demo.dones].tolist() == [0.5] * 5


def test_record_demo_steps_and_limits(tmp_path):
    env = ToyEnv(n_agents=2, seed=3)
    meta = record_demo(env, ToyEnv.NAME, expert, tmp_path / "s.demo", n_steps=17)
    assert meta.number_steps == 17 and len(load_demo(tmp_path / "s.demo")) == 17
    with pytest.raises(ValueError, match="exactly one"):
        record_demo(env, ToyEnv.NAME, expert, tmp_path / "x.demo")
    with pytest.raises(ValueError, match="is not in the environment"):
        record_demo(env, "Nope", expert, tmp_path / "x.demo", n_steps=1)
    with pytest.raises(RuntimeError, match="max_env_steps=2"):
        record_demo(env, ToyEnv.NAME, expert, tmp_path / "x.demo", n_episodes=100, max_env_steps=2)
    with pytest.raises(TypeError, match="ActionTuple"):
        record_demo(env, ToyEnv.NAME, lambda s: [0], tmp_path / "x.demo", n_steps=3)
    assert not (tmp_path / "x.demo").exists()


def test_record_steps_terminal_and_decision_same_agent(tmp_path):
    spec = BehaviorSpec([obs_spec((1,))], ActionSpec(0, (2,)))
    path = tmp_path / "both.demo"

    def decision(ids, value):
        n = len(ids)
        return DecisionSteps([np.full((n, 1), value, np.float32)], np.zeros(n, np.float32), np.array(ids, np.int32),
                             None, np.zeros(n, np.int32), np.zeros(n, np.float32))  # fmt: skip

    empty_t = TerminalSteps([np.zeros((0, 1), np.float32)], np.zeros(0, np.float32), np.zeros(0, bool),
                            np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32))  # fmt: skip
    term = TerminalSteps([np.full((1, 1), 9.0, np.float32)], np.ones(1, np.float32), np.zeros(1, bool),
                         np.array([4], np.int32), np.zeros(1, np.int32), np.zeros(1, np.float32))  # fmt: skip
    with DemoWriter(path, "Both", spec) as writer:
        writer.record_steps(decision([4], 1.0), empty_t, ActionTuple(discrete=np.array([[1]], np.int32)))
        writer.record_steps(decision([4], 2.0), term, ActionTuple(discrete=np.array([[0]], np.int32)))
        with pytest.raises(ValueError, match="actions is None"):
            writer.record_steps(decision([4], 3.0), empty_t, None)
    demo = load_demo(path)
    assert demo.observations[0][:, 0].tolist() == [1.0, 9.0, 2.0]
    assert demo.dones.tolist() == [False, True, False]
    assert demo.discrete_actions[:, 0].tolist() == [1, 1, 0]  # the terminal record keeps the last action
    t = demo.transitions(layout="unity")
    assert t.records.tolist() == [0] and t.next_records.tolist() == [1] and t.dones.tolist() == [True]


# ---------------------------------------------------------------------------------- conversions
def test_arrays_round_trip(demo_dir, tmp_path):
    demo = load_demo(real(demo_dir, "ExpertPyramid"))
    np.savez(tmp_path / "pyr.npz", **demo.to_arrays())
    with np.load(tmp_path / "pyr.npz") as arrays:
        back = Demonstration.from_arrays(dict(arrays), demo.behavior_spec, demo.behavior_name)
    for key, value in demo.to_arrays().items():
        np.testing.assert_array_equal(back.to_arrays()[key], value)
    assert back.meta.number_episodes == 10
    with pytest.raises(ValueError, match="needs 'obs_3'"):
        Demonstration.from_arrays(
            {k: v for k, v in demo.to_arrays().items() if k != "obs_3"}, demo.behavior_spec
        )


@pytest.mark.parametrize("name", ["ExpertBasic", "ExpertPyramid", "testhybridvis"])
def test_transitions_round_trip(demo_dir, tmp_path, name):
    demo = load_demo(real(demo_dir, name))
    t = demo.transitions(layout="unity")
    back = Demonstration.from_transitions(
        t.obs, t.acts, t.next_obs, t.dones, demo.behavior_spec, rewards=t.rewards, infos=t.infos
    )
    t2 = back.transitions(layout="unity")
    assert len(t2) == len(t)
    obs, obs2 = (t.obs, t2.obs) if isinstance(t.obs, list) else ([t.obs], [t2.obs])
    for a, b in zip(obs, obs2):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(t.rewards, t2.rewards)
    np.testing.assert_array_equal(t.dones, t2.dones)
    if isinstance(t.acts, dict):
        for key in t.acts:
            np.testing.assert_array_equal(t.acts[key], t2.acts[key])
    else:
        np.testing.assert_array_equal(t.acts, t2.acts)
    assert len(list(back.trajectories(layout="unity"))) == len(list(demo.trajectories(layout="unity")))
    # and it writes and reads back as a .demo file
    back.save(tmp_path / "back.demo")
    again = load_demo(tmp_path / "back.demo").transitions(layout="unity")
    np.testing.assert_array_equal(again.rewards, t.rewards)


def test_from_transitions_space_layout_images():
    spec = BehaviorSpec([VIS_HWC, obs_spec((2,), name="vec")], ActionSpec(0, (3,)))
    rng = np.random.default_rng(0)
    chw = rng.integers(0, 256, (4, 3, 6, 5)).astype(np.uint8)  # channel-first uint8, as SB3 sees images
    vec = rng.normal(size=(4, 2)).astype(np.float32)
    nxt_chw = np.concatenate([chw[1:], chw[:1]])
    nxt_vec = np.concatenate([vec[1:], vec[:1]])
    obs = {"camera": chw, "vec": vec}
    demo = Demonstration.from_transitions(
        obs,
        np.array([0, 1, 2, 1]),
        {"camera": nxt_chw, "vec": nxt_vec},
        np.array([False, False, False, True]),
        spec,
    )
    assert len(demo) == 5 and demo.dones.tolist() == [False] * 4 + [True]
    np.testing.assert_array_equal(demo.observations[0][0], chw[0].transpose(1, 2, 0) / np.float32(255))
    assert demo.discrete_actions[:4, 0].tolist() == [0, 1, 2, 1]
    with pytest.raises(ValueError, match="hybrid actions need"):
        Demonstration.from_transitions(
            vec,
            np.zeros((4, 1)),
            nxt_vec,
            np.zeros(4, bool),
            BehaviorSpec([obs_spec((2,))], ActionSpec(1, (2,))),
        )


class FakeSpaces:
    """Stands in for unity_sb3.spaces.BehaviorSpaces: the hook must call these two methods."""

    def __init__(self):
        self.calls = []

    def observations(self, obs_list):
        self.calls.append("obs")
        return {"flat": np.concatenate([o.reshape(len(o), -1) for o in obs_list], axis=1)}

    def from_unity_actions(self, continuous, discrete):
        self.calls.append("acts")
        return discrete[:, 0]


def test_space_layout_hook(demo_dir):
    demo = load_demo(real(demo_dir, "ExpertPyramid"))
    spaces = FakeSpaces()
    t = demo.transitions(spaces=spaces)
    assert t.obs["flat"].shape == (len(t), 172) and t.acts.shape == (len(t),)
    assert spaces.calls == ["obs", "acts", "obs"]
    traj = next(demo.trajectories(layout="space", spaces=spaces))
    assert traj.obs["flat"].shape == (len(traj) + 1, 172)
    with pytest.raises(ValueError, match="layout"):
        demo.transitions(layout="gym")
    unity = demo.transitions(layout="unity")
    assert isinstance(unity.obs, list) and len(unity.obs) == 4


def test_space_layout_with_behavior_spaces(demo_dir):
    spaces_mod = pytest.importorskip("unity_sb3.spaces")
    demo = load_demo(real(demo_dir, "testdcvis"))
    bs = spaces_mod.BehaviorSpaces(demo.behavior_spec)
    t = demo.transitions(layout="space")
    obs = t.obs if not isinstance(t.obs, dict) else next(iter(t.obs.values()))
    assert len(obs) == len(t)
    assert bs.observation_space.contains(
        {k: v[0] for k, v in t.obs.items()} if isinstance(t.obs, dict) else t.obs[0]
    )


def test_warnings_are_not_raised_on_real_files(demo_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in REAL:
            load_demo(real(demo_dir, name))
