"""SelfPlayCallback on a real LockstepUnity: team changes, ghosts answering, ELO, checkpoints."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from multi_behavior_scenes import HUNTER, PREY, Duel
from selfplay_scenes import TEAM1, Showdown
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

from unity_sb3 import POCA, PPO
from unity_sb3.callbacks.checkpoint import AtomicCheckpointCallback
from unity_sb3.callbacks.progress import LiveProgressCallback
from unity_sb3.callbacks.self_play import ELO_TAG, SelfPlayCallback, self_play_callbacks, self_play_state_path
from unity_sb3.multi_behavior import MultiBehaviorTrainer
from unity_sb3.selfplay import SelfPlaySettings
from unity_sb3.wrappers.lockstep import LockstepUnity


@pytest.fixture
def lockstep():
    unity = LockstepUnity(Showdown(num_agents=3), step_timeout=30.0)
    yield unity
    unity.close()


def ppo(env, seed: int = 0) -> PPO:
    return PPO("MlpPolicy", env, n_steps=16, batch_size=24, n_epochs=1, seed=seed, device="cpu")


class Recorder(BaseCallback):
    """Per step: the learner's step, the controller's and the lockstep's learning team, the teams of
    the view's agents (Showdown gives team-0 agents even ids and team-1 agents odd ones) and the dones."""

    def __init__(self, self_play: SelfPlayCallback) -> None:
        super().__init__()
        self.self_play = self_play
        self.rows: list[dict] = []

    def _on_step(self) -> bool:
        ids = self.training_env.unwrapped.slot_agent_ids()
        self.rows.append(
            {
                "step": self.model.num_timesteps,
                "learning": self.self_play.controller.learning_team,
                "lockstep": self.self_play.lockstep.learning_team("Showdown"),
                "view_teams": {agent % 2 for agent in ids},
                "done": bool(np.all(self.locals["dones"])),
            }
        )
        return True


def test_the_learning_team_changes_every_team_change_learner_steps(lockstep):
    settings = SelfPlaySettings(save_steps=10**6, team_change=30, swap_steps=10**6)
    self_play = SelfPlayCallback(lockstep, "Showdown", settings, seed=0)
    recorder = Recorder(self_play)
    ppo(lockstep.vec_env("Showdown")).learn(144, callback=[self_play, recorder])
    rows = recorder.rows
    changes = [
        now["step"] for before, now in itertools.pairwise(rows) if now["learning"] != before["learning"]
    ]
    # 3 slots count 3 steps per vector step; ML-Agents changes when step - last change > team_change
    assert changes == [33, 66, 99, 132]
    assert [row["learning"] for row in rows if row["step"] in (30, 33, 66, 99)] == [0, 1, 0, 1]
    assert all(row["lockstep"] == row["learning"] for row in rows)
    # the view's slots change team only where the games end (every slot done), after the change
    for before, now in itertools.pairwise(rows):
        if now["view_teams"] != before["view_teams"]:
            assert now["done"] and now["view_teams"] == {now["learning"]}
    assert {1} in [row["view_teams"] for row in rows]  # team 1 did play through the view


def test_the_ghost_answers_the_other_team_with_snapshots_of_the_learner(lockstep):
    settings = SelfPlaySettings(save_steps=24, team_change=10**6, swap_steps=12, window=3)
    self_play = SelfPlayCallback(lockstep, "Showdown", settings, seed=0)
    answered: list[tuple[str, int]] = []
    ghost_calls = threading.Lock()
    model = ppo(lockstep.vec_env("Showdown"))
    original = SelfPlayCallback._answerer

    def spying_answerer(callback, team):
        answer = original(callback, team)

        def spy(name, decision_steps):
            with ghost_calls:
                answered.append((name, len(decision_steps)))
            return answer(name, decision_steps)

        return spy

    SelfPlayCallback._answerer = spying_answerer
    try:
        model.learn(96, callback=self_play)
    finally:
        SelfPlayCallback._answerer = original
    names = {name for name, n in answered if n}
    assert names == {TEAM1}  # team 0 learns: its agents are the view's, team 1's the ghost's
    assert sum(n for _, n in answered) == self_play.state.ghosts[1].decisions > 0
    assert self_play.state.ghost_step == self_play.state.ghosts[1].decisions
    pool = self_play.state.pool
    assert len(pool.snapshots) == 3  # the first snapshot, then one per 24+ steps, in a ring of 3
    assert self_play.state.last_swap > 0  # swapped every 12+ ghost decisions


def test_elo_is_logged_and_moves_against_the_snapshot_played(lockstep, tmp_path):
    settings = SelfPlaySettings(save_steps=10**6, team_change=10**6, swap_steps=10**6)
    self_play = SelfPlayCallback(lockstep, "Showdown", settings, seed=0)
    model = ppo(lockstep.vec_env("Showdown"))
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(48, callback=self_play)
    # no swap yet: the opponent is ring slot 0 (ML-Agents' start), the first snapshot; every game
    # moved the learner's rating and that slot's by opposite amounts
    pool = self_play.state.pool
    assert pool.current_opponent == 0
    assert pool.current_elo + pool.elos[0] == pytest.approx(2 * 1200.0)
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    assert ELO_TAG in header


def test_every_finished_game_updates_the_elo_once_per_learning_agent(lockstep):
    settings = SelfPlaySettings(save_steps=10**6, team_change=10**6, swap_steps=10**6)
    self_play = SelfPlayCallback(lockstep, "Showdown", settings, seed=0)
    results = []
    record = self_play.state.record_episode

    def counting(final_reward, group_reward=0.0):
        results.append(final_reward)
        return record(final_reward, group_reward)

    self_play.state.record_episode = counting
    ppo(lockstep.vec_env("Showdown")).learn(48, callback=self_play)
    # 3 areas, games of 4 decisions: 48 steps / 3 slots = 16 decisions each -> 4 games per slot
    assert len(results) == 12
    assert set(np.sign(results)) <= {-1.0, 0.0, 1.0}


def test_checkpoints_hold_the_pool_and_elo_and_restore_them(lockstep, tmp_path):
    settings = SelfPlaySettings(save_steps=12, team_change=30, swap_steps=6, window=4)
    self_play = SelfPlayCallback(lockstep, "Showdown", settings, seed=3)
    checkpoints = AtomicCheckpointCallback(48, tmp_path, keep_last=1, on_save=self_play.on_checkpoint)
    model = ppo(lockstep.vec_env("Showdown"))
    model.learn(96, callback=[self_play, checkpoints])
    latest = tmp_path / "checkpoint_96_steps.zip"
    assert self_play_state_path(latest).is_file()
    assert not self_play_state_path(tmp_path / "checkpoint_48_steps.zip").exists()  # pruned with its zip
    saved = self_play.state_dict()

    fresh = SelfPlayCallback(LockstepUnity(Showdown(num_agents=3)), "Showdown", settings)
    fresh.restore(latest)
    restored = fresh.state_dict()
    assert restored["controller"] == saved["controller"]
    state, before = restored["behaviors"]["Showdown"], saved["behaviors"]["Showdown"]
    assert state["pool"]["elos"] == before["pool"]["elos"]
    assert state["pool"]["snapshot_counter"] == before["pool"]["snapshot_counter"]
    assert len(state["pool"]["snapshots"]) == len(before["pool"]["snapshots"]) == 4
    for key in ("ghost_step", "last_save", "last_swap", "last_team_change", "learning_team"):
        assert state[key] == before[key]
    fresh.lockstep.close()


def test_under_vec_normalize_snapshots_carry_the_statistics_and_results_use_raw_rewards(lockstep):
    settings = SelfPlaySettings(save_steps=24, team_change=10**6, swap_steps=12, window=3)
    self_play = SelfPlayCallback(lockstep, "Showdown", settings, seed=0)
    results = []
    record = self_play.state.record_episode
    self_play.state.record_episode = lambda reward, group=0.0: results.append(reward) or record(reward, group)
    env = VecNormalize(VecMonitor(lockstep.vec_env("Showdown")), norm_reward=True)
    ppo(env).learn(48, callback=self_play)
    assert set(results) <= {-1.0, 0.0, 1.0}  # the scene's rewards, not VecNormalize's scaled ones
    assert results
    snapshot = self_play.state.pool.snapshots[-1]
    assert {"vec_normalize//mean", "vec_normalize//var", "vec_normalize/clip_obs"} <= set(snapshot)
    assert self_play.state.ghosts[1]._normalizer is not None


def test_restoring_without_a_saved_state_says_why(tmp_path, lockstep):
    self_play = SelfPlayCallback(lockstep, "Showdown")
    with pytest.raises(FileNotFoundError, match=r"without SelfPlayCallback\.on_checkpoint"):
        self_play.restore(tmp_path / "checkpoint_10_steps.zip")


def test_unknown_behavior_is_refused_with_the_scene_behaviors(lockstep):
    with pytest.raises(ValueError, match=r"no behavior 'Showdwn'.*Showdown\?team=0"):
        SelfPlayCallback(lockstep, "Showdwn")


def test_progress_bar_shows_the_elo(lockstep):
    self_play = SelfPlayCallback(lockstep, "Showdown", SelfPlaySettings(save_steps=10**6), seed=0)
    bar = LiveProgressCallback(48, refresh_every=1, postfix=self_play.progress_text)
    ppo(lockstep.vec_env("Showdown")).learn(48, callback=[self_play, bar])
    assert self_play.progress_text() == f"ELO {self_play.elo:.1f}"
    assert bar.bar is None  # closed; the text reached tqdm through set_postfix_str (no error)


def test_asymmetric_behaviors_take_turns_and_the_frozen_one_is_answered_by_its_snapshots():
    """Hunter (PPO, continuous) and Prey (POCA, masked discrete, groups): one model each, one learns at a time."""
    set_random_seed(0)
    unity = LockstepUnity(Duel(num_agents=2), step_timeout=30.0)
    settings = {"save_steps": 20, "team_change": 40, "swap_steps": 10}
    callbacks = self_play_callbacks(unity, {HUNTER: settings, PREY: settings}, seed=0)
    hunter, prey = callbacks[HUNTER], callbacks[PREY]
    assert hunter.controller is prey.controller
    assert hunter.is_learning and not prey.is_learning  # the first behavior given learns first
    trainer = MultiBehaviorTrainer(
        unity,
        {
            HUNTER: lambda env: PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, device="cpu"),
            PREY: lambda env: POCA(
                "MultiInputPolicy", env, n_steps=16, batch_size=16, n_epochs=1, device="cpu"
            ),
        },
        callbacks=callbacks,
    )
    try:
        trainer.learn(160)
        assert trainer.models[HUNTER].num_timesteps >= 160 and trainer.models[PREY].num_timesteps >= 160
        assert hunter.controller.team_changes >= 2
        # each behavior was frozen for a while: its own snapshots answered its agents
        assert hunter.state.ghosts[0].decisions > 0 and prey.state.ghosts[1].decisions > 0
        # a result moves the learner's rating and the other behavior's opponent snapshot oppositely
        for callback in (hunter, prey):
            assert len(callback.state.pool.snapshots) > 1
    finally:
        trainer.close()
        unity.close()


@pytest.mark.slow
def test_elo_rises_while_the_learner_beats_its_snapshots():
    set_random_seed(0)
    unity = LockstepUnity(Showdown(num_agents=4))
    try:
        settings = SelfPlaySettings(save_steps=400, team_change=2000, swap_steps=100, window=5)
        self_play = SelfPlayCallback(unity, "Showdown", settings, seed=0)
        model = PPO(
            "MlpPolicy",
            unity.vec_env("Showdown"),
            n_steps=64,
            batch_size=64,
            learning_rate=1e-3,
            device="cpu",
        )
        model.learn(4000, callback=self_play)
        assert self_play.controller.team_changes == 2  # both teams learned
        assert self_play.elo > 1220.0  # about 1240-1290 over seeds 0-3
        push, _ = model.predict(np.array([[0.0, 1.0]], dtype=np.float32), deterministic=True)
        assert push[0, 0] > 0.5  # it learned the winning move
    finally:
        unity.close()


def test_the_summary_line_ends_with_the_mean_elo_of_the_period_as_mlagents_prints_it(lockstep):
    from unity_sb3.callbacks.checkpoint import SummaryCallback

    self_play = SelfPlayCallback(lockstep, "Showdown", SelfPlaySettings(save_steps=10**6), seed=0)
    summary = SummaryCallback(10**6, name="Showdown", elo=self_play.summary_elo)
    env = VecMonitor(lockstep.vec_env("Showdown"))
    ppo(env).learn(48, callback=[self_play, summary])
    expected = np.mean(self_play._period_elos)
    line = summary.summary_line(48)
    assert line.endswith(f"Training. ELO: {expected:0.3f}.")
    assert self_play.summary_elo() is None  # the period was read: no game since
    summary.rewards.clear()
    assert summary.summary_line(48).endswith("No episode was completed since last summary. Training.")


def test_a_second_learn_continues_with_the_same_pool_and_takes_turns_again(lockstep):
    settings = SelfPlaySettings(save_steps=12, team_change=30, swap_steps=6, window=3)
    self_play = SelfPlayCallback(lockstep, "Showdown", settings, seed=0)
    model = ppo(lockstep.vec_env("Showdown"))
    model.learn(48, callback=self_play)
    assert self_play.state.finished
    snapshots, changes = list(self_play.state.pool.snapshots), self_play.controller.team_changes
    model.learn(48, callback=self_play, reset_num_timesteps=False)
    assert self_play.controller.team_changes > changes  # not parked behind its own first learn
    assert self_play.state.last_save > 48  # the rules went on from the same counters
    assert len(self_play.state.pool.snapshots) == 3 and len(snapshots) == 3  # one ring, not a new pool


def test_a_game_result_adds_the_group_reward_once_and_skips_inactive_slots(lockstep):
    from types import SimpleNamespace

    self_play = SelfPlayCallback(lockstep, "Showdown", seed=0)
    model = ppo(lockstep.vec_env("Showdown"))
    model.set_logger(configure(None, []))
    self_play.init_callback(model)
    self_play._view = SimpleNamespace(add_group_reward=False)
    got = []
    self_play.state.record_episode = lambda reward, group=0.0: got.append((reward, group)) or 1200.0
    self_play.locals = {
        "dones": np.array([True, False, True, True]),
        "rewards": np.array([0.0, 5.0, 0.5, -1.0]),
        "infos": [{"group_reward": 1.0}, {}, {"group_reward": -1.0}, {"active": False}],
    }
    self_play._record_results()
    assert got == [(0.0, 1.0), (0.5, -1.0)]
    self_play._view.add_group_reward = True  # already inside the reward: not added twice
    got.clear()
    self_play._record_results()
    assert got == [(0.0, 0.0), (0.5, 0.0)]
