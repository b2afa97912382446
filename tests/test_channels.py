"""Side channels: bytes on the wire as Unity's C# side reads them, parsing, stats forwarding.

The readers below mirror com.unity.ml-agents' C# code: ``IncomingMessage`` wraps a
``BinaryReader`` (int32 and float32 little endian, strings as int32 length + ASCII bytes,
float lists as int32 count + float32s); ``SideChannelManager`` frames each message as
``Guid.ToByteArray()`` (16 bytes, mixed endian) + int32 length + payload; the
``OnMessageReceived`` of ``EngineConfigurationChannel``, ``EnvironmentParametersChannel`` and
``StatsSideChannel`` read the fields in the order reproduced here.
"""

from __future__ import annotations

import csv
import math
import struct
import uuid
from types import SimpleNamespace

import numpy as np
import pytest
from stable_baselines3.common.logger import configure

from unity_sb3.callbacks.stats import StatsCallback
from unity_sb3.unity.channels import EngineSettings, UnityChannels, find_channels
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.unity.parameters import (
    ConstantSampler,
    EnvironmentParameters,
    GaussianSampler,
    MultiRangeUniformSampler,
    UniformSampler,
    parse_sampler,
)

from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel  # isort: skip
from mlagents_envs.side_channel.raw_bytes_channel import RawBytesChannel  # isort: skip
from mlagents_envs.side_channel.side_channel_manager import SideChannelManager  # isort: skip
from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod  # isort: skip

# Guid.ToByteArray() of the C# channel ids (first three groups little endian).
ENGINE_GUID = bytes.fromhex("2c3451e97e4fea11b238784f4387d1f7")  # e951342c-4f7e-11ea-b238-784f4387d1f7
PARAMS_GUID = bytes.fromhex("1e894c530f81ea11a9d0822485860400")  # 534c891e-810f-11ea-a9d0-822485860400
STATS_GUID = bytes.fromhex("b7f7d8a1c8cef950b78bd3e165a78520")  # a1d8f7b7-cec8-50f9-b78b-d3e165a78520


class CSharpReader:
    """``IncomingMessage`` of the C# package: BinaryReader semantics, defaults at the end."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = bytes(data), 0

    def can_read_more(self) -> bool:
        return self.pos < len(self.data)

    def read_int32(self, default: int = 0) -> int:
        if not self.can_read_more():
            return default
        (value,) = struct.unpack_from("<i", self.data, self.pos)
        self.pos += 4
        return value

    def read_float32(self, default: float = 0.0) -> float:
        if not self.can_read_more():
            return default
        (value,) = struct.unpack_from("<f", self.data, self.pos)
        self.pos += 4
        return value

    def read_string(self, default: str | None = None) -> str | None:
        if not self.can_read_more():
            return default
        length = self.read_int32()
        value = self.data[self.pos : self.pos + length].decode("ascii")
        self.pos += length
        return value

    def read_float_list(self) -> list[float]:
        return [self.read_float32() for _ in range(self.read_int32())]


def csharp_split(data: bytes) -> list[tuple[bytes, bytes]]:
    """``SideChannelManager.ProcessSideChannelData``: (guid bytes, payload) per message."""
    out, pos = [], 0
    while pos < len(data):
        guid = data[pos : pos + 16]
        (length,) = struct.unpack_from("<i", data, pos + 16)
        out.append((guid, data[pos + 20 : pos + 20 + length]))
        pos += 20 + length
    assert pos == len(data)
    return out


def csharp_engine_configuration(payload: bytes) -> tuple:
    """``EngineConfigurationChannel.OnMessageReceived``: what Unity sets."""
    msg = CSharpReader(payload)
    kind = msg.read_int32()
    if kind == 0:
        return ("ScreenResolution", msg.read_int32(), msg.read_int32())
    if kind == 1:
        return ("QualityLevel", msg.read_int32())
    if kind == 2:
        return ("TimeScale", msg.read_float32())
    if kind == 3:
        return ("TargetFrameRate", msg.read_int32())
    if kind == 4:
        return ("CaptureFrameRate", msg.read_int32())
    return ("Unknown", kind)


def csharp_environment_parameter(payload: bytes) -> tuple:
    """``EnvironmentParametersChannel.OnMessageReceived``: key and what it becomes."""
    msg = CSharpReader(payload)
    key = msg.read_string()
    kind = msg.read_int32()
    if kind == 0:
        return (key, "Float", msg.read_float32())
    assert kind == 1, kind
    seed = msg.read_int32()
    sampler = msg.read_int32()
    if sampler == 0:
        return (key, "Uniform", seed, msg.read_float32(), msg.read_float32())
    if sampler == 1:
        return (key, "Gaussian", seed, msg.read_float32(), msg.read_float32())
    if sampler == 2:
        return (key, "MultiRangeUniform", seed, msg.read_float_list())
    return (key, "Unknown", sampler)


def read_progress(folder) -> list[dict[str, float]]:
    """SB3's progress.csv as one dict per dump (missing values are NaN)."""
    with open(folder / "progress.csv", newline="") as handle:
        return [
            {k: float(v) if v != "" else math.nan for k, v in row.items()} for row in csv.DictReader(handle)
        ]


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def wire(channels: UnityChannels) -> bytes:
    return bytes(SideChannelManager(channels.all()).generate_side_channel_messages())


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


# ------------------------------------------------------------------ environment parameters
@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (9.81, ("gravity", "Float", f32(9.81))),
        (
            {"sampler_type": "uniform", "sampler_parameters": {"min_value": 0.5, "max_value": 3, "seed": 7}},
            ("gravity", "Uniform", 7, 0.5, 3.0),
        ),
        (
            {"sampler_type": "gaussian", "sampler_parameters": {"mean": 2, "st_dev": 0.25, "seed": -5}},
            ("gravity", "Gaussian", -5, 2.0, 0.25),
        ),
        (
            {
                "sampler_type": "multirangeuniform",
                "sampler_parameters": {"intervals": [[1, 2], [3.5, 4]], "seed": 3},
            },
            ("gravity", "MultiRangeUniform", 3, [1.0, 2.0, 3.5, 4.0]),
        ),
        ({"sampler_type": "constant", "sampler_parameters": {"value": 4}}, ("gravity", "Float", 4.0)),
    ],
    ids=["float", "uniform", "gaussian", "multirangeuniform", "constant"],
)
def test_parameter_bytes_match_csharp_reader(config: object, expected: tuple) -> None:
    channels = UnityChannels()
    EnvironmentParameters({"gravity": config}, seed=0).apply(channels.environment_parameters)
    messages = csharp_split(wire(channels))
    assert len(messages) == 1
    guid, payload = messages[0]
    assert guid == PARAMS_GUID
    assert csharp_environment_parameter(payload) == expected


def test_float_parameter_exact_bytes() -> None:
    channels = UnityChannels()
    EnvironmentParameters({"mass": 2.0}).apply(channels.environment_parameters)
    payload = bytes.fromhex("04000000") + b"mass" + bytes.fromhex("0000000000000040")
    assert wire(channels) == PARAMS_GUID + struct.pack("<i", len(payload)) + payload


def test_uniform_sampler_exact_bytes() -> None:
    channels = UnityChannels()
    config = {"sampler_type": "uniform", "sampler_parameters": {"min_value": 1, "max_value": 2, "seed": 258}}
    EnvironmentParameters({"k": config}).apply(channels.environment_parameters)
    payload = bytes.fromhex("01000000") + b"k" + bytes.fromhex("0100000002010000000000000000803f00000040")
    assert wire(channels) == PARAMS_GUID + struct.pack("<i", len(payload)) + payload


def test_unseeded_samplers_get_run_seed_plus_offset_like_mlagents() -> None:
    params = EnvironmentParameters(
        {
            "a": 1.0,  # constants take an offset too, as in mlagents-learn
            "b": {"sampler_type": "uniform", "sampler_parameters": {"min_value": 0, "max_value": 1}},
            "c": {"sampler_type": "gaussian", "sampler_parameters": {"mean": 0, "st_dev": 1, "seed": 99}},
            "d": {
                "curriculum": [
                    {
                        "name": "l0",
                        "value": {"sampler_type": "uniform", "sampler_parameters": {"max_value": 2}},
                        "completion_criteria": {"behavior": "B", "threshold": 1},
                    },
                    {"name": "l1", "value": 3},
                ]
            },
        },
        seed=100,
    )
    seeds = {name: [lesson.value.seed for lesson in p.lessons] for name, p in params.parameters.items()}
    assert seeds == {"a": [100], "b": [101], "c": [99], "d": [102, 103]}


def test_parse_sampler_types_and_defaults() -> None:
    assert parse_sampler(3) == ConstantSampler(3.0)
    assert parse_sampler({"sampler_type": "uniform", "sampler_parameters": {}}) == UniformSampler(0.0, 1.0)
    assert parse_sampler(
        {"sampler_type": "Gaussian", "sampler_parameters": {"st_dev": 2}}
    ) == GaussianSampler(1.0, 2.0)
    assert parse_sampler(
        {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": [[0, 1], [2, 3]]}}
    ) == MultiRangeUniformSampler(((0.0, 1.0), (2.0, 3.0)))


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"sampler_type": "beta", "sampler_parameters": {}}, "unknown sampler_type 'beta'"),
        ({"sampler_parameters": {"min_value": 1}}, "has no sampler_type"),
        ({"sampler_type": "uniform"}, "has no sampler_parameters"),
        (
            {"sampler_type": "uniform", "sampler_parameters": {"min": 1, "max": 2}},
            r"unknown sampler_parameters \['max', 'min'\]",
        ),
        (
            {"sampler_type": "uniform", "sampler_parameters": {"min_value": 3, "max_value": 2}},
            "greater than max_value",
        ),
        ({"sampler_type": "gaussian", "sampler_parameters": {"st_dev": -1}}, "st_dev must be >= 0"),
        (
            {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": [[1, 2, 3]]}},
            "exactly two values",
        ),
        (
            {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": [[2, 1]]}},
            "minimum is greater",
        ),
        ({"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": []}}, "must not be empty"),
        ({"sampler_type": "uniform", "sampler_parameters": {"min_value": "a"}}, "must be a finite number"),
        ({"sampler_type": "uniform", "sampler_parameters": {"seed": 1.5}}, "seed must be an int32"),
        ({"sampler_type": "constant", "sampler_parameters": {}}, "needs sampler_parameters.value"),
        ({"type": "uniform"}, r"unknown key\(s\) \['type'\]"),
        ("fast", "expected a number or a sampler"),
        (True, "expected a number or a sampler"),
        (float("inf"), "must be a finite number"),
    ],
)
def test_parse_sampler_errors(config: object, match: str) -> None:
    with pytest.raises(UnityConfigurationError, match=match):
        parse_sampler(config, "gravity")


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"é": 1.0}, "ASCII"),
        ({"p": {"curriculum": []}}, "no lessons"),
        (
            {"p": {"curriculum": [{"name": "a", "value": 1}, {"name": "b", "value": 2}]}},
            "needs completion_criteria",
        ),
        ({"p": {"curriculum": [{"value": 1}]}}, "has no 'name'"),
        ({"p": {"curriculum": [{"name": "a"}]}}, "has no 'value'"),
        (
            {
                "p": {
                    "curriculum": [
                        {"name": "a", "value": 1, "completion_criteria": {"threshold": 1}},
                        {"name": "b", "value": 2},
                    ]
                }
            },
            "needs 'behavior'",
        ),
        (
            {
                "p": {
                    "curriculum": [
                        {
                            "name": "a",
                            "value": 1,
                            "completion_criteria": {"behavior": "B", "measure": "time"},
                        },
                        {"name": "b", "value": 2},
                    ]
                }
            },
            "measure must be 'reward' or 'progress'",
        ),
        (
            {
                "p": {
                    "curriculum": [
                        {
                            "name": "a",
                            "value": 1,
                            "completion_criteria": {"behavior": "B", "measure": "progress", "threshold": 2},
                        },
                        {"name": "b", "value": 2},
                    ]
                }
            },
            r"threshold must be in \[0, 1\]",
        ),
        (
            {
                "p": {
                    "curriculum": [
                        {"name": "a", "value": 1, "completion_criteria": {"behavior": "B", "treshold": 2}},
                        {"name": "b", "value": 2},
                    ]
                }
            },
            r"unknown completion_criteria key\(s\) \['treshold'\]",
        ),
        ([1, 2], "must be a mapping"),
    ],
)
def test_environment_parameters_errors(config: object, match: str) -> None:
    with pytest.raises(UnityConfigurationError, match=match):
        EnvironmentParameters(config)


def test_final_lesson_criteria_are_ignored(caplog: pytest.LogCaptureFixture) -> None:
    crit = {"behavior": "B", "threshold": 1}
    params = EnvironmentParameters(
        {
            "p": {
                "curriculum": [
                    {"name": "a", "value": 1, "completion_criteria": crit},
                    {"name": "b", "value": 2, "completion_criteria": crit},
                ]
            }
        }
    )
    assert params.parameters["p"].lessons[-1].completion_criteria is None
    assert "final lesson" in caplog.text


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
def csharp_stat(key: str, value: float, method: int) -> bytes:
    """``StatsSideChannel.AddStat`` + framing, as Unity sends it."""
    encoded = key.encode("ascii")
    payload = struct.pack("<i", len(encoded)) + encoded + struct.pack("<f", value) + struct.pack("<i", method)
    return STATS_GUID + struct.pack("<i", len(payload)) + payload


def test_stats_bytes_from_csharp_are_read() -> None:
    channels = UnityChannels()
    data = csharp_stat("Env/Score", 1.5, 0) + csharp_stat("Env/Score", 2.5, 1) + csharp_stat("Hits", 3, 2)
    SideChannelManager(channels.all()).process_side_channel_message(data)
    assert dict(channels.stats.get_and_reset_stats()) == {
        "Env/Score": [(1.5, StatsAggregationMethod.AVERAGE), (2.5, StatsAggregationMethod.MOST_RECENT)],
        "Hits": [(3.0, StatsAggregationMethod.SUM)],
    }


class FakeModel:
    def __init__(self, env: object, folder: str) -> None:
        self.env = env
        self.logger = configure(folder, ["csv"])
        self.num_timesteps = 0

    def get_env(self) -> object:
        return self.env


def feed(channels: UnityChannels, *stats: tuple[str, float, int]) -> None:
    data = b"".join(csharp_stat(*s) for s in stats)
    SideChannelManager(channels.all()).process_side_channel_message(data)


def test_stats_callback_honors_aggregation(tmp_path) -> None:
    a, b = UnityChannels(), UnityChannels()  # two Unity instances
    env = SimpleNamespace(get_attr=lambda name: [a, b], num_envs=2)
    model = FakeModel(env, str(tmp_path))
    callback = StatsCallback(prefix="unity/")
    callback.init_callback(model)
    callback.on_training_start({}, {})
    avg, last, total, hist = 0, 1, 2, 3
    feed(a, ("avg", 1.0, avg), ("last", 5.0, last), ("sum", 1.0, total), ("hist", 1.0, hist))
    feed(b, ("avg", 2.0, avg), ("sum", 2.0, total), ("hist", 2.0, hist))
    callback.on_step()
    feed(a, ("avg", 6.0, avg), ("last", 7.0, last), ("sum", 4.0, total), ("hist", 6.0, hist))
    callback.on_step()
    model.logger.dump(1)
    # a new logging period starts from scratch
    feed(b, ("sum", 10.0, total), ("avg", 4.0, avg))
    callback.on_step()
    model.logger.dump(2)
    first, second = read_progress(tmp_path)
    assert first["unity/avg"] == pytest.approx(3.0)
    assert first["unity/last"] == pytest.approx(7.0)
    assert first["unity/sum"] == pytest.approx(7.0)
    assert first["unity/hist"] == pytest.approx(3.0)
    assert second["unity/sum"] == pytest.approx(10.0)
    assert second["unity/avg"] == pytest.approx(4.0)
    assert np.isnan(second["unity/last"])


def test_stats_callback_inside_ppo(tmp_path) -> None:
    gym = pytest.importorskip("gymnasium")
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    class StatsEnv(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def __init__(self) -> None:
            self.unity_sb3_channels = UnityChannels()
            self.t = 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(2, np.float32), {}

        def step(self, action):
            self.t += 1
            feed(self.unity_sb3_channels, ("steps", 1.0, 2), ("t", float(self.t), 1))
            return np.zeros(2, np.float32), 0.0, self.t % 8 == 0, False, {}

    model = PPO("MlpPolicy", DummyVecEnv([StatsEnv]), n_steps=16, batch_size=16, n_epochs=1, device="cpu")
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(32, callback=StatsCallback())
    rows = read_progress(tmp_path)
    assert [row["steps"] for row in rows] == [16.0, 16.0]
    assert [row["t"] for row in rows] == [16.0, 32.0]


# ------------------------------------------------------------------ curriculum state (resume)
def scale_curriculum(threshold: float = 1e9, min_lesson_length: int = 100) -> dict:
    """Ball3D's ``scale`` in three lessons; only the test's state moves past lesson 0."""
    crit = {"behavior": "3DBall", "threshold": threshold, "min_lesson_length": min_lesson_length}
    return {
        "scale": {
            "curriculum": [
                {"name": "small", "value": 1.0, "completion_criteria": crit},
                {"name": "medium", "value": 1.5, "completion_criteria": crit},
                {"name": "large", "value": 2.0},
            ]
        },
        "gravity": 9.81,
    }


def medium_state(smoothed: float = 3.25) -> dict:
    return {
        "lesson_numbers": {"scale": 1, "gravity": 0},
        "lesson_names": {"scale": "medium", "gravity": "gravity"},
        "smoothed_values": {"scale": smoothed, "gravity": 0.0},
    }


def parameter_messages(channels: UnityChannels) -> list[tuple]:
    """The environment-parameter messages queued for Unity, as its C# channel reads them."""
    return [csharp_environment_parameter(p) for g, p in csharp_split(wire(channels)) if g == PARAMS_GUID]


def test_curriculum_state_round_trip_through_json() -> None:
    import json

    params = EnvironmentParameters(scale_curriculum(threshold=1.0, min_lesson_length=1))
    params.update_lessons(0.0, [4.0])  # smoothed 0.75 * 4 = 3 > 1: lesson 1
    params.update_lessons(0.0, [0.0])  # smoothed 0.25 * 3 = 0.75: stays
    state = params.state_dict()
    assert state == medium_state(smoothed=0.75)
    other = EnvironmentParameters(scale_curriculum(threshold=1.0, min_lesson_length=1))
    other.load_state_dict(json.loads(json.dumps(state)))
    assert other.lesson_numbers == {"scale": 1, "gravity": 0}
    assert other.smoothed_values == {"scale": 0.75, "gravity": 0.0}
    assert other.current_lessons()["scale"].name == "medium"
    # the smoothed reward continues: 0.25 * 0.75 + 0.75 * 2 = 1.6875 > 1 ends the lesson
    assert other.update_lessons(0.0, [2.0]) == (True, False) and other.lesson_numbers["scale"] == 2


def test_loaded_lessons_reach_the_embedded_scene() -> None:
    from unity_sb3.open import open_unity

    params = EnvironmentParameters(scale_curriculum())
    params.load_state_dict(medium_state())
    env = open_unity("Ball3D", transport="inprocess", num_agents=2, environment_parameters=params)
    try:
        env.reset()
        assert env.side_channels.environment_parameters == pytest.approx({"scale": 1.5, "gravity": 9.81})
        scales = env.unity_sb3_channels.stats.get_and_reset_stats()["Environment/BallScale"]
        assert [value for value, _ in scales] == [1.5, 1.5]  # both first episodes use the saved lesson
    finally:
        env.close()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            lambda s: s["lesson_numbers"].update(size=0),
            r"parameter 'size' that environment_parameters does not",
        ),
        (
            lambda s: s["lesson_numbers"].update(scale=3),
            r"'scale' was saved in lesson 3 but its curriculum now has 3",
        ),
        (lambda s: s["lesson_numbers"].update(gravity=1), r"'gravity' was saved in lesson 1 .* has 1 lesson"),
        (
            lambda s: s["lesson_names"].update(scale="huge"),
            r"'scale': lesson 1 was named 'huge' when saved and is 'medium'",
        ),
    ],
    ids=["unknown-parameter", "lesson-out-of-range", "constant-out-of-range", "renamed-lesson"],
)
def test_curriculum_state_that_does_not_fit_is_an_error(change, match: str) -> None:
    params = EnvironmentParameters(scale_curriculum())
    state = medium_state()
    change(state)
    with pytest.raises(UnityConfigurationError, match=match) as error:
        params.load_state_dict(state)
    assert "environment_parameters changed since the state was saved" in str(error.value)
    assert params.lesson_numbers == {"scale": 0, "gravity": 0}, "a failed load changes nothing"


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ([1, 2], "a mapping with 'lesson_numbers'"),
        ({"smoothed_values": {}}, "a mapping with 'lesson_numbers'"),
        ({"lesson_numbers": {"scale": -1}}, "lesson number of 'scale' must be an int >= 0"),
        ({"lesson_numbers": {"scale": 1.0}}, "lesson number of 'scale' must be an int >= 0"),
        ({"lesson_numbers": {"scale": True}}, "lesson number of 'scale' must be an int >= 0"),
        ({"lesson_numbers": {}, "smoothed_values": {"scale": math.nan}}, "smoothed value of 'scale'"),
        ({"lesson_numbers": {}, "lesson_names": ["a"]}, "lesson_names must be a mapping"),
    ],
)
def test_malformed_curriculum_state_is_an_error(state: object, match: str) -> None:
    with pytest.raises(UnityConfigurationError, match=match):
        EnvironmentParameters(scale_curriculum()).load_state_dict(state)
    with pytest.raises(UnityConfigurationError, match=match):  # also with strict=False
        EnvironmentParameters(scale_curriculum()).load_state_dict(state, strict=False)


def test_non_strict_load_warns_clamps_and_ignores() -> None:
    params = EnvironmentParameters(scale_curriculum())
    state = {"lesson_numbers": {"scale": 7, "size": 2}, "smoothed_values": {"scale": 1.0, "size": 5.0}}
    with pytest.warns(UserWarning) as record:
        params.load_state_dict(state, strict=False)
    messages = " | ".join(str(w.message) for w in record)
    assert "'size' that environment_parameters does not have" in messages
    assert "'scale' was saved in lesson 7" in messages
    assert params.lesson_numbers == {"scale": 2, "gravity": 0}  # clamped to the last lesson
    assert params.smoothed_values == {"scale": 1.0, "gravity": 0.0}


def test_curriculum_missing_from_the_state_starts_at_lesson_0(caplog: pytest.LogCaptureFixture) -> None:
    config = scale_curriculum()
    config["mass"] = {
        "curriculum": [dict(lesson, value=i) for i, lesson in enumerate(config["scale"]["curriculum"])]
    }
    params = EnvironmentParameters(config)
    params.smoothed_values["mass"] = 9.0
    with caplog.at_level("WARNING"):
        params.load_state_dict(medium_state())
    assert params.lesson_numbers == {"scale": 1, "gravity": 0, "mass": 0}
    assert params.smoothed_values["mass"] == 0.0
    assert "no 'mass': it starts at lesson 0" in caplog.text


def test_curriculum_callback_resumes_inside_ppo(tmp_path) -> None:
    """A state loaded before ``learn`` (parameters found on the env at training start): the
    lessons are the saved ones, the scene is reset with their values before the first
    training step, and the recent episode returns continue."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecMonitor

    from unity_sb3.callbacks.curriculum import CurriculumCallback
    from unity_sb3.open import open_unity
    from unity_sb3.wrappers.vec_env import UnityVecEnv

    env = open_unity("Ball3D", transport="inprocess", num_agents=2, environment_parameters=scale_curriculum())
    venv = VecMonitor(UnityVecEnv([env]))
    channels = env.unity_sb3_channels
    scales: list[float] = []

    def drain() -> None:
        scales.extend(v for v, _ in channels.stats.get_and_reset_stats().get("Environment/BallScale", []))

    class AtStart(BaseCallback):
        def _on_training_start(self) -> None:
            drain()
            self.first_training_scales = scales[-2:]  # the episodes training starts with

        def _on_step(self) -> bool:
            return True

    try:
        drain()
        assert scales and set(scales) == {1.0}, "opened at lesson 0"
        callback = CurriculumCallback()
        with pytest.raises(UnityConfigurationError, match="no environment parameters yet"):
            callback.state_dict()
        callback.load_state_dict({"parameters": medium_state(), "reward_buffer": [1.0, 2.0, 3.0]})
        model = PPO("MlpPolicy", venv, n_steps=8, batch_size=16, n_epochs=1, device="cpu", seed=0)
        at_start = AtStart()
        model.learn(16, callback=[callback, at_start])
        drain()
        assert callback.parameters is channels.parameters
        assert callback.parameters.lesson_numbers == {"scale": 1, "gravity": 0}
        assert at_start.first_training_scales == [1.5, 1.5], "reset with the loaded lesson before training"
        assert env.side_channels.environment_parameters["scale"] == 1.5
        assert scales[-1] == 1.5 and 1.0 not in scales[scales.index(1.5) :]
        state = callback.state_dict()
        assert state["parameters"]["lesson_numbers"] == {"scale": 1, "gravity": 0}
        assert state["parameters"]["smoothed_values"]["scale"] == 3.25
        assert state["reward_buffer"][:3] == [1.0, 2.0, 3.0]
        model.learn(16, callback=callback, reset_num_timesteps=False)
        assert callback.parameters.lesson_numbers == {"scale": 1, "gravity": 0}
        assert list(callback.reward_buffer)[:3] == [1.0, 2.0, 3.0], "a second learn() keeps the returns"
    finally:
        venv.close()


def test_curriculum_callback_load_with_parameters_queues_values_at_once() -> None:
    from unity_sb3.callbacks.curriculum import CurriculumCallback

    channels = UnityChannels()
    callback = CurriculumCallback(scale_curriculum(), channels=channels)
    with pytest.raises(UnityConfigurationError, match="'scale' was saved in lesson 5"):
        callback.load_state_dict({"parameters": {"lesson_numbers": {"scale": 5}}})
    assert parameter_messages(channels) == [], "nothing sent for a refused state"
    with pytest.raises(UnityConfigurationError, match="reward_buffer must be a list"):
        callback.load_state_dict({"parameters": medium_state(), "reward_buffer": "1, 2"})
    callback.load_state_dict({"parameters": medium_state(), "reward_buffer": [4.0]})
    assert parameter_messages(channels) == [("scale", "Float", 1.5), ("gravity", "Float", f32(9.81))]
    assert callback.state_dict() == {"parameters": medium_state(), "reward_buffer": [4.0]}


def test_curriculum_callback_resends_values_to_a_restarted_instance(tmp_path) -> None:
    from unity_sb3.callbacks.curriculum import CurriculumCallback

    first = UnityChannels()
    env = SimpleNamespace(unity_sb3_channels=first, num_envs=1)
    model = FakeModel(env, str(tmp_path))
    callback = CurriculumCallback(scale_curriculum(), behavior_name="3DBall")
    callback.load_state_dict({"parameters": medium_state()})
    callback.init_callback(model)
    callback.update_locals({"rewards": np.zeros(1), "dones": np.zeros(1, bool), "infos": [{}]})
    callback.on_step()
    second = UnityChannels()  # the re-opened instance; it got lesson-0 values when it opened
    env.unity_sb3_channels = second
    callback.update_locals(
        {"rewards": np.zeros(1), "dones": np.ones(1, bool), "infos": [{"restarted": True}]}
    )
    callback.on_step()
    assert callback.channels == [second]
    assert parameter_messages(second) == [("scale", "Float", 1.5), ("gravity", "Float", f32(9.81))]
