"""Whether this machine computes the embedded scenes' floats as the one that recorded the hashes did.

Tests that compare hashes of scene trajectories (``test_ball3d_bitwise``, ``test_player_wire_bytes``,
``test_vec_env_fingerprints``) recorded them on x86_64 with AVX-512 and numpy 2.4: sines, cosines and
reductions can round differently on other CPUs and numpy builds, so elsewhere those hashes are skipped
(the tests' exact comparisons made in one process still run everywhere).
"""

from __future__ import annotations

import platform

import numpy as np


def computes_as_recorded() -> bool:
    """True on the kind of machine the recorded scene hashes come from."""
    features = getattr(getattr(np, "_core", None), "_multiarray_umath", None)
    features = getattr(features, "__cpu_features__", {})
    return (
        platform.machine() == "x86_64"
        and np.__version__.startswith("2.4")
        and bool(features.get("AVX512_SKX"))
    )
