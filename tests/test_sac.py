"""unity_sb3.SAC: plain-SB3 equivalence, one Q output per signal, targets per head, save/load, GAIL."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from goal_line import BEHAVIOR, GoalLine
from stable_baselines3 import SAC as SB3SAC
from stable_baselines3.common.env_util import make_vec_env

from unity_sb3.algorithms import bc
from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError
from unity_sb3.algorithms.sac.sac import SAC

SMALL = {"hidden_units": 16, "num_layers": 1}
FAST = {"learning_starts": 40, "batch_size": 16, "seed": 0, "policy_kwargs": {"net_arch": [16]}}


def params(model) -> th.Tensor:
    return th.cat([p.detach().flatten() for p in model.policy.parameters()])


def pendulum(n_envs: int = 1):
    return make_vec_env("Pendulum-v1", n_envs=n_envs, seed=0)


def test_without_signals_it_is_sb3_sac():
    ours = SAC("MlpPolicy", pendulum(), **FAST).learn(100)
    theirs = SB3SAC("MlpPolicy", pendulum(), **FAST).learn(100)
    assert th.equal(params(ours), params(theirs))  # ours steps Adam with foreach: the same
    assert ours.critic.q_networks[0][-1].out_features == 1
    assert ours.actor.optimizer.defaults["foreach"] and ours.critic.optimizer.defaults["foreach"]


def test_one_q_output_per_signal_and_logs():
    model = SAC(
        "MlpPolicy",
        pendulum(),
        **FAST,
        reward_signals={
            "extrinsic": {},
            "curiosity": {"strength": 0.1, "network_settings": SMALL},
            "rnd": {},
        },
    )
    for critic in (model.critic, model.critic_target):
        assert all(q[-1].out_features == 3 for q in critic.q_networks)
    model.learn(80)
    logged = model.logger.name_to_value
    for key in (
        "reward_signals/extrinsic/reward",
        "reward_signals/curiosity/reward",
        "reward_signals/curiosity/forward_loss",
        "reward_signals/rnd/loss",
    ):
        assert key in logged, key


def test_head_rewards_apply_strength_to_the_stored_reward():
    model = SAC(
        "MlpPolicy",
        pendulum(),
        **FAST,
        reward_signals={"extrinsic": {"strength": 3.0}, "rnd": {"strength": 0.0, "network_settings": SMALL}},
    )
    model.learn(50)
    data = model.replay_buffer.sample(8)
    rewards = model._head_rewards(data)
    assert rewards.shape == (8, 2)
    assert th.allclose(rewards[:, 0], 3.0 * data.rewards.reshape(-1))
    assert th.all(rewards[:, 1] == 0.0)


def test_curiosity_and_rnd_heads_ignore_episode_ends_and_gammas_are_per_head():
    model = SAC(
        "MlpPolicy",
        pendulum(),
        **FAST,
        reward_signals={"extrinsic": {"gamma": 0.9}, "curiosity": {"gamma": 0.5}, "rnd": {}},
    )
    assert model._gammas.tolist() == pytest.approx([0.9, 0.5, 0.99])
    assert model._episodic.tolist() == [1.0, 0.0, 0.0]
    assert model._entropy_head == 0


def test_n_step_replay_with_signals_is_refused():
    with pytest.raises(RewardSignalConfigError, match="n-step"):
        SAC("MlpPolicy", pendulum(), n_steps=3, reward_signals={"extrinsic": {}})


def test_save_load_gives_identical_intrinsic_rewards(tmp_path):
    model = SAC(
        "MlpPolicy",
        pendulum(),
        **FAST,
        reward_signals={
            "extrinsic": {},
            "curiosity": {"network_settings": SMALL},
            "rnd": {"network_settings": SMALL},
        },
    )
    model.learn(60)
    rng = np.random.default_rng(0)
    obs, next_obs = rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=(8, 3)).astype(np.float32)
    actions = rng.uniform(-1, 1, size=(8, 1)).astype(np.float32)
    before = model.intrinsic_rewards(obs, actions, next_obs)
    model.save(tmp_path / "sac")
    loaded = SAC.load(tmp_path / "sac", env=pendulum())
    after = loaded.intrinsic_rewards(obs, actions, next_obs)
    for name in before:
        assert np.array_equal(before[name], after[name]), name
    q_before = th.cat(model.critic(th.as_tensor(obs), th.as_tensor(actions)), dim=1)
    q_after = th.cat(loaded.critic(th.as_tensor(obs), th.as_tensor(actions)), dim=1)
    assert th.equal(q_before, q_after)
    loaded.learn(20, reset_num_timesteps=False)


def test_bc_hook_runs_after_each_gradient_step(monkeypatch):
    calls = []

    class FakeBC:
        def __init__(self, algorithm, settings):
            pass

        def update(self):
            calls.append(1)
            return {"loss": 1.0}

    monkeypatch.setattr(bc, "make_bc_module", FakeBC)
    model = SAC("MlpPolicy", pendulum(), **FAST, behavioral_cloning={"strength": 1.0})
    model.learn(50)
    assert len(calls) == 50 - 40  # one gradient step per env step after learning_starts
    assert model.logger.name_to_value["behavioral_cloning/loss"] == 1.0


@pytest.mark.slow
def test_sac_with_signals_still_learns_pendulum():
    model = SAC(
        "MlpPolicy",
        pendulum(),
        learning_starts=200,
        seed=0,
        policy_kwargs={"net_arch": [64, 64]},
        reward_signals={
            "extrinsic": {},
            "curiosity": {"strength": 0.01, "network_settings": {"hidden_units": 32}},
        },
    )
    model.learn(6000)
    env = pendulum()
    obs = env.reset()
    total = 0.0
    for _ in range(600):
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, _, _ = env.step(action)
        total += float(reward[0])
    assert total / 3 > -600  # random play scores about -1200 per 200-step episode


# ---------------------------------------------------------------------------------- GAIL (Unity's test_gail)
def goal_line_demo(path, discrete: bool) -> str:
    """100 steps of Unity's ``RecordEnvironment.solve`` (walk to the goal), as its ``simple_record``."""
    from unity_sb3.demos.writer import record_demo

    scene = GoalLine(discrete=discrete, seed=100)
    record_demo(scene, BEHAVIOR, scene.expert, path, n_steps=100)
    return str(path)


def unity_gail_test_sac(env, demo: str, seed: int) -> SAC:
    """Unity's ``test_gail`` with ``SAC_TORCH_CONFIG``: GAIL alone (no extrinsic), BC over 1000 steps."""
    return SAC(
        "MlpPolicy",
        env,
        learning_rate=5e-3,
        batch_size=8,
        learning_starts=100,
        buffer_size=5000,
        tau=0.01,
        ent_coef="auto_0.01",
        policy_kwargs={"net_arch": [16], "activation_fn": th.nn.SiLU},
        seed=seed,
        device="cpu",
        reward_signals={"gail": {"demo_path": demo, "network_settings": {"hidden_units": 32}}},
        behavioral_cloning={"demo_path": demo, "steps": 1000},
    )


def test_gail_head_bootstraps_through_episode_ends(tmp_path):
    """GAIL's reward is never negative: a head that stopped at episode ends paid for long episodes."""
    from unity_sb3 import UnityVecEnv

    demo = goal_line_demo(tmp_path / "line.demo", discrete=False)
    model = SAC(
        "MlpPolicy",
        UnityVecEnv(GoalLine()),
        **FAST,
        reward_signals={"extrinsic": {}, "gail": {"demo_path": demo, "network_settings": SMALL}},
    )
    assert model._episodic.tolist() == [1.0, 0.0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("discrete", "seed"), [(False, 0), (False, 1), (False, 2), (False, 1337), (True, 0), (True, 1337)]
)
def test_sac_with_gail_learns_unitys_gail_test(tmp_path, discrete, seed):
    """Unity's ``test_simple_rl.py::test_gail`` (SAC): 500 steps, the last 5 episodes above 0.9.
    Before GAIL's head bootstrapped through episode ends, continuous seeds 0 and 1 ended at -0.32
    and -0.44 and discrete seed 0 at 0.55 (the policy put off reaching either end). Continuous
    seed 1337 ended at 0.57 while BC ran one minibatch per gradient step instead of ML-Agents' 36."""
    from unity_sb3 import UnityVecEnv

    demo = goal_line_demo(tmp_path / "line.demo", discrete)
    scene = GoalLine(discrete=discrete, seed=seed)
    unity_gail_test_sac(UnityVecEnv(scene), demo, seed).learn(500)
    assert np.mean(scene.final_rewards[-5:]) > 0.9
