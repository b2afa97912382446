"""The soccer field of ML-Agents' Soccer examples in 2-D: geometry, physics and ray sensors.

Pure numpy, vectorised over fields (``F``) and the agents of a field (``A``); used by
:mod:`unity_sb3.scenes.soccer` (SoccerTwos) and :mod:`unity_sb3.scenes.strikers_vs_goalie`.

Geometry (metres, Unity's x along the field, z across; read from the ``SoccerFieldTwos`` and
``StrikersVsGoalieField`` prefabs, whose ``Field`` is scaled by 0.01): the ground is 31 x 15;
side walls at ``|z| = 7.5``; the goal lines at ``|x| = 15.5`` with a mouth of ``|z| < 4.25``
(the ``Goal*`` boxes and nets); four corner walls at 60 degrees (``Wall Angle``) run from the
goal posts to the side walls, so the field is a convex polygon and the ball cannot stick in a
corner. The blue goal is at ``-x``, the purple goal at ``+x``.

Physics (Unity's 0.02 s fixed step, PhysX reduced to the plane: every rigid body of the
prefabs has its y position frozen): agents are discs of radius 0.5 and mass 50 with drag 3;
the ball a disc of radius 0.624 (``SphereCollider`` 41.6 scaled by 0.015), mass 3, drag 1,
bounciness 0.8 (``Bouncy`` material, maximum combine) above PhysX's 2 m/s bounce threshold.
Damping is PhysX's ``v *= 1 - min(1, drag * dt)`` before integration. Contacts are resolved
once per step with impulses (agent-agent and agent-wall inelastic, anything with the ball
elastic) and position correction in proportion to the inverse masses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DT = 0.02  # s per academy (physics) step
HALF_LENGTH = 15.5  # goal line, |x|
HALF_WIDTH = 7.5  # side walls, |z| (inner face of the 0.46-thick ``Side`` boxes at 7.75)
GOAL_HALF_WIDTH = 4.25  # goal mouth, |z| (``Goal*`` box depth 8.5)
CORNER_POST = np.array([15.6, 4.25])  # where a corner wall meets the goal post (x, z)
CORNER_ANGLE = np.deg2rad(60.0)  # corner walls turn 60 degrees from the goal line
AGENT_RADIUS = 0.5
AGENT_MASS = 50.0
AGENT_DRAG = 3.0
BALL_RADIUS = 41.61146 * 0.015
BALL_MASS = 3.0
BALL_DRAG = 1.0
BOUNCINESS = 0.8
BOUNCE_THRESHOLD = 2.0  # m/s (DynamicsManager.asset): slower contacts do not bounce
CONTACT_OFFSET = 0.02  # two colliders' default contact offsets: touching starts this close
RUN_SPEED = 2.0  # SoccerSettings.agentRunSpeed, m/s of velocity change per step
TURN_DEG = 100.0 * DT  # transform.Rotate(up, Time.deltaTime * 100f)
KICK_FORCE = 2000.0  # AgentSoccer k_Power (N), applied for one step by OnCollisionEnter
RAY_LENGTH = 20.0
RAY_RADIUS = 0.5  # SphereCast radius
RAY_LIFT = 0.5  # the cast starts 0.5 above the agent's centre, the ball and agents are lower


def _walls() -> tuple[np.ndarray, np.ndarray]:
    """The field as half-planes ``n . p <= d``: outward normals ``(6, 2)`` and offsets ``(6,)``."""
    normals = [np.array([0.0, 1.0]), np.array([0.0, -1.0])]
    offsets = [HALF_WIDTH, HALF_WIDTH]
    c, s = np.cos(np.pi / 2 - CORNER_ANGLE), np.sin(np.pi / 2 - CORNER_ANGLE)
    for sx in (1.0, -1.0):
        for sz in (1.0, -1.0):
            n = np.array([sx * c, sz * s])  # outward, pointing away from the field's centre
            post = CORNER_POST * np.array([sx, sz])
            normals.append(n)
            offsets.append(float(n @ post))
    return np.array(normals), np.array(offsets)


WALL_NORMALS, WALL_OFFSETS = _walls()
# a ray's sphere stops this far from a disc's centre (the sphere rides RAY_LIFT higher)
RAY_HIT_BALL = float(np.sqrt((BALL_RADIUS + RAY_RADIUS) ** 2 - RAY_LIFT**2))
RAY_HIT_AGENT = float(np.sqrt((AGENT_RADIUS + RAY_RADIUS) ** 2 - RAY_LIFT**2))

#: What a ray can report, from the point of view of the agent that casts it.
BALL, OWN_GOAL, OTHER_GOAL, WALL, TEAMMATE, OPPONENT = range(6)
KIND_NAMES = ("ball", "own goal", "other goal", "wall", "teammate", "opponent")
NO_HIT = -1


@dataclass(frozen=True)
class RaySensor:
    """A ``RayPerceptionSensorComponent3D`` of a prefab.

    :param name: Unity's sensor name (the observation spec is named after it).
    :param rays_per_direction: rays on each side of the centre ray.
    :param max_degrees: angle of the outermost rays from the centre ray (degrees).
    :param tags: the kinds of object it detects, in the order of its one-hot features;
        anything else a ray hits reports a hit without a tag.
    :param backwards: the sensor sits on a child turned 180 degrees (``*ReverseRays``).
    :param stacks: observation stacks (``ObservationStacks``).
    """

    name: str
    rays_per_direction: int
    max_degrees: float
    tags: tuple[int, ...]
    backwards: bool = False
    stacks: int = 3

    @property
    def bearings(self) -> np.ndarray:
        """Ray directions in degrees clockwise from the agent's forward, in Unity's order.

        ``RayPerceptionSensor.GetRayAngles``: the centre ray, then alternately the ray to the
        right and to the left of it, ``max_degrees / rays_per_direction`` apart.
        """
        step = self.max_degrees / self.rays_per_direction
        out = [0.0]
        for i in range(1, self.rays_per_direction + 1):
            out += [i * step, -i * step]
        return np.array(out) + (180.0 if self.backwards else 0.0)

    @property
    def ray_size(self) -> int:
        """Floats per ray: tag one-hot, a no-hit flag, the hit fraction."""
        return len(self.tags) + 2

    @property
    def frame_size(self) -> int:
        """Floats of one frame (all rays, before stacking)."""
        return (2 * self.rays_per_direction + 1) * self.ray_size

    @property
    def size(self) -> int:
        """Floats of the stacked observation."""
        return self.frame_size * self.stacks


def heading_vectors(heading_deg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit forward and right vectors ``(..., 2)`` (x, z) of Unity yaw angles (degrees, clockwise)."""
    h = np.deg2rad(heading_deg)
    sin, cos = np.sin(h), np.cos(h)
    return np.stack([sin, cos], axis=-1), np.stack([cos, -sin], axis=-1)


def cast_rays(
    origin: np.ndarray,
    heading_deg: np.ndarray,
    bearings: np.ndarray,
    discs: np.ndarray,
    disc_radius: np.ndarray,
    disc_kind: np.ndarray,
    own_goal_sign: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Sphere casts of ``m`` agents, ``r`` rays each, over the field.

    :param origin: ``(m, 2)`` agent centres (x, z).
    :param heading_deg: ``(m,)`` agent yaw (degrees, clockwise from +z).
    :param bearings: ``(r,)`` ray directions relative to the agent (degrees, clockwise).
    :param discs: ``(m, k, 2)`` centres of the discs each agent can see (ball, other agents).
    :param disc_radius: ``(m, k)`` distance at which the sphere stops on each disc (0 = skip).
    :param disc_kind: ``(m, k)`` kind of each disc (``BALL``, ``TEAMMATE``, ``OPPONENT``).
    :param own_goal_sign: ``(m,)`` +1 if the agent's own goal is at ``+x``, -1 if at ``-x``.
    :return: ``(kind, fraction)``: ``(m, r)`` int kind hit (``NO_HIT`` for none) and float
        hit distance divided by the ray length (1 for no hit).
    """
    yaw = np.deg2rad(heading_deg[:, None] + bearings[None, :])
    d = np.stack([np.sin(yaw), np.cos(yaw)], axis=-1)  # (m, r, 2)
    p = origin[:, None, :]
    # walls: the sphere stops RAY_RADIUS before the first half-plane the ray leaves by
    toward = d @ WALL_NORMALS.T  # (m, r, 6)
    gap = WALL_OFFSETS - RAY_RADIUS - origin @ WALL_NORMALS.T  # (m, 6)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_wall = np.where(toward > 1e-9, gap[:, None, :] / toward, np.inf).min(axis=-1)
        # goal mouths: the plane of each goal line, within the mouth
        dx = d[..., 0]
        t_goal = np.where(
            np.abs(dx) > 1e-9, (np.sign(dx) * (HALF_LENGTH - RAY_RADIUS) - p[..., 0]) / dx, np.inf
        )
    t_goal = np.where(t_goal > 0, t_goal, np.inf)
    z_goal = p[..., 1] + t_goal * d[..., 1]
    t_goal = np.where(np.abs(z_goal) < GOAL_HALF_WIDTH, t_goal, np.inf)
    t = np.maximum(np.minimum(t_wall, t_goal), 0.0)
    is_goal = t_goal <= t_wall
    own = np.sign(d[..., 0]) == own_goal_sign[:, None]
    kind = np.where(is_goal, np.where(own, OWN_GOAL, OTHER_GOAL), WALL)
    # discs: first contact of the moving sphere; a disc the cast starts inside is ignored (PhysX)
    if discs.shape[1]:
        rel = discs[:, None, :, :] - p[:, :, None, :]  # (m, r, k, 2)
        along = (rel * d[:, :, None, :]).sum(-1)
        dist2 = (rel**2).sum(-1)
        rad2 = disc_radius[:, None, :] ** 2
        disc_ahead = along**2 - dist2 + rad2
        t_disc = along - np.sqrt(np.maximum(disc_ahead, 0.0))
        valid = (disc_ahead >= 0) & (dist2 > rad2) & (t_disc >= 0) & (disc_radius[:, None, :] > 0)
        t_disc = np.where(valid, t_disc, np.inf)
        nearest = t_disc.argmin(axis=-1)
        t_near = np.take_along_axis(t_disc, nearest[..., None], -1)[..., 0]
        closer = t_near < t
        t = np.where(closer, t_near, t)
        kind = np.where(
            closer, np.take_along_axis(disc_kind[:, None, :], nearest[..., None], -1)[..., 0], kind
        )
    hit = t <= RAY_LENGTH
    return np.where(hit, kind, NO_HIT), np.where(hit, t / RAY_LENGTH, 1.0)


def ray_features(kind: np.ndarray, fraction: np.ndarray, tags: tuple[int, ...]) -> np.ndarray:
    """``RayPerceptionOutput`` floats: per ray a one-hot of ``tags``, a no-hit flag, the fraction.

    :param kind: ``(m, r)`` kinds hit (``NO_HIT`` for none); a kind not in ``tags`` is a hit
        without a tag (no one-hot, no-hit flag 0).
    :param fraction: ``(m, r)`` hit distance / ray length.
    :return: ``(m, r * (len(tags) + 2))`` float32.
    """
    m, r = kind.shape
    out = np.zeros((m, r, len(tags) + 2), dtype=np.float32)
    for j, tag in enumerate(tags):
        out[..., j] = kind == tag
    out[..., -2] = kind == NO_HIT
    out[..., -1] = fraction
    return out.reshape(m, -1)


def _keep_inside(pos: np.ndarray, vel: np.ndarray, radius: float, restitution: float) -> None:
    """Push discs ``(..., 2)`` back inside the walls; the normal velocity bounces (in place)."""
    depth = np.maximum(pos @ WALL_NORMALS.T - (WALL_OFFSETS - radius), 0.0)  # (..., 6) into each wall
    if not depth.any():
        return
    pos -= depth @ WALL_NORMALS
    vn = vel @ WALL_NORMALS.T
    e = np.where(vn > BOUNCE_THRESHOLD, restitution, 0.0)
    vel -= np.where((depth > 0) & (vn > 0), (1 + e) * vn, 0.0) @ WALL_NORMALS


def _collide(
    pa: np.ndarray,
    va: np.ndarray,
    ma: float,
    pb: np.ndarray,
    vb: np.ndarray,
    mb: float,
    reach: float,
    e: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Contacts of disc pairs ``a``-``b`` (positions, velocities ``(..., 2)``, broadcast together).

    :return: ``(shift, impulse, contact)``: the overlap along the normal from ``a`` to ``b``
        (the caller splits it between the two in proportion to their inverse masses), the
        normal impulse on ``b`` (``a`` gets its opposite; elastic with ``e`` above the bounce
        threshold), and the pairs in contact (within ``CONTACT_OFFSET`` of touching).
    """
    rel = pb - pa
    dist = np.sqrt((rel**2).sum(-1))
    normal = rel / np.maximum(dist, 1e-9)[..., None]
    normal[dist <= 1e-9] = [1.0, 0.0]
    overlap = np.maximum(reach - dist, 0.0)
    vn = ((vb - va) * normal).sum(-1)
    bounce = np.where(-vn > BOUNCE_THRESHOLD, e, 0.0)
    impulse = np.where((overlap > 0) & (vn < 0), -(1 + bounce) * vn / (1 / ma + 1 / mb), 0.0)
    return overlap[..., None] * normal, impulse[..., None] * normal, dist <= reach + CONTACT_OFFSET


@dataclass
class FieldState:
    """The moving bodies of ``F`` fields with ``A`` agents each (arrays updated in place).

    :param pos: ``(F, A, 2)`` agent centres (x, z); ``vel`` their velocities (m/s).
    :param heading: ``(F, A)`` agent yaw (degrees, clockwise from +z).
    :param ball: ``(F, 2)`` ball centre; ``ball_vel`` its velocity; ``ball_push`` a velocity
        change queued for the next step (kicks: ``AddForce`` from ``OnCollisionEnter``).
    :param touching: ``(F, A)`` agents in contact with the ball after the last step.
    """

    pos: np.ndarray
    vel: np.ndarray
    heading: np.ndarray
    ball: np.ndarray
    ball_vel: np.ndarray
    ball_push: np.ndarray
    touching: np.ndarray

    @classmethod
    def zeros(cls, fields: int, agents: int) -> FieldState:
        return cls(
            pos=np.zeros((fields, agents, 2)),
            vel=np.zeros((fields, agents, 2)),
            heading=np.zeros((fields, agents)),
            ball=np.zeros((fields, 2)),
            ball_vel=np.zeros((fields, 2)),
            ball_push=np.zeros((fields, 2)),
            touching=np.zeros((fields, agents), dtype=bool),
        )


_AXIS = np.array([0.0, 1.0, -1.0])  # action value -> direction: none, +, -


def move_agents(
    state: FieldState, actions: np.ndarray, forward_speed: np.ndarray, lateral_speed: np.ndarray
) -> None:
    """``AgentSoccer.MoveAgent`` for every agent: turn, then a velocity change along the move.

    :param actions: ``(F, A, 3)`` discrete actions: forward (0 none, 1 forward, 2 back),
        lateral (0 none, 1 right, 2 left), rotation (0 none, 1 left, 2 right).
    :param forward_speed: ``(A,)`` ``m_ForwardSpeed`` of each agent slot; ``lateral_speed`` its
        ``m_LateralSpeed``. As in the C#, a lateral move replaces the forward one.
    """
    fwd_axis, side_axis, turn_axis = actions[..., 0], actions[..., 1], actions[..., 2]
    state.heading += -TURN_DEG * _AXIS[turn_axis]  # 1 turns left (-up), 2 right
    state.heading %= 360.0
    forward, right = heading_vectors(state.heading)
    along = (_AXIS[fwd_axis] * forward_speed)[..., None] * forward
    side = (_AXIS[side_axis] * lateral_speed)[..., None] * right
    state.vel += np.where((side_axis > 0)[..., None], side, along) * RUN_SPEED


def physics_step(state: FieldState, kick_power: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """One PhysX step of every field; then ``OnCollisionEnter`` kicks.

    Contacts are solved together (one Jacobi pass): agent-agent pairs, then every agent
    against the ball, then the walls.

    :param kick_power: ``(F, A)`` force of each agent's kick on first contact, in newtons
        (``k_Power * m_KickPower``; goalies always kick with ``k_Power``).
    :param pairs: ``(P, 2)`` agent slot pairs that can collide.
    :return: ``(F, A)`` bool, agents whose contact with the ball began this step.
    """
    state.ball_vel += state.ball_push
    state.ball_push[:] = 0.0
    state.vel *= max(0.0, 1.0 - AGENT_DRAG * DT)
    state.ball_vel *= max(0.0, 1.0 - BALL_DRAG * DT)
    state.pos += state.vel * DT
    state.ball += state.ball_vel * DT
    if len(pairs):
        i, j = pairs[:, 0], pairs[:, 1]
        pos, vel = state.pos, state.vel
        shift, impulse, _ = _collide(
            pos[:, i], vel[:, i], AGENT_MASS, pos[:, j], vel[:, j], AGENT_MASS, 2 * AGENT_RADIUS, 0.0
        )
        incidence = np.zeros((len(pairs), pos.shape[1]))
        incidence[np.arange(len(pairs)), i] = -1.0
        incidence[np.arange(len(pairs)), j] = 1.0
        state.pos += 0.5 * np.einsum("fpc,pa->fac", shift, incidence)
        state.vel += np.einsum("fpc,pa->fac", impulse, incidence) / AGENT_MASS
    ball, ball_vel = state.ball[:, None, :], state.ball_vel[:, None, :]
    reach = AGENT_RADIUS + BALL_RADIUS
    shift, impulse, contact = _collide(
        state.pos, state.vel, AGENT_MASS, ball, ball_vel, BALL_MASS, reach, BOUNCINESS
    )
    share = (1 / AGENT_MASS) / (1 / AGENT_MASS + 1 / BALL_MASS)
    state.pos -= share * shift
    state.vel -= impulse / AGENT_MASS
    state.ball += ((1 - share) * shift).sum(axis=1)
    state.ball_vel += impulse.sum(axis=1) / BALL_MASS
    _keep_inside(state.pos, state.vel, AGENT_RADIUS, 0.0)
    # agents stay on the pitch (the real goal boxes let them in; here the goal line stops them)
    limit = HALF_LENGTH - AGENT_RADIUS
    x = state.pos[..., 0]
    state.vel[..., 0] = np.where((np.abs(x) > limit) & (state.vel[..., 0] * x > 0), 0.0, state.vel[..., 0])
    state.pos[..., 0] = np.clip(x, -limit, limit)
    _keep_inside(state.ball, state.ball_vel, BALL_RADIUS, BOUNCINESS)
    began = contact & ~state.touching
    state.touching[:] = contact
    if began.any():
        away = state.ball[:, None, :] - state.pos
        away /= np.maximum(np.linalg.norm(away, axis=-1, keepdims=True), 1e-9)
        push = (away * (kick_power * began)[..., None]).sum(axis=1)
        state.ball_push += push * DT / BALL_MASS
    return began


def goal_scored(ball: np.ndarray) -> np.ndarray:
    """``(F,)`` int: +1 if the ball crossed into the purple goal (``+x``), -1 the blue goal, 0 none."""
    crossed = np.abs(ball[:, 0]) >= HALF_LENGTH
    return np.where(crossed & (np.abs(ball[:, 1]) < GOAL_HALF_WIDTH), np.sign(ball[:, 0]), 0).astype(np.int64)
