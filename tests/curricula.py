"""Curriculum configs and saved states shared by the parameter and curriculum-callback tests."""

from __future__ import annotations


def three_lessons(require_reset: bool = False, behavior: str = "B") -> dict:
    crit = {"behavior": behavior, "threshold": 1.0, "signal_smoothing": False, "require_reset": require_reset}
    return {
        "difficulty": {
            "curriculum": [
                {"name": "easy", "value": 0.0, "completion_criteria": crit},
                {"name": "medium", "value": 1.0, "completion_criteria": crit},
                {"name": "hard", "value": 2.0},
            ]
        },
        "gravity": 9.81,
    }


def scale_curriculum(threshold: float = 1e9, min_lesson_length: int = 100) -> dict:
    """Ball3D's ``scale`` in three lessons; only the test's state moves past lesson 0."""
    crit = {"behavior": "3DBall", "threshold": threshold, "min_lesson_length": min_lesson_length}
    return {
        "scale": {
            "curriculum": [
                {"name": "small", "value": 1.0, "completion_criteria": crit},
                {"name": "medium", "value": 1.5, "completion_criteria": crit},
                {"name": "large", "value": 2.0},
            ]
        },
        "gravity": 9.81,
    }


def medium_state(smoothed: float = 3.25) -> dict:
    return {
        "lesson_numbers": {"scale": 1, "gravity": 0},
        "lesson_names": {"scale": "medium", "gravity": "gravity"},
        "smoothed_values": {"scale": smoothed, "gravity": 0.0},
    }
