"""Hallway: ML-Agents' Hallway example (``HallwayAgent``), a memory task.

A hallway runs along ``+z``. At each episode start ``HallwayAgent.OnEpisodeBegin`` shows one of two
symbols near the middle of the hallway, ``symbol_O`` (selection 0) or ``symbol_X`` (selection 1):
in the prefab two 4 x 4 x 1 blocks of one material, which the rays tell apart by their tags. It puts
the two goals, ``symbol_O_Goal`` and ``symbol_X_Goal``, at the far end on random sides (x = +7 / -7,
z = 22.29). The agent starts
behind the symbol (z = -15 +- 5, x +- 3, random heading) and must touch the goal that matches the
symbol: +1 (``SetReward(1f)``) for the right goal, -0.1 for the wrong one, the episode ends either
way; every academy step costs ``-1 / max_steps`` (``AddReward(-1f / MaxStep)`` in
``OnActionReceived``, which runs at every academy step because actions repeat between decisions).

The rays reach ``RAY_LENGTH`` units (12, as HallwayArea.prefab): from where the goals can be touched
the symbol is out of reach (and behind the agent), so the choice must be remembered from what was
seen earlier.

* Observations, sorted by sensor name as Unity sorts them:

  - ``"StackingSensor_size3_RayPerceptionSensor"`` (3 frames of 35 floats): 5 sphere casts (the
    prefab's ``raysPerDirection`` 2, ``maxRayDegrees`` 70, ``sphereCastRadius`` 0.5, ``rayLength``
    12; in Unity's order: ahead, then right and left at 35 degrees, then at 70 degrees) of 7 floats
    each, as ``RayPerceptionOutput``: a one-hot of the hit object's tag (``symbol_O_Goal``,
    ``symbol_X_Goal``, ``symbol_O``, ``symbol_X``, ``wall``), 1 if the ray hit nothing, and the hit
    distance / ``RAY_LENGTH`` (1 when nothing was hit);
  - ``"StackingSensor_size3_VectorSensor_size1"`` (3 frames of 1 float): ``StepCount / MaxStep``
    (``useVectorObs``).

  The prefab stacks both sensors 3 times (the ray sensor's ``ObservationStacks`` 3, the agent's
  ``NumStackedVectorObservations`` 3): Unity's ``StackingSensor``, oldest frame first, zeros before an
  episode's first decision (:mod:`unity_sb3.scenes.stacking`). ``observation_stacks=1`` gives the
  single frames under the sensors' own names (``"RayPerceptionSensor"``, ``"VectorSensor_size1"``).

* Actions (``HallwayAgent.MoveAgent``): one branch of 5: 0 nothing, 1 forward, 2 backward,
  3 turn right (clockwise seen from above), 4 turn left.
* Stats: ``Goal/Correct`` and ``Goal/Wrong`` per ended episode (the C# has them commented out),
  ``Hallway/SuccessRate`` (the right goal touched).

Motion (``motion``):

* ``"rigid_body"`` (default, Unity's): at each of a decision's 6 physics steps of 0.02 s the action
  turns the agent 3 degrees or adds a velocity change of 1.5 units/s along its heading (``MoveAgent``,
  ``HallwaySettings.agentRunSpeed``); the prefab's drag 2 and PhysX's default friction 0.6 under the
  examples' doubled gravity slow it (~0.5 units in a first forward decision, ~3.7 once up to speed; it
  slides ~8 units after the last push and keeps its momentum while turning). The prefab's walls
  (inner faces at x = +-9.5, z = +-24.75) and the shown symbol (a solid 4 x 1 block) stop it; a goal
  is the prefab's 4 x 4 pad with its marker up to the far wall, one box for the rays and for touching.
* ``"kinematic"``: the simplified scene of the earlier figures: ``move_step`` units (default
  ``MOVE_STEP``) or ``TURN_DEGREES`` per decision, no momentum, walls at +-10 / +-25, the symbol not an
  obstacle, the goals discs of ``GOAL_RADIUS`` at z = 22.29.

Both simplify: the agent's 1 x 1 box is a disc of ``AGENT_RADIUS`` (a square when it meets a box),
collisions do not turn it, and the sphere casts see square box corners. The symbol is seen ~10-20
decisions before the goal end, beyond the 3-frame stack: the choice still needs memory.
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

from unity_sb3.scenes._grid import GridScene
from unity_sb3.scenes.stacking import FrameStack, stacked_sensor_name
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.validation import is_int

NOTHING, FORWARD, BACKWARD, TURN_RIGHT, TURN_LEFT = range(5)
#: Detectable tags of the ray sensor, in the order of its one-hot features.
O_GOAL, X_GOAL, SYMBOL_O, SYMBOL_X, WALL = range(5)
RAY_TAGS = 5
RAY_FEATURES = RAY_TAGS + 2  # one-hot, "hit nothing", hit fraction
#: Ray angles from the agent's forward direction (degrees, clockwise), in Unity's order.
RAY_ANGLES = np.array([0.0, 35.0, -35.0, 70.0, -70.0])
RAY_SIZE = len(RAY_ANGLES) * RAY_FEATURES
#: HallwayArea.prefab's RayPerceptionSensor: ``m_RayLength`` 12, ``m_SphereCastRadius`` 0.5.
RAY_LENGTH = 12.0
RAY_RADIUS = 0.5
#: The hallway: walls at x = +-HALF_WIDTH and z = +-HALF_LENGTH (Unity units, ground centre at 0).
HALF_WIDTH, HALF_LENGTH = 10.0, 25.0
AGENT_RADIUS = 0.5
#: The symbols are boxes 4 wide (x) and 1 deep (z) in the prefab (``Symbol_O`` / ``Symbol_X`` scale 4, 4, 1).
SYMBOL_HALF_WIDTH, SYMBOL_HALF_DEPTH = 2.0, 0.5
GOAL_RADIUS = 2.0
GOAL_X, GOAL_Z = 7.0, 22.29
MOVE_STEP = 1.0
TURN_DEGREES = 150.0 * 0.02 * 6
#: ``motion="rigid_body"``, Unity's physics (Hallway.unity, HallwayArea.prefab, ProjectSettingsOverrides):
#: a fixed step of 0.02 s; each academy step an action turns the agent 150 degrees/s or adds a velocity
#: change of ``HallwaySettings.agentRunSpeed`` 1.5 units/s along its heading; the rigid body's drag 2
#: and the default friction 0.6 on the ground (gravity doubled) slow it: ~3.7 units per decision at full pace.
PHYSICS_DT = 0.02
RUN_SPEED = 1.5
TURN_SPEED = 150.0
DRAG = 2.0
FRICTION_DECELERATION = 0.6 * 9.81 * 2.0
#: The prefab's walls (0.5 thick at x = +-9.75, z = +-25): their inner faces.
WALL_X, WALL_Z = 9.5, 24.75
#: A goal as the prefab builds it: a 4 x 4 pad (z 20.29 to 24.29) and a marker 4.08 wide up to the far
#: wall, as one box (centre z, half width, half depth), touched by the agent's 1 x 1 box.
GOAL_BOX_Z, GOAL_HALF_WIDTH, GOAL_HALF_DEPTH = 22.54, 2.04, 2.25
MOTIONS = ("rigid_body", "kinematic")
RIGHT_REWARD, WRONG_REWARD = np.float32(1.0), np.float32(-0.1)


def cast_rays(
    pos: np.ndarray,
    yaw: np.ndarray,
    objects: np.ndarray,
    tags: np.ndarray,
    boxes: np.ndarray | None = None,
    box_tags: np.ndarray | None = None,
    walls: tuple[float, float] = (HALF_WIDTH, HALF_LENGTH),
) -> np.ndarray:
    """Ray observations of ``m`` agents: ``(m, 35)`` float32, ``RayPerceptionOutput`` per ray.

    The rays are sphere casts of radius ``RAY_RADIUS`` (Unity's ``SphereCastRadius``): a disc is hit
    where the ray passes within its radius + ``RAY_RADIUS``, a wall or a box ``RAY_RADIUS`` earlier
    (boxes grow by ``RAY_RADIUS`` on each side: square corners where Unity's are rounded); the hit
    fraction is the distance the sphere travelled / ``RAY_LENGTH``.

    :param pos: ``(m, 2)`` agent positions (x, z), Unity units.
    :param yaw: ``(m,)`` headings in degrees, clockwise from ``+z``.
    :param objects: ``(m, k, 3)`` discs the rays can hit: centre x, centre z, radius (radius <= 0 = absent).
    :param tags: ``(k,)`` tag index of each disc.
    :param boxes: ``(m, b, 4)`` axis-aligned boxes: centre x, centre z, half width (x), half depth (z).
    :param box_tags: ``(b,)`` tag index of each box, or ``(m, b)``: each agent's own.
    :param walls: where the walls' inner faces stand: x = +-``walls[0]``, z = +-``walls[1]``.
    """
    m = len(pos)
    angle = np.radians(yaw[:, None] + RAY_ANGLES[None, :])  # (m, r)
    direction = np.stack([np.sin(angle), np.cos(angle)], axis=-1)  # (m, r, 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = np.array(walls) - RAY_RADIUS
        to_wall = np.where(
            direction > 0,
            (bound - pos[:, None, :]) / direction,
            np.where(direction < 0, (-bound - pos[:, None, :]) / direction, np.inf),
        )
    dist = to_wall.min(axis=2)  # (m, r)
    tag = np.full(dist.shape, WALL, dtype=np.int64)
    for j, kind in enumerate(tags):
        centre, radius = objects[:, j, :2], objects[:, j, 2]
        reach = radius[:, None] + RAY_RADIUS
        rel = (centre - pos)[:, None, :]  # (m, 1, 2)
        along = (rel * direction).sum(axis=2)  # (m, r)
        gap2 = (rel**2).sum(axis=2) - along**2
        inside = reach**2 - gap2
        hit_at = along - np.sqrt(np.maximum(inside, 0.0))
        hit = (radius[:, None] > 0) & (inside >= 0) & (hit_at > 0) & (hit_at < dist)
        dist = np.where(hit, hit_at, dist)
        tag = np.where(hit, kind, tag)
    per_box = None if box_tags is None else np.atleast_2d(box_tags).T  # (b, 1) or (b, m)
    for j, kind in enumerate([] if per_box is None else per_box):  # kind: (1,) or (m,)
        assert boxes is not None
        kind = kind[:, None]
        low = (boxes[:, j, :2] - boxes[:, j, 2:] - RAY_RADIUS - pos)[:, None, :]  # (m, 1, 2)
        high = (boxes[:, j, :2] + boxes[:, j, 2:] + RAY_RADIUS - pos)[:, None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            t_low, t_high = low / direction, high / direction  # (m, r, 2); +-inf along an axis ray
        # a ray parallel to an axis stays inside that slab iff its start is inside
        parallel = direction == 0
        inside_slab = (low <= 0) & (high >= 0)
        near = np.where(parallel, np.where(inside_slab, -np.inf, np.inf), np.minimum(t_low, t_high)).max(
            axis=2
        )
        far = np.where(parallel, np.where(inside_slab, np.inf, -np.inf), np.maximum(t_low, t_high)).min(
            axis=2
        )
        hit = (near <= far) & (near > 0) & (near < dist)
        dist = np.where(hit, near, dist)
        tag = np.where(hit, kind, tag)
    seen = dist <= RAY_LENGTH
    out = np.zeros((m, len(RAY_ANGLES), RAY_FEATURES), dtype=np.float32)
    rows, rays = np.nonzero(seen)
    out[rows, rays, tag[rows, rays]] = 1.0
    out[..., RAY_TAGS] = ~seen
    out[..., RAY_TAGS + 1] = np.where(seen, dist / RAY_LENGTH, 1.0)
    return out.reshape(m, RAY_SIZE)


class Hallway(GridScene):
    """Remember the symbol seen at the start, touch the matching goal at the end (ML-Agents Hallway)."""

    scene_name = "Hallway"
    behavior_name = "Hallway?team=0"
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 8,
        "max_steps": 3000,
        "decision_period": 6,
        "stable_agent_ids": False,
        "move_step": MOVE_STEP,
        "shuffle_goals": True,
        "observation_stacks": 3,
        "motion": "rigid_body",
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {
        "num_agents": "number of hallways, one agent each",
        "max_steps": "academy steps before an episode is interrupted (Unity's MaxStep); sets the -1/max_steps step cost",
        "decision_period": "academy steps per decision; the agent moves or turns once per decision",
        "move_step": "motion 'kinematic' only: units walked per forward/backward decision",
        "shuffle_goals": "put the two goals on random sides each episode (Unity); false: symbol_O_Goal always "
        "at x = +7 (a T-maze: the remembered symbol alone names the side, for small budgets)",
        "observation_stacks": "frames of each sensor in an observation, oldest first (the prefab's 3; "
        "1: no stacking)",
        "motion": "'rigid_body' (Unity's: velocity changes with drag and friction, the symbol blocks the way, "
        "the prefab's walls and goal boxes) or 'kinematic' (move_step units per decision, goals as discs, "
        "the simplified scene of the earlier figures and the shipped T-maze settings)",
    }

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if not 0.1 <= params["move_step"] <= 2 * RAY_LENGTH:
            raise UnityConfigurationError(
                f"Hallway 'move_step' must be in [0.1, {2 * RAY_LENGTH}] units, got {params['move_step']}."
            )
        if params["motion"] not in MOTIONS:
            raise UnityConfigurationError(
                f"Hallway 'motion' must be one of {MOTIONS}, got {params['motion']!r}."
            )
        if params["motion"] == "rigid_body" and params["move_step"] != MOVE_STEP:
            raise UnityConfigurationError(
                "Hallway 'move_step' sets the pace of motion 'kinematic' only; the rigid body moves at "
                "Unity's pace. Pass motion='kinematic' with it, or leave move_step out."
            )
        stacks = params["observation_stacks"]
        if not is_int(stacks) or stacks < 1:
            raise UnityConfigurationError(
                f"Hallway 'observation_stacks' must be an int >= 1 (the prefab's 3), got {stacks!r}."
            )

    def _make_spec(self) -> BehaviorSpec:
        stacks = self.params["observation_stacks"]
        rays, vector = (
            ObservationSpec(
                (size * stacks,),
                (DimensionProperty.NONE,),
                ObservationType.DEFAULT,
                stacked_sensor_name(name, stacks),
            )
            for name, size in (("RayPerceptionSensor", RAY_SIZE), ("VectorSensor_size1", 1))
        )
        return BehaviorSpec([rays, vector], ActionSpec.create_discrete((5,)))

    def __init__(self, seed: int = 0, side_channels=None, **params: Any) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        n = self.num_agents
        self._pos = np.zeros((n, 2))  # (x, z)
        self._yaw = np.zeros(n)  # degrees, clockwise seen from above (Unity's y rotation)
        self._vel = np.zeros((n, 2))  # units/s (x, z); motion "rigid_body" only
        self._selection = np.zeros(n, dtype=np.int64)  # 0: symbol O shown, 1: symbol X shown
        self._symbol = np.zeros((n, 2))  # where the shown symbol stands
        self._o_goal_x = np.zeros(n)  # x of symbol_O_Goal; symbol_X_Goal is at -x
        self._seen_symbol = np.zeros(n, dtype=bool)  # the expert walked past the symbol
        self._right = np.zeros(n, dtype=bool)  # the episode just ended at the right goal
        self._wrong = np.zeros(n, dtype=bool)  # ... at the wrong goal
        stacks = self.params["observation_stacks"]
        self._stacks = (FrameStack(n, stacks, RAY_SIZE), FrameStack(n, stacks, 1))

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        m, rng = idx.size, self._rng
        selection = rng.integers(0, 2, size=m)
        # as the C#: symbol O at x +- 3, symbol X on the centre line; both at z +- 5
        x = np.where(selection == 0, rng.uniform(-3.0, 3.0, size=m), 0.0)
        self._selection[idx] = selection
        self._symbol[idx] = np.stack([x, rng.uniform(-5.0, 5.0, size=m)], axis=1)
        self._pos[idx] = np.stack(
            [rng.uniform(-3.0, 3.0, size=m), -15.0 + rng.uniform(-5.0, 5.0, size=m)], axis=1
        )
        self._yaw[idx] = rng.uniform(0.0, 360.0, size=m)
        self._vel[idx] = 0.0
        goal_pos = rng.integers(0, 2, size=m)  # drawn either way: the rest of the episode stays the same
        if not self.params["shuffle_goals"]:
            goal_pos[:] = 0
        self._o_goal_x[idx] = np.where(goal_pos == 0, GOAL_X, -GOAL_X)
        self._seen_symbol[idx] = False
        for stack in self._stacks:
            stack.clear(idx)

    def _on_episode_end(self, idx: np.ndarray, interrupted: np.ndarray) -> None:
        for right, wrong in zip(self._right[idx], self._wrong[idx]):
            self.stat("Goal/Correct", float(right))
            self.stat("Goal/Wrong", float(wrong))
            self.stat("Hallway/SuccessRate", float(right))

    # ------------------------------------------------------------------ physics
    def _forward(self, idx: np.ndarray) -> np.ndarray:
        yaw = np.radians(self._yaw[idx])
        return np.stack([np.sin(yaw), np.cos(yaw)], axis=1)

    @property
    def _rigid(self) -> bool:
        return self.params["motion"] == "rigid_body"

    def _goals(self, idx: np.ndarray) -> np.ndarray:
        """``(m, 2, 2)`` centres of symbol_O_Goal and symbol_X_Goal (discs, or boxes in rigid-body motion)."""
        o_x = self._o_goal_x[idx]
        z = np.full(idx.size, GOAL_BOX_Z if self._rigid else GOAL_Z)
        return np.stack([np.stack([o_x, z], axis=1), np.stack([-o_x, z], axis=1)], axis=1)

    def _move(self) -> None:
        act = np.flatnonzero(self._active)
        if act.size == 0:
            return
        if self._rigid:
            self._move_rigid(act)
            return
        action = self._disc_action[act, 0]
        turn = np.select([action == TURN_RIGHT, action == TURN_LEFT], [TURN_DEGREES, -TURN_DEGREES], 0.0)
        self._yaw[act] = (self._yaw[act] + turn) % 360.0
        move = self.params["move_step"]
        step = np.select([action == FORWARD, action == BACKWARD], [move, -move], 0.0)
        pos = self._pos[act] + step[:, None] * self._forward(act)
        limit = np.array([HALF_WIDTH, HALF_LENGTH]) - AGENT_RADIUS
        self._pos[act] = np.clip(pos, -limit, limit)
        if self.max_steps > 0:  # -1/MaxStep at each academy step of the decision
            self._reward[act] += np.float32(-self.decision_period / self.max_steps)
        reach = (
            np.linalg.norm(self._goals(act) - self._pos[act][:, None, :], axis=2)
            <= GOAL_RADIUS + AGENT_RADIUS
        )
        self._touch(act, reach)

    def _touch(self, act: np.ndarray, reach: np.ndarray) -> np.ndarray:
        """End the episodes of the agents ``act`` whose row of ``reach`` ``(m, 2)`` (O goal, X goal
        touched) has a goal: ``SetReward`` 1 or -0.1. Returns which of ``act`` ended."""
        touched = reach.any(axis=1)
        if not touched.any():
            return touched
        done = act[touched]
        right = reach[touched, self._selection[done]]
        self._reward[done] = np.where(right, RIGHT_REWARD, WRONG_REWARD)
        self._right[done], self._wrong[done] = right, ~right
        self._finish(done, False)
        self._right[done] = self._wrong[done] = False
        self._start(done)
        return touched

    def _move_rigid(self, act: np.ndarray) -> None:
        """One decision of Unity's physics: the action repeats at each of the ``decision_period``
        academy steps (``TakeActionsBetweenDecisions``), each a fixed step of ``PHYSICS_DT``.

        Per step, as ``MoveAgent`` and PhysX: turn, or add a velocity change along the heading;
        friction and drag slow the body; it moves; the walls and the shown symbol (a solid 4 x 1
        block) stop the velocity into them; a goal box touched ends the episode (``OnCollisionEnter``)
        and the agent stays still until its next decision.
        """
        action = self._disc_action[act, 0]
        turn = (
            np.select([action == TURN_RIGHT, action == TURN_LEFT], [1.0, -1.0], 0.0) * TURN_SPEED * PHYSICS_DT
        )
        push = np.select([action == FORWARD, action == BACKWARD], [1.0, -1.0], 0.0) * RUN_SPEED
        limit = np.array([WALL_X, WALL_Z]) - AGENT_RADIUS
        block = np.array([SYMBOL_HALF_WIDTH, SYMBOL_HALF_DEPTH]) + AGENT_RADIUS
        goal = np.array([GOAL_HALF_WIDTH, GOAL_HALF_DEPTH]) + AGENT_RADIUS
        symbol, goals = self._symbol[act], self._goals(act)  # fixed during the decision
        for _ in range(self.decision_period):
            self._yaw[act] = (self._yaw[act] + turn) % 360.0
            vel = self._vel[act] + push[:, None] * self._forward(act)
            speed = np.linalg.norm(vel, axis=1)
            slowed = np.maximum(speed - FRICTION_DECELERATION * PHYSICS_DT, 0.0)
            vel *= (
                np.divide(slowed, speed, out=np.zeros_like(speed), where=speed > 0)
                * (1.0 - DRAG * PHYSICS_DT)
            )[:, None]
            pos = self._pos[act] + vel * PHYSICS_DT
            at_wall = np.abs(pos) > limit
            pos = np.clip(pos, -limit, limit)
            vel[at_wall] = 0.0
            rel = pos - symbol
            depth = block - np.abs(rel)  # (m, 2) overlap along x and z
            inside = (depth > 0).all(axis=1)
            if inside.any():  # out along the shallower axis, that velocity component stopped
                rows = np.flatnonzero(inside)
                axis = np.argmin(depth[rows], axis=1)
                side = np.where(rel[rows, axis] >= 0, 1.0, -1.0)
                pos[rows, axis] = symbol[rows, axis] + side * block[axis]
                vel[rows, axis] = 0.0
            self._pos[act], self._vel[act] = pos, vel
            if self.max_steps > 0:
                self._reward[act] += np.float32(-1.0 / self.max_steps)
            reach = (np.abs(goals - pos[:, None, :]) <= goal).all(axis=2)
            touched = self._touch(act, reach)
            left = ~touched
            act, turn, push, symbol, goals = act[left], turn[left], push[left], symbol[left], goals[left]
            if act.size == 0:
                return

    # ------------------------------------------------------------------ observations
    def _objects(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What the rays can hit besides the walls: ``(m, k, 3)`` discs (x, z, radius) and their tags,
        ``(m, b, 4)`` boxes (x, z, half width, half depth) and their tags; the shown symbol is the last
        box, tagged ``SYMBOL_O`` (the caller re-tags it). The goals are discs in kinematic motion,
        the prefab's boxes in rigid-body motion."""
        goal_tags = np.array([O_GOAL, X_GOAL])
        symbol = np.zeros((idx.size, 1, 4))
        symbol[:, 0, :2] = self._symbol[idx]
        symbol[:, 0, 2:] = SYMBOL_HALF_WIDTH, SYMBOL_HALF_DEPTH
        if self._rigid:
            goals = np.zeros((idx.size, 2, 4))
            goals[:, :, :2] = self._goals(idx)
            goals[:, :, 2:] = GOAL_HALF_WIDTH, GOAL_HALF_DEPTH
            boxes = np.concatenate([goals, symbol], axis=1)
            return (
                np.zeros((idx.size, 0, 3)),
                np.zeros(0, dtype=np.int64),
                boxes,
                np.append(goal_tags, SYMBOL_O),
            )
        discs = np.zeros((idx.size, 2, 3))
        discs[:, :, :2] = self._goals(idx)
        discs[:, :, 2] = GOAL_RADIUS
        return discs, goal_tags, symbol, np.array([SYMBOL_O])

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        return [stack.push(idx, frame) for stack, frame in zip(self._stacks, self._frame(idx))]

    def _frame(self, idx: np.ndarray) -> list[np.ndarray]:
        """What the two sensors see now, unstacked and changing no state: rays ``(m, 35)`` and the
        step fraction ``(m, 1)``."""
        discs, disc_tags, boxes, box_tags = self._objects(idx)
        walls = (WALL_X, WALL_Z) if self._rigid else (HALF_WIDTH, HALF_LENGTH)
        tags = np.repeat(box_tags[None, :], idx.size, axis=0)
        tags[:, -1] = np.where(self._selection[idx] == 0, SYMBOL_O, SYMBOL_X)  # the shown symbol's tag
        rays = cast_rays(self._pos[idx], self._yaw[idx], discs, disc_tags, boxes, tags, walls)
        steps = self._step_count[idx] / self.max_steps if self.max_steps > 0 else np.zeros(idx.size)
        return [rays, steps.astype(np.float32)[:, None]]

    # ------------------------------------------------------------------ scripted expert
    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """A privileged expert (it reads the scene's state, by agent id): walk to the symbol, then to its goal.

        Walking to the symbol first puts it in the rays, so what the expert does next follows from
        what it has seen: a policy with memory can imitate it from the observations (Unity's
        ``ExpertHallway.demo`` plays this role for imitation/Hallway.yaml). It turns while its
        target is more than half a turn off its heading, else walks forward.
        """
        self._check_behavior(behavior_name)
        where = {int(agent): i for i, agent in enumerate(self._agent_id)}
        unknown = [
            int(a) for a in decision_steps.agent_id if int(a) not in where or not self._active[where[int(a)]]
        ]
        if unknown:
            raise ValueError(
                f"Hallway.expert_actions: agent id(s) {unknown} are not live agents of this scene; "
                "pass the DecisionSteps this scene returned last."
            )
        idx = np.array([where[int(a)] for a in decision_steps.agent_id], dtype=np.intp)
        near = (
            np.linalg.norm(self._symbol[idx] - self._pos[idx], axis=1)
            <= SYMBOL_HALF_WIDTH + AGENT_RADIUS + self.params["move_step"]
        )
        self._seen_symbol[idx] |= near
        goal = self._goals(idx)[np.arange(idx.size), self._selection[idx]]
        target = np.where(self._seen_symbol[idx][:, None], goal, self._symbol[idx])
        delta = target - self._pos[idx]
        wanted = np.degrees(np.arctan2(delta[:, 0], delta[:, 1]))
        diff = (wanted - self._yaw[idx] + 180.0) % 360.0 - 180.0
        action = np.where(
            np.abs(diff) <= TURN_DEGREES / 2, FORWARD, np.where(diff > 0, TURN_RIGHT, TURN_LEFT)
        )
        return ActionTuple(discrete=action.astype(np.int32)[:, None])
