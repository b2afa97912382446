"""StrikersVsGoalie: ML-Agents' asymmetric soccer, two strikers against one goalie.

The SoccerTwos field and physics (:mod:`unity_sb3.scenes.soccer`) with the
``StrikersVsGoalieField`` prefab's agents: two blue strikers (behavior ``Striker?team=0``,
``Position.Striker``) attack the purple goal (``+x``), defended by one purple goalie
(``Goalie?team=1``, ``Position.Goalie``). Each side of a field is a ``SimpleMultiAgentGroup``
(strikers ``group_id = 2 * field + 1``, goalie ``2 * field + 2``). The two behaviors have
different specs, as in Unity:

* Striker: forward speed 1.3, lateral 0.3, an existential penalty of
  ``-1 / MaxEnvironmentSteps`` per academy step; it kicks when moving forward. Rays: 11 over
  +-60 degrees forward and 3 over +-45 degrees backward, tags ball, other goal, wall,
  teammate, opponent (its own goal is seen as an untagged hit): 231 + 63 floats.
* Goalie: forward and lateral speed 1, an existential bonus of ``+1 / MaxEnvironmentSteps``
  per step; it always kicks (``force = k_Power``). One sensor of 41 rays all round
  (``PurpleGoalieRayPerceptionSensor``: 20 per direction over 180 degrees), tags ball, own
  goal, wall, opponent: 738 floats.

Goals use ``SoccerEnvController.GoalTouched`` as in SoccerTwos: the scoring group gets
``1 - timer / MaxEnvironmentSteps``, the other -1 (the strikers can also score in their own
goal at ``-x``, which counts for the goalie). Spawn (``ResetScene``): strikers at x -8.19,
z +-1.2, the goalie at x 9, z 0, each shifted by U(-5, 5) along x.
"""

from __future__ import annotations

from unity_sb3.scenes._soccer_field import BALL, OPPONENT, OTHER_GOAL, OWN_GOAL, TEAMMATE, WALL, RaySensor
from unity_sb3.scenes.soccer import BLUE, GOALIE, PURPLE, STRIKER, Slot, SoccerScene

STRIKER_TAGS = (BALL, OTHER_GOAL, WALL, TEAMMATE, OPPONENT)  # ball, purpleGoal, wall, blueAgent, purpleAgent
GOALIE_TAGS = (BALL, OWN_GOAL, WALL, OPPONENT)  # ball, purpleGoal, wall, blueAgent


class StrikersVsGoalie(SoccerScene):
    """Two strikers against a goalie: two behaviors with different specs (ML-Agents' StrikersVsGoalie)."""

    scene_name = "StrikersVsGoalie"
    BEHAVIORS = ("Striker?team=0", "Goalie?team=1")
    AREA_BEHAVIORS = (0, 0, 1)
    SLOTS = (
        Slot(BLUE, STRIKER, (-8.19, 1.2)),
        Slot(BLUE, STRIKER, (-8.19, -1.2)),
        Slot(PURPLE, GOALIE, (9.0, 0.0)),
    )
    SENSORS = (
        (
            RaySensor("BlueRayPerceptionSensor", 5, 60.0, STRIKER_TAGS),
            RaySensor("BlueRayPerceptionSensorReverse", 1, 45.0, STRIKER_TAGS, backwards=True),
        ),
        (RaySensor("PurpleGoalieRayPerceptionSensor", 20, 180.0, GOALIE_TAGS),),
    )
