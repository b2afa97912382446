"""Make ``import mlagents_envs`` work on protobuf >= 4 even when ``unity_sb3`` is never imported.

Installing ``unity_sb3`` puts ``unity_sb3_mlagents.pth`` into site-packages; Python's ``site``
runs its one line at start-up, which imports this module and calls :func:`install`. That only
puts :class:`MlagentsEnvsFinder` at the front of ``sys.meta_path``: no protobuf, no numpy, no
``unity_sb3`` is imported at start-up, and nothing else happens until some code imports
``mlagents_envs``.

On that first import the finder lets the usual finders locate ``mlagents_envs`` and wraps its
loader: right after the package's own ``__init__`` ran (two version strings) and before any
other ``mlagents_envs`` module loads, it imports :mod:`unity_sb3.unity.compat`, which rebuilds
the generated ``*_pb2`` modules from their serialized descriptors. So scripts written for
ML-Agents (``from mlagents_envs.environment import UnityEnvironment`` first) work unchanged.

It does nothing when protobuf is 3.x (those modules import as they are), when ``unity_sb3``
itself is already importing the compat layer, or when ``unity_sb3`` is gone. Every failure is
caught: at worst ``mlagents_envs`` imports as if this hook did not exist, with a warning
saying why.
"""

import sys

#: the package whose first import triggers the compat layer
TARGET = "mlagents_envs"
#: the module that does the work (importing it runs ``compat.install()``)
COMPAT = "unity_sb3.unity.compat"


def _protobuf_needs_rebuild() -> bool:
    """Whether the installed protobuf (>= 4) rejects mlagents_envs' protoc-3 modules."""
    try:
        import google.protobuf
    except ImportError:  # mlagents_envs will say protobuf is missing
        return False
    return int(google.protobuf.__version__.split(".")[0]) >= 4


def prepare_mlagents_envs() -> None:
    """Run unity_sb3's compat layer if protobuf needs it. Never raises."""
    if COMPAT in sys.modules:  # unity_sb3 imported it already, or is importing it right now
        return
    try:
        if not _protobuf_needs_rebuild():
            return
        import importlib

        importlib.import_module(COMPAT)
    except Exception as exc:
        import warnings

        warnings.warn(
            f"unity_sb3 could not prepare mlagents_envs for this protobuf version ({exc!r}); "
            'mlagents_envs\' generated modules may fail to import. Run `python -c "import unity_sb3"` '
            "to see the full error, or reinstall unity_sb3.",
            RuntimeWarning,
            stacklevel=2,
        )


class _PreparingLoader:
    """Runs the real loader of ``mlagents_envs``, then :func:`prepare_mlagents_envs`."""

    def __init__(self, loader: object) -> None:
        self._loader = loader

    def create_module(self, spec: object) -> object:
        return self._loader.create_module(spec)

    def exec_module(self, module: object) -> None:
        self._loader.exec_module(module)
        # leave no trace: the module and its spec point at the real loader again
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        prepare_mlagents_envs()

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)


class MlagentsEnvsFinder:
    """``sys.meta_path`` finder acting only on the import of the top-level ``mlagents_envs``."""

    _busy = False  # guards against finding ourselves while asking the other finders

    @classmethod
    def find_spec(cls, fullname: str, path: object = None, target: object = None) -> object:
        if fullname != TARGET or cls._busy:
            return None
        cls._busy = True
        try:
            for finder in list(sys.meta_path):
                if finder is cls or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
            if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _PreparingLoader(spec.loader)
            return spec
        except Exception:  # never break an import we only meant to help
            return None
        finally:
            cls._busy = False


def install() -> None:
    """Put :class:`MlagentsEnvsFinder` first on ``sys.meta_path`` (once). Never raises."""
    try:
        if MlagentsEnvsFinder not in sys.meta_path:
            sys.meta_path.insert(0, MlagentsEnvsFinder)
    except Exception:
        pass


def uninstall() -> None:
    """Remove :class:`MlagentsEnvsFinder` from ``sys.meta_path`` (for tests)."""
    while MlagentsEnvsFinder in sys.meta_path:
        sys.meta_path.remove(MlagentsEnvsFinder)
