"""Features extractors after ML-Agents' encoders.

Saved models pickle their extractor as ``unity_sb3.networks.<Class>``: keep these re-exports so models saved before the move load."""

from __future__ import annotations

from unity_sb3.networks.extractors import (
    ENCODERS,
    HyperLinear,
    UnityCnn,
    UnityMultiInputExtractor,
    check_resolution,
    conv_body,
    encoders_for,
)

__all__ = [
    "ENCODERS",
    "HyperLinear",
    "UnityCnn",
    "UnityMultiInputExtractor",
    "check_resolution",
    "conv_body",
    "encoders_for",
]
