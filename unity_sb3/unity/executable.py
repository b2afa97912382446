"""Finding the Unity build to launch: a path, an .app bundle, suggestions when it is not one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)
from unity_sb3.unity.errors import (
    UnityExecutableError,
    UnityExecutableNotFoundError,
)
from unity_sb3.validation import close_matches

__all__: list[str] = []


BUILD_SUFFIXES = (".x86_64", ".x86", ".exe", ".app")


# --------------------------------------------------------------------------------------------
# Executables
# --------------------------------------------------------------------------------------------
def _looks_like_build(path: Path) -> bool:
    if path.name.startswith("UnityCrashHandler"):
        return False
    if path.suffix in BUILD_SUFFIXES:
        return True
    return path.is_file() and os.access(path, os.X_OK)


def _nearby_builds(directory: Path) -> list[str]:
    found: list[str] = []
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return found
    for entry in entries:
        if _looks_like_build(entry):
            found.append(str(entry))
        elif entry.is_dir():
            with contextlib.suppress(OSError):
                found += [str(p) for p in sorted(entry.iterdir()) if p.suffix in BUILD_SUFFIXES]
    return found


def _app_binary(app: Path) -> Path | None:
    macos = app / "Contents" / "MacOS"
    if (macos / app.stem).is_file():
        return macos / app.stem
    binaries = sorted(p for p in macos.glob("*") if p.is_file()) if macos.is_dir() else []
    return binaries[0] if binaries else None


def resolve_executable(target: str | os.PathLike[str], scene_names: Sequence[str] = ()) -> Path:
    """The file to launch for a Unity build given as ``target``.

    Accepts the executable itself, its path without the platform suffix (``builds/3DBall`` for
    ``builds/3DBall.x86_64``, as ``mlagents_envs`` does), a macOS ``.app`` bundle, or a build
    folder holding exactly one executable.

    :param target: path to the build.
    :param scene_names: embedded scene names, mentioned when nothing is found.
    :raises UnityExecutableNotFoundError: nothing there; the message lists builds nearby.
    :raises UnityExecutableError: the file is not executable, or a folder holds several builds.
    """
    path = Path(target).expanduser()
    resolved: Path | None = None
    if path.is_dir() and path.suffix == ".app":
        resolved = _app_binary(path)
    elif path.is_file():
        resolved = path
    elif path.is_dir():
        builds = [Path(p) for p in _nearby_builds(path) if Path(p).parent == path]
        if len(builds) > 1:
            named = [b for b in builds if b.stem == path.name]
            if len(named) != 1:
                raise UnityExecutableError(
                    str(target),
                    f"The folder {path} holds several builds; pass the one to launch.",
                    [str(b) for b in builds],
                )
            builds = named
        if builds:
            resolved = _app_binary(builds[0]) if builds[0].suffix == ".app" else builds[0]
    else:
        for suffix in BUILD_SUFFIXES:
            candidate = path.with_name(path.name + suffix)
            if candidate.exists():
                resolved = _app_binary(candidate) if suffix == ".app" else candidate
                break
    if resolved is None:
        directory = path if path.is_dir() else path.parent
        while not directory.exists() and directory != directory.parent:
            directory = directory.parent
        detail = f"No Unity build at {str(target)!r}"
        if not path.parent.exists():
            detail += f" (the folder {path.parent} does not exist)"
        detail += "."
        if scene_names:
            detail += f" It is not an embedded scene either ({', '.join(scene_names)})."
            close = close_matches(path.name, scene_names, ignore_case=True)
            if close:
                detail += f" Did you mean the scene {close[0]!r}?"
        raise UnityExecutableNotFoundError(str(target), detail, _nearby_builds(directory))
    if not os.access(resolved, os.X_OK):
        raise UnityExecutableError(
            str(target),
            f"The Unity build {resolved} is not executable; run `chmod +x {resolved}` and try again.",
        )
    return resolved
