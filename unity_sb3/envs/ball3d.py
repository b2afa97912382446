"""Ball3D: after ML-Agents' 3DBall (``Ball3DAgent``).

Each agent tilts a 5x5 platform about its z and x axes to keep a ball on it.

* Observation (8 floats, like ``Ball3DAgent.CollectObservations``): platform rotation
  quaternion components z and x, ball position relative to the platform (x, y, z) and ball
  velocity (x, y, z).
* Actions: 2 continuous in [-1, 1] (clipped): rotation about z and about x, 2 degrees per
  physics step at full action; the tilt is limited to about 29 degrees (quaternion component
  0.25, as in the original).
* Reward: +0.1 per decision while the ball stays (``SetReward(0.1f)`` every physics step),
  -1 and episode end when it falls (more than 2 below, or 3 to the side of, the platform).
* Episode start: random tilt in [-10, 10] degrees on each axis, ball dropped from 4 units
  above a random point in [-1.5, 1.5]^2. ``max_steps`` = 5000 physics steps, a decision every
  5 physics steps (so a perfect agent scores 100).
* Environment parameters (as in ``3DBall_randomize``): ``mass`` (heavier = less rolling
  resistance, harder to stop), ``scale`` (ball diameter: rest height), ``gravity``.

Physics: 0.02 s physics steps; a ball rolling on the platform accelerates by
``5/7 * gravity * sin(tilt)`` minus rolling resistance ``0.5 / mass`` times its velocity;
a ball past the platform edge falls freely. Between two decisions the action is constant,
so the scene integrates all physics steps of a decision interval at once (closed form over
the interval, batched over agents) and cuts the interval where an event (ball leaves the
edge, ball lost, max step) happens.
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
from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod

from unity_sb3.envs.base import EmbeddedScene
from unity_sb3.unity.errors import UnityConfigurationError

DT = 0.02  # s per physics step (Unity's default fixed timestep)
DEG_PER_ACTION = 2.0  # degrees per physics step at action 1
TILT_LIMIT = float(np.degrees(2 * np.arcsin(0.25)))  # |quaternion component| <= 0.25
ROLL = 5.0 / 7.0  # rolling solid sphere: a = 5/7 g sin(tilt)
RESISTANCE = 0.5  # 1/s, divided by the mass
EDGE = 2.5  # platform half size
LOST_SIDE = 3.0
LOST_BELOW = -2.0
PLATFORM_TOP = 0.25
HALF_RAD = np.pi / 360.0  # degrees -> half angle in radians
RAD = np.pi / 180.0
# Tilting about +z sends the ball to -x; tilting about +x sends it to +z.
AXIS_SIGN = np.array([-1.0, 1.0])


class Ball3D(EmbeddedScene):
    """Balance a ball on a tilting platform (ML-Agents 3DBall); 8 floats, 2 continuous actions."""

    scene_name = "Ball3D"
    behavior_name = "3DBall?team=0"
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 12,
        "max_steps": 5000,
        "decision_period": 5,
        "stable_agent_ids": False,
        "mass": 1.0,
        "scale": 1.0,
        "gravity": 9.81,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {
        "mass": "ball mass (rolling resistance is 0.5/mass per second)",
        "scale": "ball diameter (units)",
        "gravity": "gravity (units/s^2)",
    }
    DYNAMIC_PARAMS = ("mass", "scale", "gravity")

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        for key in ("mass", "scale"):
            if params[key] <= 0:
                raise UnityConfigurationError(f"Ball3D parameter {key!r} must be > 0, got {params[key]}.")

    def _make_spec(self) -> BehaviorSpec:
        obs = ObservationSpec((8,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "VectorSensor_size8")
        return BehaviorSpec([obs], ActionSpec.create_continuous(2))

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        n, period = self.num_agents, self.decision_period
        # state columns: 0 tilt z (deg), 1 tilt x (deg), 2 x, 3 y, 4 z, 5 vx, 6 vy, 7 vz
        self._s = np.zeros((n, 8))
        self._tilt = self._s[:, 0:2]
        self._pos = self._s[:, 2:5:2]  # (x, z) view
        self._vel = self._s[:, 5:8:2]  # (vx, vz) view
        self._mass = np.ones(n)
        self._scale = np.ones(n)
        self._gravity = np.full(n, 9.81)
        # height of the ball's centre at rest on the platform; -inf once it left the platform
        self._floor = np.full((n, 1), PLATFORM_TOP + 0.5)
        self._event_side = np.full((n, 1), EDGE)  # |x| or |z| beyond which something happens
        self._steps_left = self.max_steps  # min over agents of max_steps - step count
        self._resting = False  # every ball lies on its platform (then no vertical motion)
        self._gravity_down = True
        k = np.arange(1, period + 1, dtype=np.float64)
        self._dk = DEG_PER_ACTION * k  # tilt change after k physics steps at action 1
        self._dtk = DT * k
        self._fall = DT * DT * k * (k + 1) / 2  # free-fall drop after k physics steps, per unit gravity
        self._fall_g = np.zeros((n, period))
        self._acc_gain = np.zeros((n, 2, 1))
        lag = k[None, :] - k[:, None]  # [j, k] = k - j
        self._lag = np.where(lag >= 0, lag, 0.0)
        self._causal = lag >= 0
        self._decay_pow = np.ones((n, period + 1))  # d^k, k = 0..period
        # [j, k] = dt d^(k-j) (j <= k): velocity at step k from the acceleration at step j;
        # [j, period + k] = dt * sum_{j <= i <= k} of the above: its position sum.
        self._vel_pos_mat = np.zeros((n, period, 2 * period))
        self._pos_pow = np.zeros((n, period))  # dt * sum_{i=1..k} d^i: position from the initial velocity

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        m = idx.size
        rng = self._rng
        s = self._s
        s[idx, 0:2] = rng.uniform(-10.0, 10.0, size=(m, 2))
        s[idx, 2] = rng.uniform(-1.5, 1.5, size=m)
        s[idx, 4] = rng.uniform(-1.5, 1.5, size=m)
        s[idx, 3] = 4.0
        s[idx, 5:8] = 0.0
        self._event_side[idx] = EDGE
        mass = np.maximum(self._param("mass", m), 0.05)
        scale = np.maximum(self._param("scale", m), 0.05)
        self._mass[idx] = mass
        self._scale[idx] = scale
        self._gravity[idx] = self._param("gravity", m)
        self._floor[idx, 0] = PLATFORM_TOP + 0.5 * scale
        self._steps_left = self.max_steps - int(self._step_count.max())
        self._resting = False  # dropped balls fall first
        self._gravity_down = bool((self._gravity > 0).all())
        self._fall_g[idx] = self._gravity[idx, None] * self._fall
        self._acc_gain[idx] = (ROLL * self._gravity[idx, None] * AXIS_SIGN)[:, :, None]
        period = self.decision_period
        decay = 1.0 - DT * RESISTANCE / mass
        self._decay_pow[idx] = decay[:, None] ** np.arange(self.decision_period + 1)
        vel_mat = np.where(self._causal, DT * decay[:, None, None] ** self._lag, 0.0)
        self._vel_pos_mat[idx, :, :period] = vel_mat
        self._vel_pos_mat[idx, :, period:] = DT * np.cumsum(vel_mat, axis=2)
        self._pos_pow[idx] = DT * np.cumsum(self._decay_pow[idx, 1:], axis=1)
        for value in mass:
            self.stat("Environment/BallMass", float(value), StatsAggregationMethod.AVERAGE)
        for value in scale:
            self.stat("Environment/BallScale", float(value), StatsAggregationMethod.AVERAGE)

    def _advance(self, max_substeps: int) -> int:
        r, period = max_substeps, self.decision_period
        s = self._s
        # Every op below works on all agents and all physics steps of the interval at once;
        # with small arrays numpy's per-call cost dominates, so the op count is kept low.
        step = np.minimum(np.maximum(self._cont_action, -1.0), 1.0)
        tilt = self._tilt[:, :, None] + step[:, :, None] * self._dk[:r]
        np.minimum(np.maximum(tilt, -TILT_LIMIT, out=tilt), TILT_LIMIT, out=tilt)  # (n, 2, r)
        acc = np.sin(tilt * RAD)
        acc *= self._acc_gain
        resting = self._resting  # fast path: every ball lies on its platform
        if not resting:
            y0, vy0 = s[:, 3:4], s[:, 6:7]
            y = y0 + self._dtk[:r] * vy0 - self._fall_g[:, :r]  # free fall, (n, r)
            contact = y <= self._floor  # the floor is -inf once the ball left the platform
            np.maximum(y, self._floor, out=y)
            acc *= contact[:, None, :]
        # one matmul gives velocity and position sums: columns [0, period) and [period, 2 period)
        out = acc @ self._vel_pos_mat[:, :r, :]
        pos = self._pos[:, :, None] + self._vel[:, :, None] * self._pos_pow[:, None, :r]
        pos += out[:, :, period : period + r]
        side = np.maximum(np.abs(pos[:, 0]), np.abs(pos[:, 1]))  # (n, r)
        # events: a ball leaves its platform (side > EDGE while on it) or is lost
        events = side > self._event_side
        if not resting:
            events |= y < LOST_BELOW
        e = r
        if events.any():
            e = int(events.any(axis=0).argmax()) + 1
        if self.max_steps > 0:
            e = max(1, min(e, self._steps_left))
        j = e - 1
        self._tilt[:] = tilt[:, :, j]
        self._pos[:] = pos[:, :, j]
        self._vel[:] = self._vel * self._decay_pow[:, e : e + 1] + out[:, :, j]
        if not resting:
            s[:, 3] = y[:, j]
            s[:, 6] = np.where(contact[:, j], 0.0, vy0[:, 0] - self._gravity * (DT * e))
            self._resting = self._gravity_down and bool(contact[:, j].all())
        self._step_count += e
        self._steps_left -= e
        self._reward.fill(0.1)
        if events[:, j].any():
            off = side[:, j] > EDGE
            if off.any():
                self._floor[off] = -np.inf
                self._event_side[off] = LOST_SIDE
                self._resting = False
            lost = np.flatnonzero((side[:, j] > LOST_SIDE) | (s[:, 3] < LOST_BELOW))
            if lost.size:
                self._reward[lost] = -1.0
                self._finish(lost, False)
                self._start(lost)
        if self.max_steps > 0 and self._steps_left <= 0:
            self._truncate_at_max_steps()
        return e

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        obs = self._s[idx].astype(np.float32)
        obs[:, 0:2] = np.sin(obs[:, 0:2] * np.float32(HALF_RAD))
        return [obs]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """PD controller on the ball's position and velocity, read from the observations.

        It picks the tilt that gives the ball a critically damped return to the centre
        (natural frequency 2 rad/s, default gravity assumed) and moves the platform towards
        that tilt within one decision (10 degrees at action 1).
        """
        self._check_behavior(behavior_name)
        obs = np.asarray(decision_steps.obs[0], dtype=np.float64)
        tilt = np.degrees(2.0 * np.arcsin(np.clip(obs[:, 0:2], -1.0, 1.0)))
        pos, vel = obs[:, [2, 4]], obs[:, [5, 7]]
        wn = 2.0
        wanted_acc = -(wn * wn * pos + 2.0 * wn * vel)  # critically damped
        sin_tilt = np.clip(wanted_acc / (ROLL * 9.81) * AXIS_SIGN, -0.45, 0.45)
        target = np.degrees(np.arcsin(sin_tilt))
        per_decision = DEG_PER_ACTION * self.decision_period
        action = np.clip((target - tilt) / per_decision, -1.0, 1.0).astype(np.float32)
        return ActionTuple(continuous=action)
