"""Environment parameters: samplers and their bytes, lessons advancing as in mlagents-learn, saved state."""

from __future__ import annotations

import math
import struct

import pytest
from csharp_channels import PARAMS_GUID, csharp_environment_parameter, csharp_split, f32, wire
from curricula import medium_state, scale_curriculum, three_lessons

from unity_sb3.unity.channels import UnityChannels
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.unity.parameters import (
    CompletionCriteria,
    ConstantSampler,
    EnvironmentParameters,
    GaussianSampler,
    MultiRangeUniformSampler,
    UniformSampler,
    parse_sampler,
)


# ------------------------------------------------------------------ samplers and their bytes
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


# ------------------------------------------------------------------ lessons
def criteria(**kwargs) -> CompletionCriteria:
    return CompletionCriteria(behavior="B", **kwargs)


@pytest.mark.parametrize(
    ("crit", "progress", "rewards", "smoothing", "expected"),
    [
        # not enough episodes in the lesson yet
        (criteria(threshold=1, min_lesson_length=3), 0.0, [10, 10], 0.0, (False, 0.0)),
        # reward, no smoothing: strictly greater than the threshold
        (
            criteria(threshold=5, min_lesson_length=3, signal_smoothing=False),
            0.0,
            [6, 6, 6],
            0.0,
            (True, 0.0),
        ),
        (criteria(threshold=6, signal_smoothing=False), 0.0, [6, 6], 0.0, (False, 0.0)),
        # smoothing: measure = 0.25 * previous + 0.75 * mean, stored as the new smoothing
        (criteria(threshold=5), 0.0, [8.0], 0.0, (True, 6.0)),
        (criteria(threshold=5), 0.0, [6.0], 0.0, (False, 4.5)),
        (criteria(threshold=5), 0.0, [6.0], 4.5, (True, 5.625)),
        # no episode at all with min_lesson_length 0: never completes on reward
        (criteria(threshold=-100), 0.0, [], 0.0, (False, 0.0)),
        (criteria(threshold=0), 0.0, [math.nan], 1.0, (False, 1.0)),
        # progress: strictly greater, still gated by min_lesson_length
        (criteria(measure="progress", threshold=0.5), 0.5, [], 0.0, (False, 0.0)),
        (criteria(measure="progress", threshold=0.5), 0.51, [], 0.0, (True, 0.0)),
        (criteria(measure="progress", threshold=0.5, min_lesson_length=2), 0.9, [1.0], 0.0, (False, 0.0)),
    ],
)
def test_need_increment_matches_mlagents(crit, progress, rewards, smoothing, expected) -> None:
    done, new_smoothing = crit.need_increment(progress, rewards, smoothing)
    assert done is expected[0] or done == expected[0]
    assert new_smoothing == pytest.approx(expected[1])


def test_update_lessons_advances_one_lesson_per_call_and_stops_at_last() -> None:
    params = EnvironmentParameters(three_lessons())
    assert params.has_curriculum and not params.parameters["gravity"].is_curriculum
    assert params.update_lessons(0.0, [0.5]) == (False, False)
    assert params.lesson_numbers["difficulty"] == 0
    assert params.update_lessons(0.0, [2.0]) == (True, False)
    assert params.lesson_numbers["difficulty"] == 1
    assert params.update_lessons(0.0, [2.0]) == (True, False)
    assert params.lesson_numbers["difficulty"] == 2
    assert params.update_lessons(0.0, [2.0]) == (False, False)
    assert params.current_samplers()["difficulty"].value == 2.0
    assert params.current_lessons()["difficulty"].name == "hard"


def test_update_lessons_reports_require_reset() -> None:
    params = EnvironmentParameters(three_lessons(require_reset=True))
    assert params.update_lessons(0.0, [2.0]) == (True, True)


def test_update_lessons_only_evaluates_behaviors_given() -> None:
    params = EnvironmentParameters(three_lessons(behavior="Walker"))
    assert params.update_lessons({"Other": 0.0}, {"Other": [5.0]}) == (False, False)
    assert params.update_lessons({"Walker": 0.0}, {"Walker": [5.0]}) == (True, False)


def test_reward_buffer_size_is_largest_min_lesson_length() -> None:
    config = three_lessons()
    config["difficulty"]["curriculum"][1]["completion_criteria"] = {"behavior": "B", "min_lesson_length": 7}
    params = EnvironmentParameters(config)
    assert params.reward_buffer_size() == 7
    assert params.reward_buffer_size("B") == 7
    assert params.reward_buffer_size("Other") == 1


def test_state_dict_round_trip() -> None:
    params = EnvironmentParameters(three_lessons())
    params.update_lessons(0.0, [2.0])
    other = EnvironmentParameters(three_lessons())
    other.load_state_dict(params.state_dict())
    assert other.lesson_numbers == {"difficulty": 1, "gravity": 0}


# ------------------------------------------------------------------ curriculum state (resume)
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
    env = open_unity(
        "Ball3D", transport="inprocess", num_agents=2, report_parameters=True, environment_parameters=params
    )
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
