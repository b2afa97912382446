"""Shared helpers for the benchmark scripts: machine info, a plain-text table, JSON results.

Each script prints a table and writes ``benchmarks/results/<name>.json`` holding its rows and
the machine they were measured on (results are generated files: do not commit them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _import_this_tree() -> None:
    """Make ``import unity_sb3`` take this source tree, not the venv's editable install (which
    points at the main checkout), so that a ``git worktree`` of another commit benchmarks that
    commit. Scripts import this module before ``unity_sb3``. A set ``PYTHONPATH`` decides instead:
    ``--baseline`` workers run another tree's ``unity_sb3`` that way."""
    root = str(Path(__file__).resolve().parents[1])
    if not os.environ.get("PYTHONPATH") and root not in sys.path:
        sys.path.insert(0, root)


_import_this_tree()

_PACKAGES = ("numpy", "torch", "stable-baselines3", "mlagents-envs", "protobuf", "grpcio", "gymnasium")


def machine_info() -> dict[str, Any]:
    """Python, OS, CPU count and versions of the packages that matter for speed."""
    versions = {}
    for package in _PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    try:
        from google.protobuf.internal import api_implementation

        protobuf_backend = api_implementation.Type()
    except ImportError:
        protobuf_backend = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "protobuf_backend": protobuf_backend,
        "packages": versions,
    }


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return "" if value is None else str(value)


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], title: str = "") -> str:
    """Rows as an aligned plain-text (and Markdown-compatible) table.

    :param rows: one dict per row; missing keys print empty.
    :param columns: keys to print, in order; they are also the headers.
    :param title: printed above the table when given.
    """
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths)))
            + " |"
        )

    out = [title] if title else []
    out.append(line(list(columns)))
    out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], title: str = "") -> None:
    """Print :func:`format_table`."""
    print(format_table(rows, columns, title), flush=True)


def write_results(name: str, rows: Sequence[dict[str, Any]], **extra: Any) -> Path:
    """Write ``benchmarks/results/<name>.json`` with the rows, the machine and ``extra`` fields.

    :param name: file stem, e.g. ``"scenes"``.
    :param rows: the measured rows.
    :param extra: more top-level fields (settings of the run).
    :return: the path written.
    """
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    payload = {
        "benchmark": name,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(),
        **extra,
        "rows": list(rows),
    }
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


def free_base_port(span: int) -> int:
    """A base port on 127.0.0.1 that is free now and leaves room for ``span`` more after it."""
    import socket

    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + span < 65000:
            return port
    raise RuntimeError("no free port")


def this_tree_module(relative: str) -> ModuleType:
    """A module of this source tree loaded from its file, whichever ``unity_sb3`` is imported.

    A benchmark run with ``--baseline DIR`` imports the other tree's ``unity_sb3``; a helper both
    sides must share (the same random actions for both trees) comes from this tree, and works
    with baseline trees older than it. The module must import nothing from ``unity_sb3``.

    :param relative: its path from the repository root, e.g. ``"unity_sb3/scenes/random_play.py"``.
    """
    path = Path(__file__).resolve().parents[1] / relative
    spec = importlib.util.spec_from_file_location(f"_this_tree_{path.stem}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
