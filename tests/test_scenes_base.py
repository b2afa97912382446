"""EmbeddedScene with several behaviors: specs, steps, actions and masks per behavior, the player."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.base_env import ActionTuple
from mlagents_envs.exception import UnityActionException
from mlagents_envs.rpc_utils import behavior_spec_from_proto
from multi_behavior_scenes import HUNTER, PREY, Duel
from test_scenes_player import close_and_check, compare_runs, open_player

from unity_sb3.scenes.base import EmbeddedScene
from unity_sb3.scenes.player.server import StandInPlayer
from unity_sb3.unity.errors import UnityConfigurationError

DUEL_FACTORY = f"{Path(__file__).with_name('multi_behavior_scenes.py')}:make_duel"


def all_ids(env: Duel) -> dict[str, set[int]]:
    out = {}
    for name in env.behavior_specs:
        d, t = env.get_steps(name)
        out[name] = set(d.agent_id.tolist()) | set(t.agent_id.tolist())
    return out


def test_every_behavior_has_its_own_spec_and_agents():
    env = Duel(seed=0, num_agents=3)
    assert list(env.behavior_specs) == [HUNTER, PREY] == list(Duel.behavior_names_of())
    hunter, prey = env.behavior_specs[HUNTER], env.behavior_specs[PREY]
    assert hunter.action_spec.continuous_size == 2 and hunter.action_spec.discrete_size == 0
    assert prey.action_spec.discrete_branches == (3, 3) and len(prey.observation_specs) == 2
    assert env.total_agents == 9 and env.agent_behavior.tolist() == [0, 1, 1] * 3
    env.reset()
    d_hunter, _ = env.get_steps(HUNTER)
    d_prey, _ = env.get_steps(PREY)
    assert len(d_hunter) == 3 and len(d_prey) == 6
    assert [o.shape for o in d_hunter.obs] == [(3, 3)]
    assert [o.shape for o in d_prey.obs] == [(6, 4), (6, 2)]
    ids = all_ids(env)
    assert not ids[HUNTER] & ids[PREY]  # ids are unique across the whole scene
    assert d_hunter.group_id.tolist() == [0, 0, 0]
    assert d_prey.group_id.tolist() == [1, 1, 2, 2, 3, 3]
    text = Duel.describe(num_agents=3)
    assert f"behavior {HUNTER!r}: 3 agent(s)" in text and f"behavior {PREY!r}: 6 agent(s)" in text


def test_actions_are_checked_against_their_own_behavior():
    env = Duel(seed=0)
    env.reset()
    with pytest.raises(UnityActionException, match=r"'Hunter\?team=0', 'Prey\?team=1'"):
        env.get_steps("Nope?team=0")
    with pytest.raises(UnityActionException, match="needs a"):  # prey take discrete actions
        env.set_actions(PREY, ActionTuple(continuous=np.zeros((4, 2), np.float32)))
    with pytest.raises(UnityActionException, match=r"Prey\?team=1 must lie in \[0, branch size\)"):
        env.set_actions(PREY, ActionTuple(discrete=np.full((4, 2), 3, np.int32)))
    with pytest.raises(UnityActionException, match="needs a"):  # 2 hunters, not 4
        env.set_actions(HUNTER, ActionTuple(continuous=np.zeros((4, 2), np.float32)))
    hunter_id = int(env.get_steps(HUNTER)[0].agent_id[0])
    with pytest.raises(IndexError, match=r"previous step of Prey\?team=1"):
        env.set_action_for_agent(PREY, hunter_id, ActionTuple(discrete=np.zeros((1, 2), np.int32)))


def test_actions_reach_only_the_agents_of_their_behavior():
    env = Duel(seed=1, max_steps=0, hunt_length=1000)
    env.reset()
    d_hunter, _ = env.get_steps(HUNTER)
    d_prey, _ = env.get_steps(PREY)
    start_h, start_p = d_hunter.obs[0][:, :2].copy(), d_prey.obs[0][:, :2].copy()
    start_ids = d_prey.agent_id.copy()
    env.set_actions(HUNTER, ActionTuple(continuous=np.array([[1, 0], [0, -1]], np.float32)))
    # one prey is told to stay (1, 1); the others get no action: zeros, which move left and down
    env.set_action_for_agent(
        PREY, int(d_prey.agent_id[1]), ActionTuple(discrete=np.array([[1, 1]], np.int32))
    )
    env.step()  # decision period 2: two academy steps
    d_hunter, t_hunter = env.get_steps(HUNTER)
    d_prey, _ = env.get_steps(PREY)
    assert len(t_hunter) == 0
    np.testing.assert_allclose(d_hunter.obs[0][:, :2] - start_h, [[0.2, 0], [0, -0.2]], atol=1e-6)
    free = np.isin(d_prey.agent_id, start_ids)  # caught prey start over elsewhere, with new ids
    moved = d_prey.obs[0][:, :2] - start_p
    expected = np.array([[-0.2, -0.2], [0, 0], [-0.2, -0.2], [-0.2, -0.2]])
    np.testing.assert_allclose(moved[free], expected[free], atol=1e-6)


def test_terminal_steps_are_reported_by_their_own_behavior():
    env = Duel(seed=2, num_agents=3, hunt_length=5, max_steps=0)
    env.reset()
    first = all_ids(env)
    rng = np.random.default_rng(0)
    ended = {HUNTER: [], PREY: []}
    between_decisions = 0
    for _ in range(60):
        n_hunters, n_prey = len(env.get_steps(HUNTER)[0]), len(env.get_steps(PREY)[0])
        env.set_actions(HUNTER, ActionTuple(continuous=rng.uniform(-1, 1, (n_hunters, 2)).astype(np.float32)))
        env.set_actions(PREY, ActionTuple(discrete=rng.integers(0, 2, (n_prey, 2)).astype(np.int32)))
        env.step()
        sizes = {}
        for name in (HUNTER, PREY):
            d, t = env.get_steps(name)
            ended[name] += t.agent_id.tolist()
            sizes[name] = len(d)
            assert t.obs[0].shape[1] == (3 if name == HUNTER else 4)
        # every agent decides together (decision period 2), or nobody: an episode that ends
        # between two decisions is reported alone, for its own behavior only
        assert sizes in ({HUNTER: 3, PREY: 6}, {HUNTER: 0, PREY: 0})
        between_decisions += sizes[HUNTER] == 0
    # hunters end every 5 academy steps, at odd steps (between two decisions of period 2)
    assert between_decisions and len(ended[HUNTER]) >= 3 * 10
    assert set(ended[HUNTER]) & first[HUNTER] == first[HUNTER]
    assert not set(ended[HUNTER]) & (first[PREY] | set(ended[PREY]))
    assert ended[PREY]  # some prey were caught
    assert len(set(ended[HUNTER] + ended[PREY])) == len(ended[HUNTER]) + len(ended[PREY])  # ids never reused


def test_masks_and_group_rewards_per_behavior():
    env = Duel(seed=3, num_agents=4, max_steps=0, hunt_length=1000)
    env.reset()
    for _ in range(8):
        n = len(env.get_steps(PREY)[0])
        env.set_actions(PREY, ActionTuple(discrete=np.full((n, 2), 2, np.int32) * np.array([1, 0], np.int32)))
        env.step()
        d_prey, _ = env.get_steps(PREY)
        d_hunter, _ = env.get_steps(HUNTER)
        if not len(d_prey):  # a prey was caught between two decisions
            continue
        assert d_hunter.action_mask is None or all(m.size == 0 for m in d_hunter.action_mask)
        assert [m.shape for m in d_prey.action_mask] == [(len(d_prey), 3), (len(d_prey), 3)]
        np.testing.assert_array_equal(d_prey.action_mask[0][:, 2], d_prey.obs[0][:, 0] > 0.5)
        assert not d_prey.action_mask[1].any()
        assert (d_hunter.group_reward == 0).all()
    assert (d_prey.group_reward > 0).any()


def test_spec_count_must_match_the_behavior_names():
    class Broken(Duel):
        def _make_specs(self):
            return super()._make_specs()[:1]

    class Stray(Duel):
        AREA_BEHAVIORS = (0, 2)

    with pytest.raises(UnityConfigurationError, match="one spec per behavior"):
        Broken()
    with pytest.raises(
        UnityConfigurationError, match=r"AREA_BEHAVIORS \(0, 2\) must name behavior indices in \[0, 2\)"
    ):
        Stray()


def test_single_behavior_scene_keeps_its_one_behavior():
    from unity_sb3.scenes import make_scene

    env = make_scene("Basic")
    assert isinstance(env, EmbeddedScene)
    assert env.behavior_names == ("Basic?team=0",) and env.total_agents == env.num_agents == 1


def test_handshake_sends_every_behavior_with_an_agent():
    scene = Duel(seed=0)
    message = StandInPlayer(scene, port=1, name="Duel").handshake_message()
    init = message.unity_output.rl_initialization_output
    assert [b.brain_name for b in init.brain_parameters] == [HUNTER, PREY]
    for brain in init.brain_parameters:
        agents = message.unity_output.rl_output.agentInfos[brain.brain_name].value
        assert len(agents) >= 1
        assert behavior_spec_from_proto(brain, agents[0]) == scene.behavior_specs[brain.brain_name]


@pytest.mark.player
def test_several_behaviors_through_the_player_match_in_process(tmp_path):
    env, log = open_player(tmp_path, DUEL_FACTORY, seed=4)
    try:
        compare_runs(env, Duel(seed=4), steps=120, seed=2, visual_atol=0.0)
    finally:
        close_and_check(env, log)
