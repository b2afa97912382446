"""Gymnasium ids for the embedded scenes: ``unity_sb3/<Scene>-v0``.

Cheap on purpose (no scene, torch or wrapper import): ``import unity_sb3`` calls
:func:`register_gymnasium_ids`. ``gymnasium.make("unity_sb3/Ball3D-v0", **kwargs)`` builds
``unity_sb3.wrappers.gym_env.UnityGymEnv(env="Ball3D", **kwargs)``.
"""

from __future__ import annotations

from unity_sb3.scenes import SCENES

NAMESPACE = "unity_sb3"
ENTRY_POINT = "unity_sb3.wrappers.gym_env:UnityGymEnv"


def gymnasium_id(scene: str) -> str:
    """The gymnasium id of an embedded scene, e.g. ``unity_sb3/Ball3D-v0``."""
    return f"{NAMESPACE}/{scene}-v0"


def register_gymnasium_ids() -> list[str]:
    """Register every embedded scene with gymnasium (idempotent).

    :return: the registered ids.
    """
    try:
        import gymnasium
    except ImportError:  # gymnasium is a dependency; stay importable without it
        return []
    ids = []
    for scene in SCENES:
        env_id = gymnasium_id(scene)
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"env": scene})
        ids.append(env_id)
    return ids
