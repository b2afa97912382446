"""Print the embedded scenes: ``python -m unity_sb3.scenes [SCENE ...]``."""

from __future__ import annotations

import argparse

from unity_sb3.scenes import describe_scene, list_scenes
from unity_sb3.unity.errors import UnityConfigurationError


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m unity_sb3.scenes",
        description="Describe the embedded Unity scenes (behaviors, specs, parameters).",
    )
    parser.add_argument(
        "scenes", nargs="*", metavar="SCENE", help=f"scene names (default: all of {list_scenes()})"
    )
    args = parser.parse_args(argv)
    try:
        print("\n\n".join(describe_scene(name) for name in args.scenes or list_scenes()))
    except UnityConfigurationError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    main()
