"""Embedded scenes: pure-Python re-creations of ML-Agents example scenes as ``BaseEnv``\\ s.

Each scene has the observation and action layout of its ML-Agents original where practical
and the semantics of a Unity build (``DecisionSteps`` / ``TerminalSteps``, auto-reset,
``interrupted`` on max step, side channels), vectorised over agents with numpy::

    from unity_sb3.scenes import list_scenes, make_scene, describe_scene

    env = make_scene("Ball3D", seed=1, num_agents=12)
    env.reset()
    decision_steps, terminal_steps = env.get_steps("3DBall?team=0")

Scene modules are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
import numbers
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.errors import UnityConfigurationError

if TYPE_CHECKING:
    from mlagents_envs.side_channel.side_channel import SideChannel

    from unity_sb3.scenes.base import EmbeddedScene

#: scene name -> "module:class"
SCENES: dict[str, str] = {
    "Ball3D": "unity_sb3.scenes.ball3d:Ball3D",
    "GridWorld": "unity_sb3.scenes.gridworld:GridWorld",
    "Escape": "unity_sb3.scenes.escape:Escape",
    "PyramidsLite": "unity_sb3.scenes.pyramids:PyramidsLite",
    "Basic": "unity_sb3.scenes.basic:Basic",
    "Sorter": "unity_sb3.scenes.sorter:Sorter",
    "SoccerTwos": "unity_sb3.scenes.soccer:SoccerTwos",
    "StrikersVsGoalie": "unity_sb3.scenes.strikers_vs_goalie:StrikersVsGoalie",
    "Tennis": "unity_sb3.scenes.tennis:Tennis",
    "HybridLine": "unity_sb3.scenes.hybrid_line:HybridLine",
    "Hallway": "unity_sb3.scenes.hallway:Hallway",
}

__all__ = [
    "SCENES",
    "EmbeddedScene",
    "describe_scene",
    "list_scenes",
    "make_scene",
    "replicate_areas",
    "scene_class",
]


def __getattr__(name: str) -> Any:
    if name == "EmbeddedScene":
        from unity_sb3.scenes.base import EmbeddedScene

        return EmbeddedScene
    raise AttributeError(f"module 'unity_sb3.scenes' has no attribute {name!r}")


def list_scenes() -> list[str]:
    """Names of the embedded scenes, for :func:`make_scene`."""
    return list(SCENES)


def scene_class(name: str) -> type[EmbeddedScene]:
    """The ``EmbeddedScene`` subclass of scene ``name`` (case-insensitive)."""
    key = {k.lower(): k for k in SCENES}.get(str(name).lower())
    if key is None:
        raise UnityConfigurationError(f"Unknown scene {name!r}; available scenes: {', '.join(SCENES)}.")
    module, cls = SCENES[key].split(":")
    return getattr(importlib.import_module(module), cls)


def make_scene(
    name: str, seed: int = 0, side_channels: Sequence[SideChannel] | None = None, **params: Any
) -> EmbeddedScene:
    """Create an embedded scene.

    :param name: one of :func:`list_scenes` (case-insensitive).
    :param seed: seed of the scene's random generator; same seed and same actions give
        identical steps.
    :param side_channels: ``mlagents_envs`` side channels (e.g. ``EnvironmentParametersChannel``,
        ``StatsSideChannel``) used in-process, as with ``UnityEnvironment``.
    :param params: scene parameters (``num_agents``, ``max_steps``, ... see :func:`describe_scene`).
    :return: the scene, a ``mlagents_envs.base_env.BaseEnv``; call ``reset()`` first.
    """
    return scene_class(name)(seed=seed, side_channels=side_channels, **params)


def replicate_areas(name: str, params: Mapping[str, Any], num_areas: int) -> dict[str, Any]:
    """Scene parameters with the scene's training areas copied ``num_areas`` times.

    The one rule for ML-Agents' ``num_areas`` on an embedded scene, which Unity's
    ``TrainingAreaReplicator`` applies to a build after the handshake: the scene's ``num_agents``
    areas (the given value, else the scene's default) become ``num_agents * num_areas``.
    ``open_unity`` applies it in-process; the stand-in player applies it when the handshake asks.

    :param name: one of :func:`list_scenes` (case-insensitive).
    :param params: the scene parameters asked for (not changed).
    :param num_areas: copies of the scene's areas, >= 1; 1 returns ``params`` as they are.
    :return: the parameters to create the scene with.
    :raises UnityConfigurationError: the scene has no ``num_agents`` parameter to scale.
    """
    if num_areas == 1:
        return dict(params)
    defaults = getattr(scene_class(name), "PARAMS", {})
    if "num_agents" not in defaults:
        raise UnityConfigurationError(
            f"Scene {name!r} has no 'num_agents' parameter, so its training area cannot be copied "
            f"num_areas={num_areas} times; open it with num_areas=1."
        )
    areas = params.get("num_agents", defaults["num_agents"])
    if isinstance(areas, bool) or not isinstance(areas, numbers.Integral) or areas < 1:
        raise UnityConfigurationError(
            f"Scene {name!r}: num_agents must be a whole number >= 1 to copy its areas, got {areas!r}."
        )
    return {**params, "num_agents": int(areas) * num_areas}


def describe_scene(name: str, **params: Any) -> str:
    """Human-readable description of a scene: behavior, observation and action specs, parameters."""
    return scene_class(name).describe(**params)
