"""GhostController and SelfPlayBehavior: who learns, in which order, and what is saved."""

from __future__ import annotations

import pytest

from unity_sb3.selfplay import GhostController, SelfPlayBehavior, SelfPlaySettings


def behaviors(*teams_of: list[int], controller: GhostController | None = None) -> list[SelfPlayBehavior]:
    controller = controller or GhostController()
    return [
        SelfPlayBehavior(f"B{i}", teams, SelfPlaySettings(), controller) for i, teams in enumerate(teams_of)
    ]


def test_first_subscribed_team_learns_and_teams_rotate_in_order():
    controller = GhostController()
    behaviors([0, 1], [2], controller=controller)
    assert controller.learning_team == 0
    assert [controller.change_training_team() for _ in range(4)] == [1, 2, 0, 1]
    assert controller.team_changes == 4


def test_a_finished_behavior_is_passed_over_while_another_still_trains():
    controller = GhostController()
    first, second = behaviors([0], [1], controller=controller)
    second.finished = True
    assert controller.change_training_team() == 0  # back to the only behavior still training
    second.finished, first.finished = False, True
    assert controller.change_training_team() == 1


def test_one_team_played_by_two_behaviors_is_refused():
    controller = GhostController()
    behaviors([0], controller=controller)
    with pytest.raises(ValueError, match=r"team 0 is already played by behavior 'B0'.*different team ids"):
        SelfPlayBehavior("Other", [0], SelfPlaySettings(), controller)


def test_the_team_change_rule_uses_the_learner_steps_of_the_behavior():
    step = [0]
    (behavior,) = behaviors([0, 1])
    behavior.settings = SelfPlaySettings(save_steps=10**6, team_change=100, swap_steps=10**6)
    behavior.bind(lambda: step[0], dict)
    behavior.start()
    changed = []
    for step[0] in range(0, 401, 10):
        if behavior.advance().team_changed:
            changed.append(step[0])
    assert changed == [110, 220, 330]  # strictly more than team_change since the last change
    assert behavior.controller.learning_team == 1
    assert behavior.learning_team == 1  # the swap that follows a change saw it


def test_controller_state_round_trips_and_refuses_other_teams():
    controller = GhostController()
    behaviors([0, 1], [2], controller=controller)
    controller.change_training_team()
    saved = controller.state_dict()
    other = GhostController()
    behaviors([0, 1], [2], controller=other)
    other.load_state_dict(saved)
    assert other.learning_team == 1 and other.state_dict() == saved
    with pytest.raises(ValueError, match=r"teams \[0, 1, 2\] but this run has \[0, 1\]"):
        lone = GhostController()
        behaviors([0, 1], controller=lone)
        lone.load_state_dict(saved)


class FakeGhost:
    def __init__(self) -> None:
        self.decisions = 0
        self.loaded: list[float] = []

    def load_weights(self, weights) -> None:
        self.loaded.append(float(weights["w"]))


def test_a_restored_behavior_puts_its_ghosts_back_on_the_opponent_it_was_playing():
    import torch as th

    step, value = [0], [0.0]
    (saved,) = behaviors([0, 1])
    saved.settings = SelfPlaySettings(save_steps=5, team_change=10**6, swap_steps=10**6, window=4)
    saved.bind(lambda: step[0], lambda: {"w": th.tensor(value[0])})
    saved.start()
    for step[0] in range(0, 31, 3):
        value[0] = float(step[0])
        saved.advance()
    saved.ghosts[1] = FakeGhost()
    saved.ghosts[1].decisions = 7
    saved.pool.current_opponent = 1  # playing ring slot 1
    state = saved.state_dict()

    (restored,) = behaviors([0, 1])
    restored.settings = saved.settings
    restored.ghosts.update({0: FakeGhost(), 1: FakeGhost()})
    restored.load_state_dict(state)
    restored.bind(lambda: step[0], lambda: {"w": th.tensor(-1.0)})
    restored.start()
    assert restored.ghosts[1].loaded == [float(saved.pool.snapshots[1]["w"])]  # the opponent it played
    assert restored.ghosts[0].loaded == [float(saved.pool.current["w"])]  # the learning team: latest
    assert restored.ghost_step == 7 and restored.pool.elos == saved.pool.elos
    assert (restored.last_save, restored.learning_team) == (saved.last_save, saved.learning_team)
