"""Unity ids in RL Zoo and the one ``UnityVecEnv`` the bridge builds for them."""

from __future__ import annotations

from typing import Any

UNITY_PREFIX = "unity_sb3/"
#: gymnasium id for a Unity build or the Editor (``--env-kwargs target:"'path'"``)
BUILD_ID = "unity_sb3/Unity-v0"
#: ``--env-kwargs`` keys that configure :class:`UnityVecEnv`; the rest go to ``open_unity``
VEC_ENV_KEYS = (
    "behavior_name",
    "num_slots",
    "visual",
    "flatten_obs",
    "hybrid",
    "add_group_reward",
    "restart_on_crash",
    "max_restarts",
    "max_idle_steps",
    "restart_backoff",
)


def is_unity_id(env_id: Any) -> bool:
    """Whether a gymnasium id names a Unity scene (``unity_sb3/...``)."""
    return str(getattr(env_id, "gym_id", env_id)).startswith(UNITY_PREFIX)


def _scene_target(env_id: str, env_kwargs: dict[str, Any]) -> str:
    gym_id = str(env_id)
    if gym_id == BUILD_ID:
        target = env_kwargs.pop("target", None)
        if not target:
            raise ValueError(
                f"{BUILD_ID} needs the Unity build: --env-kwargs target:\"'path/to/build'\" "
                "(or target:\"'editor'\" to connect to the Editor's Play button)."
            )
        return str(target)
    if "target" in env_kwargs:
        raise ValueError(f"target= is only for {BUILD_ID}; {gym_id} is an embedded scene.")
    return gym_id[len(UNITY_PREFIX) :].rsplit("-v", 1)[0]


def make_unity_vec_env(
    env_id: str,
    n_instances: int = 1,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    first_worker_id: int = 0,
    monitor_file: str | None = None,
    monitor_kwargs: dict[str, Any] | None = None,
):
    """One ``UnityVecEnv`` (in a ``VecMonitor``) over ``n_instances`` Unity instances of ``env_id``.

    :param env_id: ``unity_sb3/<Scene>-v0``, or :data:`BUILD_ID` with ``target`` in ``env_kwargs``.
    :param n_instances: Unity instances; each contributes all its agents as slots.
    :param seed: instance ``i`` is opened with seed ``seed + i``.
    :param env_kwargs: ``UnityVecEnv`` keywords (:data:`VEC_ENV_KEYS`) and ``open_unity`` keywords.
    :param first_worker_id: worker id of the first instance (ports of builds and players).
    :param monitor_file: VecMonitor file prefix (``.monitor.csv`` is appended), or None.
    :param monitor_kwargs: more ``VecMonitor`` keywords (``info_keywords``).
    """
    from stable_baselines3.common.vec_env import VecMonitor

    from unity_sb3.open import open_unity
    from unity_sb3.wrappers.vec_env import UnityVecEnv

    if n_instances < 1:
        raise ValueError(f"n_envs (Unity instances) must be >= 1, got {n_instances}.")
    kwargs = dict(env_kwargs or {})
    kwargs.pop("render_mode", None)  # RL Zoo adds it for enjoy; Unity renders its own window
    target = _scene_target(env_id, kwargs)
    vec_kwargs = {key: kwargs.pop(key) for key in VEC_ENV_KEYS if key in kwargs}
    open_kwargs = kwargs

    def factory(i: int):
        def open_instance():
            return open_unity(target, worker_id=first_worker_id + i, **{"seed": seed + i, **open_kwargs})

        return open_instance

    env = UnityVecEnv([factory(i) for i in range(n_instances)], **vec_kwargs)
    return VecMonitor(env, filename=monitor_file, **(monitor_kwargs or {}))
