"""Unity's StackingSensor for embedded scenes (``unity_sb3.scenes.stacking``)."""

from __future__ import annotations

import numpy as np
import pytest

from unity_sb3.scenes.stacking import FrameStack, stacked_sensor_name


@pytest.mark.parametrize(
    ("name", "stacks", "expected"),
    [
        ("RayPerceptionSensor", 3, "StackingSensor_size3_RayPerceptionSensor"),
        ("VectorSensor_size9", 3, "StackingSensor_size3_VectorSensor_size9"),
        ("RayPerceptionSensor", 1, "RayPerceptionSensor"),  # Unity wraps only above 1
    ],
)
def test_names_are_unitys(name, stacks, expected):
    assert stacked_sensor_name(name, stacks) == expected


def test_frames_are_oldest_first_per_agent_and_cleared_agents_start_from_zeros():
    stack = FrameStack(agents=3, stacks=3, frame_size=2)
    both = np.array([0, 2])
    out = stack.push(both, np.array([[1.0, 1.0], [5.0, 5.0]]))
    np.testing.assert_array_equal(out, [[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 5, 5]])
    stack.push(both, np.array([[2.0, 2.0], [6.0, 6.0]]))
    out = stack.push(np.array([2]), np.array([[7.0, 7.0]]))  # agent 2 alone
    np.testing.assert_array_equal(out, [[5, 5, 6, 6, 7, 7]])
    out = stack.push(both, np.array([[3.0, 3.0], [8.0, 8.0]]))
    np.testing.assert_array_equal(out, [[1, 1, 2, 2, 3, 3], [6, 6, 7, 7, 8, 8]])
    assert out.dtype == np.float32 and not stack.frames[1].any()  # agent 1 never observed
    stack.clear(np.array([0]))
    out = stack.push(both, np.array([[4.0, 4.0], [9.0, 9.0]]))
    np.testing.assert_array_equal(out, [[0, 0, 0, 0, 4, 4], [7, 7, 8, 8, 9, 9]])


def test_one_stack_is_the_frame_itself():
    stack = FrameStack(agents=2, stacks=1, frame_size=3)
    frame = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(stack.push(np.arange(2), frame), frame)
