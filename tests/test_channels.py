"""Side channels: engine settings as Unity's C# reader sees them, the channel set, stats read from Unity."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from csharp_channels import ENGINE_GUID, csharp_engine_configuration, csharp_split, csharp_stat, wire

from unity_sb3.unity.channels import EngineSettings, UnityChannels, find_channels
from unity_sb3.unity.errors import UnityConfigurationError

from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel  # isort: skip
from mlagents_envs.side_channel.raw_bytes_channel import RawBytesChannel  # isort: skip
from mlagents_envs.side_channel.side_channel_manager import SideChannelManager  # isort: skip
from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod  # isort: skip


# ------------------------------------------------------------------ engine configuration
def test_engine_settings_bytes_match_csharp_reader() -> None:
    channels = UnityChannels()
    EngineSettings(width=84, height=84, quality_level=5, time_scale=20.0, target_frame_rate=-1,
                   capture_frame_rate=60).apply(channels.engine)  # fmt: skip
    data = wire(channels)
    messages = csharp_split(data)
    assert all(guid == ENGINE_GUID for guid, _ in messages)
    assert [csharp_engine_configuration(p) for _, p in messages] == [
        ("ScreenResolution", 84, 84),
        ("QualityLevel", 5),
        ("TimeScale", 20.0),
        ("TargetFrameRate", -1),
        ("CaptureFrameRate", 60),
    ]
    # exact bytes of the time-scale message: guid, length 8, type 2, 20.0f
    expected = ENGINE_GUID + bytes.fromhex("08000000020000000000a041")
    assert expected in data
    assert ENGINE_GUID + bytes.fromhex("0c000000000000005400000054000000") in data
    assert ENGINE_GUID + bytes.fromhex("0800000003000000ffffffff") in data


def test_engine_settings_none_fields_are_not_sent() -> None:
    channels = UnityChannels()
    EngineSettings(width=None, height=None, quality_level=None, time_scale=1.5, target_frame_rate=None,
                   capture_frame_rate=None).apply(channels.engine)  # fmt: skip
    assert [csharp_engine_configuration(p) for _, p in csharp_split(wire(channels))] == [("TimeScale", 1.5)]


def test_engine_settings_defaults_are_mlagents_learn_defaults() -> None:
    s = EngineSettings()
    assert (s.width, s.height, s.quality_level, s.time_scale, s.target_frame_rate, s.capture_frame_rate) == (
        84, 84, 5, 20.0, -1, 60,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"width": 100, "height": None}, "width and height"),
        ({"width": 0, "height": 10}, "width must be a positive int"),
        ({"time_scale": 0}, "time_scale must be a positive"),
        ({"time_scale": float("nan")}, "time_scale must be a positive"),
        ({"quality_level": -1}, "quality_level must be >= 0"),
        ({"target_frame_rate": 2.5}, "target_frame_rate must be an int32"),
    ],
)
def test_engine_settings_rejects_bad_values(kwargs: dict, match: str) -> None:
    with pytest.raises(UnityConfigurationError, match=match):
        EngineSettings(**kwargs)


def test_engine_settings_coerce() -> None:
    assert EngineSettings.coerce({"time_scale": 5}).time_scale == 5
    assert EngineSettings.coerce(None) == EngineSettings()
    with pytest.raises(UnityConfigurationError, match=r"Unknown engine setting\(s\) \['timescale'\]"):
        EngineSettings.coerce({"timescale": 5})
    with pytest.raises(UnityConfigurationError, match="EngineSettings or a dict"):
        EngineSettings.coerce(3)


# ------------------------------------------------------------------ channel set
def test_unity_channels_reuse_user_channels_and_keep_extras() -> None:
    engine = EngineConfigurationChannel()
    raw = RawBytesChannel(uuid.uuid4())
    channels = UnityChannels.from_side_channels([engine, raw])
    assert channels.engine is engine
    assert channels.extra == [raw]
    assert len({c.channel_id for c in channels.all()}) == 4
    with pytest.raises(UnityConfigurationError, match="share the channel id"):
        UnityChannels.from_side_channels([raw, raw])
    with pytest.raises(UnityConfigurationError, match="SideChannel objects"):
        UnityChannels.from_side_channels(["engine"])


def test_find_channels_deduplicates_slots() -> None:
    a, b = UnityChannels(), UnityChannels()
    env = SimpleNamespace(get_attr=lambda name: [a, a, b, a])
    assert find_channels(env) == [a, b]
    with pytest.raises(UnityConfigurationError, match="unity_sb3_channels"):
        find_channels(SimpleNamespace(get_attr=lambda name: [None, None]))


# ------------------------------------------------------------------ stats
def test_stats_bytes_from_csharp_are_read() -> None:
    channels = UnityChannels()
    data = csharp_stat("Env/Score", 1.5, 0) + csharp_stat("Env/Score", 2.5, 1) + csharp_stat("Hits", 3, 2)
    SideChannelManager(channels.all()).process_side_channel_message(data)
    assert dict(channels.stats.get_and_reset_stats()) == {
        "Env/Score": [(1.5, StatsAggregationMethod.AVERAGE), (2.5, StatsAggregationMethod.MOST_RECENT)],
        "Hits": [(3.0, StatsAggregationMethod.SUM)],
    }


def test_stats_channel_keeps_only_the_newest_values():
    from mlagents_envs.side_channel.incoming_message import IncomingMessage
    from mlagents_envs.side_channel.outgoing_message import OutgoingMessage
    from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod

    from unity_sb3.unity.channels import BoundedStatsSideChannel, UnityChannels

    channel = BoundedStatsSideChannel(max_values=100)
    assert isinstance(UnityChannels().stats, BoundedStatsSideChannel)
    for i in range(1000):
        out = OutgoingMessage()
        out.write_string("Environment/Reward")
        out.write_float32(float(i))
        out.write_int32(StatsAggregationMethod.AVERAGE.value)
        channel.on_message_received(IncomingMessage(out.buffer))
    values = channel.get_and_reset_stats()["Environment/Reward"]
    assert 100 <= len(values) <= 200
    assert values[-1] == (999.0, StatsAggregationMethod.AVERAGE)
    assert [v for v, _ in values] == list(range(1000 - len(values), 1000))
    assert channel.get_and_reset_stats() == {}
    with pytest.raises(ValueError, match="max_values"):
        BoundedStatsSideChannel(0)


def _stat_message(key: str, value: float, method) -> object:
    from mlagents_envs.side_channel.incoming_message import IncomingMessage
    from mlagents_envs.side_channel.outgoing_message import OutgoingMessage

    out = OutgoingMessage()
    out.write_string(key)
    out.write_float32(value)
    out.write_int32(method.value)
    return IncomingMessage(out.buffer)


def test_stats_channel_gives_what_mlagents_channel_gives():
    """Keys in order, float32 values, every aggregation method, ``stats`` reads and resets as
    mlagents_envs' ``StatsSideChannel`` does."""
    from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod, StatsSideChannel

    from unity_sb3.unity.channels import BoundedStatsSideChannel

    ours, theirs = BoundedStatsSideChannel(), StatsSideChannel()
    methods = list(StatsAggregationMethod)
    for i in range(50):
        key = ("b/Reward", "a/Length", "c/Hist")[i % 3]
        for channel in (ours, theirs):
            channel.on_message_received(_stat_message(key, i * 0.1 - 2.0, methods[i % len(methods)]))
    assert ours.stats == theirs.stats and list(ours.stats) == list(theirs.stats)
    assert ours.get_and_reset_stats() == theirs.get_and_reset_stats()
    assert ours.get_and_reset_stats() == {} and ours.stats == {}


def test_stats_channel_keeps_no_garbage_collected_object_per_value():
    """Values are kept in flat arrays: 5,000 messages add no objects the garbage collector tracks
    (tuples per value made full collections recur in long runs)."""
    import gc

    from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod

    from unity_sb3.unity.channels import BoundedStatsSideChannel

    channel = BoundedStatsSideChannel(max_values=10_000)
    messages = [
        _stat_message("Environment/Reward", float(i), StatsAggregationMethod.AVERAGE) for i in range(5000)
    ]
    gc.collect()
    before = len(gc.get_objects())
    for message in messages:
        channel.on_message_received(message)
    gc.collect()
    assert len(gc.get_objects()) - before < 50
    assert len(channel.get_and_reset_stats()["Environment/Reward"]) == 5000
