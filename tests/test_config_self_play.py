"""The self_play section of ML-Agents' trainer YAML maps to SelfPlaySettings with nothing left unhonoured."""

from __future__ import annotations

import pytest

from unity_sb3.config.mlagents import convert_mlagents_config
from unity_sb3.config.mlagents_schema import MLAgentsConfigError
from unity_sb3.selfplay import SelfPlaySettings


def config(trainer_type: str, behaviors: dict[str, dict]) -> dict:
    """A trainer config with Unity's hyperparameters for its competitive scenes and these self_play sections."""
    return {
        "behaviors": {
            name: {
                "trainer_type": trainer_type,
                "hyperparameters": {"batch_size": 2048, "buffer_size": 20480, "learning_rate": 0.0003},
                "max_steps": 50000000,
                "self_play": self_play,
            }
            for name, self_play in behaviors.items()
        }
    }


# the self_play sections of Unity's config/poca/SoccerTwos.yaml, config/poca/StrikersVsGoalie.yaml
# and config/ppo/Tennis.yaml
SOCCER = {"save_steps": 50000, "team_change": 200000, "swap_steps": 2000, "window": 10,
          "play_against_latest_model_ratio": 0.5, "initial_elo": 1200.0}  # fmt: skip
GOALIE = {**SOCCER, "swap_steps": 1000}
STRIKER = {**SOCCER, "swap_steps": 4000}
TENNIS = {**SOCCER, "team_change": 100000}


@pytest.mark.parametrize(
    ("trainer_type", "behaviors"),
    [
        ("poca", {"SoccerTwos": SOCCER}),
        ("poca", {"Goalie": GOALIE, "Striker": STRIKER}),
        ("ppo", {"Tennis": TENNIS}),
    ],
)
def test_unity_self_play_sections_map_with_every_setting_honoured(trainer_type, behaviors):
    data = config(trainer_type, behaviors)
    for name, section in behaviors.items():
        run = convert_mlagents_config(data, behavior=name)
        assert run.self_play == SelfPlaySettings(**section)
        rows = [row for row in run.rows if row.source.startswith("self_play")]
        assert {row.source for row in rows} == {f"self_play.{key}" for key in section}
        assert all(row.honored for row in rows)
        assert "self_play" not in {row.source for row in run.unhonored}


def test_missing_self_play_keys_take_mlagents_defaults_and_say_so():
    run = convert_mlagents_config(config("ppo", {"Tennis": {"save_steps": 10000}}), behavior="Tennis")
    assert run.self_play.team_change == 50000 and run.self_play.swap_steps == 2000
    notes = {row.source: row.note for row in run.rows}
    assert notes["self_play.team_change"].endswith("(ML-Agents' default)")
    assert not notes["self_play.save_steps"].endswith("(ML-Agents' default)")


def test_no_self_play_section_means_no_self_play():
    data = config("ppo", {"Tennis": None})
    del data["behaviors"]["Tennis"]["self_play"]
    assert convert_mlagents_config(data).self_play is None


def test_a_bad_self_play_key_is_an_mlagents_config_error_naming_it():
    data = config("ppo", {"Tennis": {"windows": 5}})
    with pytest.raises(MLAgentsConfigError, match=r"behaviors\.Tennis\.self_play\. Did you mean 'window'"):
        convert_mlagents_config(data)
