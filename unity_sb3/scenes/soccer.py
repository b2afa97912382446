"""SoccerTwos: ML-Agents' 2 vs 2 soccer (``AgentSoccer``, ``SoccerEnvController``, ``SoccerBallController``).

Each field (``num_agents`` counts fields, as Unity's scene holds several ``SoccerFieldTwos``)
has two blue agents (behavior ``SoccerTwos?team=0``, ``Team.Blue = 0``, own goal at ``-x``)
and two purple agents (``SoccerTwos?team=1``, own goal at ``+x``), and one ball. Each team of
a field is a ``SimpleMultiAgentGroup``: ``group_id = 2 * field + team + 1``.

* Actions (``MoveAgent``): 3 discrete branches of 3: forward (none, forward, back), lateral
  (none, right, left; a lateral move replaces the forward one, as the C# ``switch`` does),
  rotation (none, left, right; 2 degrees per step). A move is a velocity change of
  ``agentRunSpeed = 2`` m/s times the role's speed (generic: forward 1, lateral 0.3) at every
  physics step (``DecisionRequester`` period 5 with ``TakeActionsBetweenDecisions``). An agent
  moving forward kicks the ball it starts touching with 2000 N (``OnCollisionEnter``).
* Rewards (``SoccerEnvController.GoalTouched``): a goal gives the scoring group
  ``1 - timer / MaxEnvironmentSteps`` and the other group -1 (``AddGroupReward``), then both
  groups end their episode (``EndGroupEpisode``) and the field resets (the timer divides as a
  float, as ML-Agents' documentation states; an older ``SoccerEnvController`` divided two ints,
  which made every goal worth 1). After
  ``max_steps`` (``MaxEnvironmentSteps = 5000``) academy steps without a goal both groups
  are interrupted (``GroupEpisodeInterrupted``). SoccerTwos' agents are ``Position.Generic``:
  no existential reward (strikers and goalies of :mod:`~unity_sb3.scenes.strikers_vs_goalie`
  have one). The ``ball_touch`` environment parameter (default 0) rewards ``0.2 * ball_touch``
  per touch, as ``OnEpisodeBegin`` reads it.
* Observations: Unity's two ``RayPerceptionSensor3D`` per agent, stacked 3 times (336
  floats): 11 rays over +-60 degrees forward (264) and 3 rays over +-45 degrees backward (72),
  each ray reporting a one-hot of what it hit (ball, own goal, other goal, wall, teammate,
  opponent: the team-relative tags of the prefab), a no-hit flag and the hit distance divided
  by 20 (``RayPerceptionOutput``). They are re-created exactly in 2-D rather than replaced
  by positions: sphere casts (radius 0.5, 0.5 above the agent, length 20) against the field's
  walls, the goal mouths and the discs of the ball and the other agents, in Unity's ray order
  and sensor order (sorted by name), with Unity's stacking (oldest frame first, reset at each
  episode). So a policy trained here reads what the real sensors give, and the task keeps its
  partial observability (the ball can be out of sight).
* Reset (``ResetScene``): agents at their prefab start (x -8.19 blue, 8.19 purple, z +-1.2)
  shifted by U(-5, 5) along x and facing the other goal within U(80, 100) degrees; the ball at
  the centre shifted by U(-2.5, 2.5) in x and z.

The field and its physics are :mod:`unity_sb3.scenes._soccer_field` (a 2-D reduction of the
prefab; see there). ``expert_actions`` is a scripted team that reads only the rays: it turns
to the ball, lines the ball up with the other goal when it sees it, and runs through the ball
(a kick), side-stepping instead when its own goal is behind the ball.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
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
from mlagents_envs.side_channel.side_channel import SideChannel

from unity_sb3.scenes import _soccer_field as field
from unity_sb3.scenes._soccer_field import (
    BALL,
    OPPONENT,
    OTHER_GOAL,
    OWN_GOAL,
    TEAMMATE,
    WALL,
    FieldState,
    RaySensor,
)
from unity_sb3.scenes.base import EmbeddedScene
from unity_sb3.scenes.stacking import FrameStack, stacked_sensor_name
from unity_sb3.unity.errors import UnityConfigurationError

BLUE, PURPLE = 0, 1  # AgentSoccer.Team: the team id of the behavior name


@dataclass(frozen=True)
class Role:
    """An ``AgentSoccer.Position``: move speeds, existential reward sign, kick."""

    name: str
    forward_speed: float
    lateral_speed: float
    existential: float  # per academy step, times 1 / MaxEnvironmentSteps
    always_kicks: bool = False


GENERIC = Role("generic", 1.0, 0.3, 0.0)
STRIKER = Role("striker", 1.3, 0.3, -1.0)
GOALIE = Role("goalie", 1.0, 1.0, 1.0, always_kicks=True)


@dataclass(frozen=True)
class Slot:
    """One agent of a field: team, role and ``initialPos`` (x, z) before the random shift."""

    team: int
    role: Role
    start: tuple[float, float]


#: SoccerTwos' tags as each team sees them (``m_DetectableTags`` of the prefab)
TWOS_TAGS = (BALL, OWN_GOAL, OTHER_GOAL, WALL, TEAMMATE, OPPONENT)
# discrete branches: forward, lateral, rotation
NONE, FORWARD, BACK = 0, 1, 2
RIGHT, LEFT = 1, 2
TURN_LEFT, TURN_RIGHT = 1, 2


def _spec(sensors: Sequence[RaySensor]) -> BehaviorSpec:
    """The behavior spec of agents with ``sensors``: one stacked vector per sensor, 3 branches of 3."""
    obs = [
        ObservationSpec(
            (s.size,),
            (DimensionProperty.NONE,),
            ObservationType.DEFAULT,
            stacked_sensor_name(s.name, s.stacks),
        )
        for s in sensors
    ]
    return BehaviorSpec(obs, ActionSpec.create_discrete((3, 3, 3)))


class SoccerScene(EmbeddedScene):
    """Shared soccer field logic: subclasses give the behaviors, the slots and the sensors."""

    #: the agents of one field, in ``AREA_BEHAVIORS`` order
    SLOTS: ClassVar[tuple[Slot, ...]] = ()
    #: per behavior, its ray sensors in Unity's order (sorted by name)
    SENSORS: ClassVar[tuple[tuple[RaySensor, ...], ...]] = ()
    PARAMS: ClassVar[dict[str, Any]] = {
        "num_agents": 8,
        "max_steps": 5000,
        "decision_period": 5,
        "stable_agent_ids": False,
        "ball_touch": 0.0,
    }
    PARAM_DOCS: ClassVar[dict[str, str]] = {
        "num_agents": "number of fields (each with its teams and a ball)",
        "max_steps": "MaxEnvironmentSteps: academy steps before both groups are interrupted; 0 = never",
        "ball_touch": "reward 0.2 * ball_touch to an agent each time it touches the ball",
    }
    DYNAMIC_PARAMS = ("ball_touch",)

    def __init__(
        self, seed: int = 0, side_channels: Sequence[SideChannel] | None = None, **params: Any
    ) -> None:
        super().__init__(seed=seed, side_channels=side_channels, **params)
        n_fields, n_slots = self.num_agents, len(self.SLOTS)
        every = np.arange(self.total_agents)
        self._field_of = every // n_slots
        self._slot_of = every % n_slots
        self._team = np.array([s.team for s in self.SLOTS])[self._slot_of]
        self._group_id[:] = 2 * self._field_of + self._team + 1
        self._forward_speed = np.array([s.role.forward_speed for s in self.SLOTS])
        self._lateral_speed = np.array([s.role.lateral_speed for s in self.SLOTS])
        self._always_kicks = np.array([s.role.always_kicks for s in self.SLOTS])
        existential = np.array([s.role.existential for s in self.SLOTS], dtype=np.float32)
        self._existential = np.tile(
            existential / self.max_steps if self.max_steps else 0 * existential, n_fields
        )
        self._start_pos = np.array([s.start for s in self.SLOTS], dtype=np.float64)
        self._start_sign = np.where(np.array([s.team for s in self.SLOTS]) == BLUE, 1.0, -1.0)  # rotSign
        self._pairs = np.array(list(combinations(range(n_slots), 2)), dtype=np.intp).reshape(-1, 2)
        self._state = FieldState.zeros(n_fields, n_slots)
        self._timer = np.zeros(n_fields, dtype=np.int64)
        self._ball_touch = np.zeros(self.total_agents)
        self._stacks = [
            [FrameStack(self.total_agents, s.stacks, s.frame_size) for s in sensors]
            for sensors in self.SENSORS
        ]

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if len(cls.SLOTS) != len(cls.AREA_BEHAVIORS) or len(cls.SENSORS) != len(cls.behavior_names_of()):
            raise UnityConfigurationError(
                f"Scene {cls.scene_name} has {len(cls.SLOTS)} slot(s) for {len(cls.AREA_BEHAVIORS)} agent(s) per "
                f"field and {len(cls.SENSORS)} sensor set(s) for {len(cls.behavior_names_of())} behavior(s): "
                "give one Slot per agent of a field (AREA_BEHAVIORS order) and one tuple of sensors per behavior."
            )

    def _make_specs(self) -> list[BehaviorSpec]:
        return [_spec(sensors) for sensors in self.SENSORS]

    # ------------------------------------------------------------------ episodes
    def _field_members(self, fields: np.ndarray) -> np.ndarray:
        """The agent indices of ``fields``, field by field."""
        n_slots = len(self.SLOTS)
        return (fields[:, None] * n_slots + np.arange(n_slots)).ravel()

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        self._ball_touch[idx] = self._param("ball_touch", idx.size)
        for stacks in self._stacks:
            for stack in stacks:
                stack.clear(idx)
        self._reset_fields(np.unique(self._field_of[idx]))

    def _reset_fields(self, fields: np.ndarray) -> None:
        """``SoccerEnvController.ResetScene`` for ``fields``."""
        m, n_slots, st = fields.size, len(self.SLOTS), self._state
        shift = self._rng.uniform(-5.0, 5.0, size=(m, n_slots))
        st.pos[fields] = self._start_pos
        st.pos[fields, :, 0] += shift
        st.heading[fields] = (self._start_sign * self._rng.uniform(80.0, 100.0, size=(m, n_slots))) % 360.0
        st.vel[fields] = 0.0
        st.ball[fields] = self._rng.uniform(-2.5, 2.5, size=(m, 2))
        st.ball_vel[fields] = 0.0
        st.ball_push[fields] = 0.0
        st.touching[fields] = False
        self._timer[fields] = 0

    def _end_fields(self, fields: np.ndarray, scorer: np.ndarray | None) -> None:
        """End both groups of ``fields``: a goal by team ``scorer`` (``(len(fields),)``), or interrupted."""
        members = self._field_members(fields)
        if scorer is not None:
            winner = np.repeat(scorer, len(self.SLOTS))
            elapsed = (
                np.repeat(self._timer[fields], len(self.SLOTS)) / self.max_steps if self.max_steps else 0.0
            )
            self._group_reward[members] += np.where(self._team[members] == winner, 1.0 - elapsed, -1.0)
        self._finish(members, scorer is None)
        self._start(members)

    # ------------------------------------------------------------------ physics
    def _advance(self, max_substeps: int) -> int:
        for k in range(max_substeps):
            if self._academy_step_once():
                return k + 1  # report the ended episodes at once, as Unity does
        return max_substeps

    def _academy_step_once(self) -> bool:
        """One ``FixedUpdate``: agents act, the controller's timer, physics, collisions.

        :return: whether an episode ended.
        """
        n_fields, n_slots, st = self.num_agents, len(self.SLOTS), self._state
        actions = self._disc_action[:, :3].reshape(n_fields, n_slots, 3)
        self._reward += self._existential
        field.move_agents(st, actions, self._forward_speed, self._lateral_speed)
        ended = False
        self._timer += 1
        if self.max_steps > 0:
            late = np.flatnonzero(self._timer >= self.max_steps)
            if late.size:
                self._end_fields(late, None)
                ended = True
        kick = field.KICK_FORCE * np.where(self._always_kicks, 1.0, actions[..., 0] == FORWARD)
        began = field.physics_step(st, kick, self._pairs)
        if began.any():
            self._reward += (0.2 * self._ball_touch * began.ravel()).astype(np.float32)
        goal = field.goal_scored(st.ball)
        scored = np.flatnonzero(goal)
        if scored.size:  # the ball in the purple goal (+x) is a blue goal
            self._end_fields(scored, np.where(goal[scored] > 0, BLUE, PURPLE))
            ended = True
        return ended

    # ------------------------------------------------------------------ observations
    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        b = int(self.agent_behavior[idx[0]]) if idx.size else 0
        f, s = self._field_of[idx], self._slot_of[idx]
        st = self._state
        discs = np.concatenate([st.ball[f][:, None, :], st.pos[f]], axis=1)  # ball, then every agent
        radius = np.full(discs.shape[:2], field.RAY_HIT_AGENT)
        radius[:, 0] = field.RAY_HIT_BALL
        radius[np.arange(idx.size), 1 + s] = 0.0  # the caster itself
        team = np.array([slot.team for slot in self.SLOTS])
        kind = np.where(team[None, :] == self._team[idx, None], TEAMMATE, OPPONENT)
        kind = np.concatenate([np.full((idx.size, 1), BALL), kind], axis=1)
        own_sign = np.where(self._team[idx] == BLUE, -1.0, 1.0)
        out = []
        for sensor, stack in zip(self.SENSORS[b], self._stacks[b]):
            hit, fraction = field.cast_rays(
                st.pos[f, s], st.heading[f, s], sensor.bearings, discs, radius, kind, own_sign
            )
            out.append(stack.push(idx, field.ray_features(hit, fraction, sensor.tags)))
        return out

    # ------------------------------------------------------------------ scripted team
    def expert_actions(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """A scripted team that reads the newest frame of the rays only (works on a real build's observations).

        A hit without a tag is taken for the goal the sensor does not tag (a striker's own
        goal, the goalie's other goal): nothing else in the field is untagged.

        Turn toward the ball (search to the right when no ray sees it). When the ball is ahead:
        if the other goal is in sight and not behind the ball, side-step until they line up;
        if the own goal is behind the ball, side-step away; otherwise run forward through it
        (a kick).
        """
        b = self._check_behavior(behavior_name)
        n = len(decision_steps)
        if n == 0:
            return self._specs[b].action_spec.empty_action(0)
        ball = np.full(n, np.nan)
        ball_dist = np.full(n, np.inf)
        goal = {OWN_GOAL: np.full(n, np.nan), OTHER_GOAL: np.full(n, np.nan)}
        for sensor, obs in zip(self.SENSORS[b], decision_steps.obs):
            rays = np.asarray(obs, dtype=np.float32)[:, -sensor.frame_size :].reshape(n, -1, sensor.ray_size)
            bearing = (sensor.bearings + 180.0) % 360.0 - 180.0
            fraction = rays[..., -1]
            # a hit without a tag is the goal the sensor does not tag (striker: own goal, goalie: other goal)
            untagged = (rays[..., -2] < 0.5) & (rays[..., : len(sensor.tags)].max(axis=-1) < 0.5)
            for kind, target in ((BALL, ball), (OWN_GOAL, goal[OWN_GOAL]), (OTHER_GOAL, goal[OTHER_GOAL])):
                seen = rays[..., sensor.tags.index(kind)] > 0.5 if kind in sensor.tags else untagged
                dist = np.where(seen, fraction, np.inf)
                nearest = dist.argmin(axis=1)
                best = dist[np.arange(n), nearest]
                closer = best < (ball_dist if kind == BALL else np.inf)
                target[closer] = bearing[nearest[closer]]
                if kind == BALL:
                    ball_dist[closer] = best[closer]
        act = np.zeros((n, 3), dtype=np.int32)
        seen = ~np.isnan(ball)
        # search to the right; a ball right behind is searched for the same way (no dithering)
        act[:, 2] = np.where(
            ~seen | (ball > 10.0) | (ball < -150.0), TURN_RIGHT, np.where(ball < -10.0, TURN_LEFT, NONE)
        )
        ahead = seen & (np.abs(ball) < 45.0)
        with np.errstate(invalid="ignore"):
            # facing the own goal: pushing the ball on would score for the other team
            wrong_way = (np.abs(goal[OWN_GOAL]) < 75.0) | (np.abs(goal[OTHER_GOAL]) > 105.0)
            aim = goal[OTHER_GOAL] - ball
            line_up = ahead & (np.abs(aim) > 15.0) & (np.abs(aim) < 90.0)
        act[:, 0] = np.where(ahead & ~wrong_way, FORWARD, NONE)
        act[:, 1] = np.where(line_up, np.where(aim > 0, LEFT, RIGHT), NONE)
        act[:, 1] = np.where(ahead & wrong_way, RIGHT, act[:, 1])  # circle round the ball
        return ActionTuple(discrete=act)


class SoccerTwos(SoccerScene):
    """2 vs 2 soccer, two groups per field, ray observations (ML-Agents' SoccerTwos)."""

    scene_name = "SoccerTwos"
    BEHAVIORS = ("SoccerTwos?team=0", "SoccerTwos?team=1")
    AREA_BEHAVIORS = (0, 0, 1, 1)
    SLOTS = (
        Slot(BLUE, GENERIC, (-8.19, 1.2)),
        Slot(BLUE, GENERIC, (-8.19, -1.2)),
        Slot(PURPLE, GENERIC, (8.19, 1.2)),
        Slot(PURPLE, GENERIC, (8.19, -1.2)),
    )
    SENSORS = tuple(
        (
            RaySensor(f"{color}RayPerceptionSensor", 5, 60.0, TWOS_TAGS),
            RaySensor(f"{color}RayPerceptionSensorReverse", 1, 45.0, TWOS_TAGS, backwards=True),
        )
        for color in ("Blue", "Purple")
    )
