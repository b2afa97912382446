"""Starting the stand-in player as a Unity build is started: its scene, its parameters, its launcher.

:func:`load_scene` creates the ``BaseEnv`` a player serves (an embedded scene's name or your own
``module:factory``), :func:`parse_param` reads the ``--param key=value`` a launcher passes, and
:func:`write_launcher` writes the executable that ``UnityEnvironment(file_name=...)`` starts as it
starts a build (:mod:`unity_sb3.scenes.player.server` is what that executable runs).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import shlex
import stat
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from mlagents_envs.base_env import BaseEnv

from unity_sb3.unity.errors import UnityConfigurationError

__all__ = ["is_factory", "load_scene", "parse_param", "write_launcher"]


def parse_param(text: str) -> tuple[str, Any]:
    """Parse ``key=value`` from ``--param``: the value as JSON or a Python literal, else a string.

    :param text: e.g. ``"num_agents=4"``, ``"visual=true"``, ``"name=red"``.
    :return: ``(key, value)``.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise ValueError(f"--param needs key=value with a Python identifier as key, got {text!r}")
    for parse in (json.loads, ast.literal_eval):
        try:
            return key, parse(raw)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return key, raw


def _format_param(key: str, value: Any) -> str:
    """``key=value`` text that :func:`parse_param` turns back into ``value`` (same type)."""
    candidates = [value] if isinstance(value, str) else []
    with suppress(TypeError, ValueError):
        candidates.append(json.dumps(value))
    candidates.append(repr(value))
    for text in candidates:
        parsed = parse_param(f"{key}={text}")[1]
        if type(parsed) is type(value) and parsed == value:
            return f"{key}={text}"
    raise UnityConfigurationError(
        f"Scene parameter {key}={value!r} cannot be passed on a command line; use numbers, strings, "
        "booleans, lists or dicts of those."
    )


def _import_factory(spec: str) -> Callable[..., BaseEnv]:
    module_name, _, attr = spec.rpartition(":")
    if module_name.endswith(".py"):
        path = Path(module_name).expanduser().resolve()
        if not path.is_file():
            raise UnityConfigurationError(f"Scene factory file {path} does not exist.")
        module_spec = importlib.util.spec_from_file_location(f"_unity_sb3_scene_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise UnityConfigurationError(f"Cannot import {path} as a Python module.")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UnityConfigurationError(f"{spec!r}: {module_name} has no callable {attr!r}.")
    return factory


def is_factory(scene: str) -> bool:
    """Whether ``scene`` names your own ``module:factory`` / ``file.py:factory`` (else a scene name)."""
    return ":" in scene


def load_scene(
    scene: str, seed: int = 0, params: dict[str, Any] | None = None, num_areas: int = 1
) -> BaseEnv:
    """Create the environment the player serves.

    :param scene: an embedded scene name (``unity_sb3.scenes.list_scenes()``), or
        ``module:factory`` / ``file.py:factory`` for your own ``BaseEnv``.
    :param seed: passed to the factory (the handshake's seed replaces it through ``reseed``).
    :param params: keyword arguments for the scene.
    :param num_areas: copies of an embedded scene's training areas
        (:func:`unity_sb3.scenes.replicate_areas`); a factory's scene cannot be copied.
    """
    params = dict(params or {})
    if is_factory(scene):
        if num_areas != 1:
            raise UnityConfigurationError(
                f"{scene!r} is your own factory: the player cannot copy its areas num_areas={num_areas} times."
            )
        return _import_factory(scene)(seed=seed, **params)
    try:
        from unity_sb3.scenes import make_scene, replicate_areas
    except ImportError as exc:
        raise UnityConfigurationError(
            f"Cannot serve scene {scene!r}: the embedded scenes (unity_sb3.scenes) are not available ({exc}). "
            "Pass module:factory to serve your own BaseEnv."
        ) from exc
    return make_scene(scene, seed=seed, **replicate_areas(scene, params, num_areas))


_MANGLED = (".app", ".exe", ".x86")  # mlagents_envs.env_utils strips these anywhere in the path


def _launcher_stem(scene: str) -> str:
    stem = scene.rpartition(":")[2] if is_factory(scene) else scene
    return re.sub(r"[^A-Za-z0-9_-]", "_", stem) or "scene"


def write_launcher(
    scene: str,
    directory: str | Path,
    *,
    scene_params: dict[str, Any] | None = None,
    python: str = sys.executable,
    extra_args: Sequence[str] = (),
) -> Path:
    """Write an executable that ``UnityEnvironment(file_name=...)`` launches like a Unity build.

    On Linux it is ``<directory>/<scene>.x86_64``; on macOS ``<directory>/<scene>.app`` (a
    bundle holding ``Contents/MacOS/<scene>``), because that is where ``mlagents_envs``
    looks. The script ``exec``\\ s ``python -m unity_sb3.scenes.player`` (so the process that
    ``UnityEnvironment`` holds *is* the player) with ``unity_sb3``'s own location first on
    ``PYTHONPATH``; the arguments ``mlagents_envs`` adds (``--mlagents-port``, ``-logFile``,
    ``-nographics`` ...) are passed through.

    :param scene: scene name or ``module:factory`` (see :func:`load_scene`).
    :param directory: folder to write into (created if missing). It must not contain
        ``.app``, ``.exe`` or ``.x86`` anywhere: ``mlagents_envs`` strips those from paths.
    :param scene_params: scene keyword arguments, passed as ``--param key=value``.
    :param python: interpreter that runs the player.
    :param extra_args: more player arguments, e.g. ``["--timeout", "600"]``.
    :return: the path to pass as ``file_name``.
    """
    if sys.platform == "win32":
        raise UnityConfigurationError(
            "The stand-in player launcher is a shell script and does not run on Windows; "
            "use the in-process transport there."
        )
    directory = Path(directory).expanduser().resolve()
    bad = [part for part in _MANGLED if part in str(directory)]
    if bad:
        raise UnityConfigurationError(
            f"Launcher directory {directory} contains {bad[0]!r}, which mlagents_envs strips from "
            "executable paths; choose another directory."
        )
    stem = _launcher_stem(scene)
    if sys.platform == "darwin":
        bundle = directory / f"{stem}.app"
        script = bundle / "Contents" / "MacOS" / stem
        result = bundle
    else:
        script = directory / f"{stem}.x86_64"
        result = script
    script.parent.mkdir(parents=True, exist_ok=True)
    args = [python, "-m", "unity_sb3.scenes.player", scene]
    for key, value in (scene_params or {}).items():
        args += ["--param", _format_param(key, value)]
    args += list(extra_args)
    package_root = str(Path(__file__).resolve().parents[3])  # the folder holding unity_sb3/
    text = (
        "#!/bin/sh\n"
        f"# Stand-in Unity player for scene {scene!r}, written by unity_sb3.scenes.player.launcher.write_launcher.\n"
        f"PYTHONPATH={shlex.quote(package_root)}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        "export PYTHONPATH\n"
        "GRPC_VERBOSITY=${GRPC_VERBOSITY:-ERROR}  # no gRPC info lines (e.g. GOAWAY on close) on stderr\n"
        "export GRPC_VERBOSITY\n"
        f'exec {" ".join(shlex.quote(a) for a in args)} "$@"\n'
    )
    script.write_text(text)
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return result
