"""Tennis: ML-Agents' Tennis (``TennisAgent``, ``HitWall``, ``TennisArea`` on the ``TennisArea`` prefab).

Two rackets, one per team, hit a ball over a net; the scene is a 2-D court (Unity freezes the
ball's and the rackets' z). Each area holds agent A (``Tennis?team=0``, left, ``invertX``
false) and agent B (``Tennis?team=1``, right, ``invertX`` true); ``num_agents`` counts areas.

* Observation (``CollectObservations``, 9 floats, ``m_InvertMult`` = 1 for A and -1 for B, so
  each agent sees the court as A does: itself on the left, the net to its right): the racket's
  x (times ``m_InvertMult``) and y relative to the area, its velocity x (times
  ``m_InvertMult``) and y, the ball's x (times ``m_InvertMult``) and y and its velocity x (times
  ``m_InvertMult``) and y, and ``m_InvertMult * transform.rotation.z``. That last one is the z
  component of the racket's rotation *quaternion*, and a rotation ``Euler(0, -180, z)`` has
  none: it is always 0 in Unity too. The prefab stacks 3 observations
  (``NumStackedVectorObservations``), so the observation is 27 floats, oldest first, zeros at
  an episode's start (Unity's ``StackingSensor``); it is taken at each decision and at the
  episode's end.
* Actions: 3 continuous, clamped to [-1, 1], applied at every physics step
  (``TakeActionsBetweenDecisions``): ``moveX`` sets the racket's x velocity to 30 times it
  (times ``m_InvertMult``: positive is towards the net for both teams); ``moveY`` above 0.5
  sets the y velocity to 7 (a jump) while the racket is below y = -1.5; ``rotate`` sets the
  racket's angle to ``55 * rotate * m_InvertMult + 90 * m_InvertMult`` degrees (from vertical
  at 0 to 35 degrees either way). A racket never goes past x = -1 (A) or x = 1 (B): it is put
  back there before each physics step, as ``OnActionReceived`` does (so it can be seen up to
  one step's motion past it).
* Rewards and episode end (``HitWall.OnCollisionEnter``): the point's winner gets +1, the
  loser -1 (``SetReward``), both episodes end and the ball is served again. A loses when the
  ball bounces twice on its side, when it bounces on its side first after a serve, when A
  hits it twice in a row, into the net before a valid bounce, into A's own wall, or long into
  B's wall without a bounce (and the same for B). As in ``HitWall``, the net ends a point only
  until the rally's first valid bounce or volley (its ``net`` flag stays set for the rest of
  the point), and a ball that reaches A's wall untouched after a serve is B's fault. Nothing
  else is rewarded. No ``MaxStep``:
  ``max_steps`` is 0 (an interrupted episode restarts the rackets but not the point, as in
  Unity where only ``HitWall`` serves the ball again).
* Episode start (``OnEpisodeBegin``, ``TennisArea.MatchReset``): each racket at x = -+U(6, 8),
  y = -1.5 at rest; the ball at rest at x = +-U(6, 8) (a random side), y = 6: the agent on
  that side serves (it must hit the ball before it lands).
* Environment parameter ``scale`` (ball diameter, default 0.5), read at each episode start.

Physics (Unity's 0.02 s fixed step, gravity 9.81, decision period 5): a 2-D model of what
PhysX does with the prefab's bodies. The ball (radius 0.25, mass 0.75, bounciness 1 combined
by maximum: every bounce is elastic) has its velocity clamped to +-9 per axis before each step
(``TennisArea.FixedUpdate``); the rackets are 0.988 x 0.127 boxes (mass 4, gravity on) that
stop on the floor (y = -6.9) and at the back walls (x = +-11.88). The net is a 0.122-wide box
up to y = -6.43 at x = 0. Ball-racket contacts are impulses between the two bodies (the
racket's x velocity is set again by the next action); the ball's path is checked in four
sub-steps against each racket, so a fast racket does not pass through it. As in PhysX, a
ball slower than the bounce threshold (2) stays on the floor, and a contact that lasts counts
once (``OnCollisionEnter``).

Differences from Unity, and why:

* Rigid bodies are a 2-D ballistic model, not PhysX: a racket is a capsule of the box's
  thickness (rounded corners), contacts are resolved one at a time in the order rackets, net,
  floor, walls, and a racket does not collide with the net or the other racket (the net
  limit keeps them apart, except for a low racket tilted flat right at the limit). Close-call
  hits can differ from Unity's; the rules above are exact. Unity's trained ``Tennis.onnx`` was
  not available here, so unlike Ball3D this re-creation is not checked against Unity's own
  policy.
* ``scale`` applies to every point; in Unity ``MatchReset`` puts the ball back to 0.5 after
  each point, so only the first point sees it. The ``angle`` parameter is left out: Unity
  overwrites that racket angle with the next action, before any physics step sees it.
* The scoreboard is kept as stats: ``Tennis/HitsPerPoint`` and ``Tennis/PointLength``
  (academy steps), one value per point.
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

from unity_sb3.scenes.base import EmbeddedScene
from unity_sb3.scenes.stacking import FrameStack, stacked_sensor_name
from unity_sb3.unity.errors import UnityConfigurationError

DT = 0.02  # s per physics step (Project/ProjectSettings/TimeManager.asset)
GRAVITY = 9.81  # Project/ProjectSettings/DynamicsManager.asset
OBS_SIZE, STACK = 9, 3  # VectorObservationSize, NumStackedVectorObservations
# court (TennisArea prefab, relative to the area): floors' top, back walls' inner faces, net
FLOOR_TOP = -6.9
WALL_X = 11.88
NET_HALF_WIDTH, NET_TOP, NET_BOTTOM = 0.061, -6.433, -7.5
# rackets (AgentA/AgentB: BoxCollider 197.7 x 25.3 at scale 0.005, Rigidbody mass 4)
RACKET_LENGTH, RACKET_THICKNESS, RACKET_MASS = 0.988, 0.127, 4.0
MOVE_SPEED, JUMP_SPEED, JUMP_BELOW = 30.0, 7.0, -1.5
TURN_DEG, UPRIGHT_DEG = 55.0, 90.0
NET_LIMIT = 1.0  # a racket is put back at x = -1 (A) / 1 (B)
RACKET_START_X, RACKET_START_Y = (6.0, 8.0), -1.5
# ball (SphereCollider radius 0.5 at scale 0.5, Rigidbody mass 0.75, ballMat bounciness 1)
BALL_MASS, BALL_MAX_SPEED = 0.75, 9.0
BALL_START_X, BALL_START_Y = (6.0, 8.0), 6.0
SUBSTEPS = 4  # ball-racket checks per physics step
BOUNCE_THRESHOLD = 2.0  # m_BounceThreshold (DynamicsManager.asset)

# HitWall.FloorHit
SERVICE, FLOOR_UNSET, FLOOR_A, FLOOR_B = range(4)
# what the ball touched (an event of HitWall.OnCollisionEnter)
RACKET_A, RACKET_B, NET, FLOOR_A_HIT, FLOOR_B_HIT, WALL_A, WALL_B = range(7)


class Tennis(EmbeddedScene):
    """Two rackets hit a ball over a net (ML-Agents Tennis); 2 teams, 27 floats, 3 continuous actions."""

    scene_name = "Tennis"
    BEHAVIORS = ("Tennis?team=0", "Tennis?team=1")
    AREA_BEHAVIORS = (0, 1)
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 1,
        "max_steps": 0,
        "decision_period": 5,
        "stable_agent_ids": False,
        "scale": 0.5,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {
        "num_agents": "number of courts (areas); each holds one racket per team",
        "scale": "ball diameter (units)",
    }
    DYNAMIC_PARAMS = ("scale",)

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if not 0 < params["scale"] <= 4:
            raise UnityConfigurationError(
                f"Tennis parameter 'scale' must be in (0, 4], got {params['scale']}."
            )

    def _make_specs(self) -> list[BehaviorSpec]:
        name = stacked_sensor_name(f"VectorSensor_size{OBS_SIZE}", STACK)
        obs = ObservationSpec((OBS_SIZE * STACK,), (DimensionProperty.NONE,), ObservationType.DEFAULT, name)
        spec = BehaviorSpec([obs], ActionSpec.create_continuous(3))
        return [spec, spec]

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        n, areas = self.total_agents, self.num_agents
        self.invert = np.where(self.agent_behavior == 0, 1.0, -1.0)  # m_InvertMult
        self.area = np.arange(n) // 2
        # rackets: position and velocity relative to the area, angle (degrees, Euler z)
        self._pos = np.zeros((n, 2))
        self._vel = np.zeros((n, 2))
        self._angle = self.invert * UPRIGHT_DEG
        self._stack = FrameStack(n, STACK, OBS_SIZE)
        # balls and HitWall's state, per area
        self._ball = np.zeros((areas, 2))
        self._ball_vel = np.zeros((areas, 2))
        self._radius = np.full(areas, 0.25)
        self._last_agent_hit = np.full(areas, -1)
        self._last_floor_hit = np.full(areas, SERVICE)
        self._net = np.zeros(areas, dtype=bool)
        self._touching = np.zeros((areas, 2), dtype=bool)  # ball in contact with racket A / B
        self._on_floor = np.zeros(areas, dtype=bool)  # ball in contact with a floor
        self._hits = np.zeros(areas, dtype=np.int64)
        self._point_steps = np.zeros(areas, dtype=np.int64)
        self._serve = np.ones(areas, dtype=bool)  # areas whose ball is served at the next episode start

    # ------------------------------------------------------------------ episodes
    def reset(self) -> None:
        self._serve[:] = True
        super().reset()

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        m = idx.size
        self._pos[idx, 0] = -self.invert[idx] * self._rng.uniform(*RACKET_START_X, size=m)
        self._pos[idx, 1] = RACKET_START_Y
        self._vel[idx] = 0.0
        self._angle[idx] = self.invert[idx] * UPRIGHT_DEG
        self._stack.clear(idx)
        scale = self._param("scale", m)
        areas = self.area[idx]
        self._radius[areas] = 0.5 * scale
        served = np.unique(areas[self._serve[areas]])
        if served.size:
            self._match_reset(served)

    def _match_reset(self, areas: np.ndarray) -> None:
        """``TennisArea.MatchReset`` and ``HitWall.Reset``: serve the ball again."""
        k = areas.size
        side = np.where(self._rng.integers(0, 2, size=k) == 0, -1.0, 1.0)
        self._ball[areas, 0] = side * self._rng.uniform(*BALL_START_X, size=k)
        self._ball[areas, 1] = BALL_START_Y
        self._ball_vel[areas] = 0.0
        self._last_agent_hit[areas] = -1
        self._last_floor_hit[areas] = SERVICE
        self._net[areas] = False
        self._touching[areas] = False
        self._on_floor[areas] = False
        self._hits[areas] = 0
        self._point_steps[areas] = 0
        self._serve[areas] = False

    # ------------------------------------------------------------------ physics
    def _advance(self, max_substeps: int) -> int:
        for k in range(1, max_substeps + 1):
            self._act()
            events = self._physics_step()
            self._step_count[self._active] += 1
            self._point_steps += 1
            winners = self._score(events)
            if winners:
                self._end_points(winners)
            if self.max_steps > 0:
                self._truncate_at_max_steps()
            if any(self._terminals):  # an ended episode is reported at the next academy step
                return k
        return max_substeps

    def _act(self) -> None:
        """``OnActionReceived`` of every racket (the last decision's action, zeros before one)."""
        action = np.clip(self._cont_action.astype(np.float64), -1.0, 1.0)
        inv = self.invert
        jump = (action[:, 1] > 0.5) & (self._pos[:, 1] < JUMP_BELOW)
        self._vel[jump, 1] = JUMP_SPEED
        self._vel[:, 0] = action[:, 0] * inv * MOVE_SPEED
        self._angle = TURN_DEG * action[:, 2] * inv + UPRIGHT_DEG * inv
        past = inv * self._pos[:, 0] > -NET_LIMIT
        self._pos[past, 0] = -inv[past] * NET_LIMIT

    def _racket_axes(self) -> tuple[np.ndarray, np.ndarray]:
        """Each racket's long axis ``u`` and face normal ``n`` in the court's x-y plane, ``(n, 2)``.

        A rotation ``Euler(0, -180, z)`` maps the box's local x to (-cos z, sin z) and its local
        y to (sin z, cos z); local z (the handle) points out of the court's plane.
        """
        rad = np.radians(self._angle)
        cos, sin = np.cos(rad), np.sin(rad)
        return np.stack([-cos, sin], axis=1), np.stack([sin, cos], axis=1)

    def _physics_step(self) -> list[tuple[int, int]]:
        """One physics step of every racket and ball; returns the ball's contacts ``(area, event)``."""
        u, n = self._racket_axes()
        # rackets: gravity, motion, then the floor and their back wall stop them
        racket_prev = self._pos.copy()
        self._vel[:, 1] -= GRAVITY * DT
        self._pos += self._vel * DT
        half = 0.5 * RACKET_LENGTH * np.abs(u) + 0.5 * RACKET_THICKNESS * np.abs(n)
        low = self._pos[:, 1] - half[:, 1] < FLOOR_TOP
        self._pos[low, 1] = FLOOR_TOP + half[low, 1]
        self._vel[low, 1] = np.maximum(self._vel[low, 1], 0.0)
        back = self.invert * self._pos[:, 0] - half[:, 0] < -WALL_X
        self._pos[back, 0] = -self.invert[back] * (WALL_X - half[back, 0])
        self._vel[back, 0] = 0.0
        # balls: TennisArea.FixedUpdate's clamp, gravity, motion
        ball_prev = self._ball.copy()
        np.clip(self._ball_vel, -BALL_MAX_SPEED, BALL_MAX_SPEED, out=self._ball_vel)
        self._ball_vel[:, 1] -= GRAVITY * DT
        self._ball += self._ball_vel * DT
        events = self._racket_contacts(ball_prev, racket_prev, u)
        events += self._court_contacts()
        return events

    def _racket_contacts(
        self, ball_prev: np.ndarray, racket_prev: np.ndarray, u: np.ndarray
    ) -> list[tuple[int, int]]:
        """Ball against each racket of its area, checked along the step's path in ``SUBSTEPS``."""
        events = []
        reach = self._radius + 0.5 * RACKET_THICKNESS
        for side in (0, 1):
            agents = 2 * np.arange(self.num_agents) + side
            # most steps no ball is anywhere near a racket: skip the path check
            far = np.abs(self._ball - self._pos[agents]).max(axis=1) > reach + RACKET_LENGTH / 2 + 1.0
            if far.all() and not self._touching[:, side].any():
                continue
            hit = np.zeros(self.num_agents, dtype=bool)
            where = np.zeros((self.num_agents, 2))
            normal = np.zeros((self.num_agents, 2))
            for s in np.arange(1, SUBSTEPS + 1) / SUBSTEPS:
                ball = ball_prev + s * (self._ball - ball_prev)
                racket = racket_prev[agents] + s * (self._pos[agents] - racket_prev[agents])
                along = np.clip(
                    ((ball - racket) * u[agents]).sum(axis=1), -RACKET_LENGTH / 2, RACKET_LENGTH / 2
                )
                gap = ball - (racket + along[:, None] * u[agents])
                dist = np.sqrt((gap * gap).sum(axis=1))
                new = (dist < reach) & ~hit
                if new.any():
                    normal[new] = gap[new] / np.maximum(dist[new], 1e-9)[:, None]
                    where[new] = (
                        racket[new] + along[new, None] * u[agents][new] + normal[new] * reach[new, None]
                    )
                    hit |= new
            was_touching = self._touching[:, side].copy()
            rel = self._ball_vel - self._vel[agents]
            closing = (rel * normal).sum(axis=1)
            bounce = hit & (closing < 0)
            if bounce.any():
                # an elastic impulse between ball (0.75) and racket (4)
                impulse = 2.0 * closing[bounce] / (1.0 / BALL_MASS + 1.0 / RACKET_MASS)
                self._ball_vel[bounce] -= (impulse / BALL_MASS)[:, None] * normal[bounce]
                self._vel[agents[bounce]] += (impulse / RACKET_MASS)[:, None] * normal[bounce]
            if hit.any():
                self._ball[hit] = where[hit]
            self._touching[:, side] = hit
            events += [(int(a), RACKET_A + side) for a in np.flatnonzero(hit & ~was_touching)]
        return events

    def _court_contacts(self) -> list[tuple[int, int]]:
        """Ball against the net, the floors and the back walls (elastic bounces)."""
        events = []
        ball, vel, r = self._ball, self._ball_vel, self._radius
        # net: the closest point of its box
        near = np.stack(
            [np.clip(ball[:, 0], -NET_HALF_WIDTH, NET_HALF_WIDTH), np.clip(ball[:, 1], NET_BOTTOM, NET_TOP)],
            axis=1,
        )
        gap = ball - near
        dist = np.sqrt((gap * gap).sum(axis=1))
        for a in np.flatnonzero(dist < r):
            if dist[a] > 1e-9:
                normal = gap[a] / dist[a]
            else:  # the centre went into the net: back out the way it came
                normal = np.array([-1.0 if vel[a, 0] > 0 else 1.0, 0.0])
            ball[a] = near[a] + normal * r[a]
            vn = vel[a] @ normal
            if vn < 0:
                vel[a] -= 2.0 * vn * normal
            events.append((int(a), NET))
        low = ball[:, 1] - r < FLOOR_TOP
        for a in np.flatnonzero(low):
            ball[a, 1] = FLOOR_TOP + r[a]
            # PhysX bounces only above its bounce threshold; slower, the ball stays on the floor
            vel[a, 1] = -vel[a, 1] if vel[a, 1] < -BOUNCE_THRESHOLD else 0.0
            if not self._on_floor[a]:  # OnCollisionEnter: a new contact only
                events.append((int(a), FLOOR_A_HIT if ball[a, 0] < 0 else FLOOR_B_HIT))
        self._on_floor[:] = low
        for a in np.flatnonzero(np.abs(ball[:, 0]) + r > WALL_X):
            side = -1.0 if ball[a, 0] < 0 else 1.0
            ball[a, 0] = side * (WALL_X - r[a])
            vel[a, 0] = -side * abs(vel[a, 0])
            events.append((int(a), WALL_A if side < 0 else WALL_B))
        return events

    # ------------------------------------------------------------------ rules
    def _score(self, events: list[tuple[int, int]]) -> dict[int, int]:
        """``HitWall.OnCollisionEnter`` for each contact in order; returns {area: winning team}."""
        winners: dict[int, int] = {}
        for area, event in events:
            if area in winners:
                continue
            winner = self._rule(area, event)
            if winner is not None:
                winners[area] = winner
        return winners

    def _rule(self, area: int, event: int) -> int | None:
        """The winning team (0 = A, 1 = B) if this contact ends the point, else None."""
        last_agent, last_floor = self._last_agent_hit[area], self._last_floor_hit[area]
        if event in (RACKET_A, RACKET_B):
            team = event - RACKET_A
            if last_agent == team:  # double hit
                return 1 - team
            if last_floor != SERVICE and not self._net[area]:  # a return in the air
                self._net[area] = True
            self._last_agent_hit[area] = team
            self._last_floor_hit[area] = FLOOR_UNSET
            self._hits[area] += 1
            return None
        if event in (WALL_A, WALL_B):
            team = event - WALL_A  # whose wall
            own_floor = FLOOR_A if team == 0 else FLOOR_B
            # into one's own wall, or a winner that bounced on that side first
            return 1 - team if last_agent == team or last_floor == own_floor else team
        if event in (FLOOR_A_HIT, FLOOR_B_HIT):
            team = event - FLOOR_A_HIT  # whose floor
            own_floor = FLOOR_A if team == 0 else FLOOR_B
            if last_agent == team or last_floor in (own_floor, SERVICE):
                return 1 - team  # into one's own floor, a double bounce, or a missed serve
            self._last_floor_hit[area] = own_floor
            self._net[area] = True
            return None
        if event == NET and not self._net[area] and last_agent in (0, 1):
            return 1 - int(last_agent)
        return None

    def _end_points(self, winners: dict[int, int]) -> None:
        """``HitWall.AgentAWins`` / ``AgentBWins``: +1 / -1, both episodes end, serve again."""
        areas = np.fromiter(winners, dtype=np.intp)
        won = np.fromiter(winners.values(), dtype=np.intp)
        agents = np.stack([2 * areas, 2 * areas + 1], axis=1).ravel()
        self._reward[2 * areas] = np.where(won == 0, 1.0, -1.0)
        self._reward[2 * areas + 1] = np.where(won == 1, 1.0, -1.0)
        for area in areas:
            self.stat("Tennis/HitsPerPoint", float(self._hits[area]))
            self.stat("Tennis/PointLength", float(self._point_steps[area]))
        self._finish(agents, False)
        self._serve[areas] = True
        self._start(agents)

    # ------------------------------------------------------------------ observations
    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        """The stacked observations of agents ``idx``; pushes the newest onto their stacks."""
        inv = self.invert[idx]
        areas = self.area[idx]
        now = np.empty((idx.size, OBS_SIZE), dtype=np.float32)
        now[:, 0] = inv * self._pos[idx, 0]
        now[:, 1] = self._pos[idx, 1]
        now[:, 2] = inv * self._vel[idx, 0]
        now[:, 3] = self._vel[idx, 1]
        now[:, 4] = inv * self._ball[areas, 0]
        now[:, 5] = self._ball[areas, 1]
        now[:, 6] = inv * self._ball_vel[areas, 0]
        now[:, 7] = self._ball_vel[areas, 1]
        now[:, 8] = 0.0  # m_InvertMult * rotation.z: the quaternion of Euler(0, -180, z) has no z
        return [self._stack.push(idx, now)]

    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """A scripted player, from the newest observation only (its own, mirrored, view).

        It runs under the spot where the ball will come down to racket height, a little
        behind it so that the tilted racket sends the ball up and over the net, and waits at
        home while the ball is on its way to the other side.
        """
        self._check_behavior(behavior_name)
        obs = np.asarray(decision_steps.obs[0], dtype=np.float64)[:, -OBS_SIZE:]
        return ActionTuple(continuous=scripted_player(obs))


#: Tuned by play against random and scripted opponents (see tests/test_tennis.py).
EXPERT_HIT_HEIGHT = 1.2  # above the racket, where the player meets the ball
EXPERT_BEHIND = 0.35  # how far behind the ball's landing spot it stands (away from the net)
EXPERT_TILT = -0.8  # rotate action: leans the racket's face towards the net
EXPERT_JUMP_WITHIN = 0.0  # jumps when the ball is this close above (0: never; jumping lost more)
EXPERT_AWAY = 0.5  # x speed (towards the net) above which the ball is on its way out
EXPERT_HOME = -6.0  # where it waits


def scripted_player(obs: np.ndarray) -> np.ndarray:
    """Actions ``(n, 3)`` of the scripted player for observations ``(n, 9)`` (one agent's view)."""
    x, y, bx, by, bvx, bvy = obs[:, 0], obs[:, 1], obs[:, 4], obs[:, 5], obs[:, 6], obs[:, 7]
    # time until the ball falls to the meeting height (ballistic, speed clamped at 9)
    height = by - (y + EXPERT_HIT_HEIGHT)
    vy = np.clip(bvy, -BALL_MAX_SPEED, BALL_MAX_SPEED)
    t = (vy + np.sqrt(np.maximum(vy * vy + 2 * GRAVITY * np.maximum(height, 0.0), 0.0))) / GRAVITY
    land = bx + np.clip(bvx, -BALL_MAX_SPEED, BALL_MAX_SPEED) * t
    # bounce the landing spot off the back wall; stay on our side
    land = np.where(land < -WALL_X, -2 * WALL_X - land, land)
    target = np.clip(land - EXPERT_BEHIND, -WALL_X + 0.5, -NET_LIMIT)
    # the ball comes to us (or drops on our side to be served); otherwise wait at home
    coming = (bvx < -EXPERT_AWAY) | ((bx < 0) & (bvx <= EXPERT_AWAY))
    target = np.where(coming, target, EXPERT_HOME)
    move = np.clip((target - x) / (MOVE_SPEED * DT * 2), -1.0, 1.0)
    close = coming & (np.abs(bx - x) < 1.0) & (by > y) & (by - y < EXPERT_JUMP_WITHIN)
    jump = np.where(close, 1.0, 0.0)
    tilt = np.full_like(x, EXPERT_TILT)
    return np.stack([move, jump, tilt], axis=1).astype(np.float32)
