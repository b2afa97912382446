"""Build script: everything is declared in setup.cfg except shipping ``unity_sb3_mlagents.pth``.

The ``.pth`` file makes ``import mlagents_envs`` work on protobuf >= 4 without importing
``unity_sb3`` first (see ``_unity_sb3_hook.py``). A ``.pth`` must sit at the root of
site-packages, which ``setup.cfg`` cannot express, so ``build_py`` writes it:

- regular wheels (``pip install .``): into ``build_lib``, whose whole tree becomes the wheel's
  purelib root;
- editable wheels (PEP 660, ``pip install -e .``): setuptools ignores ``build_lib`` there and
  packs the directory the ``install`` command targets, so the file is written there too.
"""

from __future__ import annotations

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_NAME = "unity_sb3_mlagents.pth"
# One line, run by `site` at start-up. The try keeps start-up silent should the module be gone.
PTH_CONTENT = (
    'import sys; exec("try:\\n import _unity_sb3_hook\\nexcept Exception:\\n pass\\n'
    'else:\\n _unity_sb3_hook.install()")\n'
)


class BuildPyWithPth(build_py):
    """``build_py`` that also writes :data:`PTH_NAME` for regular and editable wheels."""

    def run(self) -> None:
        super().run()
        targets = [self.build_lib]
        if getattr(self, "editable_mode", False):
            targets.append(self.get_finalized_command("install").install_lib)
        for directory in targets:
            if directory:
                os.makedirs(directory, exist_ok=True)
                with open(os.path.join(directory, PTH_NAME), "w", encoding="utf-8") as fh:
                    fh.write(PTH_CONTENT)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH_NAME)]


setup(cmdclass={"build_py": BuildPyWithPth})
