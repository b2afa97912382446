"""Unity's ``StackingSensor`` for embedded scenes: the last few frames of a sensor, oldest first.

A sensor with ``ObservationStacks`` (or an agent with ``NumStackedVectorObservations``) above 1 is
wrapped by Unity in a ``StackingSensor``: its observation is the last ``stacks`` frames side by
side on the last axis, oldest first, zeros before the episode's first frame (the buffer is cleared
when the agent resets), and its name becomes ``StackingSensor_size<stacks>_<name>``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FrameStack", "stacked_sensor_name"]


def stacked_sensor_name(name: str, stacks: int) -> str:
    """The name Unity gives sensor ``name`` stacked ``stacks`` times (unchanged for 1: no wrapper)."""
    return name if stacks == 1 else f"StackingSensor_size{stacks}_{name}"


class FrameStack:
    """The stacked frames of one flat sensor for every agent of a scene.

    :param agents: number of agents (rows).
    :param stacks: frames kept per agent (``ObservationStacks``), >= 1.
    :param frame_size: floats per frame.
    """

    def __init__(self, agents: int, stacks: int, frame_size: int) -> None:
        self.frames = np.zeros((agents, stacks, frame_size), dtype=np.float32)

    def clear(self, idx: np.ndarray) -> None:
        """Forget the frames of agents ``idx`` (an episode start: ``StackingSensor.Reset``)."""
        self.frames[idx] = 0.0

    def push(self, idx: np.ndarray, frame: np.ndarray) -> np.ndarray:
        """Add the newest frame of agents ``idx`` and return their stacked observations.

        :param idx: agent rows, shape (m,).
        :param frame: their new frames, shape (m, frame_size).
        :return: shape (m, stacks * frame_size), float32, oldest frame first.
        """
        frames = self.frames
        frames[idx, :-1] = frames[idx, 1:]
        frames[idx, -1] = frame
        return frames[idx].reshape(len(idx), -1)
