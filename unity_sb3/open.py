"""open_unity(target): a build path, "editor", an embedded scene name or a BaseEnv -> a BaseEnv."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.channels import EngineSettings, UnityChannels
from unity_sb3.unity.errors import (
    UnityConfigurationError,
)
from unity_sb3.unity.parameters import EnvironmentParameters

from mlagents_envs.base_env import BaseEnv  # isort: skip
from mlagents_envs.side_channel.side_channel import SideChannel  # isort: skip
from unity_sb3.unity.connect import TRANSPORTS, LocalUnityEnvironment
from unity_sb3.unity.executable import BUILD_SUFFIXES

__all__: list[str] = []


# --------------------------------------------------------------------------------------------
# open_unity
# --------------------------------------------------------------------------------------------
def _scene_names() -> list[str]:
    try:
        from unity_sb3.scenes import list_scenes
    except ImportError:
        return []
    return list(list_scenes())


def _scene_name(target: str, scenes: Sequence[str]) -> str | None:
    by_lower = {name.lower(): name for name in scenes}
    return by_lower.get(target.lower())


def _target_kind(target: str | os.PathLike[str] | None, transport: str) -> tuple[str, str | None]:
    """``("editor", None)``, ``("scene", name)`` or ``("build", path)``."""
    if target is None or (isinstance(target, str) and target.lower() == "editor"):
        return "editor", None
    text = os.fspath(target)
    path = Path(text).expanduser()
    exists = path.exists() or any(path.with_name(path.name + s).exists() for s in BUILD_SUFFIXES)
    scene = None if exists else _scene_name(text, _scene_names())
    if transport in ("inprocess", "player") and scene is None:
        raise UnityConfigurationError(
            f"transport={transport!r} runs embedded scenes, and {text!r} is not one "
            f"(scenes: {', '.join(_scene_names()) or 'none installed'}); use transport='auto' for a build."
        )
    return ("scene", scene) if scene is not None else ("build", text)


def open_unity(
    target: str | os.PathLike[str] | None = None,
    *,
    transport: str = "auto",
    worker_id: int = 0,
    base_port: int | None = None,
    find_free_port: bool = False,
    seed: int = 0,
    no_graphics: bool = True,
    no_graphics_monitor: bool = False,
    num_areas: int = 1,
    timeout_wait: float = 60,
    additional_args: list[str] | None = None,
    log_folder: str | None = None,
    engine_settings: EngineSettings | Mapping[str, Any] | None = None,
    environment_parameters: Mapping[str, Any] | EnvironmentParameters | None = None,
    side_channels: list[SideChannel] | None = None,
    bind_address: str = "127.0.0.1",
    **scene_params: Any,
) -> BaseEnv:
    """Open a Unity environment and return it as a ``BaseEnv``.

    :param target: a Unity build (the executable, its path without suffix, or its folder);
        ``None`` or ``"editor"`` to wait for the Editor's Play button (port 5004); or the name of
        an embedded scene (``unity_sb3.scenes.list_scenes()``, case-insensitive).
    :param transport: for embedded scenes: ``"inprocess"`` (a plain Python object, fastest),
        ``"player"`` (the stand-in Unity player in its own process, over gRPC, exactly like a
        build), or ``"auto"`` (in-process for scenes; builds and the Editor always use gRPC).
    :param worker_id: offset from ``base_port``; one per Unity instance running at once.
    :param base_port: port of worker 0; default 5005 for builds, 5004 for the Editor.
    :param find_free_port: when the port is taken, move to the next free ``worker_id``.
    :param seed: the seed Unity receives in the handshake (the scene's seed in-process); also
        seeds environment-parameter samplers without their own seed.
    :param no_graphics: launch builds with ``-nographics -batchmode`` (no rendering, so no
        visual observations).
    :param no_graphics_monitor: launch worker 0 with graphics and every other worker without, to
        watch one instance while the others train headless (mlagents-learn's ``--no-graphics-monitor``).
    :param num_areas: copies of the scene's training area (ML-Agents' ``num_areas``, which Unity's
        ``TrainingAreaReplicator`` reads from the handshake); an embedded scene opens with ``num_agents``
        times as many areas (:func:`unity_sb3.scenes.replicate_areas`), in-process or, told in the
        handshake as a build is, in the stand-in player.
    :param timeout_wait: seconds to wait for Unity to connect and for each step.
    :param additional_args: more command-line arguments for the build.
    :param log_folder: where the build writes ``Player-<worker_id>.log`` (and the captured
        stdout/stderr as ``.out``); default a per-user temporary folder.
    :param engine_settings: :class:`~unity_sb3.unity.channels.EngineSettings` or a dict of its
        fields; default ``mlagents-learn``'s (time scale 20).
    :param environment_parameters: ML-Agents' ``environment_parameters`` mapping (constants,
        samplers, curricula); lesson 0 values are sent with the first reset. Drive curricula
        with :class:`~unity_sb3.callbacks.curriculum.CurriculumCallback`.
    :param side_channels: more ``mlagents_envs`` side channels; an engine, environment
        parameters or stats channel given here replaces the one created.
    :param bind_address: address the gRPC server listens on (loopback by default).
    :param scene_params: scene keyword arguments (embedded scenes only), e.g. ``num_agents=4``.
    :return: the environment, with ``env.unity_sb3_channels``.
    """
    if transport not in TRANSPORTS:
        raise UnityConfigurationError(f"transport must be one of {TRANSPORTS}, got {transport!r}.")
    if isinstance(num_areas, bool) or not isinstance(num_areas, int) or num_areas < 1:
        raise UnityConfigurationError(f"num_areas must be a whole number >= 1, got {num_areas!r}.")
    kind, name = _target_kind(target, transport)
    if scene_params and kind != "scene":
        raise UnityConfigurationError(
            f"Scene parameters {sorted(scene_params)} only apply to embedded scenes, not to "
            f"{'the Editor' if kind == 'editor' else 'a Unity build'}; unknown keyword argument(s)?"
        )
    settings = EngineSettings.coerce(engine_settings)
    channels = UnityChannels.from_side_channels(side_channels)
    channels.engine_settings = settings
    settings.apply(channels.engine)
    if environment_parameters is not None:
        if not isinstance(environment_parameters, EnvironmentParameters):
            environment_parameters = EnvironmentParameters(environment_parameters, seed=seed)
        channels.parameters = environment_parameters
        environment_parameters.apply(channels.environment_parameters)
    graphics_off = no_graphics if settings.no_graphics is None else settings.no_graphics
    graphics_off = graphics_off or (no_graphics_monitor and worker_id != 0)  # as mlagents_envs decides it

    env: Any
    if kind == "scene" and transport != "player":  # the areas copied here, as the replicator would
        from unity_sb3.scenes import make_scene, replicate_areas

        params = replicate_areas(name, scene_params, num_areas)
        env = make_scene(name, seed=seed, side_channels=channels.all(), **params)
    else:  # a build, the Editor and the stand-in player copy the areas themselves, told in the handshake
        file_name: str | None = name
        temp_dir: str | None = None
        if kind == "scene":
            from unity_sb3.scenes.player.launcher import write_launcher

            temp_dir = tempfile.mkdtemp(prefix="unity_sb3-player-")
            file_name = str(write_launcher(name, temp_dir, scene_params=scene_params or None))
        try:
            env = LocalUnityEnvironment(
                file_name,
                scene_names=_scene_names(),
                worker_id=worker_id,
                base_port=base_port,
                seed=seed,
                no_graphics=graphics_off,
                timeout_wait=timeout_wait,
                additional_args=additional_args,
                side_channels=channels.all(),
                log_folder=log_folder,
                num_areas=num_areas,
                bind_address=bind_address,
                find_free_port=find_free_port,
                process_name=f"stand-in player {name!r}" if kind == "scene" else None,
            )
        except BaseException:
            if temp_dir is not None:
                shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        if temp_dir is not None:
            env._resources.temp_dirs.append(temp_dir)
    env.unity_sb3_channels = channels
    return env
