"""unity_sb3.RecurrentPPO: memories stored while acting, BPTT over sequences, inactive slots, predict, save/load."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.env_util import make_vec_env
from test_ppo import PhaseVecEnv

from unity_sb3 import PPO, RecurrentPPO

SMALL = dict(n_steps=16, batch_size=16, n_epochs=1, memory_size=8, sequence_length=4, seed=0)


class CueEnv(gym.Env):
    """A memory task: the first observation shows a cue (+1 or -1), later ones show 0; the last of
    ``length`` steps pays +1 if the action names the cue (1 for +1, 0 for -1), else nothing.

    :param action_space: ``"discrete"`` (Discrete(2)), ``"multi"`` (MultiDiscrete([2, 2]), first
        branch answers) or ``"box"`` (Box(1,), its sign answers).
    """

    def __init__(self, action_space: str = "discrete", length: int = 3) -> None:
        self.length = length
        self.kind = action_space
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = {
            "discrete": spaces.Discrete(2),
            "multi": spaces.MultiDiscrete([2, 2]),
            "box": spaces.Box(-1.0, 1.0, (1,), np.float32),
        }[action_space]

    def _obs(self) -> np.ndarray:
        shown = self.cue if self.t == 0 else 0.0
        return np.array([shown, self.t / self.length], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.cue = float(self.np_random.choice([-1.0, 1.0]))
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        reward = 0.0
        if done:
            answer = float(np.asarray(action).reshape(-1)[0])
            says_plus = answer > 0 if self.kind == "box" else answer == 1
            reward = float(says_plus == (self.cue > 0))
        return self._obs(), reward, done, False, {}


def cue_env(kind: str = "discrete", n_envs: int = 2, seed: int = 0):
    return make_vec_env(lambda: CueEnv(kind), n_envs=n_envs, seed=seed)


def test_a_waiting_slot_keeps_its_memory_and_its_placeholders_stay_out_of_the_sequences() -> None:
    model = RecurrentPPO("MlpLstmPolicy", PhaseVecEnv(), **SMALL)
    model.learn(32)
    buffer = model.rollout_buffer
    memories = buffer.actor_memories
    # slot 1 waits on odd steps: the memory stored before the next (active) step is unchanged
    for t in range(1, 15, 2):
        np.testing.assert_array_equal(memories[t, 1], memories[t + 1, 1])
        assert not np.array_equal(memories[t, 0], memories[t + 1, 0])
    indices, mask = buffer.sequences()
    assert mask.sum() == buffer.active.sum() == 16 + 8
    assert buffer.active.reshape(-1)[indices[mask]].all()
    assert sum(len(batch.advantages) for batch in buffer.get(8)) == 24


@pytest.mark.parametrize("length", [3, 7])
def test_training_sequences_start_at_episode_starts_and_never_cross_one(length: int) -> None:
    """ML-Agents' cut: a sequence lies within one episode, and an episode no longer than
    ``sequence_length`` is one sequence from its first step (so BPTT reaches its cue)."""
    env = make_vec_env(lambda: CueEnv("discrete", length=length), n_envs=2, seed=0)
    model = RecurrentPPO("MlpLstmPolicy", env, **{**SMALL, "n_steps": 30, "sequence_length": 5})
    model.learn(1)
    buffer = model.rollout_buffer
    indices, mask = buffer.sequences()
    starts = buffer.active_episode_starts().reshape(-1)
    assert starts[indices[:, 1:][mask[:, 1:]]].sum() == 0  # no episode starts inside a sequence
    assert starts[indices[:, 0]].sum() == starts.sum()  # each one begins a sequence
    assert mask.sum() == buffer.active.sum() and len(np.unique(indices[mask])) == mask.sum()
    # one rollout of 30 steps per slot from the reset: 3-step episodes are whole sequences; 7-step
    # ones 5 steps then the other 2 (the last episode cut by the rollout's end after 2)
    per_slot = [3] * 10 if length == 3 else [5, 2, 5, 2, 5, 2, 5, 2, 2]
    assert mask.sum(axis=1).tolist() == per_slot * 2


def test_training_sequences_restart_after_each_time_horizon_cut() -> None:
    """ML-Agents hands an agent's experience over as a trajectory every ``time_horizon`` decisions and
    cuts each trajectory into sequences from its first step: a sequence never crosses a cut, and the
    one after a cut unrolls from the memory stored there (not zeroed: the episode goes on)."""
    env = make_vec_env(lambda: CueEnv("discrete", length=11), n_envs=2, seed=0)
    model = RecurrentPPO(
        "MlpLstmPolicy", env, **{**SMALL, "n_steps": 30, "sequence_length": 4}, time_horizon=3
    )
    model.learn(1)
    buffer = model.rollout_buffer
    indices, mask = buffer.sequences()
    starts = buffer.active_episode_starts().reshape(-1)
    cuts = buffer.chunk_ends.reshape(-1)
    assert cuts.any()
    # no cut before a sequence's last step; every step after a cut begins one
    assert not cuts[indices[:, :-1][mask[:, 1:]]].any()
    after_cut = np.flatnonzero(cuts) + buffer.n_envs
    after_cut = after_cut[after_cut < cuts.size]
    assert set(after_cut.tolist()) <= set(indices[:, 0].tolist())
    assert starts[indices[:, 1:][mask[:, 1:]]].sum() == 0
    # 11-step episodes from the reset, cut every 3 decisions: 3 + 3 + 3 + 2, then the rollout's end
    assert mask.sum(axis=1).tolist() == [3, 3, 3, 2] * 2 + [3, 3, 2] + [3, 3, 3, 2] * 2 + [3, 3, 2]


@pytest.mark.parametrize(
    ("make_env", "time_horizon"),
    [
        (PhaseVecEnv, None),
        (lambda: cue_env("discrete", n_envs=3), None),
        (lambda: cue_env("discrete", n_envs=3), 2),
    ],
    ids=["waiting_slot", "episodes", "time_horizon"],
)
def test_sequences_from_stored_memories_replay_what_acting_computed(make_env, time_horizon) -> None:
    """Before any update, unrolling the training sequences gives back the values and log-probabilities
    stored while acting: the stored memories, episode starts, waiting slots and ``time_horizon`` cuts
    line up with BPTT."""
    model = RecurrentPPO(
        "MlpLstmPolicy",
        make_env(),
        **{**SMALL, "n_steps": 24, "sequence_length": 5},
        time_horizon=time_horizon,
    )
    model.learn(1, reset_num_timesteps=True)  # one rollout is collected (and trained on) ...
    model.collect_rollouts(model.env, model._init_callback(None), model.rollout_buffer, model.n_steps)
    buffer = model.rollout_buffer  # ... and this one is fresh: no update since it was collected
    if isinstance(make_env(), PhaseVecEnv):
        assert not buffer.active.all()
    else:
        assert buffer.episode_starts[1:].any()
    model.policy.set_training_mode(False)
    with th.no_grad():
        for batch in buffer.get(10):
            values, log_prob, _ = model._evaluate_minibatch(batch)
            th.testing.assert_close(
                values.reshape(batch.old_values.shape), batch.old_values, atol=1e-5, rtol=1e-4
            )
            th.testing.assert_close(log_prob, batch.old_log_prob, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["discrete", "multi", "box"])
def test_predict_carries_memory_and_save_load_keeps_it(kind: str, tmp_path) -> None:
    env = cue_env(kind)
    model = RecurrentPPO("MlpLstmPolicy", env, reward_signals={"extrinsic": {}, "rnd": {}}, **SMALL)
    model.learn(32)
    obs = env.reset()
    actions, state = model.predict(obs, None, np.ones(2), deterministic=True)
    assert state.shape == (2, 8) and actions.shape == (2, *env.action_space.shape)
    _, again = model.predict(obs, state, np.zeros(2), deterministic=True)
    assert not np.allclose(again, state)  # the memory moved on
    _, restarted = model.predict(obs, again, np.ones(2), deterministic=True)
    np.testing.assert_allclose(restarted, state, atol=1e-6)  # an episode start forgets it
    model.save(tmp_path / "model")
    loaded = RecurrentPPO.load(tmp_path / "model", env=env)
    assert loaded.sequence_length == 4 and loaded.policy.memory_size == 8
    for a, b in zip(
        loaded.predict(obs, state, np.zeros(2), True), model.predict(obs, state, np.zeros(2), True)
    ):
        np.testing.assert_allclose(a, b, atol=1e-6)
    loaded.learn(16)


def test_post_memory_layers_sit_between_the_lstms_and_the_heads_and_survive_save_load(tmp_path) -> None:
    env = cue_env()
    model = RecurrentPPO("MlpLstmPolicy", env, policy_kwargs=dict(post_memory_arch=[12]), **SMALL)
    policy = model.policy
    assert policy.lstm_actor.output_size == policy.lstm_critic.output_size == 12
    assert policy.action_net.in_features == 12 and policy.value_net.in_features == 12
    assert any(
        p is policy.lstm_actor.post_memory[0].weight
        for g in policy.optimizer.param_groups
        for p in g["params"]
    )
    model.learn(32)
    obs = env.reset()
    _, state = model.predict(obs, None, np.ones(2), deterministic=True)
    assert state.shape == (2, 8)  # the memory is the LSTM's, whatever comes after it
    model.save(tmp_path / "model")
    loaded = RecurrentPPO.load(tmp_path / "model", env=env)
    assert loaded.policy.post_memory_arch == [12]
    for a, b in zip(
        loaded.predict(obs, state, np.zeros(2), True), model.predict(obs, state, np.zeros(2), True)
    ):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_wrong_state_shape_names_the_expected_one() -> None:
    model = RecurrentPPO("MlpLstmPolicy", cue_env(), **SMALL)
    with pytest.raises(ValueError, match=r"state must be the memories of shape \(2, 8\)"):
        model.predict(np.zeros((2, 2), np.float32), np.zeros((2, 6), np.float32))


@pytest.mark.parametrize(("memory_size", "sequence_length"), [(7, 4), (8, 0)])
def test_bad_memory_settings_fail_at_construction(memory_size: int, sequence_length: int) -> None:
    with pytest.raises(ValueError, match=r"memory_size|sequence_length"):
        RecurrentPPO("MlpLstmPolicy", cue_env(), memory_size=memory_size, sequence_length=sequence_length)


def success_rate(model, n_episodes: int = 40, memory: bool = True) -> float:
    env = cue_env(n_envs=1, seed=123)
    obs, state, start, wins, done_episodes = env.reset(), None, np.ones(1), 0.0, 0
    while done_episodes < n_episodes:
        if memory:
            action, state = model.predict(obs, state, start, deterministic=True)
        else:
            action, _ = model.predict(obs, deterministic=True)
        obs, reward, done, _ = env.step(action)
        start = done.astype(np.float32)
        wins += float(reward[0])
        done_episodes += int(done[0])
    return wins / n_episodes


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_memory_solves_a_cue_task_that_ppo_without_memory_cannot(seed: int) -> None:
    settings = dict(n_steps=32, batch_size=64, n_epochs=4, learning_rate=1e-3, ent_coef=0.0, seed=seed)
    settings["policy_kwargs"] = dict(net_arch=[32])
    recurrent = RecurrentPPO(
        "MlpLstmPolicy", cue_env(n_envs=4), memory_size=16, sequence_length=8, **settings
    )
    recurrent.learn(2048)
    plain = PPO("MlpPolicy", cue_env(n_envs=4), **settings)
    plain.learn(2048)
    assert success_rate(recurrent) >= 0.95
    assert success_rate(plain, memory=False) <= 0.75  # without memory the answer is a coin flip


def cue_demonstrations(n_episodes: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Expert episodes of :class:`CueEnv`: it answers the cue at the last step (action 0 before)."""
    env, observations, actions, dones = CueEnv(), [], [], []
    for episode in range(n_episodes):
        obs, _ = env.reset(seed=seed + episode)
        for t in range(env.length):
            action = int(env.cue > 0) if t == env.length - 1 else 0
            observations.append(obs)
            actions.append([action])
            obs, _, done, _, _ = env.step(action)
            dones.append(done)
    return {"observations": np.array(observations), "actions": np.array(actions), "dones": np.array(dones)}


def test_the_bc_term_trains_the_recurrent_actor_on_demo_sequences() -> None:
    """The expert's last action depends on the first observation only: imitating it needs the memory."""
    bc = {"demonstrations": cue_demonstrations(64), "strength": 1.0, "batch_size": 48, "num_epoch": 8}
    reward_signals = {"extrinsic": {"strength": 0.0}}  # BC alone moves the policy
    model = RecurrentPPO(
        "MlpLstmPolicy",
        cue_env(),
        reward_signals=reward_signals,
        behavioral_cloning=bc,
        learning_rate=3e-3,
        **{**SMALL, "memory_size": 16},
    )
    before = success_rate(model)
    model.learn(16 * 2 * 8)
    assert model.logger.name_to_value["behavioral_cloning/loss"] < 0.2
    assert success_rate(model) >= 0.95 > before


@pytest.mark.parametrize(
    ("scene", "policy", "kwargs"),
    [
        ("Ball3D", "MlpLstmPolicy", dict(num_agents=3, max_steps=20)),  # Box actions
        ("GridWorld", "MultiInputLstmPolicy", dict(max_steps=10)),  # image + vector, Discrete, masks
    ],
)
def test_runs_on_unity_vec_env_scenes(scene: str, policy: str, kwargs: dict) -> None:
    from unity_sb3 import UnityMultiInputExtractor, UnityVecEnv
    from unity_sb3.scenes import make_scene

    env = UnityVecEnv(make_scene(scene, seed=0, **kwargs))
    policy_kwargs = dict(features_extractor_class=UnityMultiInputExtractor, net_arch=[16])
    model = RecurrentPPO(policy, env, policy_kwargs=policy_kwargs, **{**SMALL, "n_steps": 24})
    model.learn(24 * env.num_envs)
    assert model.rollout_buffer.dones.any()  # episode ends inside the rollout
    obs = env.reset()
    actions, state = model.predict(obs, None, np.ones(env.num_envs), deterministic=True)
    assert state.shape == (env.num_envs, 8) and len(actions) == env.num_envs
    env.close()


def test_hybrid_actions_with_memory_honour_the_masks_in_acting_and_in_the_training_sequences() -> None:
    """Unity's hybrid + memory models: the hybrid distribution after the LSTM, env masks everywhere."""
    from stable_baselines3.common.vec_env import DummyVecEnv
    from test_ppo_hybrid import MaskedHybridEnv

    env = DummyVecEnv([MaskedHybridEnv, MaskedHybridEnv])
    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=16, batch_size=16, n_epochs=2, memory_size=8, sequence_length=4, seed=1
    )
    model.learn(64)
    received = [d for e in env.envs for _, d in e.received]
    assert received and all(tuple(d) == (2, 0) for d in received)  # only (2, 0) is allowed
    seq = next(model.rollout_buffer.get(16)).sequences
    assert seq.action_masks is not None and seq.action_masks.shape == (len(seq.mask), 5)
    assert not seq.action_masks[:, [0, 1, 4]].any() and seq.action_masks[:, [2, 3]].all()
    with th.no_grad():
        args = (seq.observations, seq.actions, (seq.actor_memories, seq.critic_memories), seq.episode_starts)
        _, masked, _ = model.policy.evaluate_actions(*args, seq.action_masks)
        _, unmasked, _ = model.policy.evaluate_actions(*args)
    assert (masked > unmasked).all()  # the log-probabilities the update uses are taken under the masks
    (continuous, discrete), memories = model.predict(np.zeros((2, 1), np.float32), None, np.ones(2))
    assert continuous.shape == (2, 2) and discrete.shape == (2, 2) and memories.shape == (2, 8)
