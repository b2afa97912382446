"""``python -m unity_sb3.scenes.player``: the stand-in Unity player (see :mod:`.server`)."""

import sys

from unity_sb3.scenes.player.server import main

if __name__ == "__main__":
    sys.exit(main())
