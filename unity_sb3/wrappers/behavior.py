"""Choosing a behavior of a Unity scene by name, for every wrapper (one place, one set of errors)."""

from __future__ import annotations

from collections.abc import Iterable

from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.validation import close_matches


def split_behavior_name(name: str) -> tuple[str, int]:
    """``"3DBall?team=1"`` -> ``("3DBall", 1)``; a name without a team gives team 0."""
    base, _, query = name.partition("?")
    team = 0
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key == "team" and value.lstrip("-").isdigit():
            team = int(value)
    return base, team


def choose_behavior(
    names: Iterable[str], behavior_name: str | None, where: str, option: str = "behavior_name="
) -> str:
    """The behavior of a scene that ``behavior_name`` names.

    ``behavior_name`` is the full name (``"3DBall?team=0"``), the name without ``?team=`` when
    only one behavior has it, or ``None`` for the only behavior of the scene.

    :param names: the scene's behavior names (the keys of ``BaseEnv.behavior_specs``).
    :param behavior_name: the behavior asked for, or ``None``.
    :param where: what the chosen behavior is for, ending the error that asks for a choice
        when the scene has several behaviors, e.g. ``"whose agents become the slots"``.
    :param option: how the caller names a behavior, in that error (a command gives its flag).
    :return: the full behavior name.
    :raises UnityConfigurationError: the scene has no behavior, several and none was named, or
        none by that name (with the closest name as a hint).
    """
    names = list(names)
    if not names:
        raise UnityConfigurationError(
            "the Unity scene declares no behaviors; check that it has an Agent with a BehaviorParameters component"
        )
    if behavior_name is None:
        if len(names) == 1:
            return names[0]
        raise UnityConfigurationError(
            f"the scene has several behaviors ({len(names)} behaviors: {names}); pass {option} to "
            f"choose the one {where}"
        )
    if behavior_name in names:
        return behavior_name
    same = [n for n in names if split_behavior_name(n)[0] == behavior_name]  # "3DBall" for "3DBall?team=0"
    if len(same) == 1:
        return same[0]
    if same:
        raise UnityConfigurationError(
            f"behavior {behavior_name!r} is the name of several behaviors {same}; pass the full name"
        )
    close = close_matches(behavior_name, names, cutoff=0.5, ignore_case=True)  # "3dball" -> "3DBall?team=0"
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise UnityConfigurationError(
        f"unknown behavior {behavior_name!r} not found; the scene has {names}{hint}"
    )
