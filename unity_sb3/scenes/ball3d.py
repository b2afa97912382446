"""Ball3D: ML-Agents' 3DBall (``Ball3DAgent`` on the ``3DBall`` prefab), physics included.

Each agent is a 5x5x5 cube (the prefab's ``Agent``: scale 5, ``BoxCollider`` of size 1,
rotated by its transform, no rigidbody) carrying a ball (radius 0.5, ``Rigidbody`` mass 1,
drag 0, angular drag 0.01) on its top face, 2.5 above the cube's centre, about which it tilts.

* Observation (8 floats, ``Ball3DAgent.CollectObservations``): the cube's rotation quaternion
  components z and x, the ball's position relative to the cube's centre (x, y, z: the ball
  rests at y = 3 on a level cube) and the ball's velocity (x, y, z), all in world axes.
* Actions: 2 continuous, clamped to [-1, 1]. At every physics step (``DecisionRequester``
  with ``TakeActionsBetweenDecisions``) the cube turns by ``2 * action[0]`` degrees about its
  own z axis, then ``2 * action[1]`` degrees about its own x axis (``Transform.Rotate``),
  each only while the quaternion component of that axis is below 0.25 in the direction of
  the turn (so the tilt stops near 29 degrees).
* Reward: 0.1 per decision while the ball stays; -1 and the episode ends when the ball is
  more than 2 below the cube's centre or more than 3 from it along x or z (checked every
  physics step, after the turn and before physics, as ``OnActionReceived`` does).
* Episode start (``OnEpisodeBegin``): the cube is set level, turned by U(-10, 10) degrees
  about x then about z; the ball is placed at (U(-1.5, 1.5), 4, U(-1.5, 1.5)) with zero
  velocity (its spin is kept, as Unity does). ``max_steps`` = 5000 physics steps, a decision
  every 5: a perfect agent scores 100.
* Environment parameters (``SetResetParameters``): ``mass`` (default 1) and ``scale`` (ball
  diameter, default 1), read at each episode start; plus ``gravity``. As in Unity, the mass
  changes nothing in the motion (the ball only touches a static collider). Unity's agent records
  no statistics; ``report_parameters=True`` sends each episode's mass and scale as the stats
  ``Environment/BallMass`` and ``Environment/BallScale`` (for tests and debugging: it is the only
  way to see the mass from outside).

Physics: Unity's 0.02 s fixed step and PhysX's rigid-body step for a sphere against a box
that the agent's transform moves (a static collider: it pushes the ball out when it turns
into it, but gives it no velocity of its own): gravity, then one contact (normal impulse
with speculative contact within the contact offsets, Coulomb friction at the contact point
coupling the ball's spin and slide), then semi-implicit Euler. Penetration is resolved by a
bias velocity that moves the ball but is not kept in its reported velocity (PhysX's
position iterations). Vectorised over agents, one physics step at a time.
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

from unity_sb3.scenes.base import EmbeddedScene
from unity_sb3.unity.errors import UnityConfigurationError

DT = 0.02  # s per physics step (Project/ProjectSettings/TimeManager.asset)
DEG_PER_ACTION = 2.0  # degrees per physics step at action 1 (Ball3DAgent: 2f * Clamp(action))
QUAT_LIMIT = 0.25  # a turn is allowed while |rotation.z| (or .x) < 0.25 in its direction
HALF = 2.5  # half size of the cube (scale 5, BoxCollider size 1)
LOST_SIDE = 3.0
LOST_BELOW = -2.0
START_HEIGHT = 4.0
CONTACT_OFFSET = 0.02  # Unity's default contact offset (0.01) of both colliders
BIAS = 0.8  # fraction of a penetration removed per step
MAX_DEPENETRATION = 10.0  # m/s, Rigidbody.maxDepenetrationVelocity (Unity's default)
FRICTION = 0.6  # Unity's default PhysicMaterial (static = dynamic friction)
BOUNCE_THRESHOLD = 2.0  # m/s (DynamicsManager.asset)
BOUNCINESS = 0.0
ANGULAR_DRAG = 0.01  # 1/s (prefab)
MAX_ANGULAR_VELOCITY = 7.0  # rad/s, Rigidbody.maxAngularVelocity (Unity's default)
RAD = np.pi / 180.0
SPIN_KEEP = 1.0 - ANGULAR_DRAG * DT  # the spin kept by one step of angular drag
FRICTION_SCALE = 2.0 / 7.0  # the share of its slip a friction impulse removes (a sphere)
FRICTION_SPIN = FRICTION_SCALE * 2.5  # its spin per unit slip, over the radius (5 / 7r)


def cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cross products of vectors stored as columns: ``a``, ``b`` of shape (3, n) -> (3, n)."""
    a, b = np.concatenate((a, a[:2])), np.concatenate((b, b[:2]))  # rows x y z x y
    return a[1:4] * b[2:5] - a[2:5] * b[1:4]


def _cross5(a5: np.ndarray, b5: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
    """:func:`cross` of ``a``, ``b`` given with their rows x y z x y (shape (5, n)), into ``out``."""
    np.multiply(a5[1:4], b5[2:5], out)
    np.multiply(a5[2:5], b5[1:4], tmp)
    out -= tmp


# A cube's frame is one column of 13 rows: its quaternion (x, y, z, w), then its rotation
# matrix row by row (rot[r, c] in row 4 + 3 r + c); rot[:, j] is local axis j in world axes.
FRAME_ROWS = 13


def _turn_rows(axis: int, perm: list[int]) -> tuple[np.ndarray, np.ndarray]:
    i, j = (0, 1) if axis == 2 else (1, 2)  # the two local axes that turn
    a, b = [4 + i, 7 + i, 10 + i], [4 + j, 7 + j, 10 + j]
    return np.array([0, 1, 2, 3, *a, *b]), np.array([*perm, *b, *a])


# q * AngleAxis(angle, axis) for q = (x, y, z, w): q c + q[perm] * sign s (c, s of the half angle);
# the turning axes a, b of the matrix: a c + b s and b c - a s (c, s of the angle). Per axis: the
# rows rewritten, the rows each is mixed with, and the quaternion's signs.
_TURN = {
    2: (*_turn_rows(2, [1, 0, 3, 2]), np.array([1.0, -1.0, 1.0, -1.0])[:, None]),
    0: (*_turn_rows(0, [3, 2, 1, 0]), np.array([1.0, 1.0, -1.0, -1.0])[:, None]),
}


def turn_factors(
    half: tuple[np.ndarray, np.ndarray], full: tuple[np.ndarray, np.ndarray], axis: int
) -> tuple[np.ndarray, np.ndarray]:
    """The factors :func:`turn` applies for turns about ``axis``: compute once, turn many times.

    :param half: sine and cosine of half the turn angles, shape (n,) each.
    :param full: sine and cosine of the turn angles, shape (n,) each.
    :param axis: 0 for the local x axis, 2 for the local z axis.
    :return: what multiplies the rewritten rows and what multiplies the rows they are mixed
        with, shape (10, n) each.
    """
    (s_half, c_half), (s_full, c_full) = half, full
    keep = np.empty((10, np.size(c_half)))
    keep[:4] = c_half
    keep[4:] = c_full
    mix = np.empty_like(keep)
    mix[:4] = _TURN[axis][2] * s_half
    mix[4:7] = s_full
    mix[7:] = -s_full  # b c + a (-s) is b c - a s bit for bit
    return keep, mix


#: :func:`turn_factors` of no turn (angle 0), as columns that broadcast.
IDLE = {axis: turn_factors((np.zeros(1), np.ones(1)), (np.zeros(1), np.ones(1)), axis) for axis in _TURN}
#: The same stacked (keep over mix, 20 rows), and the frame rows a turn reads in that order.
IDLE_STACKED = {axis: np.concatenate(IDLE[axis]) for axis in _TURN}
_Z_THEN_X = np.stack([_TURN[2][2], _TURN[0][2]])  # (2, 4, 1): the quaternion signs, z then x
_X_THEN_Z = _Z_THEN_X[::-1].copy()
_GATHER = {axis: np.concatenate(_TURN[axis][:2]) for axis in _TURN}


def stacked_turn_factors(
    s_half: np.ndarray, c_half: np.ndarray, s_full: np.ndarray, c_full: np.ndarray, signs: np.ndarray
) -> np.ndarray:
    """:func:`turn_factors` of two turns at once, keep over mix: shape (2, 20, n), the same values.

    :param s_half: sines of half the angles of the two turns, shape (2, n); ``c_half`` their
        cosines, ``s_full`` and ``c_full`` those of the angles.
    :param signs: the two axes' quaternion signs, shape (2, 4, 1) (``_Z_THEN_X`` or ``_X_THEN_Z``).
    """
    factors = np.empty((2, 20, s_half.shape[1]))
    factors[:, :4] = c_half[:, None]
    factors[:, 4:10] = c_full[:, None]
    np.multiply(signs, s_half[:, None], factors[:, 10:14])
    factors[:, 14:17] = s_full[:, None]
    np.negative(s_full[:, None], factors[:, 17:])
    return factors


def turn(frame: np.ndarray, factors: tuple[np.ndarray, np.ndarray], axis: int) -> None:
    """Turn cubes about their own ``axis`` (``Transform.Rotate``), in place.

    :param frame: the cubes' frames (quaternion and matrix, see ``FRAME_ROWS``), shape (13, n).
    :param factors: :func:`turn_factors` of the turn angles.
    :param axis: 0 for the local x axis, 2 for the local z axis.
    """
    rows, mixed, _ = _TURN[axis]
    keep, mix = factors
    frame[rows] = frame[rows] * keep + frame[mixed] * mix


def interval_turn(
    s_half: np.ndarray, c_half: np.ndarray, s_full: np.ndarray, c_full: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One physics step's turn about z then x (``AngleAxis(a, z) * AngleAxis(b, x)``), as operators.

    :param s_half: sines of half the angles (a, b), shape (2, n); ``c_half`` their cosines.
    :param s_full: sines of the angles (a, b), shape (2, n); ``c_full`` their cosines.
    :return: M (4, 4, n) with ``q * turn = M @ q`` for quaternions (x, y, z, w), and the turn's
        rotation matrices (3, 3, n) (``R * turn``).
    """
    sa, sb = s_half
    ca, cb = c_half
    x, y, z, w = ca * sb, sa * sb, sa * cb, ca * cb  # the turn's quaternion
    m = np.empty((4, 4, sa.size))
    m[0] = w, z, -y, x
    m[1] = -z, w, x, y
    m[2] = y, -x, w, z
    m[3] = -x, -y, -z, w
    sa, sb = s_full
    ca, cb = c_full
    r = np.empty((3, 3, sa.size))
    r[0] = ca, -sa * cb, sa * sb
    r[1] = sa, ca * cb, -ca * sb
    r[2, 0] = 0.0
    r[2, 1:] = sb, cb
    return m, r


def rotation_matrices(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (3, 3, n) of unit quaternions (x, y, z, w) as columns (4, n): world = R @ local."""
    x, y, z, w = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def sphere_box_contact(p: np.ndarray, rot: np.ndarray, radius: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Contact normal (world axes, towards the ball) and separation of a ball and the cube.

    :param p: ball centres relative to the cube's centre, world axes, shape (3, n).
    :param rot: cube rotations, shape (3, 3, n) (see :func:`rotation_matrices`).
    :param radius: ball radii, shape (n,).
    :return: normals (3, n) and separations (n,) (negative: penetration).
    """
    local = (rot * p[:, None, :]).sum(axis=0)
    d = local - np.clip(local, -HALF, HALF)
    dist = np.sqrt((d * d).sum(axis=0))
    inside = dist < 1e-9
    if inside.any():  # centre inside the cube: out through the nearest face
        cols = np.flatnonzero(inside)
        depth = HALF - np.abs(local[:, cols])
        axis = depth.argmin(axis=0)
        d[:, cols] = 0.0
        d[axis, cols] = np.where(local[axis, cols] >= 0, 1.0, -1.0)
        dist[cols] = 1.0
        normal = (rot * (d / dist)[None, :, :]).sum(axis=1)
        dist[cols] = -depth[axis, np.arange(cols.size)]
        return normal, dist - radius
    normal = (rot * (d / dist)[None, :, :]).sum(axis=1)
    return normal, dist - radius


#: The frame of a level cube (the identity rotation), one column.
LEVEL = np.concatenate(
    ([[0.0], [0.0], [0.0], [1.0]], rotation_matrices(np.array([[0.0], [0.0], [0.0], [1.0]])).reshape(9, 1))
)


class _Work:
    """Preallocated buffers of :meth:`Ball3D._physics_step` and :meth:`Ball3D._act` for ``n`` agents.

    Also views of the state they read (``pos_col``, ``rot_y``) and the radius terms set at each
    episode start (``top``, ``spin_gain``).
    """

    def __init__(self, frame: np.ndarray, pos: np.ndarray, vel: np.ndarray) -> None:
        n = frame.shape[1]
        self.q_xz, self.vel_y = frame[0:3:2], vel[1]
        self.pos_col = pos[:, None, :]
        self.rot_y = frame[4:].reshape(3, 3, n)[:, 1]  # the cube's local y axis (its top face's normal)
        self.t33 = np.empty((3, 3, n))
        self.local = np.empty((3, n))
        self.local_xz, self.local_y = self.local[0:3:2], self.local[1]
        self.xz = np.empty((2, n))
        self.t3, self.u3, self.slip = np.empty((3, n)), np.empty((3, n)), np.empty((3, n))
        self.n5, self.a5 = np.empty((5, n)), np.empty((5, n))
        self.sep, self.vn, self.target, self.jn = (np.empty(n) for _ in range(4))
        self.s1, self.size, self.limit, self.speed2 = (np.empty(n) for _ in range(4))
        self.touching, self.over = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
        self.signed, self.allowed = np.empty(n), np.empty(n, dtype=bool)
        self.gathered, self.turned = np.empty((20, n)), np.empty((10, n))
        self.d, self.normal, self.dist = np.empty((3, n)), np.empty((3, n)), np.empty(n)
        self.d_row = self.d[None]
        self.pos_xz, self.pos_y, self.side = pos[0:3:2], pos[1], np.empty((2, n))
        self.top = np.empty(n)
        self.spin_gain = np.empty(n)


class Ball3D(EmbeddedScene):
    """Balance a ball on a tilting cube (ML-Agents 3DBall); 8 floats, 2 continuous actions."""

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
        "report_parameters": False,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {
        "mass": "ball mass (as in Unity, it does not change the motion)",
        "scale": "ball diameter (units)",
        "gravity": "gravity (units/s^2)",
        "report_parameters": "send each episode's mass and scale as stats (Unity's 3DBall sends none)",
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
        n = int(params.get("num_agents", self.PARAMS["num_agents"]))
        # state as columns (one agent per column), world axes, relative to the cube's centre
        self._frame = np.zeros((FRAME_ROWS, n))  # cube rotations: quaternions and matrices
        self._q = self._frame[:4]  # (x, y, z, w)
        self._q[3] = 1.0
        self._rot = self._frame[4:].reshape(3, 3, n)  # the same, as matrices (kept in step)
        self._rot[...] = rotation_matrices(self._q)
        self._pos = np.zeros((3, n))  # ball centre
        self._vel = np.zeros((3, n))
        self._spin = np.zeros((3, n))  # ball angular velocity (rad/s)
        self._radius = np.full(n, 0.5)
        self._fall = np.full(n, 9.81 * DT)  # velocity gained by falling for one step
        self._work = _Work(self._frame, self._pos, self._vel)
        self._set_radius_terms()
        super().__init__(seed=seed, side_channels=side_channels, **params)

    def _set_radius_terms(self) -> None:
        """Terms of the contact that depend only on the ball radii (set at each episode start)."""
        work = self._work
        work.top = self._radius + HALF  # a ball's centre above the cube's centre when it rests
        work.spin_gain = FRICTION_SPIN / self._radius  # the spin a full friction impulse gives

    def reset(self) -> None:
        # Unity keeps a ball's spin through OnEpisodeBegin; a reset of the whole scene starts
        # still, so that a seeded reset repeats the same episodes.
        self._spin[:] = 0.0
        super().reset()

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        m = idx.size
        rng = self._rng
        frame = np.empty((FRAME_ROWS, m))
        frame[...] = LEVEL  # set level
        # Rotate(x, U(-10, 10)) then Rotate(z, U(-10, 10)): both angles drawn at once (the same
        # draws in the same order as one call per axis)
        angle = rng.uniform(-10.0, 10.0, size=(2, m)) * RAD
        half = angle / 2
        factors = stacked_turn_factors(np.sin(half), np.cos(half), np.sin(angle), np.cos(angle), _X_THEN_Z)
        for i, axis in enumerate((0, 2)):
            gathered = frame.take(_GATHER[axis], axis=0)
            gathered *= factors[i]
            frame[_TURN[axis][0]] = gathered[:10] + gathered[10:]  # turn(frame, factors, axis)
        self._frame[:, idx] = frame
        start = np.empty((3, m))
        start[0:3:2] = rng.uniform(-1.5, 1.5, size=(2, m))  # x, then z
        start[1] = START_HEIGHT
        self._pos[:, idx] = start
        self._vel[:, idx] = 0.0
        mass = self._param("mass", m)  # drawn even when not reported: a sampler's draws stay in order
        scale = self._param("scale", m)
        radius = 0.5 * np.maximum(scale, 1e-3)
        self._radius[idx] = radius
        self._set_radius_terms()
        self._fall[idx] = self._param("gravity", m) * DT
        if not self.params["report_parameters"]:
            return
        for value in mass:
            self.stat("Environment/BallMass", float(value), StatsAggregationMethod.AVERAGE)
        for value in scale:
            self.stat("Environment/BallScale", float(value), StatsAggregationMethod.AVERAGE)

    def _advance(self, max_substeps: int) -> int:
        # the action holds for the whole interval: its turns' sines and cosines too
        work = self._work
        angle = self._cont_action.T.astype(np.float64)  # DEG_PER_ACTION * RAD * np.clip(action, -1, 1)
        np.maximum(angle, -1.0, out=angle)
        np.minimum(angle, 1.0, out=angle)
        angle *= DEG_PER_ACTION * RAD
        half = angle / 2
        sines = (np.sin(half), np.cos(half), np.sin(angle), np.cos(angle))
        # Fast path: no cube can reach the quaternion limit within the interval (a step moves a
        # component by less than 0.02), so every step applies the same turn: one product.
        step = turns = None
        np.absolute(work.q_xz, work.xz)
        if np.maximum.reduce(work.xz, axis=None) + 0.02 * max_substeps < QUAT_LIMIT:
            step = interval_turn(*sines)
        else:
            factors = stacked_turn_factors(*sines, _Z_THEN_X)  # the factors of both axes, z then x
            # +1 turns up, -1 down, NaN not at all: a turn is allowed while sign * q < limit
            sign = np.where(angle > 0, 1.0, np.where(angle < 0, -1.0, np.nan))
            turns = [(2, sign[0], factors[0]), (0, sign[1], factors[1])]
        pos = self._pos
        steps_left = self.max_steps - int(np.maximum.reduce(self._step_count)) if self.max_steps > 0 else -1
        # 0.1 per physics step while the ball stays: set once, as nothing else changes a reward
        # before this loop returns (a lost ball or the step limit ends it)
        self._reward.fill(0.1)
        for k in range(1, max_substeps + 1):
            if step is None:
                self._act(turns)
            else:
                self._q[...] = np.einsum("ijn,jn->in", step[0], self._q)
                self._rot[...] = np.einsum("ijn,jkn->ikn", self._rot, step[1])
            # OnActionReceived's check, on the positions left by the last physics step: a ball
            # is lost when max(|x|, |z|, 1 - y) > 3. First the cheap question whether any might be.
            lost = ()
            np.absolute(work.pos_xz, work.side)
            if (
                np.maximum.reduce(work.side, axis=None) > LOST_SIDE
                or LOST_SIDE + LOST_BELOW - np.minimum.reduce(work.pos_y) > LOST_SIDE
            ):
                side = work.side
                worst = np.maximum(np.maximum(side[0], side[1]), LOST_SIDE + LOST_BELOW - pos[1])
                if worst.max() > LOST_SIDE:
                    lost = np.flatnonzero(worst > LOST_SIDE)
            if len(lost):
                self._reward[lost] = -1.0
                self._finish(lost, False)
                self._start(lost)
            self._physics_step()
            self._step_count += 1
            steps_left -= 1
            if steps_left == 0 or (len(lost) and self.max_steps > 0):
                self._truncate_at_max_steps()
            if steps_left == 0 or len(lost):
                return k
        return max_substeps

    def _contact(self, local: np.ndarray) -> np.ndarray:
        """:func:`sphere_box_contact` from the ball centres in the cubes' axes ``local``, in buffers.

        :return: the normals (3, n); the separations are left in ``_work.sep``.
        """
        work, rot = self._work, self._rot
        d = np.maximum(local, -HALF, out=work.d)  # d = local - np.clip(local, -HALF, HALF)
        np.minimum(d, HALF, out=d)
        np.subtract(local, d, d)
        np.multiply(d, d, work.t3)
        dist = np.add.reduce(work.t3, 0, None, work.dist)
        np.sqrt(dist, dist)  # dist = np.sqrt((d * d).sum(axis=0))
        if np.logical_or.reduce(np.less(dist, 1e-9, work.over)):  # a centre inside its cube: the general form
            normal, separation = sphere_box_contact(self._pos, rot, self._radius)
            work.sep[...] = separation
            return normal
        np.divide(d, dist, d)
        np.multiply(rot, work.d_row, work.t33)
        normal = np.add.reduce(work.t33, 1, None, work.normal)  # (rot * (d / dist)[None]).sum(axis=1)
        np.subtract(dist, self._radius, work.sep)
        return normal

    def _act(self, turns: list[tuple[int, np.ndarray, np.ndarray]]) -> None:
        """``OnActionReceived``: turn about z, then about x, each within the quaternion limit.

        :param turns: per axis (2 for z, then 0 for x): the axis, the turns' signs (+1 up, -1
            down, NaN for no turn; shape (n,)) and their :func:`turn_factors` stacked (keep
            over mix, shape (20, n)).
        """
        q, frame, work = self._q, self._frame, self._work
        for axis, sign, factors in turns:
            # allowed: (up & (q < limit)) | (down & (q > -limit)), as one product and compare
            np.multiply(q[axis], sign, work.signed)
            if not np.logical_and.reduce(np.less(work.signed, QUAT_LIMIT, work.allowed)):
                factors = np.where(work.allowed, factors, IDLE_STACKED[axis])
            # turn(frame, (keep, mix), axis): frame[rows] * keep + frame[mixed] * mix
            gathered = frame.take(_GATHER[axis], axis=0, out=work.gathered)
            gathered *= factors
            np.add(gathered[:10], gathered[10:], work.turned)
            frame[_TURN[axis][0]] = work.turned

    def _physics_step(self) -> None:
        """One PhysX step of every ball against its (already turned) cube.

        Written as in-place numpy calls on preallocated buffers (``_Work``), ``out`` passed
        positionally (a keyword costs more per call): at 12 agents a step is a few dozen calls on
        tiny arrays, whose count and per-call overhead are its cost.
        Every value is computed by the same operations in the same order as the plain form
        given in the comments, so the results are the same bit for bit.
        """
        pos, vel, spin, work = self._pos, self._vel, self._spin, self._work
        t3, u3, sep = work.t3, work.u3, work.sep
        np.subtract(work.vel_y, self._fall, work.vel_y)  # vel[1] -= fall
        spin *= SPIN_KEEP
        # local = (rot * pos[:, None, :]).sum(axis=0): the ball centres in the cube's axes
        np.multiply(self._rot, work.pos_col, work.t33)
        local = np.add.reduce(work.t33, 0, None, work.local)
        np.absolute(work.local_xz, work.xz)
        if np.maximum.reduce(work.xz, axis=None) <= HALF and np.minimum.reduce(work.local_y) > HALF:
            normal = work.rot_y  # every ball above its top face
            np.subtract(work.local_y, work.top, sep)  # local[1] - (radius + HALF)
            np.concatenate((normal, normal[:2]), out=work.n5)
        else:
            normal = self._contact(local)
            np.concatenate((normal, normal[:2]), out=work.n5)
        smallest = np.minimum.reduce(sep)
        if smallest >= CONTACT_OFFSET:  # no ball touches
            np.multiply(vel, DT, t3)  # pos += vel * DT
            pos += t3
            return
        np.multiply(vel, normal, t3)
        vn = np.add.reduce(t3, 0, None, work.vn)  # (vel * normal).sum(axis=0)
        # kept velocity: no approach faster than closing the gap within the step (speculative
        # contact); a bounce only above the bounce threshold
        target = np.maximum(sep, 0.0, out=work.target)
        target *= -1.0 / DT
        if BOUNCINESS > 0:
            target = np.where((sep <= 0) & (vn < -BOUNCE_THRESHOLD), -BOUNCINESS * vn, target)
        jn = np.subtract(target, vn, work.jn)  # impulse per unit mass
        np.maximum(jn, 0.0, out=jn)
        touching = True  # sep < CONTACT_OFFSET: every ball touches unless one is further
        if np.maximum.reduce(sep) >= CONTACT_OFFSET:
            touching = np.less(sep, CONTACT_OFFSET, work.touching)
            jn *= touching
        # the velocity that moves the ball also pushes a penetration out (not kept)
        extra = None
        if smallest < 0:
            push = np.where(sep < 0, np.minimum(sep * (-BIAS / DT), MAX_DEPENETRATION), target)
            extra = np.maximum(push - vn, 0.0) * touching - jn
        np.multiply(jn, normal, t3)  # vel += jn * normal
        vel += t3
        # friction at the contact point (-r n from the centre): the impulse -2/7 of its slip
        # stops it (a sphere's 1/m + r^2/I = 7/(2m)), within the friction cone; the same impulse
        # turns the ball by (5 / 7r) n x slip
        slip = work.slip
        np.concatenate((spin, spin[:2]), out=work.a5)
        _cross5(work.a5, work.n5, t3, u3)  # cross(spin, normal)
        t3 *= self._radius
        np.subtract(vel, t3, slip)  # slip = vel - cross(spin, normal) * radius
        np.multiply(slip, normal, t3)
        s1 = np.add.reduce(t3, 0, None, work.s1)
        np.multiply(s1, normal, t3)
        slip -= t3  # slip -= (slip * normal).sum(axis=0) * normal
        np.multiply(slip, slip, t3)
        size = np.add.reduce(t3, 0, None, work.size)
        np.sqrt(size, size)
        scale: float | np.ndarray = FRICTION_SCALE
        size *= scale  # size = sqrt((slip * slip).sum(axis=0)) * scale
        limit = np.multiply(jn, FRICTION, work.limit)  # FRICTION * jn
        if np.logical_or.reduce(np.greater(size, limit, work.over)):
            scale = scale * np.minimum(1.0, limit / np.maximum(size, 1e-12))
            gain = scale * 2.5 / self._radius
        else:
            gain = work.spin_gain  # FRICTION_SCALE * 2.5 / radius
        np.multiply(slip, scale, t3)
        vel -= t3  # vel -= slip * scale
        np.concatenate((slip, slip[:2]), out=work.a5)
        _cross5(work.n5, work.a5, t3, u3)  # cross(normal, slip)
        t3 *= gain
        spin += t3
        np.multiply(spin, spin, t3)
        speed2 = np.add.reduce(t3, 0, None, work.speed2)  # (spin * spin).sum(axis=0)
        if np.maximum.reduce(speed2) > MAX_ANGULAR_VELOCITY**2:
            spin *= np.minimum(1.0, MAX_ANGULAR_VELOCITY / np.sqrt(np.maximum(speed2, 1e-24)))
        if extra is None:
            np.multiply(vel, DT, t3)  # pos += vel * DT
        else:
            np.multiply(extra, normal, u3)  # pos += (vel + extra * normal) * DT
            np.add(vel, u3, t3)
            t3 *= DT
        pos += t3

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        # rows q.z, q.x, position, velocity; as float32 (n, 8)
        rows = np.concatenate((self._q[2:3], self._q[0:1], self._pos, self._vel))
        obs = np.empty((idx.size, 8), dtype=np.float32)
        obs.T[...] = rows[:, idx]
        return [obs]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """PD controller on the ball's position and velocity, read from the observations.

        It picks the tilt that gives the ball a critically damped return to the centre
        (natural frequency 1.5 rad/s, default gravity assumed, at most 17 degrees) and turns the
        cube towards that tilt within one decision (10 degrees at action 1).
        """
        self._check_behavior(behavior_name)
        obs = np.asarray(decision_steps.obs[0], dtype=np.float64)
        tilt = np.degrees(2.0 * np.arcsin(np.clip(obs[:, 0:2], -1.0, 1.0)))  # about z, about x
        pos, vel = obs[:, [2, 4]], obs[:, [5, 7]]
        wn = 1.5
        wanted_acc = -(wn * wn * pos + 2.0 * wn * vel)  # critically damped
        # a rolling ball accelerates by 5/7 g sin(tilt): to -x for a turn about +z, to +z about +x
        sin_tilt = np.clip(wanted_acc / (5.0 / 7.0 * 9.81) * np.array([-1.0, 1.0]), -0.3, 0.3)
        target = np.degrees(np.arcsin(sin_tilt))
        per_decision = DEG_PER_ACTION * self.decision_period
        action = np.clip((target - tilt) / per_decision, -1.0, 1.0).astype(np.float32)
        return ActionTuple(continuous=action)
