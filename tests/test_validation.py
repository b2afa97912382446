"""The shared checks of user settings (unity_sb3.validation): keys, numbers, choices, did-you-mean."""

from __future__ import annotations

import math

import numpy as np
import pytest

from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.validation import (
    check_keys,
    choice,
    close_matches,
    did_you_mean,
    finite_float,
    flag,
    is_int,
    is_number,
    number,
    short_repr,
    unknown_keys,
)


class CallerError(ValueError):
    """Stands for a room's own error class (MLAgentsConfigError, RewardSignalConfigError, ...)."""


@pytest.mark.parametrize(
    ("word", "choices", "expected"),
    [
        ("curiousity", ("extrinsic", "curiosity", "gail"), " Did you mean 'curiosity'?"),
        ("bata", ("beta", "epsilon"), " Did you mean 'beta'?"),
        ("zzz", ("beta", "epsilon"), ""),
        (3, ("3x", "beta"), " Did you mean '3x'?"),  # a YAML key need not be a string
    ],
)
def test_did_you_mean_suggests_the_closest_choice_or_nothing(word, choices, expected) -> None:
    assert did_you_mean(word, choices) == expected


def test_close_matches_can_ignore_case_and_return_the_original_spelling() -> None:
    assert close_matches("BALL3D", ["Ball3D", "Basic"]) == []
    assert close_matches("BALL3D", ["Ball3D", "Basic"], ignore_case=True) == ["Ball3D"]
    assert close_matches("poc", ["ppo", "poca", "sac"], n=3, cutoff=0.5) == ["poca", "ppo"]


def test_check_keys_raises_the_callers_error_with_a_hint_and_the_valid_keys() -> None:
    with pytest.raises(CallerError) as info:
        check_keys({"beta": 1, "lambd": 0.9, "bata": 2}, ("beta", "lambd"), "hyperparameters", CallerError)
    assert str(info.value) == (
        "Unknown key 'bata' in hyperparameters. Did you mean 'beta'? Valid keys: beta, lambd."
    )


@pytest.mark.parametrize("config", [None, {}, {"beta": 1}])
def test_check_keys_passes_known_keys_and_an_empty_section(config) -> None:
    check_keys(config, ("beta",), "hyperparameters", CallerError)


def test_check_keys_refuses_a_section_that_is_not_a_mapping() -> None:
    with pytest.raises(
        UnityConfigurationError, match=r"engine_settings must be a mapping of settings, got \[1\]"
    ):
        check_keys([1], ("time_scale",), "engine_settings")


def test_unknown_keys_lists_every_unknown_key_sorted() -> None:
    assert unknown_keys({"min": 1, "max": 2, "seed": 3}, ("seed", "min_value", "max_value")) == ["max", "min"]
    assert unknown_keys({"seed": 3}, ("seed",)) == []


@pytest.mark.parametrize(
    ("value", "kwargs", "expected"),
    [
        (3, {}, 3.0),
        (np.float32(0.5), {"low": 0.0, "high": 1.0}, 0.5),
        (4.0, {"low": 1, "integer": True}, 4),
        ("3e-4", {"text": True}, 3e-4),
    ],
)
def test_number_returns_the_value_as_float_or_int(value, kwargs, expected) -> None:
    out = number(value, "x", error=CallerError, **kwargs)
    assert out == pytest.approx(expected) and type(out) is type(expected)


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        ("3e-4", {}, "beta must be a number, got '3e-4'."),
        ("a lot", {"text": True}, "beta must be a number, got 'a lot'."),
        (True, {}, "beta must be a number, got True."),
        (math.nan, {}, "beta must be a number, got nan."),
        (math.inf, {"low": 0}, "beta must be a number, got inf."),
        (-1, {"low": 0.0}, "beta must be >= 0.0, got -1."),
        (1.5, {"low": 0.0, "high": 1.0}, "beta=1.5 is outside [0.0, 1.0]."),
        (2.5, {"low": 1, "integer": True}, "beta must be a whole number, got 2.5."),
    ],
)
def test_number_refuses_with_the_callers_error(value, kwargs, message) -> None:
    with pytest.raises(CallerError) as info:
        number(value, "beta", error=CallerError, **kwargs)
    assert str(info.value) == message


def test_choice_lists_the_choices_and_suggests_one() -> None:
    assert choice("ppo", ("ppo", "sac"), "trainer_type", CallerError) == "ppo"
    with pytest.raises(CallerError) as info:
        choice("ppp", ("ppo", "sac", "poca"), "trainer_type", CallerError)
    assert str(info.value) == "trainer_type must be one of ppo, sac, poca, got 'ppp'. Did you mean 'ppo'?"


@pytest.mark.parametrize("value", [1, "yes", None, np.bool_(True)])
def test_flag_accepts_only_true_or_false(value) -> None:
    assert flag(True, "normalize") is True and flag(False, "normalize") is False
    with pytest.raises(CallerError, match="normalize must be true or false, got"):
        flag(value, "normalize", CallerError)


def test_finite_float_and_the_type_predicates() -> None:
    assert finite_float(np.int64(3), "x") == 3.0
    with pytest.raises(UnityConfigurationError, match="x must be a finite number, got inf"):
        finite_float(math.inf, "x")
    with pytest.raises(CallerError, match="must be a finite number"):
        finite_float("1", "x", CallerError)
    assert is_int(np.int32(2)) and not is_int(True) and not is_int(2.0)
    assert is_number(np.float32(1)) and not is_number(np.bool_(False)) and not is_number("1")
    assert short_repr("x" * 100, limit=10) == "'xxxxxx..." and short_repr(1) == "1"
