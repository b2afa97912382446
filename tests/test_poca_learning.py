"""Slow learning checks for POCA through UnityVecEnv on the embedded scenes (``-m slow``)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow


def _success_rate(model, make_env, steps: int) -> float:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from poca_escape import GroupOutcomes

    env = make_env()
    outcomes = GroupOutcomes()
    obs = env.reset()
    for _ in range(steps):
        actions, _ = model.predict(obs)
        obs, _, dones, infos = env.step(actions)
        outcomes.update(dones, infos)
    env.close()
    return outcomes.rate


def test_poca_learns_the_sacrifice_on_escape():
    from unity_sb3 import POCA, UnityVecEnv
    from unity_sb3.envs import make_scene

    def make_env(seed=0):
        return UnityVecEnv(make_scene("Escape", seed=seed, num_agents=12), add_group_reward=True)

    env = make_env()
    before = POCA("MlpPolicy", env, n_steps=256, batch_size=512, n_epochs=3, seed=0)
    random_rate = _success_rate(before, lambda: make_env(7), 500)
    model = before.learn(150_000)
    env.close()
    rate = _success_rate(model, lambda: make_env(7), 500)
    assert rate > max(0.6, random_rate + 0.3), (random_rate, rate)


def test_poca_with_groups_of_one_learns_ball3d():
    from unity_sb3 import POCA, UnityVecEnv
    from unity_sb3.envs import make_scene

    env = UnityVecEnv(make_scene("Ball3D", seed=0))
    model = POCA("MlpPolicy", env, n_steps=256, batch_size=512, n_epochs=3, learning_rate=1e-3, seed=0)
    model.learn(100_000)
    env.close()
    eval_env = UnityVecEnv(make_scene("Ball3D", seed=3))
    obs = eval_env.reset()
    total = np.zeros(eval_env.num_envs)
    returns = []
    for _ in range(1000):
        actions, _ = model.predict(obs, deterministic=True)
        obs, rewards, dones, _ = eval_env.step(actions)
        total += rewards
        for i in np.flatnonzero(dones):
            returns.append(total[i])
            total[i] = 0.0
    eval_env.close()
    mean = np.mean(returns) if returns else total.mean()
    assert mean > 20.0, mean  # random play scores about 1-2
