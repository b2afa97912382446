"""``unity_sb3.algorithms.action_masks``: the same masks as sb3-contrib's per-slot route, read in one go."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionSpec
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3.common.vec_env import VecEnvWrapper, VecMonitor, VecNormalize

from unity_sb3 import UnityVecEnv
from unity_sb3.algorithms.action_masks import mask_reader, read_action_masks
from unity_sb3.scenes.scripted import ScriptedAgent, ScriptedBehavior, ScriptedEnv

pytestmark = pytest.mark.filterwarnings("ignore:UnityVecEnv. 1 of 3 slots")


def _mask(agent: int, t: int) -> list[np.ndarray]:
    first = np.ones(3, dtype=bool)
    first[(agent + t) % 3] = False
    return [first, np.array([True, t % 2 == 0])]


def _masked_venv() -> UnityVecEnv:
    behavior = ScriptedBehavior(
        [ScriptedAgent(), ScriptedAgent(), ScriptedAgent(episode_length=1, episodes=1)],
        action_spec=ActionSpec(0, (3, 2)),
        mask_fn=_mask,
    )
    venv = UnityVecEnv(ScriptedEnv(behavior))
    venv.reset()
    return venv


class _ForbidFirst(VecEnvWrapper):
    """A wrapper that changes the masks through ``env_method``: the reader must ask it, not what it wraps."""

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        return self.venv.step_wait()

    def env_method(self, method_name, *args, indices=None, **kwargs):
        answers = self.venv.env_method(method_name, *args, indices=indices, **kwargs)
        if method_name == "action_masks":
            answers = [np.concatenate([[False], mask[1:]]) for mask in answers]
        return answers


@pytest.mark.parametrize(
    "wrap",
    [lambda v: v, VecMonitor, lambda v: VecNormalize(VecMonitor(v), norm_reward=False)],
    ids=["bare", "VecMonitor", "VecNormalize"],
)
def test_reader_gives_sb3_contribs_masks_through_forwarding_wrappers(wrap):
    venv = wrap(_masked_venv())
    reader = mask_reader(venv)
    assert reader is not None
    for _ in range(3):
        masks = reader()
        assert masks.dtype == bool and masks.shape == (3, 5)
        np.testing.assert_array_equal(masks, get_action_masks(venv))
        np.testing.assert_array_equal(read_action_masks(venv), masks)
        venv.step(np.zeros((3, 2), dtype=np.int64))
    assert reader() is not reader(), "every call returns a fresh array the caller may keep"


def test_a_wrapper_that_changes_masks_is_asked_itself():
    venv = _ForbidFirst(VecMonitor(_masked_venv()))
    masks = read_action_masks(venv)
    assert masks is not None and not masks[:, 0].any()
    np.testing.assert_array_equal(masks, get_action_masks(venv))


def test_an_env_without_masks_has_no_reader():
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env("CartPole-v1", n_envs=2)
    assert mask_reader(venv) is None and read_action_masks(venv) is None
