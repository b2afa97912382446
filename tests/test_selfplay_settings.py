"""ML-Agents' self_play settings: keys, defaults, checks."""

from __future__ import annotations

import pytest

from unity_sb3.selfplay import SELF_PLAY_KEYS, SelfPlayConfigError, SelfPlaySettings


def test_defaults_are_mlagents_defaults():
    settings = SelfPlaySettings()
    assert settings.as_dict() == {
        "save_steps": 20000,
        "team_change": 100000,
        "swap_steps": 2000,
        "window": 10,
        "play_against_latest_model_ratio": 0.5,
        "initial_elo": 1200.0,
    }
    assert tuple(settings.as_dict()) == SELF_PLAY_KEYS


def test_team_change_defaults_to_five_times_save_steps():
    assert SelfPlaySettings.from_mapping({"save_steps": 50000}).team_change == 250000
    assert SelfPlaySettings.from_mapping({"save_steps": 50000, "team_change": 7}).team_change == 7


def test_an_empty_section_gives_the_defaults_and_text_numbers_are_read():
    assert SelfPlaySettings.from_mapping(None) == SelfPlaySettings()
    assert SelfPlaySettings.from_mapping({"save_steps": "5e4"}).save_steps == 50000


def test_unknown_key_names_the_section_and_suggests_the_key():
    with pytest.raises(
        SelfPlayConfigError,
        match=r"Unknown key 'swap_step' in behaviors.Tennis.self_play\. Did you mean 'swap_steps'",
    ):
        SelfPlaySettings.from_mapping({"swap_step": 10}, where="behaviors.Tennis.self_play")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "play_against_latest_model_ratio",
            1.5,
            r"play_against_latest_model_ratio=1.5 is outside \[0.0, 1.0\]",
        ),
        ("window", 0, "window must be >= 1"),
        ("save_steps", 10.5, "save_steps must be a whole number"),
        ("swap_steps", "often", "swap_steps must be a number"),
        ("initial_elo", float("nan"), "initial_elo must be a number"),
    ],
)
def test_bad_values_are_refused_with_the_key(key, value, message):
    with pytest.raises(SelfPlayConfigError, match=message):
        SelfPlaySettings.from_mapping({key: value})
