"""SAC with memory (unity_sb3.algorithms.sac.recurrent): sequences sampled from the replay buffer,
memory carried while acting, inactive slots, save/load and a task only memory solves."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from recurrent_onnx import assert_onnx_carries_memory
from stable_baselines3.common.vec_env import DummyVecEnv

from unity_sb3 import SAC
from unity_sb3.algorithms.sac.buffers import SequenceReplayBuffer
from unity_sb3.algorithms.sac.recurrent import SequenceBatch
from unity_sb3.networks.memory import episode_sequences

ACTION_SPACES = {
    "box": spaces.Box(-1.0, 1.0, (1,), np.float32),
    "discrete": spaces.Discrete(2),
    "multidiscrete": spaces.MultiDiscrete([2, 3]),
    "hybrid": spaces.Tuple((spaces.Box(-1.0, 1.0, (1,), np.float32), spaces.MultiDiscrete([2]))),
}


class CueEnv(gym.Env):
    """The cue (+1 or -1) is shown only at the first step; at the last step the action must match it.

    Reward 1 for a match (the first discrete branch's choice, or the sign of the first continuous
    action), else 0: a memoryless policy gets 0.5 on average.
    """

    def __init__(self, action_space: spaces.Space, length: int = 3) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = action_space
        self.length = length

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.cue = 0, float(self.np_random.choice([-1.0, 1.0]))
        return np.array([self.cue, 1.0], np.float32), {}

    def _choice(self, action) -> float:
        if isinstance(self.action_space, spaces.Box):
            return float(np.sign(np.asarray(action).ravel()[0]))
        if isinstance(self.action_space, spaces.Tuple):
            return float(np.sign(np.asarray(action[0]).ravel()[0]))
        return 1.0 if int(np.asarray(action).ravel()[0]) == 1 else -1.0

    def step(self, action) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        done = self.t >= self.length
        reward = float(self._choice(action) == self.cue) if done else 0.0
        return np.zeros(2, np.float32), reward, done, False, {}


def make_sac(action_space: spaces.Space, n_envs: int = 1, **kwargs) -> SAC:
    env = DummyVecEnv([lambda: CueEnv(action_space) for _ in range(n_envs)])
    policy_kwargs = dict(net_arch=[16], memory_size=8, sequence_length=4)
    return SAC(
        "MlpLstmPolicy",
        env,
        buffer_size=500,
        learning_starts=8,
        batch_size=16,
        seed=0,
        policy_kwargs=policy_kwargs,
        **kwargs,
    )


def cue_score(model: SAC, episodes: int = 40) -> float:
    env, rewards = CueEnv(model.action_space), []
    for episode in range(episodes):
        obs, _ = env.reset(seed=1000 + episode)
        memory, start, done, reward = None, np.ones(1, bool), False, 0.0
        while not done:
            action, memory = model.predict(obs[None], memory, start, deterministic=True)
            obs, reward, done, _, _ = env.step(
                action[0] if not isinstance(action, tuple) else tuple(a[0] for a in action)
            )
            start = np.zeros(1, bool)
        rewards.append(reward)
    return float(np.mean(rewards))


def filled_buffer(steps: int, n_envs: int = 2, size: int = 10, length: int = 3) -> SequenceReplayBuffer:
    """A buffer whose step ``t`` of env ``e`` has observation ``[t, e]``, memory ``t`` and an episode start every 4 steps."""
    buffer = SequenceReplayBuffer(
        size,
        spaces.Box(-np.inf, np.inf, (2,)),
        spaces.Box(-1, 1, (1,)),
        n_envs=n_envs,
        memory_size=2,
        sequence_length=length,
    )
    for t in range(steps):
        obs = np.array([[t, e] for e in range(n_envs)], np.float32)
        buffer.set_memories(
            np.full((n_envs, 2), t, np.float32),
            np.full((n_envs, 2), t + 0.5, np.float32),
            np.full(n_envs, float(t % 4 == 0)),
        )
        buffer.add(
            obs,
            obs + 1,
            np.zeros((n_envs, 1)),
            np.zeros(n_envs),
            np.zeros(n_envs),
            [{} for _ in range(n_envs)],
        )
    return buffer


def held_sequences(steps: int, rows: int = 5, length: int = 3) -> list[list[int]]:
    """:func:`filled_buffer`'s training sequences (steps ``t``) still held in its ``rows`` rows per
    env (SB3 gives each env ``size // n_envs``): ML-Agents' cut of the whole history (episode
    starts every 4 steps), the sequence holding the oldest step cut there."""
    history = episode_sequences(np.arange(steps), np.arange(steps) % 4 == 0, length)
    oldest = max(0, steps - rows)
    return [[t for t in piece if t >= oldest] for piece in history if piece[-1] >= oldest]


@pytest.mark.parametrize("steps", [4, 7, 25])  # not yet full (5 rows per env); full and wrapped around
def test_buffer_samples_training_sequences_cut_as_ml_agents_cuts_them(steps: int) -> None:
    buffer = filled_buffer(steps)
    expected = held_sequences(steps)
    np.random.seed(steps)
    for _ in range(20):
        data = buffer.sample(12)
        mask = data.observations.sequence_mask.numpy()
        lengths = mask.sum(axis=1)
        assert np.all(mask == (np.arange(3) < lengths[:, None]))  # real steps first
        assert lengths.sum() >= 12 > lengths[:-1].sum()  # drawn until they hold 12 real steps
        obs = data.observations.observations.numpy()
        pieces = np.split(obs, np.cumsum(lengths)[:-1])
        for piece in pieces:
            assert np.all(piece[:, 1] == piece[0, 1])  # one env per sequence
            assert piece[:, 0].astype(int).tolist() in expected
        first_t = np.array([piece[0, 0] for piece in pieces])
        np.testing.assert_array_equal(data.observations.memories.numpy()[:, 0], first_t)
        np.testing.assert_array_equal(data.next_observations.memories.numpy()[:, 0], first_t + 0.5)
        starts = data.observations.episode_starts.numpy()
        np.testing.assert_array_equal(starts, obs[:, 0] % 4 == 0)
        firsts = np.r_[0, np.cumsum(lengths)[:-1]]
        assert np.all(np.delete(starts, firsts) == 0)  # no episode starts inside a sequence
        np.testing.assert_array_equal(data.next_observations.episode_starts.numpy(), 0.0)
        np.testing.assert_array_equal(data.next_observations.observations.numpy(), obs + 1)


def test_buffer_draws_each_sequence_equally_often_whatever_its_length() -> None:
    """ML-Agents samples its (padded) sequences uniformly; here lengths 3, 1, 3, 1."""
    buffer = filled_buffer(8, n_envs=1)
    np.random.seed(0)
    firsts = [buffer.sample(1).observations.observations[0, 0].item() for _ in range(2000)]
    counts = np.array([firsts.count(t) for t in (0.0, 3.0, 4.0, 7.0)])
    assert counts.sum() == 2000
    assert np.all(np.abs(counts / 2000 - 0.25) < 0.04), counts


def test_buffer_samples_shorter_sequences_while_it_holds_fewer_steps() -> None:
    data = filled_buffer(2).sample(6)
    mask = data.observations.sequence_mask.numpy()
    assert mask.tolist() == [[True, True, False]] * 3
    np.testing.assert_array_equal(data.observations.observations.numpy()[:, 0], [0, 1] * 3)
    with pytest.raises(ValueError, match="empty"):
        filled_buffer(0).sample(6)


@pytest.mark.parametrize("net", ["actor", "critic"])
def test_sequences_of_different_lengths_unroll_as_each_alone(net: str) -> None:
    model = make_sac(ACTION_SPACES["box"])
    network = getattr(model, net)
    extractor = network.features_extractor
    obs, stored = th.randn(4, 2), th.randn(2, 8)
    mask = th.tensor([[True, True, True], [True, False, False]])
    starts = th.tensor([1.0, 0.0, 0.0, 0.0])
    together = network.extract_features(SequenceBatch(obs, starts, stored, mask), extractor)
    first = network.extract_features(SequenceBatch(obs[:3], starts[:3], stored[:1]), extractor)
    second = network.extract_features(SequenceBatch(obs[3:], starts[3:], stored[1:]), extractor)
    th.testing.assert_close(together, th.cat([first, second]))


@pytest.mark.parametrize("name", ["box", "discrete"])
def test_actor_unrolls_from_the_stored_memory_and_the_q_networks_from_zeros(name: str) -> None:
    """ML-Agents' SAC: sequences start from the actor's stored memory; Q networks start from zero memory."""
    model = make_sac(ACTION_SPACES[name])
    obs = th.randn(6, 2)  # 2 sequences of 3 steps
    starts = th.tensor(
        [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    )  # the first sequence starts an episode at its third step
    stored, zeros = th.randn(2, 8), th.zeros(2, 8)
    for net, starts_from_stored in [(model.actor, True), (model.critic, False), (model.critic_target, False)]:
        extractor = net.features_extractor
        with_stored = net.extract_features(SequenceBatch(obs, starts, stored), extractor)
        with_zeros = net.extract_features(SequenceBatch(obs, starts, zeros), extractor)
        differs = ~th.isclose(with_stored, with_zeros).all(dim=1)
        # the stored memory matters before the episode start of sequence 1, everywhere in sequence 2
        assert differs.tolist() == (
            [True, True, False, True, True, True] if starts_from_stored else [False] * 6
        )


@pytest.mark.parametrize("name", list(ACTION_SPACES))
def test_predict_carries_the_memory_and_episode_start_resets_it(name: str) -> None:
    model = make_sac(ACTION_SPACES[name])
    obs = np.array([[1.0, 1.0], [-1.0, 1.0]], np.float32)
    _, memory = model.predict(obs)
    assert memory.shape == (2, 8) and np.abs(memory).sum() > 0
    _, carried = model.predict(np.zeros_like(obs), memory, np.zeros(2, bool))
    _, reset = model.predict(np.zeros_like(obs), memory, np.ones(2, bool))
    _, fresh = model.predict(np.zeros_like(obs))
    assert not np.allclose(carried, fresh)
    np.testing.assert_allclose(reset, fresh, atol=1e-6)
    with pytest.raises(ValueError, match="state must be the memories"):
        model.predict(obs, np.zeros((2, 3)))


def test_an_inactive_slot_keeps_its_memory() -> None:
    model = make_sac(ACTION_SPACES["box"], n_envs=2)
    model._setup_learn(10)
    model._sample_action(0, None, 2)
    before = model._step_memories[0].copy()
    buffer = model.replay_buffer
    obs = np.zeros((2, 2), np.float32)
    model._store_transition(buffer, np.zeros((2, 1)), obs, np.zeros(2), np.zeros(2), [{"active": False}, {}])
    np.testing.assert_array_equal(model._memories[0], before[0])
    assert not np.allclose(model._memories[1], before[1])
    np.testing.assert_array_equal(buffer.next_memories[0, 0], before[0])


@pytest.mark.parametrize("name", list(ACTION_SPACES))
def test_trains_and_reloads_with_the_same_actions_and_memory(name: str, tmp_path) -> None:
    model = make_sac(ACTION_SPACES[name], n_envs=2)
    model.learn(40)
    obs = np.array([[1.0, 1.0], [-1.0, 1.0]], np.float32)
    action, memory = model.predict(obs, deterministic=True)
    model.save(tmp_path / "model.zip")
    loaded = SAC.load(tmp_path / "model.zip")
    assert loaded.policy.memory_size == 8 and loaded.policy.sequence_length == 4
    loaded_action, loaded_memory = loaded.predict(obs, deterministic=True)
    np.testing.assert_allclose(loaded_memory, memory, atol=1e-6)
    for a, b in zip(
        *((action, loaded_action) if isinstance(action, tuple) else ((action,), (loaded_action,)))
    ):
        np.testing.assert_allclose(a, b, atol=1e-6)
    loaded.set_env(model.get_env())
    loaded.learn(20, reset_num_timesteps=False)


def test_trains_with_reward_signals() -> None:
    model = make_sac(
        ACTION_SPACES["discrete"], reward_signals={"extrinsic": {}, "curiosity": {"strength": 0.01}}
    )
    model.learn(40)
    assert model.logger.name_to_value["reward_signals/curiosity/reward"] >= 0.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"behavioral_cloning": {"demo_path": "x.demo"}}, "behavioral_cloning"),
        ({"n_steps": 2}, "n_steps"),
        ({"policy_kwargs": dict(memory_size=7)}, "even"),
    ],
)
def test_refuses_what_memory_does_not_support(kwargs: dict, match: str) -> None:
    env = DummyVecEnv([lambda: CueEnv(ACTION_SPACES["box"])])
    with pytest.raises(ValueError, match=match):
        SAC("MlpLstmPolicy", env, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "policy", "low", "high"),
    [
        ("discrete", "MlpLstmPolicy", 0.9, 1.0),
        ("box", "MlpLstmPolicy", 0.9, 1.0),
        ("discrete", "MlpPolicy", 0.0, 0.75),  # without memory: a guess, 0.5 on average
    ],
)
def test_learns_a_cue_shown_only_at_the_first_step(name: str, policy: str, low: float, high: float) -> None:
    env = DummyVecEnv([lambda: CueEnv(ACTION_SPACES[name])])
    policy_kwargs: dict = dict(net_arch=[32])
    if policy == "MlpLstmPolicy":
        policy_kwargs.update(memory_size=32, sequence_length=4)
    model = SAC(
        policy,
        env,
        buffer_size=5000,
        learning_starts=200,
        batch_size=64,
        learning_rate=3e-3,
        seed=0,
        policy_kwargs=policy_kwargs,
    )
    model.learn(1500)
    score = cue_score(model)
    print(f"cue score {name} {policy}: {score:.3f}")  # RESULTS.md quotes it (pytest -s)
    assert low <= score <= high


@pytest.mark.parametrize("name", ["box", "discrete", "hybrid"])
def test_onnx_export_carries_the_memory_as_predict(name: str, tmp_path) -> None:
    """Unity's recurrent contract: recurrent_in/out (batch, 1, memory_size) equal predict's memory, step by step."""
    from unity_sb3.export import to_onnx

    model = make_sac(ACTION_SPACES[name])
    assert_onnx_carries_memory(model, to_onnx(model, tmp_path / "policy.onnx"), memory_size=8)
