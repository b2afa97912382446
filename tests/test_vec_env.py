"""UnityVecEnv: every rule of DESIGN 4.2 on the scripted env, the VecEnv contract, SB3 wrappers."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stable_baselines3.common.vec_env import VecFrameStack, VecMonitor, VecNormalize, VecTransposeImage

sys.path.insert(0, str(Path(__file__).resolve().parent))

from unity_sb3.scenes.scripted import DEFAULT_BEHAVIOR, ScriptedAgent, ScriptedBehavior, ScriptedEnv

from mlagents_envs.base_env import ActionSpec, ActionTuple  # isort: skip
from mlagents_envs.exception import UnityTimeOutException  # isort: skip

from players import faulty_factory
from ports import free_base_port

from unity_sb3.unity.errors import UnityConfigurationError, UnityObservationError, UnityProcessError
from unity_sb3.wrappers.gym_env import UnityGymEnv
from unity_sb3.wrappers.instances import UnityNoDecisionError
from unity_sb3.wrappers.vec_env import UnityVecEnv


def scripted(*args, **kwargs) -> ScriptedEnv:
    """A ScriptedEnv whose group ids come as lists, as from a real Unity build."""
    kwargs.setdefault("list_group_ids", True)
    return ScriptedEnv(*args, **kwargs)


# observation columns of the scripted env
K, EPISODE, STEP, T = 0, 1, 2, 3


def slot_actions(venv: UnityVecEnv, step: int) -> np.ndarray:
    """Distinct continuous actions per slot and step, so a test can see which agent got which."""
    n = venv.num_envs
    return ((np.arange(n)[:, None] + 1) / 10.0 + step / 1000.0 + np.zeros((n, 2))).astype(np.float32)


def make(agents, **kwargs) -> tuple[ScriptedEnv, UnityVecEnv]:
    env = scripted(agents, strict=True)
    return env, UnityVecEnv(env, **kwargs)


@pytest.fixture(autouse=True)
def _quiet_inactive_warning():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="UnityVecEnv: .* slots have no agent")
        yield


# ---------------------------------------------------------------------- basic rules
def test_all_agents_decide_every_step_and_get_their_slot_action():
    env, venv = make([ScriptedAgent(), ScriptedAgent(), ScriptedAgent()])
    obs = venv.reset()
    assert venv.num_envs == 3
    assert obs[:, K].tolist() == [0, 1, 2]
    for step in range(5):
        actions = slot_actions(venv, step)
        obs, reward, done, infos = venv.step(actions)
        assert obs[:, T].tolist() == [step + 1] * 3
        np.testing.assert_allclose(reward, 1.0)
        assert not done.any()
        assert all(info["active"] for info in infos)
        assert venv.active_mask.all()
        for k in range(3):
            np.testing.assert_allclose(env.actions_of(k)[-1].continuous, actions[k])
    assert env.unanswered == []
    venv.close()


def test_decision_period_sums_rewards_over_the_unity_steps_advanced():
    env, venv = make([ScriptedAgent(period=3, reward=0.5), ScriptedAgent(period=3, reward=2.0)])
    venv.reset()
    for step in range(4):
        _, reward, done, _ = venv.step(slot_actions(venv, step))
        assert env.t == 3 * (step + 1)  # the wrapper stepped Unity until the agents asked again
        np.testing.assert_allclose(reward, [1.5, 6.0])
        assert not done.any()
    assert [len(env.actions_of(k)) for k in range(2)] == [4, 4]
    assert env.unanswered == []


def test_terminal_and_decision_in_the_same_step():
    _env, venv = make([ScriptedAgent(episode_length=3), ScriptedAgent()])
    venv.reset()
    agent_before = venv.slot_agent_ids()[0]
    for step in range(2):
        _, _, done, _ = venv.step(slot_actions(venv, step))
        assert not done.any()
    obs, reward, done, infos = venv.step(slot_actions(venv, 2))
    assert done.tolist() == [True, False]
    assert infos[0]["TimeLimit.truncated"] is False
    terminal = infos[0]["terminal_observation"]
    assert terminal[[K, EPISODE, STEP]].tolist() == [0, 0, 3]
    # the returned observation is the next episode's first, from the same agent
    assert obs[0, [K, EPISODE, STEP]].tolist() == [0, 1, 0]
    assert infos[0]["active"] is True
    assert reward[0] == 1.0
    assert venv.slot_agent_ids()[0] == agent_before
    assert "terminal_observation" not in infos[1]


def test_interrupted_episode_is_a_truncation():
    _, venv = make([ScriptedAgent(episode_length=2, interrupted=True)])
    venv.reset()
    venv.step(slot_actions(venv, 0))
    _, _, done, infos = venv.step(slot_actions(venv, 1))
    assert done[0]
    assert infos[0]["TimeLimit.truncated"] is True


def test_agent_that_reappears_later_takes_its_slot_back():
    env, venv = make([ScriptedAgent(episode_length=2, respawn_delay=3), ScriptedAgent()])
    venv.reset()
    venv.step(slot_actions(venv, 0))
    obs, reward, done, infos = venv.step(slot_actions(venv, 1))  # t=2: terminal, nobody to replace it
    assert done[0] and not infos[0]["active"]
    terminal = infos[0]["terminal_observation"]
    np.testing.assert_array_equal(obs[0], terminal)  # placeholder: the slot's last observation
    received = len(env.actions_of(0))
    for step in range(2, 4):  # t=3, 4: the agent is away
        obs, reward, done, infos = venv.step(slot_actions(venv, step))
        assert not infos[0]["active"] and not venv.active_mask[0]
        assert reward[0] == 0.0 and not done[0]
        np.testing.assert_array_equal(obs[0], terminal)
    obs, reward, done, infos = venv.step(slot_actions(venv, 4))  # t=5: back
    assert infos[0]["active"] and not done[0]
    assert obs[0, [K, EPISODE, STEP]].tolist() == [0, 1, 0]
    assert len(env.actions_of(0)) == received  # the inactive slot's actions were dropped
    venv.step(slot_actions(venv, 5))
    np.testing.assert_allclose(env.actions_of(0)[-1].continuous, slot_actions(venv, 5)[0])
    assert env.unanswered == []


def test_slot_follows_an_agent_whose_id_changes_every_episode():
    env, venv = make([ScriptedAgent(episode_length=2, new_id_each_episode=True) for _ in range(2)])
    venv.reset()
    seen_ids = set()
    for step in range(6):
        obs, _, done, infos = venv.step(slot_actions(venv, step))
        seen_ids.update(venv.slot_agent_ids())
        assert obs[:, K].tolist() == [0, 1]
        assert all(info["active"] for info in infos)
        if step % 2 == 1:
            assert done.all()
            assert [info["terminal_observation"][K] for info in infos] == [0, 1]
    assert len(seen_ids) == 8  # 2 agents x 4 episodes, each with a new id
    assert venv.slot_agent_ids() == env.agent_ids()
    assert env.unanswered == []


def test_agent_that_dies_without_replacement_leaves_an_inactive_slot_and_one_warning():
    env, venv = make([ScriptedAgent(episode_length=2, episodes=1), ScriptedAgent()])
    venv.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        venv.step(slot_actions(venv, 0))
        _, _, done, infos = venv.step(slot_actions(venv, 1))
        assert done[0] and not infos[0]["active"]
        received = len(env.actions_of(0))
        for step in range(2, 6):
            _obs, reward, done, infos = venv.step(slot_actions(venv, step))
            assert infos[0]["active"] is False
            assert reward[0] == 0.0 and not done[0]
            assert infos[1]["active"] is True and reward[1] == 1.0
    assert len(env.actions_of(0)) == received
    inactive_warnings = [w for w in caught if "slots have no agent" in str(w.message)]
    assert len(inactive_warnings) == 1
    assert venv.active_mask.tolist() == [False, True]


def test_no_warning_when_algorithm_handles_inactive_steps():
    _, venv = make([ScriptedAgent(episode_length=1, episodes=1), ScriptedAgent()])
    venv.warn_inactive = False
    venv.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(3):
            venv.step(slot_actions(venv, step))


def test_out_of_phase_periods_alternate_active_slots():
    env, venv = make([ScriptedAgent(period=2, start=0), ScriptedAgent(period=2, start=1)], num_slots=2)
    obs = venv.reset()
    # only agent 0 asked at reset; agent 1 takes the free slot when it first asks
    assert venv.active_mask.tolist() == [True, False]
    for step in range(6):
        obs, _reward, _, infos = venv.step(slot_actions(venv, step))
        active = [info["active"] for info in infos]
        assert sum(active) == 1
        assert obs[active.index(True), T] == step + 1
    assert venv.slot_agent_ids() == env.agent_ids()
    # each agent got exactly one action per request
    for k in range(2):
        asked = sum(k_ids.tolist().count(env.agent_ids()[k]) for _, k_ids in env.requests[DEFAULT_BEHAVIOR])
        assert len(env.actions_of(k)) == asked
    assert env.unanswered == []


def test_agents_beyond_the_slots_get_a_zero_action():
    env, venv = make([ScriptedAgent(), ScriptedAgent(), ScriptedAgent()], num_slots=2)
    venv.reset()
    for step in range(3):
        venv.step(slot_actions(venv, step))
    assert len(env.actions_of(2)) == 3
    assert all(np.all(a.continuous == 0) for a in env.actions_of(2))
    assert all(np.all(a.continuous != 0) for a in env.actions_of(0))


def test_late_agents_fill_reserved_slots():
    _env, venv = make([ScriptedAgent(), ScriptedAgent(start=2)], num_slots=2)
    venv.reset()
    assert venv.active_mask.tolist() == [True, False]
    venv.step(slot_actions(venv, 0))
    obs, _, _, _ = venv.step(slot_actions(venv, 1))
    assert venv.active_mask.tolist() == [True, True]
    assert obs[1, K] == 1


def test_wrapper_steps_again_until_unity_asks_and_errors_when_it_never_does():
    _env, venv = make([ScriptedAgent(episode_length=2, episodes=1)], max_idle_steps=7)
    venv.reset()
    venv.step(slot_actions(venv, 0))
    _, _, done, _ = venv.step(slot_actions(venv, 1))
    assert done[0]
    with pytest.raises(UnityNoDecisionError, match=r"worker 0.*7 Unity steps"):
        venv.step(slot_actions(venv, 2))


def test_idle_steps_answer_unassigned_agents():
    # the slot's agent decides every 4th step; an unassigned agent decides every step meanwhile
    env, venv = make([ScriptedAgent(period=4), ScriptedAgent(start=1)], num_slots=1)
    venv.reset()
    venv.step(slot_actions(venv, 0))
    assert env.t == 4
    assert len(env.actions_of(1)) == 3 and env.unanswered == []


# ---------------------------------------------------------------------- protocol property
@st.composite
def agent_scripts(draw):
    n = draw(st.integers(1, 4))
    agents = []
    for _ in range(n):
        agents.append(
            ScriptedAgent(
                period=draw(st.integers(1, 3)),
                start=draw(st.integers(0, 2)),
                episode_length=draw(st.one_of(st.none(), st.integers(1, 6))),
                episodes=draw(st.one_of(st.none(), st.integers(1, 3))),
                respawn_delay=draw(st.integers(0, 3)),
                interrupted=draw(st.booleans()),
                new_id_each_episode=draw(st.booleans()),
            )
        )
    agents[0].start = 0  # someone asks at reset
    return agents, draw(st.one_of(st.none(), st.integers(1, n + 1)))


@settings(max_examples=40, deadline=None)
@given(agent_scripts())
def test_never_an_unrequested_action_never_an_unanswered_request(case):
    agents, num_slots = case
    env = scripted(agents, strict=True)
    venv = UnityVecEnv(env, num_slots=num_slots, max_idle_steps=50)
    obs = venv.reset()
    expected: dict[tuple[int, int], np.ndarray] = {}  # (agent index, request step) -> action sent
    for step in range(12):
        actions = slot_actions(venv, step)
        for i in np.flatnonzero(venv.active_mask):
            expected[(int(obs[i, K]), int(obs[i, T]))] = actions[i]
        try:
            obs, reward, done, infos = venv.step(actions)
        except UnityNoDecisionError:
            break
        for i, info in enumerate(infos):
            if not info["active"] and not done[i]:
                assert reward[i] == 0.0
    sent = 0
    for k in range(len(agents)):
        for received in env.actions_of(k):
            want = expected.pop((k, received.step), None)
            if want is None:  # an agent without a slot: zero action
                assert np.all(received.continuous == 0)
            else:
                np.testing.assert_allclose(received.continuous, want)
                sent += 1
    assert expected == {}  # every slot action reached its agent
    assert env.unanswered == []
    requested = sum(len(ids) for _, ids in env.requests[DEFAULT_BEHAVIOR])
    assert requested == sum(len(env.actions_of(k)) for k in range(len(agents)))


# ---------------------------------------------------------------------- groups, masks, spaces
def test_group_id_and_group_reward_in_infos():
    agents = [ScriptedAgent(period=2, group_id=7, group_reward=0.25), ScriptedAgent(period=2)]
    _, venv = make(agents)
    venv.reset()
    _, reward, _, infos = venv.step(slot_actions(venv, 0))
    assert [info["group_id"] for info in infos] == [7, 0]
    assert [info["group_reward"] for info in infos] == [0.5, 0.0]
    np.testing.assert_allclose(reward, [2.0, 2.0])
    _, venv = make(agents, add_group_reward=True)
    venv.reset()
    _, reward, _, _ = venv.step(slot_actions(venv, 0))
    np.testing.assert_allclose(reward, [2.5, 2.0])


def _mask(k: int, t: int) -> list[np.ndarray]:
    # True = NOT allowed (ML-Agents): agent k may not pick action k % 3 in branch 0
    first = np.zeros(3, dtype=bool)
    first[k % 3] = True
    return [first, np.array([False, t % 2 == 1])]


def test_action_masks_per_slot_in_sb3_contrib_format():
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported

    behavior = ScriptedBehavior(
        [ScriptedAgent(), ScriptedAgent(), ScriptedAgent(episode_length=1, episodes=1)],
        action_spec=ActionSpec(0, (3, 2)),
        mask_fn=_mask,
    )
    env = scripted(behavior, strict=True)
    venv = UnityVecEnv(env)
    assert isinstance(venv.action_space, spaces.MultiDiscrete)
    venv.reset()
    masks = venv.action_masks()
    assert masks.shape == (3, 5) and masks.dtype == bool
    assert masks[:, :3].tolist() == [[False, True, True], [True, False, True], [True, True, False]]
    assert masks[:, 3:].all()
    assert is_masking_supported(venv)
    np.testing.assert_array_equal(get_action_masks(venv), masks)
    assert len(venv.env_method("action_masks")) == 3
    np.testing.assert_array_equal(venv.env_method("action_masks", indices=[1])[0], masks[1])
    venv.step(np.array([[1, 0], [0, 1], [0, 0]]))
    masks = venv.action_masks()
    assert masks[:2, 3:].tolist() == [[True, False], [True, False]]  # t=1 forbids action 1 of branch 1
    assert masks[2].all()  # inactive slot (its agent died): everything allowed, the action is dropped
    np.testing.assert_array_equal(env.actions_of(0)[0].discrete, [1, 0])


def test_discrete_single_branch_and_hybrid_actions():
    env = scripted(ScriptedBehavior([ScriptedAgent()] * 2, action_spec=ActionSpec(0, (4,))), strict=True)
    venv = UnityVecEnv(env)
    assert venv.action_space == spaces.Discrete(4)
    venv.reset()
    venv.step(np.array([3, 1]))
    assert [env.actions_of(k)[0].discrete.tolist() for k in range(2)] == [[3], [1]]

    env = scripted(ScriptedBehavior([ScriptedAgent()], action_spec=ActionSpec(1, (2,))), strict=True)
    venv = UnityVecEnv(env)
    assert isinstance(venv.action_space, spaces.Box) and venv.action_space.shape == (2,)
    venv.reset()
    venv.step(np.array([[0.5, 0.9]], dtype=np.float32))
    assert env.actions_of(0)[0].discrete.tolist() == [1]
    np.testing.assert_allclose(env.actions_of(0)[0].continuous, [0.5])


def test_bad_actions_get_a_clear_error():
    env = scripted(ScriptedBehavior([ScriptedAgent()], action_spec=ActionSpec(0, (4,))))
    venv = UnityVecEnv(env)
    venv.reset()
    with pytest.raises(ValueError, match="out of range"):
        venv.step(np.array([4]))


def test_visual_observations_dict_space_and_render():
    behavior = ScriptedBehavior([ScriptedAgent()] * 3, visual_shape=(8, 6, 3))
    venv = UnityVecEnv(scripted(behavior))
    assert isinstance(venv.observation_space, spaces.Dict)
    assert venv.observation_space["camera"].shape == (3, 8, 6)
    assert venv.observation_space["camera"].dtype == np.uint8
    obs = venv.reset()
    assert obs["camera"].shape == (3, 3, 8, 6) and obs["vector"].shape == (3, 4)
    assert venv.render_mode == "rgb_array"
    image = venv.render(mode="rgb_array")
    assert image.shape == (2 * 8, 2 * 6, 3) and image.dtype == np.uint8
    assert image[0, 0, 1] == round(255 * 0.01)  # slot 0 (agent 0) sits in the top-left tile

    flat = UnityVecEnv(scripted([ScriptedAgent()]))
    assert flat.render_mode is None
    with pytest.warns(UserWarning):
        assert flat.render() is None


@pytest.mark.parametrize("visual", ["uint8", "float", "uint8_hwc", "float_hwc"])
def test_render_tiles_rgb_images_in_every_visual_mode(visual):
    behavior = ScriptedBehavior([ScriptedAgent()] * 5, visual_shape=(4, 3, 1))
    venv = UnityVecEnv(scripted(behavior), visual=visual)
    venv.reset()
    image = venv.render()
    assert image.shape == (3 * 4, 2 * 3, 3) and image.dtype == np.uint8  # 5 slots on a 3 x 2 grid
    assert np.all(image[:4, :3] == round(255 * 0.01))  # grey from one channel
    assert np.all(image[8:, 3:] == 0)  # the unused sixth tile


def test_flatten_obs_option():
    behavior = ScriptedBehavior([ScriptedAgent()], visual_shape=(4, 4, 1))
    with pytest.raises(ValueError, match="flatten=True needs every observation to be 1-D"):
        UnityVecEnv(scripted(behavior), flatten_obs=True)


# ---------------------------------------------------------------------- behaviors
def _two_behaviors(**kw) -> ScriptedEnv:
    return scripted(
        {
            "A?team=0": ScriptedBehavior([ScriptedAgent(), ScriptedAgent()]),
            "B?team=1": ScriptedBehavior([ScriptedAgent()], action_spec=ActionSpec(0, (3,))),
        },
        strict=True,
        **kw,
    )


def test_behavior_name_must_be_chosen_when_there_are_several():
    with pytest.raises(UnityConfigurationError, match=r"several behaviors.*A\?team=0.*B\?team=1"):
        UnityVecEnv(_two_behaviors())
    with pytest.raises(UnityConfigurationError, match="not found"):
        UnityVecEnv(_two_behaviors(), "C")


def test_other_behaviors_answered_with_zeros_or_the_callback():
    env = _two_behaviors()
    venv = UnityVecEnv(env, "A?team=0")
    assert venv.num_envs == 2
    venv.reset()
    venv.step(slot_actions(venv, 0))
    assert env.actions_of(0, "B?team=1")[0].discrete.tolist() == [0]
    assert env.unanswered == []

    calls = []

    def answer(name, dec):
        calls.append(name)
        return ActionTuple(discrete=np.full((len(dec), 1), 2, dtype=np.int32))

    env = _two_behaviors()
    venv = UnityVecEnv(env, "A?team=0", other_behaviors=answer)
    venv.reset()
    venv.step(slot_actions(venv, 0))
    assert calls and set(calls) == {"B?team=1"}
    assert env.actions_of(0, "B?team=1")[-1].discrete.tolist() == [2]


# ---------------------------------------------------------------------- several instances, crashes
def test_several_instances_are_slots_side_by_side():
    envs = [scripted([ScriptedAgent(), ScriptedAgent()], strict=True) for _ in range(2)]
    venv = UnityVecEnv([lambda e=e: e for e in envs])
    assert venv.num_envs == 4
    assert venv.worker_ids == [0, 0, 1, 1]
    assert venv.get_attr("worker_id") == [0, 0, 1, 1]
    venv.reset()
    actions = slot_actions(venv, 0)
    venv.step(actions)
    for w, env in enumerate(envs):
        assert env.t == 1
        for k in range(2):
            np.testing.assert_allclose(env.actions_of(k)[0].continuous, actions[2 * w + k])
    venv.close()
    assert all(env.closed for env in envs)


def test_num_slots_per_instance_must_fit():
    envs = [scripted([ScriptedAgent()]) for _ in range(2)]
    with pytest.raises(UnityConfigurationError, match="multiple of the number of instances"):
        UnityVecEnv(envs, num_slots=3)
    venv = UnityVecEnv(envs, num_slots=[1, 2])
    assert venv.num_envs == 3


def test_strings_are_opened_with_open_unity_and_their_worker_id(monkeypatch):
    calls = []

    def fake_open_unity(target, **kwargs):
        calls.append((target, kwargs))
        return scripted([ScriptedAgent()])

    monkeypatch.setattr("unity_sb3.open.open_unity", fake_open_unity)
    venv = UnityVecEnv(["Ball3D", "Ball3D"], open_kwargs={"timeout_wait": 5})
    assert venv.num_envs == 2
    assert calls == [
        ("Ball3D", {"worker_id": 0, "timeout_wait": 5}),
        ("Ball3D", {"worker_id": 1, "timeout_wait": 5}),
    ]


@pytest.mark.parametrize(
    ("crash_in", "error"),
    [("step", None), ("get_steps", None), ("step", UnityTimeOutException)],
)
def test_crashed_instance_is_reported_by_worker_id(crash_in, error):
    kw = {"crash_error": error} if error else {}
    envs = [
        scripted([ScriptedAgent()]),
        scripted([ScriptedAgent()], crash_at=3, crash_in=crash_in, **kw),
    ]
    venv = UnityVecEnv(envs)
    venv.reset()
    venv.step(slot_actions(venv, 0))
    venv.step(slot_actions(venv, 1))
    with pytest.raises(UnityProcessError, match=r"Unity worker 1:.*restart_on_crash") as info:
        venv.step(slot_actions(venv, 2))
    assert info.value.worker_id == 1
    venv.close()


def test_restart_needs_a_string_or_factory():
    with pytest.raises(UnityConfigurationError, match="restart_on_crash=True needs"):
        UnityVecEnv(scripted([ScriptedAgent()]), restart_on_crash=True)


def test_crashed_instance_is_restarted_when_asked():
    made: list[ScriptedEnv] = []

    def factory() -> ScriptedEnv:
        env = scripted([ScriptedAgent(), ScriptedAgent()], crash_at=3 if not made else None)
        made.append(env)
        return env

    healthy = scripted([ScriptedAgent()])
    venv = UnityVecEnv([lambda: healthy, factory], restart_on_crash=True, restart_backoff=0.0)
    venv.reset()
    venv.step(slot_actions(venv, 0))
    last, *_ = venv.step(slot_actions(venv, 1))
    with pytest.warns(UserWarning, match="worker 1 crashed"):
        obs, _reward, done, infos = venv.step(slot_actions(venv, 2))
    assert len(made) == 2 and made[0].closed
    assert done.tolist() == [False, True, True]
    assert [info.get("restarted", False) for info in infos] == [False, True, True]
    assert infos[1]["TimeLimit.truncated"] is True
    np.testing.assert_array_equal(infos[1]["terminal_observation"], last[1])
    assert obs[1:, T].tolist() == [0, 0]  # the restarted instance's first observations
    assert healthy.t == 3
    _, _, done, _ = venv.step(slot_actions(venv, 3))
    assert not done.any()


def test_restarts_are_limited():
    made = []

    def factory() -> ScriptedEnv:
        made.append(1)
        return scripted([ScriptedAgent()], crash_at=2)

    venv = UnityVecEnv(factory, restart_on_crash=True, max_restarts=2, restart_backoff=0.0)
    venv.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UnityProcessError, match=r"worker 0.*after 2 restarts"):
            for step in range(10):
                venv.step(slot_actions(venv, step))
    assert len(made) == 3


# ---------------------------------------------------------------------- VecEnv contract
def test_seed_is_passed_to_reseed_at_the_next_reset():
    envs = [scripted([ScriptedAgent()]) for _ in range(2)]
    venv = UnityVecEnv(envs)
    assert venv.seed(10) == [10, 11]
    assert envs[0].seeds == []
    venv.reset()
    assert envs[0].seeds == [10] and envs[1].seeds == [11]
    venv.reset()
    assert envs[0].seeds == [10]


def test_reset_returns_obs_and_reset_infos_and_resets_unity():
    env, venv = make([ScriptedAgent(group_id=3), ScriptedAgent()])
    assert env.reset_count == 1
    obs = venv.reset()  # the construction's reset is reused
    assert env.reset_count == 1
    assert obs.shape == (2, 4)
    assert venv.reset_infos == [
        {"active": True, "group_id": 3, "group_reward": 0.0},
        {"active": True, "group_id": 0, "group_reward": 0.0},
    ]
    venv.step(slot_actions(venv, 0))
    obs = venv.reset()
    assert env.reset_count == 2 and obs[:, T].tolist() == [0, 0]


def test_get_set_attr_env_method_and_env_is_wrapped():
    env = scripted([ScriptedAgent(), ScriptedAgent()])
    venv = UnityVecEnv(env)
    channels = venv.get_attr("unity_sb3_channels")
    assert channels == [env.unity_sb3_channels] * 2
    assert venv.get_attr("agent_id") == venv.slot_agent_ids()
    assert venv.get_attr("behavior_name", indices=0) == [DEFAULT_BEHAVIOR]
    with pytest.raises(AttributeError, match="no_such_thing"):
        venv.get_attr("no_such_thing")
    assert not venv.has_attr("no_such_thing")
    venv.set_attr("crash_at", 99, indices=[0])
    assert env.crash_at == 99
    venv.set_attr("note", "x", indices=[1])
    assert venv.get_attr("note", indices=[1]) == ["x"]
    venv.env_method("reseed", 5, indices=[0])
    assert env.seeds == [5]
    from stable_baselines3.common.monitor import Monitor

    assert venv.env_is_wrapped(Monitor) == [False, False]


def test_close_is_idempotent_and_blocks_further_steps():
    env, venv = make([ScriptedAgent()])
    venv.close()
    venv.close()
    assert env.closed
    with pytest.raises(RuntimeError, match="closed"):
        venv.step(slot_actions(venv, 0))


def test_step_before_step_async_is_an_error():
    _, venv = make([ScriptedAgent()])
    with pytest.raises(RuntimeError, match="step_async"):
        venv.step_wait()


# ---------------------------------------------------------------------- SB3 wrappers
def test_works_under_vec_monitor_and_vec_normalize():
    _, venv = make([ScriptedAgent(episode_length=3), ScriptedAgent(episode_length=3)])
    wrapped = VecNormalize(VecMonitor(venv), norm_obs=True, norm_reward=True)
    obs = wrapped.reset()
    assert obs.shape == (2, 4)
    episodes = []
    for step in range(6):
        obs, _reward, _done, infos = wrapped.step(slot_actions(venv, step))
        episodes += [info["episode"] for info in infos if "episode" in info]
        assert np.all(np.isfinite(obs))
    assert len(episodes) == 4
    assert all(ep["l"] == 3 and ep["r"] == 3.0 for ep in episodes)


def test_works_under_vec_frame_stack():
    _, venv = make([ScriptedAgent(episode_length=2), ScriptedAgent()])
    stacked = VecFrameStack(venv, n_stack=3)
    obs = stacked.reset()
    assert obs.shape == (2, 12)
    obs, _, done, infos = stacked.step(slot_actions(venv, 0))
    obs, _, done, infos = stacked.step(slot_actions(venv, 1))
    assert done[0]
    assert infos[0]["terminal_observation"].shape == (12,)
    assert obs[0, -4 + T] == 2  # new episode's first frame is last; earlier frames zeroed
    assert np.all(obs[0, :8] == 0)


def test_works_under_vec_transpose_image_with_channel_last_images():
    behavior = ScriptedBehavior([ScriptedAgent(), ScriptedAgent()], visual_shape=(8, 6, 3))
    hwc = UnityVecEnv(scripted(behavior), visual="uint8_hwc")
    assert hwc.observation_space["camera"].shape == (8, 6, 3)
    transposed = VecTransposeImage(hwc)
    chw = UnityVecEnv(scripted(behavior))
    assert transposed.observation_space["camera"] == chw.observation_space["camera"]
    a, b = transposed.reset(), chw.reset()
    np.testing.assert_array_equal(a["camera"], b["camera"])
    a, *_ = transposed.step(slot_actions(hwc, 0))
    b, *_ = chw.step(slot_actions(chw, 0))
    np.testing.assert_array_equal(a["camera"], b["camera"])


# ---------------------------------------------------------------------- learning through UnityVecEnv
def _mean_step_reward(venv: UnityVecEnv, policy, steps: int) -> float:
    obs = venv.reset()
    total = 0.0
    for _ in range(steps):
        obs, reward, _, _ = venv.step(policy(obs))
        total += float(reward.mean())
    return total / steps


def _random_policy(venv: UnityVecEnv, seed: int = 0):
    rng = np.random.default_rng(seed)
    return lambda obs: rng.uniform(-1, 1, (venv.num_envs, *venv.action_space.shape)).astype(np.float32)


def test_ppo_learns_ball3d():
    from stable_baselines3 import PPO

    from unity_sb3.scenes import make_scene

    venv = UnityVecEnv(make_scene("Ball3D", seed=0))
    assert venv.num_envs == 12
    random_reward = _mean_step_reward(venv, _random_policy(venv), 200)
    model = PPO("MlpPolicy", VecMonitor(venv), n_steps=256, batch_size=512, n_epochs=5, seed=0)
    model.learn(12 * 256 * 5)
    trained = _mean_step_reward(venv, lambda obs: model.predict(obs, deterministic=True)[0], 200)
    # +0.1 per step while the ball stays up, -1 when it falls: random drops it every few decisions
    assert trained > random_reward + 0.02, (trained, random_reward)
    venv.close()


@pytest.mark.slow
def test_ppo_solves_ball3d():
    from stable_baselines3 import PPO

    from unity_sb3.scenes import make_scene

    # normalized observations, as ML-Agents' 3DBall config (without them PPO needs ~150k steps)
    venv = VecNormalize(VecMonitor(UnityVecEnv(make_scene("Ball3D", seed=1))), norm_reward=False)
    model = PPO("MlpPolicy", venv, n_steps=256, batch_size=512, n_epochs=5, seed=1)
    model.learn(12 * 256 * 20)
    venv.training = False
    obs = venv.reset()
    falls = 0
    for _ in range(1000):
        obs, _, done, infos = venv.step(model.predict(obs, deterministic=True)[0])
        falls += sum(1 for d, info in zip(done, infos) if d and not info["TimeLimit.truncated"])
    assert falls == 0  # 12 balls balanced for 1000 decisions each


@pytest.mark.slow
def test_sac_learns_ball3d():
    from stable_baselines3 import SAC

    from unity_sb3.scenes import make_scene

    venv = UnityVecEnv(make_scene("Ball3D", seed=0))
    random_reward = _mean_step_reward(venv, _random_policy(venv), 200)
    model = SAC(
        "MlpPolicy",
        venv,
        learning_starts=1000,
        batch_size=256,
        gradient_steps=2,
        buffer_size=100_000,
        seed=0,
        policy_kwargs={"net_arch": [64, 64]},
    )
    model.learn(40_000)
    trained = _mean_step_reward(venv, lambda obs: model.predict(obs, deterministic=True)[0], 200)
    assert trained > random_reward + 0.02, (trained, random_reward)


def _gridworld(**params) -> UnityVecEnv:
    from unity_sb3.scenes import make_scene

    # 36 px: the smallest image SB3's NatureCNN accepts
    return UnityVecEnv(make_scene("GridWorld", seed=0, image_size=36, **params))


def test_maskable_ppo_trains_on_gridworld_and_never_sends_a_masked_action():
    from sb3_contrib import MaskablePPO

    venv = _gridworld()
    scene = venv.unity_envs[0]
    behavior = venv.behavior_name
    original = scene.set_actions
    checked = []

    def set_actions(name, action):
        if name == behavior:
            dec, _ = scene.get_steps(name)
            allowed = venv.spaces.action_masks(dec.action_mask, len(dec))
            chosen = action.discrete[:, 0]
            assert allowed[np.arange(len(dec)), chosen].all(), "a masked action reached Unity"
            checked.append(int((~allowed).sum()))
        original(name, action)

    scene.set_actions = set_actions
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=32, batch_size=144, n_epochs=1, seed=0)
    model.learn(9 * 32 * 2)
    assert len(checked) >= 64 and sum(checked) > 0  # masks were in force and always respected


@pytest.mark.slow
def test_maskable_ppo_learns_gridworld():
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class PooledImage(BaseFeaturesExtractor):
        """Average-pool the top-down image to about one value per cell: learns in minutes, unlike a CNN."""

        def __init__(self, space: spaces.Dict, pool: int = 4) -> None:
            image = space["CameraSensor"].shape
            size = image[0] * (image[1] // pool) * (image[2] // pool) + space["GoalSensor"].shape[0]
            super().__init__(space, 128)
            self.pool = nn.AvgPool2d(pool)
            self.net = nn.Sequential(nn.Linear(size, 128), nn.ReLU())

        def forward(self, obs: dict) -> torch.Tensor:
            pooled = self.pool(obs["CameraSensor"].float()).flatten(1)
            return self.net(torch.cat([pooled, obs["GoalSensor"]], dim=1))

    venv = _gridworld(grid_size=3)
    rng = np.random.default_rng(0)

    def random_allowed(obs):
        return np.array([rng.choice(np.flatnonzero(row)) for row in venv.action_masks()])

    random_reward = _mean_step_reward(venv, random_allowed, 400)
    model = MaskablePPO(
        "MultiInputPolicy",
        venv,
        n_steps=64,
        batch_size=192,
        n_epochs=3,
        gamma=0.9,
        learning_rate=1e-3,
        ent_coef=0.01,
        seed=0,
        policy_kwargs={"features_extractor_class": PooledImage, "net_arch": [64]},
    )
    model.learn(100_000)
    trained = _mean_step_reward(
        venv, lambda obs: model.predict(obs, deterministic=False, action_masks=venv.action_masks())[0], 400
    )
    # -0.01 per step, +1 at the goal the signal names, -1 at the other one
    assert trained > random_reward + 0.01, (trained, random_reward)


def test_recurrent_ppo_runs_with_slots_bound_to_agents():
    from sb3_contrib import RecurrentPPO

    from unity_sb3.scenes import make_scene

    venv = UnityVecEnv(make_scene("Ball3D", seed=0, num_agents=4))
    bindings: list[list[int | None]] = []

    class Track(VecMonitor):
        def step_wait(self):
            before = venv.slot_agent_ids()
            result = super().step_wait()
            after = venv.slot_agent_ids()
            # a slot changes agent only when its episode ended (so LSTM states do not mix agents)
            for i, done in enumerate(result[2]):
                if not done:
                    assert before[i] == after[i]
            bindings.append(after)
            return result

    model = RecurrentPPO("MlpLstmPolicy", Track(venv), n_steps=32, batch_size=64, n_epochs=1, seed=0)
    model.learn(4 * 32 * 3)
    assert model.num_timesteps >= 4 * 32 * 3 and len(bindings) >= 96


# ---------------------------------------------------------------------- through the stand-in player (gRPC)


@pytest.mark.player
def test_two_players_in_parallel_and_a_killed_one_is_restarted(tmp_path):
    kwargs = {
        "transport": "player",
        "base_port": free_base_port(4),
        "find_free_port": True,
        "timeout_wait": 30,
        "num_agents": 3,
        "log_folder": str(tmp_path),
    }
    venv = UnityVecEnv(["Ball3D", "Ball3D"], open_kwargs=kwargs, restart_on_crash=True, restart_backoff=0.0)
    try:
        assert venv.num_envs == 6 and venv.worker_ids == [0, 0, 0, 1, 1, 1]
        assert venv.get_attr("unity_sb3_channels")[0] is venv.unity_envs[0].unity_sb3_channels
        venv.reset()
        for step in range(5):
            _, _reward, _, infos = venv.step(slot_actions(venv, step))
            assert all(info["active"] for info in infos)
        victim = venv.unity_envs[1]
        victim.process.kill()
        victim.process.wait(timeout=30)
        with pytest.warns(UserWarning, match="worker 1 crashed"):
            _, _, done, infos = venv.step(slot_actions(venv, 5))
        assert done[3:].all() and all(info.get("restarted") for info in infos[3:])
        assert venv.unity_envs[1] is not victim
        venv.step(slot_actions(venv, 6))
    finally:
        venv.close()
    assert all(env.process is None or env.process.poll() is not None for env in venv.unity_envs)


@pytest.mark.player
def test_killed_player_is_reported_by_worker_id(tmp_path):
    kwargs = {
        "transport": "player",
        "base_port": free_base_port(4),
        "find_free_port": True,
        "timeout_wait": 30,
    }
    venv = UnityVecEnv("Ball3D", open_kwargs={**kwargs, "num_agents": 2, "log_folder": str(tmp_path)})
    try:
        venv.reset()
        venv.unity_envs[0].process.kill()
        venv.unity_envs[0].process.wait(timeout=30)
        with pytest.raises(UnityProcessError, match="Unity worker 0") as info:
            venv.step(slot_actions(venv, 0))
        assert info.value.worker_id == 0
    finally:
        venv.close()


# ---------------------------------------------------------------------- bad actions
NAN = float("nan")


def continuous_vec_env() -> UnityVecEnv:
    return UnityVecEnv("Ball3D", open_kwargs={"num_agents": 3})  # Box(-1, 1, (2,)), 3 slots


def hybrid_vec_env() -> tuple[ScriptedEnv, UnityVecEnv]:
    env = ScriptedEnv(ScriptedBehavior([ScriptedAgent(), ScriptedAgent()], action_spec=ActionSpec(1, (3,))))
    return env, UnityVecEnv(env)  # hybrid as Box(-1, 1, (1 + 1,))


BAD_CONTINUOUS = [
    (np.zeros((3, 3), np.float32), r"shape \(3, 3\), expected \(3, 2\)"),
    (np.zeros((4, 2), np.float32), r"shape \(4, 2\), expected \(3, 2\)"),
    (np.zeros(5, np.float32), r"shape \(5,\), expected \(3, 2\)"),
    (np.full((3, 2), NAN, np.float32), "NaN or infinite"),
    (np.full((3, 2), np.inf), "NaN or infinite"),
    (np.array([["a", "b"]] * 3), "continuous actions must be numbers"),
    ({"continuous": np.zeros((3, 2))}, "continuous actions must be numbers, got dict"),
    (None, "actions is None"),
]


@pytest.mark.parametrize(("actions", "match"), BAD_CONTINUOUS, ids=[m for _, m in BAD_CONTINUOUS])
def test_bad_continuous_actions_into_vec_env(actions, match):
    venv = continuous_vec_env()
    venv.reset()
    with pytest.raises(ValueError, match=match):
        venv.step(actions)
    venv.step(np.zeros((3, 2), np.float32))  # the env is still usable afterwards
    venv.close()


def test_out_of_range_continuous_actions_are_clipped_like_ml_agents():
    env = ScriptedEnv([ScriptedAgent()])
    venv = UnityVecEnv(env)
    venv.reset()
    venv.step(np.array([[5.0, -7.5]], np.float32))
    np.testing.assert_array_equal(env.actions_of(0)[0].continuous, [1.0, -1.0])


@pytest.mark.parametrize(
    ("actions", "match"),
    [
        (np.array([[0.0, NAN], [0.0, 0.0]], np.float32), "hybrid actions contain NaN"),
        (np.array([[0.0, np.inf], [0.0, 0.0]], np.float32), "hybrid actions contain NaN"),
        (np.array([[0.0], [0.0]], np.float32), r"hybrid actions have shape \(2, 1\), expected \(2, 2\)"),
        (np.array([["x", "y"], ["z", "w"]]), "hybrid actions must be numbers"),
    ],
)
def test_bad_hybrid_actions(actions, match):
    env, venv = hybrid_vec_env()
    venv.reset()
    with pytest.raises(ValueError, match=match):
        venv.step(actions)
    assert not any(env.actions_of(k) for k in range(2)), "nothing reached Unity"


@pytest.mark.parametrize(
    ("actions", "match"),
    [
        (np.full(9, 1.5), "whole numbers"),
        (np.full(9, NAN), "whole numbers"),
        (np.full(9, -1), "-1 for agent 0 is out of range for branch 0 .size 5.; valid actions are 0..4"),
        (np.full(9, 2**40), "out of range"),
        (np.array(["up"] * 9), "must be integers, got dtype <U2"),
        (np.zeros((9, 2), np.int64), r"shape \(9, 2\), expected \(9, 1\)"),
    ],
)
def test_bad_discrete_actions_into_vec_env(actions, match):
    venv = UnityVecEnv("GridWorld")  # Discrete(5), 9 slots
    venv.reset()
    with pytest.raises(ValueError, match=match):
        venv.step(actions)
    venv.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_garbage_actions_raise_value_error_or_reach_unity_valid(data):
    env = ScriptedEnv(ScriptedBehavior([ScriptedAgent(), ScriptedAgent()], action_spec=ActionSpec(0, (3, 2))))
    venv = UnityVecEnv(env)
    venv.reset()
    shape = data.draw(st.sampled_from([(2, 2), (2,), (4,), (2, 3), (1, 2), (2, 2, 1)]))
    values = data.draw(
        st.lists(
            st.one_of(
                st.integers(-3, 5),
                st.floats(allow_nan=True, allow_infinity=True),
                st.sampled_from([0.0, 1.0]),
            ),
            min_size=int(np.prod(shape)),
            max_size=int(np.prod(shape)),
        )
    )
    actions = np.array(values, dtype=object if any(isinstance(v, float) for v in values) else np.int64)
    actions = actions.astype(np.float64 if actions.dtype == object else np.int64).reshape(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            venv.step(actions)
        except ValueError:
            assert not env.actions_of(0), "a refused action must not reach Unity"
            return
    for k in range(2):
        sent = env.actions_of(k)[0].discrete
        assert 0 <= sent[0] < 3 and 0 <= sent[1] < 2


# ---------------------------------------------------------------------- NaN / inf from Unity
@pytest.mark.player
@pytest.mark.parametrize(("mode", "word"), [("nan", "NaN"), ("inf", "infinite values")])
@pytest.mark.parametrize("restart_on_crash", [False, True])
def test_non_finite_observations_name_worker_behavior_agent_and_what_to_check(
    tmp_path, mode, word, restart_on_crash
):
    factory = faulty_factory(tmp_path, free_base_port(), fail_at=2, mode=mode)
    venv = UnityVecEnv(factory, restart_on_crash=restart_on_crash, restart_backoff=0.0)
    try:
        venv.reset()
        with pytest.raises(UnityObservationError) as info:
            for _ in range(5):
                venv.step(np.zeros((venv.num_envs, 2), np.float32))
        message = str(info.value)
        assert message.startswith("Unity worker 0 sent ")
        assert f"{word} in observation 0" in message and "of behavior '3DBall?team=0'" in message
        assert "CollectObservations" in message and "clamp or normalise" in message
        behavior, agent, _ = info.value.problems[0]
        assert behavior == "3DBall?team=0" and isinstance(agent, int)
        assert isinstance(info.value, RuntimeError), "still a RuntimeError, as mlagents_envs raises"
        assert venv.restart_counts == [0], "bad data is not a crash: no restart"
    finally:
        venv.close()


# ---------------------------------------------------------------------- names
@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: UnityVecEnv("Ball3D", behavior_name="3DBal"), "did you mean '3DBall\\?team=0'"),
        (lambda: UnityGymEnv("Ball3D", behavior_name="3dball"), "did you mean '3DBall\\?team=0'"),
        (
            lambda: UnityVecEnv("Ball3D", behavior_name="Walker"),
            r"not found; the scene has \['3DBall\?team=0'\]$",
        ),
        (lambda: UnityVecEnv("Ball3D", open_kwargs={"num_agentz": 2}), "Did you mean 'num_agents'"),
        (lambda: UnityVecEnv("Bal3D"), "not an embedded scene either .*Did you mean the scene 'Ball3D'"),
    ],
    ids=["vec_env", "gym_env", "no_close_match", "scene_param", "scene_name"],
)
def test_unknown_names_get_a_did_you_mean(make, match):
    with pytest.raises((UnityConfigurationError, FileNotFoundError), match=match):
        make()


def test_behavior_name_without_team_suffix_is_accepted():
    venv = UnityVecEnv("Ball3D", behavior_name="3DBall", open_kwargs={"num_agents": 2})
    assert venv.behavior_name == "3DBall?team=0"
    venv.close()
