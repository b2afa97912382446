"""``.demo`` files: format, reading, writing, recording a policy, datasets for BC and GAIL."""

from __future__ import annotations

from unity_sb3.demos.reader import (
    DemoFormatError,
    DemoMeta,
    Demonstration,
    DemoSpecError,
    DemoTrajectory,
    DemoTransitions,
    DemoWriter,
    check_demo_spec,
    describe_demo,
    load_demo,
    record_demo,
)

__all__ = [
    "DemoFormatError",
    "DemoMeta",
    "DemoSpecError",
    "DemoTrajectory",
    "DemoTransitions",
    "DemoWriter",
    "Demonstration",
    "check_demo_spec",
    "describe_demo",
    "load_demo",
    "record_demo",
]
