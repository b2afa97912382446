"""The slot contract (``unity_sb3.slots``): reading slot infos, and telling a UnityVecEnv that its
algorithm understands inactive slots, through SB3's VecEnv wrappers."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor, VecNormalize

from unity_sb3.scenes.scripted import ScriptedAgent, ScriptedEnv
from unity_sb3.slots import (
    ACTIVE,
    GROUP_ID,
    GROUP_REWARD,
    WARN_INACTIVE,
    active_from_infos,
    active_mask,
    group_ids,
    group_rewards,
    is_unity_vec_env,
    mark_inactive_aware,
    reset_infos_of,
)
from unity_sb3.wrappers.vec_env import UnityVecEnv

INFOS = [
    {ACTIVE: True, GROUP_ID: 3, GROUP_REWARD: 0.5},
    {ACTIVE: False, GROUP_ID: np.int32(0), GROUP_REWARD: np.float32(-1.0)},
    {},  # any other VecEnv: active, no group, no group reward
    {ACTIVE: np.bool_(False), GROUP_ID: None},
]


def test_helpers_read_every_slot_with_defaults():
    np.testing.assert_array_equal(active_mask(INFOS), [True, False, True, False])
    np.testing.assert_array_equal(group_ids(INFOS), [3, 0, 0, 0])
    np.testing.assert_array_equal(group_rewards(INFOS), [0.5, -1.0, 0.0, 0.0])
    assert active_mask(INFOS).dtype == bool
    assert group_ids(INFOS).dtype == np.int64
    assert group_rewards(INFOS).dtype == np.float32


@pytest.mark.parametrize("infos", [None, [], INFOS[:2]], ids=["none", "empty", "wrong_length"])
def test_missing_infos_mean_every_slot_is_active(infos):
    np.testing.assert_array_equal(active_from_infos(infos, 4), [True] * 4)


def test_active_from_infos_reads_infos_of_the_right_length():
    np.testing.assert_array_equal(active_from_infos(INFOS, 4), [True, False, True, False])


def _dying_slot_env() -> UnityVecEnv:
    """Two slots; slot 0's agent ends after one step and nobody replaces it (an inactive slot)."""
    return UnityVecEnv(
        ScriptedEnv([ScriptedAgent(episode_length=1, episodes=1), ScriptedAgent()], strict=True)
    )


@pytest.mark.parametrize(
    "wrap",
    [lambda v: v, VecMonitor, lambda v: VecNormalize(VecMonitor(v))],
    ids=["bare", "VecMonitor", "VecNormalize(VecMonitor)"],
)
def test_unity_vec_env_is_found_and_told_through_wrappers(wrap):
    venv = _dying_slot_env()
    env = wrap(venv)
    try:
        assert is_unity_vec_env(env)
        assert env.get_attr(WARN_INACTIVE) == [True, True]
        mark_inactive_aware(env)
        assert venv.warn_inactive is False  # the env itself, not a wrapper layer
        env.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the placeholder-step warning would fail here
            for _ in range(3):
                _, _, _, infos = env.step(np.zeros((2, 2), dtype=np.float32))
        assert active_mask(infos).tolist() == [False, True]
    finally:
        env.close()


def test_unity_vec_env_warns_plain_algorithms_once():
    venv = _dying_slot_env()
    env = VecMonitor(venv)
    try:
        env.reset()
        with pytest.warns(UserWarning, match="slots have no agent"):
            for _ in range(3):
                env.step(np.zeros((2, 2), dtype=np.float32))
    finally:
        env.close()


def test_other_vec_envs_are_left_alone():
    env = VecMonitor(DummyVecEnv([lambda: gym.make("CartPole-v1")]))
    assert not is_unity_vec_env(env)
    assert not is_unity_vec_env(None)
    mark_inactive_aware(env)  # no attribute to set, no error
    assert not env.has_attr(WARN_INACTIVE)
    env.close()


def test_reset_infos_are_read_under_wrappers():
    venv = _dying_slot_env()
    env = VecNormalize(VecMonitor(venv))
    try:
        env.reset()
        infos = reset_infos_of(env)
        assert infos is not None and len(infos) == 2
        assert active_mask(infos).tolist() == [True, True]
        assert all(GROUP_ID in info for info in infos)
    finally:
        env.close()


def test_predict_masks_only_for_a_discrete_model_whose_predict_takes_them():
    from gymnasium import spaces

    from unity_sb3.slots import predict_masks

    class Masked(gym.Env):
        observation_space = spaces.Box(-1, 1, (1,))
        action_space = spaces.Discrete(3)

        def action_masks(self):
            return np.array([True, False, True])

    class Model:
        def __init__(self, action_space, takes_masks):
            self.action_space = action_space
            self.predict = self._masked if takes_masks else self._plain

        def _masked(
            self, observation, state=None, episode_start=None, deterministic=False, action_masks=None
        ):
            return None

        def _plain(self, observation, state=None, episode_start=None, deterministic=False):
            return None

    env = DummyVecEnv([Masked, Masked])
    masks = predict_masks(Model(spaces.Discrete(3), True), env)["action_masks"]
    np.testing.assert_array_equal(masks, [[True, False, True]] * 2)
    assert predict_masks(Model(spaces.Discrete(3), False), env) == {}
    assert predict_masks(Model(spaces.Box(-1, 1, (2,)), True), env) == {}
