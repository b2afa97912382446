"""Basic: ML-Agents' Basic example re-created, checked against Unity's C# and its ExpertBasic.demo recording."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.base_env import ActionTuple, DimensionProperty, ObservationType

from unity_sb3.scenes import make_scene
from unity_sb3.scenes.basic import LARGE_GOAL, SMALL_GOAL, START
from unity_sb3.wrappers.gym_env import UnityGymEnv

BEHAVIOR = "Basic?team=0"
STAY, LEFT, RIGHT = 0, 1, 2
#: Unity's benchmark for Basic: 7 moves right, 7 x -0.01 + 1
OPTIMAL_RETURN = 0.93


def act(env, action: int) -> None:
    """Give every deciding agent ``action`` and step."""
    n = len(env.get_steps(BEHAVIOR)[0])
    env.set_actions(BEHAVIOR, ActionTuple(discrete=np.full((n, 1), action, dtype=np.int32)))
    env.step()


def position(obs: np.ndarray) -> list[int]:
    """Positions encoded by ``(m, 20)`` one-hot observations (checked to be one-hot)."""
    assert obs.shape[1] == 20 and np.all(obs.sum(axis=1) == 1.0) and np.all((obs == 0) | (obs == 1))
    return obs.argmax(axis=1).tolist()


def test_layout_as_unity_declares_it():
    env = make_scene("Basic")
    assert list(env.behavior_specs) == [BEHAVIOR]
    spec = env.behavior_specs[BEHAVIOR]
    (obs,) = spec.observation_specs
    # BasicSensor: ObservationSpec.Vector(k_Extents), named "Basic"; BasicActuator: MakeDiscrete(3)
    assert obs.shape == (20,) and obs.name == "Basic"
    assert (
        obs.dimension_property == (DimensionProperty.NONE,)
        and obs.observation_type == ObservationType.DEFAULT
    )
    assert spec.action_spec.continuous_size == 0 and spec.action_spec.discrete_branches == (3,)
    # one agent, no MaxStep, a decision every academy step (BasicController.FixedUpdate)
    assert (env.num_agents, env.max_steps, env.decision_period) == (1, 0, 1)
    env.reset()
    d, t = env.get_steps(BEHAVIOR)
    assert position(d.obs[0]) == [START] and d.reward.tolist() == [0.0] and len(t) == 0


@pytest.mark.parametrize(("action", "moved_to"), [(STAY, START), (LEFT, START - 1), (RIGHT, START + 1)])
def test_actions_move_one_cell_and_cost(action, moved_to):
    env = make_scene("Basic")
    env.reset()
    act(env, action)
    d, t = env.get_steps(BEHAVIOR)
    assert position(d.obs[0]) == [moved_to] and len(t) == 0
    assert d.reward.tolist() == [np.float32(-0.01)]


@pytest.mark.parametrize(
    ("action", "goal", "moves", "reward"),
    [
        (LEFT, SMALL_GOAL, 3, np.float32(-0.01) + np.float32(0.1)),
        (RIGHT, LARGE_GOAL, 7, np.float32(-0.01) + np.float32(1.0)),
    ],
)
def test_goal_ends_the_episode_and_a_new_agent_starts(action, goal, moves, reward):
    env = make_scene("Basic")
    env.reset()
    first_id = int(env.get_steps(BEHAVIOR)[0].agent_id[0])
    rewards = []
    for _ in range(moves):
        act(env, action)
        d, t = env.get_steps(BEHAVIOR)
        rewards.append(float(t.reward.sum() if len(t) else d.reward.sum()))
    assert len(t) == 1 and t.agent_id.tolist() == [first_id] and not t.interrupted[0]
    assert position(t.obs[0]) == [goal]  # observed in EndEpisode, before the scene reloads
    assert t.reward[0] == reward  # float32 sums, as C# adds them
    # the reloaded scene: a new agent (new id) at the start, asking in the same step
    assert len(d) == 1 and position(d.obs[0]) == [START] and d.reward.tolist() == [0.0]
    assert int(d.agent_id[0]) != first_id
    assert sum(rewards) == pytest.approx({SMALL_GOAL: 0.07, LARGE_GOAL: OPTIMAL_RETURN}[goal], abs=1e-6)


def test_no_max_step_and_interruptions_keep_the_position():
    """MaxStep 0: staying never ends. With max_steps, Unity's Agent has no OnEpisodeBegin to move it back."""
    env = make_scene("Basic")
    env.reset()
    for _ in range(500):
        act(env, STAY)
        assert len(env.get_steps(BEHAVIOR)[1]) == 0
    env = make_scene("Basic", max_steps=4)
    env.reset()
    act(env, LEFT)
    for _ in range(3):
        act(env, STAY)
    d, t = env.get_steps(BEHAVIOR)
    assert len(t) == 1 and t.interrupted.tolist() == [True] and position(t.obs[0]) == [START - 1]
    assert position(d.obs[0]) == [START - 1] and d.agent_id[0] != t.agent_id[0]
    env.reset()  # Python's reset: the scene as loaded
    assert position(env.get_steps(BEHAVIOR)[0].obs[0]) == [START]


def test_agents_are_independent_copies():
    env = make_scene("Basic", num_agents=3)
    env.reset()
    for _ in range(3):
        env.set_actions(BEHAVIOR, ActionTuple(discrete=np.array([[LEFT], [STAY], [RIGHT]], dtype=np.int32)))
        env.step()
    d, t = env.get_steps(BEHAVIOR)
    assert len(t) == 1 and position(t.obs[0]) == [SMALL_GOAL]  # only the first agent ended
    assert sorted(position(d.obs[0])) == [START, START, START + 3]


# ------------------------------------------------------------------------------------- the real recording


def test_replays_unitys_expert_demo(demo_dir):
    """ExpertBasic.demo (recorded by Unity): its actions from its first state give its observations and rewards.

    The recording is from an older Basic that reset the position in place, so the record that
    ends an episode holds the next episode's first observation (10). Current Unity, and this
    scene, report the goal cell as the terminal observation and the start in the same step's
    DecisionSteps: the demo determines the rewards, the episode ends and every decision's
    observation, not the terminal observation.
    """
    from unity_sb3.demos.reader import load_demo

    demo = load_demo(demo_dir / "ExpertBasic.demo")
    obs, actions, rewards, dones = demo.observations[0], demo.discrete_actions, demo.rewards, demo.dones
    assert obs.shape == (73, 20) and demo.behavior_spec.action_spec.discrete_branches == (3,)
    env = make_scene("Basic")
    env.reset()
    d, _ = env.get_steps(BEHAVIOR)
    np.testing.assert_array_equal(d.obs[0][0], obs[0])
    assert d.reward[0] == rewards[0]
    returns, running = [], 0.0
    for r in range(len(rewards) - 1):
        assert demo.has_action[r]
        env.set_actions(BEHAVIOR, ActionTuple(discrete=actions[r : r + 1]))
        env.step()
        d, t = env.get_steps(BEHAVIOR)
        np.testing.assert_array_equal(d.obs[0][0], obs[r + 1], err_msg=f"record {r + 1}")
        assert len(t) == int(dones[r + 1]), f"record {r + 1}"
        reward = t.reward[0] if len(t) else d.reward[0]
        assert reward == rewards[r + 1], f"record {r + 1}: {reward} != {rewards[r + 1]}"  # bit for bit
        running += float(reward)
        if len(t):
            assert not t.interrupted[0] and position(t.obs[0]) == [LARGE_GOAL]
            returns.append(running)
            running = 0.0
    assert len(returns) == 10 and returns == pytest.approx([OPTIMAL_RETURN] * 10, abs=1e-6)
    # Unity's own bookkeeping in the file: 11 episodes (the last one cut short) and their mean reward
    assert demo.meta.number_episodes == 11
    assert (sum(returns) + running) / 11 == pytest.approx(demo.meta.mean_reward, abs=1e-6)


# --------------------------------------------------------------------------------- wrappers and the player


def test_optimal_policy_scores_unitys_benchmark():
    env = make_scene("Basic", num_agents=4)
    env.reset()
    returns, running = [], {}
    for _ in range(200):
        d, t = env.get_steps(BEHAVIOR)
        for agent, reward in zip(t.agent_id.tolist(), t.reward.tolist()):
            returns.append(running.pop(agent, 0.0) + reward)
        for agent, reward in zip(d.agent_id.tolist(), d.reward.tolist()):
            running[agent] = running.get(agent, 0.0) + reward
        env.set_actions(BEHAVIOR, env.expert_actions(BEHAVIOR, d))
        env.step()
    assert len(returns) >= 100 and np.mean(returns) == pytest.approx(OPTIMAL_RETURN, abs=1e-5)


def test_gym_env_passes_the_checkers_and_scores_the_benchmark():
    from gymnasium.utils.env_checker import check_env as gym_check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check_env(UnityGymEnv(make_scene("Basic")), skip_render_check=True)
        sb3_check_env(UnityGymEnv(make_scene("Basic")))
    env = UnityGymEnv("Basic", open_kwargs={"transport": "inprocess"})
    assert env.observation_space.shape == (20,) and env.action_space.n == 3
    assert episode_returns(env, 5) == pytest.approx([OPTIMAL_RETURN] * 5, abs=1e-5)
    env.close()


def episode_returns(env: UnityGymEnv, episodes: int) -> list[float]:
    """Returns of ``episodes`` gym episodes of the always-right policy."""
    out = []
    env.reset(seed=0)
    total = 0.0
    while len(out) < episodes:
        obs, reward, terminated, truncated, _ = env.step(RIGHT)
        assert obs.shape == (20,)
        total += float(reward)
        if terminated or truncated:
            assert terminated and not truncated
            out.append(total)
            total = 0.0
            env.reset()
    return out


@pytest.mark.player
def test_player_serves_basic():
    """Through the stand-in player and the real UnityEnvironment, as a Unity build would serve it."""
    env = UnityGymEnv("Basic", open_kwargs={"transport": "player", "find_free_port": True, "worker_id": 43})
    try:
        assert env.unity_env.behavior_specs[BEHAVIOR] == make_scene("Basic").behavior_specs[BEHAVIOR]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the build's seed is fixed at launch
            assert episode_returns(env, 3) == pytest.approx([OPTIMAL_RETURN] * 3, abs=1e-5)
    finally:
        env.close()


# ---------------------------------------------------------------------------------------------- learning


def monitor_returns(path) -> list[float]:
    """Episode returns of an SB3 monitor file, in the order the episodes ended."""
    import pandas as pd

    return pd.read_csv(path, skiprows=1)["r"].tolist()


def test_ppo_learns_basic_in_seconds(tmp_path):
    """Eight copies of the scene, a faster learning rate: the stochastic policy scores >= 0.9 within 6k steps."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    from unity_sb3.wrappers.vec_env import UnityVecEnv

    venv = VecMonitor(UnityVecEnv(make_scene("Basic", seed=0, num_agents=8)), filename=str(tmp_path / "ppo"))
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=32,
        batch_size=64,
        n_epochs=3,
        learning_rate=1e-3,
        gamma=0.9,
        ent_coef=0.005,
        policy_kwargs={"net_arch": [20]},
        seed=0,
        device="cpu",
    )
    model.learn(6000)
    venv.close()
    returns = monitor_returns(tmp_path / "ppo.monitor.csv")
    assert len(returns) > 100
    assert np.mean(returns[:20]) < 0.5, "the untrained policy should not score the benchmark"
    assert np.mean(returns[-50:]) >= 0.9, f"PPO reached {np.mean(returns[-50:]):.3f} (benchmark 0.93)"


@pytest.mark.slow
def test_shipped_ppo_settings_reach_the_benchmark(tmp_path):
    """`unity-sb3 train --env Basic` with the shipped hyperparameters: the last 100 episodes average >= 0.9."""
    from unity_sb3.cli import main

    args = ["train", "--env", "Basic", "--seed", "0", "--results-dir", str(tmp_path), "--no-progress"]
    assert main([*args, "--transport", "inprocess"]) == 0
    returns = monitor_returns(tmp_path / "Basic_ppo" / "monitor.csv")
    assert np.mean(returns[:20]) < 0.5 and np.mean(returns[-100:]) >= 0.9
