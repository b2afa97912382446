"""Tests of the player's launcher: scene parameters on a command line, the executable a build stands for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import unity_sb3
from unity_sb3.scenes.player.launcher import _format_param, parse_param, write_launcher
from unity_sb3.unity.errors import UnityConfigurationError

TEST_SCENE = "unity_sb3.scenes.protocol_test:make_protocol_test_scene"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n=4", 4),
        ("x=0.5", 0.5),
        ("flag=true", True),
        ("flag=True", True),
        ("name=red", "red"),
        ("t=(1, 2)", (1, 2)),
    ],
)
def test_parse_param(text, expected):
    key, value = parse_param(text)
    assert key == text.partition("=")[0] and value == expected and type(value) is type(expected)


@pytest.mark.parametrize("value", [4, 0.5, True, "red", "4", "true", [1, 2], (1, 2), {"a": 1}, None])
def test_launcher_params_survive_the_command_line(value):
    text = _format_param("k", value)
    parsed = parse_param(text)[1]
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("bad", ["novalue", "=3", "2x=1"])
def test_parse_param_rejects_bad_input(bad):
    with pytest.raises(ValueError, match="key=value"):
        parse_param(bad)


def test_write_launcher(tmp_path):
    path = write_launcher(TEST_SCENE, tmp_path / "b", scene_params={"num_agents": 3, "name": "x y"})
    assert path.name == "make_protocol_test_scene.x86_64" and os.access(path, os.X_OK)
    text = path.read_text()
    assert "exec " in text and "--param num_agents=3" in text and "'name=x y'" in text and '"$@"' in text
    with pytest.raises(UnityConfigurationError, match="strips"):
        write_launcher("Ball3D", tmp_path / "my.application")


def test_write_launcher_where_mlagents_looks_on_macos(tmp_path, monkeypatch):
    from mlagents_envs import env_utils

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(env_utils, "get_platform", lambda: "darwin")
    path = write_launcher("Ball3D", tmp_path)
    assert path == tmp_path / "Ball3D.app"
    assert env_utils.validate_environment_path(str(path)) == str(path / "Contents" / "MacOS" / "Ball3D")
    monkeypatch.setattr(sys, "platform", "win32")
    with pytest.raises(UnityConfigurationError, match="Windows"):
        write_launcher("Ball3D", tmp_path)


def test_write_launcher_is_found_by_mlagents_on_linux(tmp_path, monkeypatch):
    from mlagents_envs import env_utils

    monkeypatch.setattr(env_utils, "get_platform", lambda: "linux")
    path = write_launcher("Ball3D", tmp_path)
    assert env_utils.validate_environment_path(str(path)) == str(path)
    assert env_utils.validate_environment_path(str(tmp_path / "Ball3D")) == str(path)


def test_launcher_puts_the_folder_holding_unity_sb3_on_the_path(tmp_path):
    """The launcher's PYTHONPATH finds this unity_sb3 even without site-packages (an uninstalled checkout)."""
    path = write_launcher("Ball3D", tmp_path)
    line = next(x for x in path.read_text().splitlines() if x.startswith("PYTHONPATH="))
    folder = line.partition("=")[2].split("$")[0]
    found = subprocess.run(
        [
            sys.executable,
            "-I",  # no PYTHONPATH, user site or current folder on the path
            "-S",  # no site-packages (no installed unity_sb3)
            "-c",
            "import importlib.util, sys; sys.path[:0] = [sys.argv[1]]; "
            "print(importlib.util.find_spec('unity_sb3').origin)",
            folder,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert Path(found) == Path(unity_sb3.__file__).resolve()
