"""``episode_returns``: whole episodes played by one answer per behavior, each agent episode's return."""

from __future__ import annotations

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple

from unity_sb3.episodes import episode_returns, play
from unity_sb3.scenes import make_scene


def test_returns_per_behavior_group_with_memories_dropped_at_episode_ends() -> None:
    scene = make_scene("Basic", seed=0)
    ended: list[int] = []

    class Right:
        """Basic's best play (walk right to the large goal), telling which agents' episodes ended."""

        def __call__(self, name, steps):
            return ActionTuple(discrete=np.full((len(steps), 1), 2, np.int32))

        def end_episodes(self, agent_ids):
            ended.extend(int(i) for i in agent_ids)

    returns = episode_returns(scene, {"Basic?team=0": Right()}, episodes=4)
    assert list(returns) == ["Basic?team=0"] and len(returns["Basic?team=0"]) == 4
    # -0.01 per step, +1 at the large goal 7 cells to the right: 1 - 0.01 * 7 on each episode
    np.testing.assert_allclose(returns["Basic?team=0"], 0.93, atol=1e-6)
    assert len(ended) >= 4


def test_behaviors_without_an_answer_get_zeros_and_groups_count_together() -> None:
    scene = make_scene("Tennis", seed=0, num_agents=2)
    random = np.random.default_rng(0)

    def swing(name, steps):
        return ActionTuple(continuous=random.uniform(-1, 1, (len(steps), 3)).astype(np.float32))

    one = episode_returns(scene, {"Tennis?team=0": swing}, episodes=2)
    assert list(one) == ["Tennis?team=0"] and len(one["Tennis?team=0"]) == 2
    both = episode_returns(
        scene, dict.fromkeys(scene.behavior_specs, swing), episodes=3, group=lambda n: "all"
    )
    assert list(both) == ["all"] and len(both["all"]) == 3


def test_bad_budgets_are_clear_errors() -> None:
    scene = make_scene("Basic", seed=0)

    def still(name, steps):
        return ActionTuple(discrete=np.zeros((len(steps), 1), np.int32))  # 0 = stay: episodes never end

    with pytest.raises(RuntimeError, match=r"episodes ended in 50 Unity steps: \{'Basic\?team=0': 0\} of 2"):
        episode_returns(scene, {"Basic?team=0": still}, episodes=2, max_unity_steps=50)
    with pytest.raises(ValueError, match="episodes must be a whole number > 0"):
        episode_returns(scene, {"Basic?team=0": still}, episodes=0)


@pytest.mark.parametrize("reset", [True, False])
def test_resets_once_unless_the_caller_just_did(reset: bool) -> None:
    scene = make_scene("Basic", seed=0)
    scene.reset()
    resets = []
    original = scene.reset
    scene.reset = lambda: resets.append(1) or original()  # type: ignore[method-assign]

    def right(name, steps):
        return ActionTuple(discrete=np.full((len(steps), 1), 2, np.int32))

    returns = episode_returns(scene, {"Basic?team=0": right}, episodes=2, reset=reset)
    assert len(resets) == int(reset) and returns["Basic?team=0"] == pytest.approx([0.93, 0.93], abs=1e-6)


def test_play_yields_every_behaviors_batches_before_stepping() -> None:
    scene = make_scene("Tennis", seed=0, num_agents=2)
    scene.reset()
    seen = []

    def swing(name, steps):
        seen.append(name)
        return ActionTuple(continuous=np.zeros((len(steps), 3), np.float32))

    for unity_step, batches in enumerate(play(scene, {"Tennis?team=0": swing})):
        assert [name for name, _, _ in batches] == list(scene.behavior_specs)
        if unity_step == 5:
            break
    assert seen and set(seen) == {"Tennis?team=0"}  # the other team played zeros, unasked
