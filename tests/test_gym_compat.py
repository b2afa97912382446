"""``UnityToGymWrapper``: ML-Agents' gym wrapper's arguments and observations on Gymnasium."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from unity_sb3.scenes import make_scene
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers.gym_compat import UnityToGymWrapper


def test_vector_observations_and_a_single_branch() -> None:
    env = UnityToGymWrapper(make_scene("Basic"))
    assert env.observation_space == spaces.Box(-np.inf, np.inf, (20,), np.float32)
    assert env.action_space == spaces.Discrete(3)
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    total, done = 0.0, False
    while not done:  # always right: the large goal (+1) at the end of the line
        obs, reward, terminated, truncated, _ = env.step(2)
        total, done = total + reward, terminated or truncated
    assert obs.shape == (20,) and total > 0.5
    env.close()


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("uint8_visual", [False, True])
def test_images_keep_the_specs_layout_and_ml_agents_uint8(channels_last: bool, uint8_visual: bool) -> None:
    scene = make_scene("GridWorld", num_agents=1, channels_last=channels_last)
    shape = tuple(scene.behavior_specs["GridWorld?team=0"].observation_specs[0].shape)
    with pytest.warns(UserWarning, match="several observations"):
        single = UnityToGymWrapper(scene, uint8_visual=uint8_visual)
    assert single.observation_space.shape == shape
    obs, _ = single.reset(seed=1)
    raw = scene.get_steps("GridWorld?team=0")[0].obs[0][0]  # what Unity sent, in its layout
    expected = (255.0 * raw).astype(np.uint8) if uint8_visual else raw
    np.testing.assert_array_equal(obs, expected)
    assert obs.dtype == (np.uint8 if uint8_visual else np.float32)
    np.testing.assert_array_equal(single.render(), obs)
    single.close()

    both = UnityToGymWrapper(
        make_scene("GridWorld", num_agents=1, channels_last=channels_last), allow_multiple_obs=True
    )
    image_space, goal_space = both.observation_space.spaces
    assert image_space.shape == shape and goal_space.shape == (2,)
    image, goal = both.reset(seed=1)[0]
    assert image.shape == shape and goal.shape == (2,) and goal.sum() == 1.0  # one-hot goal signal
    both.close()


def test_branches_flattened_in_product_order() -> None:
    scene = make_scene("Sorter", num_agents=1)
    env = UnityToGymWrapper(scene, flatten_branched=True, action_space_seed=3)
    assert env.action_space == spaces.Discrete(27)
    assert env.observation_space.shape == (4,)  # the buffer sensor is left out, as ML-Agents does
    sent = []
    original = scene.set_actions
    scene.set_actions = lambda name, action: (sent.append(action.discrete.copy()), original(name, action))
    env.reset(seed=0)
    env.step(16)
    assert tuple(sent[-1][0]) == list(itertools.product(range(3), range(3), range(3)))[16] == (1, 2, 1)
    assert env.action_space.sample() in env.action_space
    env.close()


def test_continuous_actions_and_what_it_refuses() -> None:
    env = UnityToGymWrapper(make_scene("Ball3D", num_agents=1))
    assert env.action_space == spaces.Box(-1.0, 1.0, (2,), np.float32)
    env.close()
    with pytest.raises(UnityConfigurationError, match="no hybrid"):
        UnityToGymWrapper(make_scene("HybridLine", num_agents=1))
    with pytest.raises(Exception, match="agent"):  # one agent only, as ML-Agents' wrapper
        UnityToGymWrapper(make_scene("Ball3D"))
