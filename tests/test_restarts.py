"""RestartPolicy: the one check of the restart settings and the rate limit (unity_sb3.wrappers.restarts).

Crashing instances restarted by UnityVecEnv under this policy: tests/test_crash_restarts.py.
"""

from __future__ import annotations

import math

import pytest

from unity_sb3.config.mlagents import MLAgentsConfigError, convert_mlagents_config
from unity_sb3.scenes.scripted import ScriptedAgent, ScriptedEnv
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers.restarts import RESTART_SETTINGS, RestartPolicy
from unity_sb3.wrappers.vec_env import UnityVecEnv


def test_defaults_are_ml_agents():
    assert RestartPolicy() == RestartPolicy(max_restarts=10, rate_limit_n=1, rate_limit_period_s=60.0)


@pytest.mark.parametrize(
    ("policy", "restarts", "allowed"),
    [
        (RestartPolicy(max_restarts=2), 1, True),
        (RestartPolicy(max_restarts=2), 2, False),
        (RestartPolicy(max_restarts=0), 0, False),
        (RestartPolicy(max_restarts=-1), 10_000, True),
    ],
)
def test_lifetime_limit(policy: RestartPolicy, restarts: int, allowed: bool):
    assert policy.within_lifetime(restarts) is allowed


def test_rate_limit_counts_only_restarts_inside_the_window():
    policy = RestartPolicy(rate_limit_n=2, rate_limit_period_s=10.0)
    assert policy.recent([80.0, 90.0, 95.0], now=100.0) == [95.0]  # 90 is exactly 10 s old: out
    assert policy.allows([80.0, 95.0], now=100.0)
    assert not policy.allows([92.0, 95.0], now=100.0)
    assert policy.allows([92.0, 95.0], now=102.5)
    assert "crashed again after 2 restart(s) within 10 s (restarts_rate_limit_n=2" in policy.refusal(
        [92.0, 95.0], now=100.0
    )


def test_no_rate_limit_allows_any_history():
    assert RestartPolicy(rate_limit_n=-1).allows([1.0] * 100, now=1.0)
    assert not RestartPolicy(rate_limit_n=0).allows([], now=1.0)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("max_restarts", -2, "max_restarts must be a whole number >= 0, or -1 for no limit; got -2."),
        ("max_restarts", 2.5, "max_restarts must be a whole number >= 0, or -1 for no limit; got 2.5."),
        ("restarts_rate_limit_n", True, "restarts_rate_limit_n must be a whole number >= 0, or -1"),
        ("restarts_rate_limit_n", "3", "restarts_rate_limit_n must be a whole number >= 0, or -1"),
        ("restarts_rate_limit_period_s", "soon", "must be a number of seconds, got 'soon'."),
        ("restarts_rate_limit_period_s", 0, "must be a positive number of seconds, got 0."),
        ("restarts_rate_limit_period_s", math.nan, "must be a positive number of seconds, got nan."),
        ("restarts_rate_limit_period_s", math.inf, "must be a positive number of seconds, got inf."),
    ],
)
def test_check_setting_refuses_bad_values_with_the_callers_error(name: str, value, message: str):
    with pytest.raises(MLAgentsConfigError) as info:
        RestartPolicy.check_setting(name, value, error=MLAgentsConfigError)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [("max_restarts", -1, -1), ("restarts_rate_limit_n", 0, 0), ("restarts_rate_limit_period_s", 30, 30.0)],
)
def test_check_setting_returns_good_values(name: str, value, expected):
    out = RestartPolicy.check_setting(name, value)
    assert out == expected and type(out) is type(expected)


def test_the_python_api_converts_counts_with_int():
    policy = RestartPolicy(max_restarts=2.0, rate_limit_n=3.7, rate_limit_period_s=5).check(convert=True)
    assert policy == RestartPolicy(2, 3, 5.0)
    with pytest.raises(
        UnityConfigurationError, match="max_restarts must be >= 0, or -1 for no limit; got -2"
    ):
        RestartPolicy(max_restarts=-2).check(convert=True)
    with pytest.raises(UnityConfigurationError, match="max_restarts must be a whole number >= 0"):
        RestartPolicy(max_restarts="many").check(convert=True)


def test_check_setting_names_the_setting_as_the_caller_says():
    with pytest.raises(ValueError, match=r"max_restarts in run\.yml must be a whole number"):
        RestartPolicy.check_setting("max_restarts", -5, "max_restarts in run.yml", ValueError)
    with pytest.raises(ValueError, match="is not a restart setting"):
        RestartPolicy.check_setting("restart_on_crash", True)
    assert RESTART_SETTINGS == ("max_restarts", "restarts_rate_limit_n", "restarts_rate_limit_period_s")


@pytest.mark.parametrize("period", [math.nan, math.inf])
def test_unity_vec_env_refuses_a_period_that_is_not_a_positive_finite_number(period: float):
    # before RestartPolicy, NaN passed UnityVecEnv's `period <= 0` check and disabled the rate limit
    with pytest.raises(
        UnityConfigurationError, match="restarts_rate_limit_period_s must be a positive number"
    ):
        UnityVecEnv(
            lambda: ScriptedEnv([ScriptedAgent()]), restart_on_crash=True, restarts_rate_limit_period_s=period
        )


def test_unity_vec_env_exposes_its_policy():
    venv = UnityVecEnv(lambda: ScriptedEnv([ScriptedAgent()]), max_restarts=3, restarts_rate_limit_n=2)
    try:
        assert venv.restart_policy == RestartPolicy(3, 2, 60.0)
        assert (venv.max_restarts, venv.restarts_rate_limit_n, venv.restarts_rate_limit_period_s) == (
            3,
            2,
            60.0,
        )
    finally:
        venv.close()


def test_ml_agents_env_settings_go_through_the_same_check():
    config = {
        "behaviors": {"3DBall": {"trainer_type": "ppo"}},
        "env_settings": {"restarts_rate_limit_period_s": "6e1", "max_lifetime_restarts": 4},
    }
    assert convert_mlagents_config(config).restarts == {
        "restarts_rate_limit_period_s": 60.0,
        "max_restarts": 4,
    }
    config["env_settings"] = {"restarts_rate_limit_period_s": float("nan")}
    with pytest.raises(MLAgentsConfigError, match="restarts_rate_limit_period_s must be a positive number"):
        convert_mlagents_config(config)
