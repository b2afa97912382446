"""PyramidsLite: a sparse-reward scene after ML-Agents' Pyramids.

Each agent has its own walled room of ``room_size`` x ``room_size`` cells with a switch.
Stepping on the switch turns it on and makes a target (the gold brick on top of the
pyramid) appear on a random free cell; reaching the target gives +2 (``SetReward(2f)``)
and ends the episode. Every decision costs -0.001 (``AddReward(-1f / MaxStep)`` in spirit).
Random exploration rarely completes the sequence within ``max_steps``: curiosity's case.

* Observations (8 floats, positions divided by ``room_size - 1``): own x, y; switch dx, dy;
  switch on; target visible; target dx, dy (0 until visible).
* Actions: one branch of 5: stay, up, down, left, right (a move into a wall does nothing).
* Stats: ``Pyramids/SuccessRate`` and ``Pyramids/SwitchPressed`` per episode.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)

from unity_sb3.envs._grid import GridScene, distinct_cells, greedy_moves, moved
from unity_sb3.unity.errors import UnityConfigurationError


class PyramidsLite(GridScene):
    """Press a switch, then reach the target that appears (ML-Agents Pyramids, sparse reward)."""

    scene_name = "PyramidsLite"
    behavior_name = "Pyramids?team=0"
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 8,
        "max_steps": 200,
        "decision_period": 1,
        "stable_agent_ids": False,
        "room_size": 11,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {"room_size": "room side in cells"}

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if params["room_size"] < 3:
            raise UnityConfigurationError(
                f"PyramidsLite 'room_size' must be >= 3, got {params['room_size']}."
            )

    def _make_spec(self) -> BehaviorSpec:
        obs = ObservationSpec((8,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "VectorSensor_size8")
        return BehaviorSpec([obs], ActionSpec.create_discrete((5,)))

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        n = self.num_agents
        self._size = self.params["room_size"]
        self._pos = np.zeros((n, 2), dtype=np.int64)
        self._switch = np.zeros((n, 2), dtype=np.int64)
        self._target = np.zeros((n, 2), dtype=np.int64)
        self._on = np.zeros(n, dtype=bool)
        self._success = np.zeros(n, dtype=bool)

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        cells = distinct_cells(self._rng, idx.size, 3, self._size)
        self._pos[idx] = cells[:, 0]
        self._switch[idx] = cells[:, 1]
        self._target[idx] = cells[:, 2]  # hidden until the switch is pressed
        self._on[idx] = False
        self._success[idx] = False

    def _on_episode_end(self, idx: np.ndarray, interrupted: np.ndarray) -> None:
        for ok, pressed in zip(self._success[idx], self._on[idx]):
            self.stat("Pyramids/SuccessRate", float(ok))
            self.stat("Pyramids/SwitchPressed", float(pressed))

    def _move(self) -> None:
        act = np.flatnonzero(self._active)
        self._reward[act] -= 0.001
        pos = moved(self._pos[act], self._disc_action[act, 0], self._size)
        self._pos[act] = pos
        on = self._on[act]
        self._on[act] = on | (pos == self._switch[act]).all(axis=1)
        done = on & (pos == self._target[act]).all(axis=1)  # the target exists from the step after the press
        if done.any():
            ended = act[done]
            self._reward[ended] = 2.0
            self._success[ended] = True
            self._finish(ended, False)
            self._start(ended)

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        scale = 1.0 / (self._size - 1)
        pos, on = self._pos[idx], self._on[idx]
        obs = np.zeros((idx.size, 8), dtype=np.float32)
        obs[:, 0:2] = pos * scale
        obs[:, 2:4] = (self._switch[idx] - pos) * scale
        obs[:, 4] = on
        obs[:, 5] = on
        obs[:, 6:8] = (self._target[idx] - pos) * scale * on[:, None]
        return [obs]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """Walk to the switch, then to the target (read from the observations)."""
        self._check_behavior(behavior_name)
        obs = np.asarray(decision_steps.obs[0], dtype=np.float64)
        cells = self._size - 1
        goal = np.where(obs[:, 5:6] > 0.5, obs[:, 6:8], obs[:, 2:4])
        return ActionTuple(discrete=greedy_moves(np.rint(goal * cells))[:, None])
