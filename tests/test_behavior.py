"""Choosing a scene's behavior by name (``unity_sb3.wrappers.behavior``), shared by every wrapper."""

from __future__ import annotations

import pytest

from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers.behavior import choose_behavior, split_behavior_name

TWO = ["A?team=0", "B?team=1"]


@pytest.mark.parametrize(
    ("names", "asked", "chosen"),
    [
        (["3DBall?team=0"], None, "3DBall?team=0"),
        (TWO, "B?team=1", "B?team=1"),
        (TWO, "B", "B?team=1"),  # the name without ?team= is enough when only one behavior has it
    ],
)
def test_chooses_the_named_or_the_only_behavior(names, asked, chosen):
    assert choose_behavior(names, asked, "to follow") == chosen


@pytest.mark.parametrize(
    ("names", "asked", "match"),
    [
        ([], None, "declares no behaviors"),
        ([], "A", "declares no behaviors"),
        (
            TWO,
            None,
            r"several behaviors \(2 behaviors: \['A\?team=0', 'B\?team=1'\]\).*choose the one to follow$",
        ),
        (TWO, "C", r"^unknown behavior 'C' not found; the scene has \['A\?team=0', 'B\?team=1'\]$"),
        (["3DBall?team=0"], "3dbal", r"did you mean '3DBall\?team=0'\?$"),
        (["S?team=0", "S?team=1"], "S", r"'S' is the name of several behaviors .*pass the full name"),
    ],
    ids=["no_behavior", "no_behavior_named", "several", "unknown", "did_you_mean", "ambiguous"],
)
def test_bad_choice_says_what_to_do(names, asked, match):
    with pytest.raises(UnityConfigurationError, match=match):
        choose_behavior(names, asked, "to follow")


@pytest.mark.parametrize(
    ("name", "split"),
    [("3DBall?team=7", ("3DBall", 7)), ("Walker", ("Walker", 0)), ("S?x=1&team=-2", ("S", -2))],
)
def test_split_behavior_name(name, split):
    assert split_behavior_name(name) == split


def test_the_choice_is_asked_for_in_the_callers_terms():
    """A command names its flag where the Python wrappers name their keyword."""
    with pytest.raises(UnityConfigurationError, match=r"pass --behavior NAME to choose the one to record$"):
        choose_behavior(TWO, None, "to record", option="--behavior NAME")
    with pytest.raises(UnityConfigurationError, match=r"pass behavior_name= to choose the one to follow$"):
        choose_behavior(TWO, None, "to follow")
