"""``python -m unity_sb3.zoo``: see :func:`unity_sb3.zoo.commands.main`."""

from unity_sb3.zoo.commands import main

raise SystemExit(main())
