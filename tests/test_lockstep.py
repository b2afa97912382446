"""LockstepUnity: several UnityVecEnv views stepping one Unity scene in lockstep, one thread each."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.base_env import ActionSpec, ActionTuple, DecisionSteps

from unity_sb3.scenes.scripted import ScriptedAgent, ScriptedBehavior, ScriptedEnv
from unity_sb3.unity.errors import UnityConfigurationError, UnityProcessError
from unity_sb3.wrappers.lockstep import LockstepUnity, UnityLockstepError, behavior_dir

WALKER, JUMPER = "Walker?team=0", "Jumper?team=0"
WALK = 0.5  # the Walker view's continuous action
JUMP = 2  # the Jumper view's discrete action
JOIN_TIMEOUT = 30.0


def walker_and_jumper(walker=None, jumper=None, **kwargs) -> ScriptedEnv:
    """Two behaviors: two continuous walkers (every step), one discrete jumper (every 3rd step)."""
    walker = walker or [ScriptedAgent(episode_length=6), ScriptedAgent(episode_length=9)]
    jumper = jumper or [ScriptedAgent(period=3, episode_length=10)]
    return ScriptedEnv(
        {
            WALKER: ScriptedBehavior(walker, action_spec=ActionSpec(2, ())),
            JUMPER: ScriptedBehavior(jumper, action_spec=ActionSpec(0, (3,))),
        },
        strict=True,
        **kwargs,
    )


def constant_actions(venv, value) -> np.ndarray:
    return np.full((venv.num_envs, *venv.action_space.shape), value, dtype=venv.action_space.dtype)


def run_threads(jobs: dict[str, Callable[[], object]], timeout: float = JOIN_TIMEOUT) -> dict[str, object]:
    """Run each job in its own thread; every thread must end within ``timeout`` (no deadlock)."""
    results: dict[str, object] = {}

    def wrap(name, job):
        try:
            results[name] = job()
        except BaseException as exc:  # collected for the test to look at
            results[name] = exc

    threads = [threading.Thread(target=wrap, args=item, daemon=True) for item in jobs.items()]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads still waiting after {timeout} s: deadlock"
    return results


def stepper(lock: LockstepUnity, venv, value, steps: int, record: list | None = None, detach: bool = True):
    def job():
        for _ in range(steps):
            out = venv.step(constant_actions(venv, value))
            if record is not None:
                record.append(out)
        if detach:
            lock.detach(venv)
        return steps

    return job


def requested_pairs(env: ScriptedEnv, name: str) -> list[tuple[int, int]]:
    return sorted((t, int(a)) for t, ids in env.requests[name] for a in ids.tolist())


def received_pairs(env: ScriptedEnv, name: str) -> list[tuple[int, int]]:
    return sorted((r.step, r.agent_id) for per_agent in env.received[name].values() for r in per_agent)


# ---------------------------------------------------------------------- the barrier
def test_every_asking_agent_gets_exactly_one_action_from_its_view_per_unity_step():
    env = walker_and_jumper()
    lock = LockstepUnity(env, step_timeout=20)
    walker, jumper = lock.vec_env("Walker"), lock.vec_env("Jumper")
    assert (walker.num_envs, jumper.num_envs) == (2, 1)

    def answer(name: str, dec: DecisionSteps) -> ActionTuple:  # after a detach: marked, not zeros
        if name == WALKER:
            return ActionTuple(continuous=np.full((len(dec), 2), -0.75, np.float32))
        return ActionTuple(discrete=np.ones((len(dec), 1), np.int32))

    lock.set_answerer(WALKER, answer)
    lock.set_answerer(JUMPER, answer)
    jumps: list = []
    results = run_threads(
        {
            "walker": stepper(lock, walker, WALK, 40),
            "jumper": stepper(lock, jumper, JUMP, 25, record=jumps),
        }
    )
    assert results == {"walker": 40, "jumper": 25}
    assert env.unanswered == []  # strict: a request left unanswered would also have raised
    for name in (WALKER, JUMPER):  # one action per request, none without one
        assert received_pairs(env, name) == requested_pairs(env, name)
    walked = {float(r.continuous[0]) for rs in env.received[WALKER].values() for r in rs}
    jumped = {int(r.discrete[0]) for rs in env.received[JUMPER].values() for r in rs}
    assert walked <= {WALK, -0.75} and WALK in walked  # the view's actions, or the answerer's after a detach
    assert jumped <= {JUMP, 1} and JUMP in jumped
    # the jumper's view saw only steps where its agent asked (period 3): no placeholder slots
    assert all(info["active"] for _, _, _, infos in jumps for info in infos)
    assert sum(lock.unity_steps) > 25
    lock.close()


def test_views_with_different_decision_periods_each_see_their_own_decisions():
    env = walker_and_jumper(
        walker=[ScriptedAgent(period=2)], jumper=[ScriptedAgent(period=5, episode_length=None)]
    )
    lock = LockstepUnity(env, step_timeout=20)
    walker, jumper = lock.vec_env("Walker"), lock.vec_env("Jumper")
    walks: list = []
    jumps: list = []
    run_threads(
        {
            "walker": stepper(lock, walker, WALK, 30, record=walks, detach=False),
            "jumper": stepper(lock, jumper, JUMP, 12, record=jumps),
        }
    )
    # observation [k, episode, step_in_episode, unity_step]: each view's steps are its own periods
    walk_steps = [int(obs[0, 3]) for obs, *_ in walks]
    jump_steps = [int(obs[0, 3]) for obs, *_ in jumps]
    assert walk_steps == list(range(2, 2 * 30 + 1, 2))
    assert jump_steps == list(range(5, 5 * 12 + 1, 5))
    assert received_pairs(env, JUMPER) == requested_pairs(env, JUMPER)
    lock.close()


def test_an_agent_ends_its_episode_while_the_other_view_is_idle():
    env = walker_and_jumper(
        walker=[ScriptedAgent(period=4)], jumper=[ScriptedAgent(period=1, episode_length=5)]
    )
    lock = LockstepUnity(env, step_timeout=20)
    walker, jumper = lock.vec_env("Walker"), lock.vec_env("Jumper")
    jumps: list = []
    run_threads(
        {
            "walker": stepper(lock, walker, WALK, 5, detach=False),
            "jumper": stepper(lock, jumper, JUMP, 19, record=jumps),
        }
    )
    ends = [
        (int(info["terminal_observation"][3]), int(info["terminal_observation"][2]))
        for *_, d, i in jumps
        for done, info in zip(d, i)
        if done
    ]
    # every 5 Unity steps, at Unity steps the walker (period 4) did not decide at (5, 10, 15)
    assert ends == [(5, 5), (10, 5), (15, 5)]
    assert received_pairs(env, WALKER) == requested_pairs(env, WALKER)
    lock.close()


def test_a_view_whose_agents_do_not_ask_at_reset_is_built_after_another():
    env = walker_and_jumper(jumper=[ScriptedAgent(period=3, start=2, episode_length=None)])
    lock = LockstepUnity(env, step_timeout=20)
    walker = lock.vec_env("Walker")
    jumper = lock.vec_env("Jumper")  # steps Unity twice to find its agent: the walkers get zeros then
    run_threads({"walker": stepper(lock, walker, WALK, 12), "jumper": stepper(lock, jumper, JUMP, 3)})
    assert env.unanswered == []
    walked = [(r.step, float(r.continuous[0])) for rs in env.received[WALKER].values() for r in rs]
    assert {v for t, v in walked if t < 2} == {0.0} and {v for t, v in walked if 2 <= t < 10} == {WALK}
    lock.close()


# ---------------------------------------------------------------------- ownership and teams
def two_teams(**behavior) -> ScriptedEnv:
    team0 = [
        ScriptedAgent(episode_length=7, new_id_each_episode=True),
        ScriptedAgent(episode_length=11, new_id_each_episode=True),
    ]
    team1 = [
        ScriptedAgent(episode_length=5, new_id_each_episode=True),
        ScriptedAgent(episode_length=8, new_id_each_episode=True),
    ]
    return ScriptedEnv(
        {
            "Player?team=0": ScriptedBehavior(team0, **behavior),
            "Player?team=1": ScriptedBehavior(team1, **behavior),
        },
        strict=True,
    )


def test_a_team_change_rebinds_slots_at_episode_boundaries_only():
    env = two_teams()
    lock = LockstepUnity(env)
    assert lock.base_names == ["Player"] and lock.team_of("Player?team=1") == 1
    answered: list[tuple[int, list[int]]] = []

    def ghost(name: str, dec: DecisionSteps) -> ActionTuple:
        answered.append((env.t, dec.agent_id.tolist()))
        return ActionTuple(continuous=np.full((len(dec), 2), -0.5, np.float32))

    lock.set_answerer("Player", ghost)
    view = lock.vec_env("Player")  # both teams; the learning team's agents become the slots
    assert lock.learning_team("Player") == 0 and view.num_envs == 2
    team0 = set(env.agent_ids("Player?team=0"))
    assert set(view.slot_agent_ids()) == team0
    owned: set[int] = set(team0)
    previous = view.slot_agent_ids()
    changed_at = None
    for step in range(40):
        if step == 9:
            lock.set_learning_team("Player", 1)
            changed_at = env.t
        _, _, done, _ = view.step(constant_actions(view, WALK))
        now = view.slot_agent_ids()
        for slot, (before, after) in enumerate(zip(previous, now)):
            if before is not None and after != before:
                assert done[slot], f"slot {slot} lost agent {before} mid-episode at Unity step {env.t}"
        owned.update(a for a in now if a is not None)
        previous = now
    team1_now = set(env.agent_ids("Player?team=1"))
    assert set(view.slot_agent_ids()) <= team1_now  # the view now plays team 1
    ghosted = {a for _, ids in answered for a in ids}
    assert not ghosted & owned  # an agent never had two owners
    before = {a for t, ids in answered if t < changed_at for a in ids}
    assert before and all(a not in team0 for a in before)  # the ghost played team 1 first ...
    late_team0 = {a for t, ids in answered if t > changed_at + 11 for a in ids}
    assert late_team0 and late_team0.isdisjoint(team1_now)  # ... and team 0 once its episodes ended
    lock.close()


def test_the_answerer_gets_only_the_agents_no_view_owns_and_zeros_are_the_default():
    env = walker_and_jumper()
    lock = LockstepUnity(env)
    seen: list[list[int]] = []

    def jump_once(name: str, dec: DecisionSteps) -> ActionTuple:
        seen.append(dec.agent_id.tolist())
        return ActionTuple(discrete=np.ones((len(dec), 1), np.int32))

    walker = lock.vec_env("Walker")  # nobody trains the jumper
    lock.set_answerer(JUMPER, jump_once)
    for _ in range(6):
        walker.step(constant_actions(walker, WALK))
    assert seen and all(ids == env.agent_ids(JUMPER) for ids in seen)
    assert {int(r.discrete[0]) for r in env.actions_of(0, JUMPER)} == {1}
    lock.set_answerer(JUMPER, None)
    for _ in range(6):
        walker.step(constant_actions(walker, WALK))
    assert int(env.actions_of(0, JUMPER)[-1].discrete[0]) == 0
    assert received_pairs(env, JUMPER) == requested_pairs(env, JUMPER)
    lock.close()


def test_a_parked_view_waits_without_holding_the_other_back():
    env = walker_and_jumper()
    lock = LockstepUnity(env, step_timeout=20)
    walker, jumper = lock.vec_env("Walker"), lock.vec_env("Jumper")
    lock.set_learning_team("Walker", 0)
    lock.set_learning_team("Jumper", 1)  # the jumper's team (0) does not learn now: its view parks
    results = run_threads(
        {"walker": stepper(lock, walker, WALK, 30), "jumper": stepper(lock, jumper, JUMP, 5)}
    )
    assert results["walker"] == 30
    # the jumper's live agent kept its view until its episode ended; then the view parked, and
    # once the walker detached nobody was left to step Unity
    assert isinstance(results["jumper"], UnityLockstepError) and "no other view" in str(results["jumper"])
    assert env.unanswered == []
    lock.close()


# ---------------------------------------------------------------------- detach, abort, timeout
def test_detach_releases_a_view_waiting_for_the_detached_one():
    env = walker_and_jumper()
    lock = LockstepUnity(env, step_timeout=20)
    walker, jumper = lock.vec_env("Walker"), lock.vec_env("Jumper")
    threading.Timer(0.3, lock.detach, args=(walker,)).start()  # the walker never steps
    results = run_threads({"jumper": stepper(lock, jumper, JUMP, 10)})
    assert results == {"jumper": 10}
    assert env.unanswered == []
    with pytest.raises(UnityLockstepError, match="detached"):
        walker.step(constant_actions(walker, WALK))
    lock.attach(walker)
    lock.close()


def test_abort_wakes_every_waiting_view_with_the_error():
    env = walker_and_jumper()
    lock = LockstepUnity(env, step_timeout=20)
    lock.vec_env("Walker")
    jumper = lock.vec_env("Jumper")
    threading.Timer(0.3, lock.abort, args=(ValueError("the walker's learner crashed"),)).start()
    results = run_threads({"jumper": stepper(lock, jumper, JUMP, 10)})
    error = results["jumper"]
    assert isinstance(error, UnityLockstepError) and isinstance(error.__cause__, ValueError)
    assert "crashed" in str(error)
    lock.close()


def test_a_view_waiting_too_long_names_the_views_that_never_arrived():
    env = walker_and_jumper()
    lock = LockstepUnity(env, step_timeout=0.3)
    lock.vec_env("Walker")
    jumper = lock.vec_env("Jumper")
    with pytest.raises(UnityLockstepError, match=r"waited 0.3 s for view\(s\) \['Walker\?team=0'\]"):
        jumper.step(constant_actions(jumper, JUMP))
    lock.close()


def test_a_unity_crash_reaches_every_view():
    lock = LockstepUnity(walker_and_jumper(crash_at=4), step_timeout=20)
    walker, jumper = lock.vec_env("Walker"), lock.vec_env("Jumper")
    results = run_threads(
        {"walker": stepper(lock, walker, WALK, 10), "jumper": stepper(lock, jumper, JUMP, 10)}
    )
    # the view that ran the step and the other one both report the crash of worker 0
    assert all(isinstance(e, UnityProcessError) and e.worker_id == 0 for e in results.values())
    assert all("scripted crash" in str(e) for e in results.values())
    assert any("run by lockstep view" in str(e) for e in results.values())
    lock.close()


def test_views_with_restart_on_crash_restart_the_shared_instance_once():
    made: list[ScriptedEnv] = []

    def make() -> ScriptedEnv:  # the first instance crashes at Unity step 4, the next ones do not
        made.append(walker_and_jumper(crash_at=4 if not made else None))
        return made[-1]

    lock = LockstepUnity(make, step_timeout=20)
    kwargs = {"restart_on_crash": True, "restart_backoff": 0.0}
    walker, jumper = lock.vec_env("Walker", **kwargs), lock.vec_env("Jumper", **kwargs)
    walks: list = []
    jumps: list = []
    results = run_threads(
        {
            "walker": stepper(lock, walker, WALK, 12, record=walks),
            "jumper": stepper(lock, jumper, JUMP, 6, record=jumps),
        }
    )
    assert results == {"walker": 12, "jumper": 6}
    assert len(made) == 2 and made[0].crashed  # one restart for both views
    # the view that restarted Unity reports it; a view that learns of it later only catches up: for
    # both, the episodes of their agents end, interrupted, at the restart
    for venv, record in ((walker, walks), (jumper, jumps)):
        restarted = sum(any(info.get("restarted") for info in infos) for *_, infos in record)
        assert restarted == venv.restart_counts[0] <= 1
        assert any(info.get("TimeLimit.truncated") for *_, infos in record for info in infos)
    assert walker.restart_counts[0] + jumper.restart_counts[0] >= 1
    assert made[1].unanswered == []
    for name in (WALKER, JUMPER):
        assert received_pairs(made[1], name) == requested_pairs(made[1], name)
    lock.close()


# ---------------------------------------------------------------------- reset
def test_reset_is_shared_and_ends_the_other_views_episodes():
    env = walker_and_jumper(jumper=[ScriptedAgent(period=1)])
    lock = LockstepUnity(env, step_timeout=20)
    walker, jumper = lock.vec_env("Walker"), lock.vec_env("Jumper")
    walker.seed(1)
    jumper.seed(2)
    walker.reset()
    jumper.reset()
    assert env.reset_count == 1  # nobody stepped since the first reset
    run_threads(
        {
            "walker": stepper(lock, walker, WALK, 4, detach=False),
            "jumper": stepper(lock, jumper, JUMP, 4, detach=False),
        }
    )
    assert env.seeds == []  # a seed waits for the next real reset: re-seeding now would change the scene
    walker.seed(3)
    walker.reset()
    assert env.reset_count == 2 and env.seeds == [3]
    _, _, done, infos = run_threads({"jumper": lambda: jumper.step(constant_actions(jumper, JUMP))})["jumper"]
    # the jumper's agent vanished in the reset: its episode ended, interrupted, at its last observation
    assert done[0] and infos[0]["TimeLimit.truncated"] and infos[0]["terminal_observation"][3] == 4
    jumper.seed(4)
    jumper.reset()  # the jumper's catching up was no Unity step: still the same reset
    assert env.reset_count == 2
    lock.close()


# ---------------------------------------------------------------------- several instances, misuse
def test_views_span_every_instance():
    envs = [walker_and_jumper(), walker_and_jumper()]
    lock = LockstepUnity(envs, step_timeout=20)
    walker, jumper = lock.vec_env("Walker"), lock.vec_env("Jumper")
    assert (walker.num_envs, jumper.num_envs) == (4, 2)
    run_threads({"walker": stepper(lock, walker, WALK, 15), "jumper": stepper(lock, jumper, JUMP, 8)})
    for env in envs:
        assert env.unanswered == []
        assert received_pairs(env, WALKER) == requested_pairs(env, WALKER)
    lock.close()
    assert all(env.closed for env in envs)


def test_a_view_built_while_its_team_does_not_learn_says_so():
    lock = LockstepUnity(walker_and_jumper())
    lock.vec_env("Walker")
    lock.set_learning_team("Jumper", 1)
    with pytest.raises(UnityLockstepError, match="'Jumper\\?team=0' cannot own any agent now"):
        lock.vec_env("Jumper")
    lock.set_learning_team("Jumper", 0)
    assert lock.vec_env("Jumper").num_envs == 1  # the failed view left nothing behind
    lock.close()


def test_bad_view_requests_say_what_to_do():
    lock = LockstepUnity(walker_and_jumper())
    with pytest.raises(UnityConfigurationError, match="did you mean 'Walker"):
        lock.vec_env("walkr")
    with pytest.raises(UnityConfigurationError, match="set_answerer"):
        lock.vec_env("Walker", other_behaviors=lambda name, dec: None)
    with pytest.raises(UnityConfigurationError, match="re-openable"):
        lock.vec_env("Walker", restart_on_crash=True)
    lock.vec_env("Walker")
    with pytest.raises(UnityConfigurationError, match="already belong to the view 'Walker"):
        lock.vec_env(WALKER)
    lock.close()
    mixed = ScriptedEnv(
        {
            "P?team=0": ScriptedBehavior([ScriptedAgent()]),
            "P?team=1": ScriptedBehavior([ScriptedAgent()], vector_size=5),
        }
    )
    with pytest.raises(UnityConfigurationError, match="different specs"):
        LockstepUnity(mixed).vec_env("P")


def test_behavior_dir_keeps_names_readable_and_path_safe():
    assert behavior_dir("Striker?team=0") == "Striker_team=0"
    assert behavior_dir("3DBall") == "3DBall"


@pytest.mark.player
def test_views_step_a_scene_served_over_the_real_protocol_as_in_process(tmp_path):
    from multi_behavior_scenes import Duel
    from test_scenes_base import DUEL_FACTORY
    from test_scenes_player import close_and_check, open_player

    def run(env) -> tuple[list, list]:
        lock = LockstepUnity(env, step_timeout=60)
        hunter, prey = lock.vec_env("Hunter"), lock.vec_env("Prey", flatten_obs=True)
        hunts: list = []
        flights: list = []
        run_threads(
            {
                "hunter": stepper(lock, hunter, WALK, 25, record=hunts, detach=False),
                "prey": stepper(lock, prey, 1, 25, record=flights, detach=False),
            },
            timeout=120,
        )
        return [h[0] for h in hunts], [f[0] for f in flights]

    player, log = open_player(tmp_path, DUEL_FACTORY, seed=4)
    try:
        over_grpc = run(player)
    finally:
        close_and_check(player, log)
    in_process = run(Duel(seed=4))
    for got, expected in zip(over_grpc, in_process):
        np.testing.assert_allclose(np.stack(got), np.stack(expected), atol=1e-6)


def test_vanished_agents_end_at_their_last_observation_or_zeros():
    from unity_sb3.wrappers._lockstep_batches import interrupted_terminals

    spec = walker_and_jumper().behavior_specs[WALKER]
    obs = np.arange(8, dtype=np.float32).reshape(2, 4)
    dec = DecisionSteps(
        [obs], np.zeros(2, np.float32), np.array([7, 9]), None, np.array([3, 4]), np.zeros(2, np.float32)
    )
    ended = interrupted_terminals([9, 11], {9: (dec, 1), 7: (dec, 0)}, spec)
    np.testing.assert_array_equal(ended.obs[0], [[4, 5, 6, 7], [0, 0, 0, 0]])  # agent 11 never asked
    assert ended.interrupted.all() and not ended.reward.any()
    assert ended.group_id.tolist() == [4, 0] and ended.agent_id.tolist() == [9, 11]


def test_with_no_learning_team_one_view_plays_every_team():
    env = two_teams()
    lock = LockstepUnity(env)
    lock.set_learning_team("Player", None)  # as ML-Agents trains a behavior's teams without self-play
    view = lock.vec_env("Player")
    assert lock.learning_team("Player") is None and view.num_envs == 4
    for _ in range(20):
        view.step(constant_actions(view, WALK))
    for name in ("Player?team=0", "Player?team=1"):
        assert {float(r.continuous[0]) for rs in env.received[name].values() for r in rs} == {WALK}
    lock.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_three_views_with_jittered_threads_keep_every_invariant(seed):
    rng = np.random.default_rng(seed)
    scripts = {
        f"{name}?team=0": ScriptedBehavior(
            [
                ScriptedAgent(
                    period=int(rng.integers(1, 4)),
                    start=int(rng.integers(0, 2)),
                    episode_length=int(rng.integers(4, 12)),
                    respawn_delay=int(rng.integers(0, 3)),
                    new_id_each_episode=True,
                )
                for _ in range(3)
            ]
        )
        for name in ("Ant", "Bee", "Cow")
    }
    env = ScriptedEnv(scripts, strict=True)
    lock = LockstepUnity(env, step_timeout=20)
    views = {name: lock.vec_env(name, num_slots=3) for name in ("Ant", "Bee", "Cow")}
    values = {"Ant": 0.25, "Bee": 0.5, "Cow": 0.75}

    def jittery(name: str, steps: int):
        def job():
            local = np.random.default_rng(len(name))
            venv = views[name]
            for _ in range(steps):
                if local.random() < 0.3:
                    time.sleep(local.random() * 0.002)
                venv.step(constant_actions(venv, values[name]))
            lock.detach(venv)
            return steps

        return job

    results = run_threads({name: jittery(name, n) for name, n in (("Ant", 60), ("Bee", 40), ("Cow", 50))})
    assert results == {"Ant": 60, "Bee": 40, "Cow": 50}
    assert env.unanswered == []
    for name in scripts:
        assert received_pairs(env, name) == requested_pairs(env, name)
        got = {float(r.continuous[0]) for rs in env.received[name].values() for r in rs}
        assert got <= {values[name.partition("?")[0]], 0.0}  # its view's, or zeros once detached
    lock.close()
