"""The snapshot pool: the window ring, the opponent draws, their frequency, save and load."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from unity_sb3.selfplay import LATEST, GhostController, SelfPlayBehavior, SelfPlaySettings, SnapshotPool


def weights(value: float) -> dict[str, th.Tensor]:
    return {"w": th.full((2,), float(value))}


class FakeGhost:
    """Counts decisions like GhostPolicy and remembers what it was loaded with."""

    def __init__(self) -> None:
        self.decisions = 0
        self.loaded: list[float] = []

    def load_weights(self, w) -> None:
        self.loaded.append(float(w["w"][0]))


def test_snapshots_fill_a_ring_of_window_and_overwrite_the_oldest():
    pool = SnapshotPool(window=3, seed=0)
    for value in range(5):
        pool.set_current(weights(value))
        pool.change_current_elo(10.0)
        pool.save_snapshot()
    assert len(pool.snapshots) == 3
    assert [float(s["w"][0]) for s in pool.snapshots] == [3.0, 4.0, 2.0]  # slots 0, 1 rewritten
    assert pool.snapshot_counter == 2
    assert pool.elos[:3] == [1240.0, 1250.0, 1230.0]  # each slot keeps the learner's ELO at its save
    assert len(pool.elos) == 4 and pool.current_elo == 1250.0


def test_a_snapshot_is_a_copy_that_later_training_does_not_change():
    pool = SnapshotPool(window=2)
    live = weights(1.0)
    pool.set_current(live)
    pool.save_snapshot()
    live["w"].add_(5.0)
    assert float(pool.snapshots[0]["w"][0]) == 1.0


@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.8, 1.0])
def test_the_latest_policy_is_drawn_with_play_against_latest_model_ratio(ratio):
    pool = SnapshotPool(window=4, play_against_latest_model_ratio=ratio, seed=1)
    for value in range(4):
        pool.set_current(weights(value))
        pool.save_snapshot()
    draws = []
    for _ in range(4000):
        pool.draw_opponent()
        draws.append(pool.current_opponent)
    draws = np.array(draws)
    latest = np.mean(draws == LATEST)
    assert latest == pytest.approx(ratio, abs=0.03)
    if ratio < 1.0:  # the others uniformly over the ring
        counts = np.bincount(draws[draws != LATEST], minlength=4)
        assert counts.min() / counts.max() > 0.8


def test_drawing_from_an_empty_pool_says_what_to_do():
    with pytest.raises(RuntimeError, match="save_snapshot"):
        SnapshotPool().draw_opponent()


def test_save_and_load_restore_the_pool_the_elo_and_the_draws(tmp_path):
    pool = SnapshotPool(window=3, play_against_latest_model_ratio=0.4, initial_elo=1000.0, seed=7)
    for value in range(4):
        pool.set_current(weights(value))
        pool.change_current_elo(3.5)
        pool.save_snapshot()
    pool.draw_opponent()
    pool.change_opponent_elo(1.25)
    path = pool.save(tmp_path / "pool.pt")
    loaded = SnapshotPool.load(path)
    assert loaded.elos == pool.elos
    assert loaded.snapshot_counter == pool.snapshot_counter
    assert loaded.current_opponent == pool.current_opponent
    assert [float(s["w"][0]) for s in loaded.snapshots] == [float(s["w"][0]) for s in pool.snapshots]
    assert float(loaded.current["w"][0]) == 3.0
    # the draws continue where they stopped
    assert [loaded.draw_opponent() is not None and loaded.current_opponent for _ in range(20)] == [
        pool.draw_opponent() is not None and pool.current_opponent for _ in range(20)
    ]
    assert not list(tmp_path.glob(".*tmp"))  # the temporary file is gone


def test_loading_into_a_pool_of_another_window_is_refused(tmp_path):
    pool = SnapshotPool(window=3)
    pool.set_current(weights(0))
    pool.save_snapshot()
    with pytest.raises(ValueError, match="window 3 but this one has 5"):
        SnapshotPool(window=5).load_state_dict(pool.state_dict())


def _behavior(settings: SelfPlaySettings, step: list[int], value: list[float]):
    behavior = SelfPlayBehavior("Tennis", [0, 1], settings, GhostController(), seed=0)
    ghosts = {0: FakeGhost(), 1: FakeGhost()}
    behavior.ghosts.update(ghosts)
    behavior.bind(lambda: step[0], lambda: weights(value[0]))
    behavior.start()
    return behavior, ghosts


def test_opponents_are_swapped_every_swap_steps_ghost_decisions():
    settings = SelfPlaySettings(save_steps=10**9, team_change=10**9, swap_steps=100)
    behavior, ghosts = _behavior(settings, [0], [0.0])
    swaps = []
    for tick in range(1, 1001):
        ghosts[1].decisions += 2  # the ghost answered two agents this step
        if behavior.advance().swapped:
            swaps.append(tick)
    # ML-Agents swaps when ghost_step - last_swap > swap_steps: every 51 steps of 2 decisions
    assert swaps == list(range(51, 1001, 51))
    assert len(ghosts[1].loaded) == 1 + len(swaps)  # the start, then one load per swap
    assert ghosts[0].loaded == [0.0]  # the learning team's ghost is never swapped


def test_a_snapshot_is_saved_every_save_steps_learner_steps():
    settings = SelfPlaySettings(save_steps=1000, team_change=10**9, swap_steps=10**9, window=3)
    step, value = [0], [0.0]
    behavior, _ = _behavior(settings, step, value)
    saved = []
    for tick in range(1, 51):
        step[0], value[0] = tick * 100, float(tick)
        if behavior.advance().saved is not None:
            saved.append(step[0])
    assert saved == [1100, 2200, 3300, 4400]  # strictly more than save_steps since the last save
    assert [float(s["w"][0]) for s in behavior.pool.snapshots] == [33.0, 44.0, 22.0]
