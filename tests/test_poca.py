"""POCA end to end on a tiny group VecEnv written here, and on PettingZoo through the adapter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

from unity_sb3.algorithms.poca import POCA
from unity_sb3.algorithms.poca.buffers import POCARolloutBuffer
from unity_sb3.wrappers.pettingzoo_vec_env import PettingZooVecEnv


class SacrificeVecEnv(VecEnv):
    """Groups of 3 slots (one per instance). Action 0 of branch 0 = "sacrifice": that agent dies
    (done, reward 0) and its slot is inactive; the next step the survivors get group reward +1
    and the group ends. Nobody sacrificing for ``horizon`` steps truncates the group with 0.
    Records every action it received with the slot's activity, so tests can check masks and
    that inactive actions are dropped.
    """

    def __init__(self, action: str = "discrete", n_instances: int = 1, masks: bool = False, horizon: int = 4):
        self.kind = action
        self.n_instances = n_instances
        self.horizon = horizon
        self.masks = masks
        n = 3 * n_instances
        self.render_mode = None
        action_space: spaces.Space = {
            "discrete": spaces.Discrete(3),
            "multidiscrete": spaces.MultiDiscrete([3, 2]),
            "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
        }[action]
        super().__init__(n, spaces.Box(-1.0, 1.0, (4,), np.float32), action_space)
        self.received: list[tuple[np.ndarray, np.ndarray]] = []
        self._actions: np.ndarray | None = None
        self._reset_all()

    def _reset_all(self) -> None:
        self.alive = np.ones(self.num_envs, dtype=bool)
        self.t = np.zeros(self.n_instances, dtype=int)
        self.pending_win = np.zeros(self.n_instances, dtype=bool)

    def _obs(self) -> np.ndarray:
        obs = np.zeros((self.num_envs, 4), dtype=np.float32)
        for g in range(self.n_instances):
            sl = slice(3 * g, 3 * g + 3)
            obs[sl, 0] = self.t[g] / self.horizon
            obs[sl, 1] = self.alive[sl].sum() / 3.0
            obs[sl, 2] = np.arange(3) / 3.0
        obs[~self.alive] = 0.0
        return obs

    def _info(self, i: int) -> dict[str, Any]:
        return {"active": bool(self.alive[i]), "group_id": 1, "instance": i // 3, "group_reward": 0.0}

    def reset(self):
        self._reset_all()
        self.reset_infos = [self._info(i) for i in range(self.num_envs)]
        return self._obs()

    def step_async(self, actions):
        self._actions = np.asarray(actions)

    def _sacrifices(self, actions: np.ndarray) -> np.ndarray:
        if self.kind == "discrete":
            return actions.reshape(-1) == 0
        if self.kind == "multidiscrete":
            return actions[:, 0] == 0
        return actions[:, 0] < -0.5

    def step_wait(self):
        actions = self._actions
        self.received.append((actions.copy(), self.alive.copy()))
        n = self.num_envs
        rewards = np.zeros(n, dtype=np.float32)
        dones = np.zeros(n, dtype=bool)
        infos = [self._info(i) for i in range(n)]
        sacrifice = self._sacrifices(actions) & self.alive
        for g in range(self.n_instances):
            sl = np.arange(3 * g, 3 * g + 3)
            self.t[g] += 1
            end, truncated, group_reward = False, False, 0.0
            if self.pending_win[g]:
                end, group_reward = True, 1.0
            elif sacrifice[sl].any():
                first = sl[np.flatnonzero(sacrifice[sl])[0]]
                dones[first] = True
                infos[first].update(terminal_observation=self._obs()[first], **{"TimeLimit.truncated": False})
                self.alive[first] = False
                self.pending_win[g] = True
            elif self.t[g] >= self.horizon:
                end, truncated = True, True
            if end:
                terminal = self._obs()
                for i in sl[self.alive[sl]]:
                    dones[i] = True
                    infos[i].update(
                        terminal_observation=terminal[i],
                        group_reward=group_reward,
                        **{"TimeLimit.truncated": truncated},
                    )
                self.alive[sl] = True
                self.t[g] = 0
                self.pending_win[g] = False
        obs = self._obs()
        for i in range(n):
            infos[i]["active"] = bool(self.alive[i])
        return obs, rewards, dones, infos

    def action_masks(self) -> np.ndarray:
        width = 3 if self.kind == "discrete" else 5
        masks = np.ones((self.num_envs, width), dtype=bool)
        masks[:, 1] = False  # action 1 of branch 0 is never allowed
        return masks

    def close(self):
        pass

    def get_attr(self, attr_name, indices=None):
        if attr_name == "action_masks" and not self.masks:
            raise AttributeError(attr_name)
        return [getattr(self, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name, value, indices=None):
        setattr(self, attr_name, value)

    def env_method(self, method_name, *args, indices=None, **kwargs):
        if method_name == "action_masks":
            return list(self.action_masks()[list(self._get_indices(indices))])
        return [getattr(self, method_name)(*args, **kwargs) for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False for _ in self._get_indices(indices)]


SMALL = dict(
    n_steps=16, batch_size=32, n_epochs=2, policy_kwargs=dict(net_arch=[32], critic_embed_dim=16), seed=0
)


@pytest.mark.parametrize("action", ["discrete", "multidiscrete", "box"])
def test_learn_runs_on_every_action_space(action):
    env = SacrificeVecEnv(action, n_instances=2)
    model = POCA("MlpPolicy", env, **SMALL).learn(64)
    assert model.num_timesteps >= 64
    buffer = model.rollout_buffer
    assert buffer.active.any() and not buffer.active.all()  # dead agents left inactive rows
    assert np.isfinite(buffer.returns).all() and np.isfinite(buffer.baselines).all()


def test_inactive_rows_never_sampled():
    env = SacrificeVecEnv()
    model = POCA("MlpPolicy", env, **SMALL)
    model.learn(48)
    buffer = model.rollout_buffer
    n_rows = sum(batch.returns.shape[0] for batch in buffer.get(7))
    assert n_rows == int(buffer.active.sum()) < buffer.active.size


def test_group_keys_use_instance_and_mates_stay_within_it():
    env = SacrificeVecEnv(n_instances=2)
    model = POCA("MlpPolicy", env, **SMALL)
    model.learn(16)
    buffer: POCARolloutBuffer = model.rollout_buffer
    t = int(np.flatnonzero(buffer.active.all(axis=1))[0])
    assert len(set(buffer.group_keys[t, :3])) == 1 and len(set(buffer.group_keys[t, 3:])) == 1
    assert buffer.group_keys[t, 0] != buffer.group_keys[t, 3]
    assert set(buffer.mates[t, 0].tolist()) == {1, 2}
    assert set(buffer.mates[t, 4].tolist()) == {3, 5}


def test_posthumous_credit_in_a_real_rollout():
    """The agent that died bootstraps from V of its group at the next step (the survivor's row), not
    from zero: the +1 it never saw reaches it through the critic. The survivor's return has it."""
    env = SacrificeVecEnv()
    model = POCA("MlpPolicy", env, gamma=0.9, gae_lambda=1.0, **SMALL)
    model.learn(48)
    b = model.rollout_buffer
    for t in range(b.buffer_size - 2):
        died = np.flatnonzero(b.dones[t] & b.active[t] & ~b.truncated[t])
        if died.size == 1 and b.group_rewards[t + 1].max() == 1.0:
            survivor = np.flatnonzero(b.active[t + 1])[0]
            assert b.values[t + 1, survivor] != 0.0
            assert b.returns[t, died[0]] == pytest.approx(0.9 * b.values[t + 1, survivor], rel=1e-5)
            assert b.returns[t, survivor] == pytest.approx(0.9 * 1.0)
            return
    pytest.fail("no sacrifice followed by a win in the rollout")


def test_masked_actions_never_sampled_and_inactive_dropped():
    env = SacrificeVecEnv("multidiscrete", masks=True)
    model = POCA("MlpPolicy", env, **SMALL).learn(64)
    actions = np.concatenate([a for a, _ in env.received])
    assert not (actions[:, 0] == 1).any()
    assert model.rollout_buffer.has_masks
    masks = np.ones((5, 5), dtype=bool)
    masks[:, 1] = False
    predicted, _ = model.predict(np.zeros((5, 4), np.float32), action_masks=masks)
    assert not (predicted[:, 0] == 1).any()


def test_masks_ignored_when_disabled():
    env = SacrificeVecEnv(masks=True)
    model = POCA("MlpPolicy", env, use_masking=False, **SMALL).learn(32)
    assert not model.rollout_buffer.has_masks


def test_predict_deterministic_and_save_load_round_trip(tmp_path):
    env = SacrificeVecEnv("box")
    model = POCA("MlpPolicy", env, **SMALL).learn(32)
    obs = np.random.default_rng(0).uniform(-1, 1, (6, 4)).astype(np.float32)
    a1, _ = model.predict(obs, deterministic=True)
    a2, _ = model.predict(obs, deterministic=True)
    np.testing.assert_array_equal(a1, a2)
    model.save(tmp_path / "poca")
    loaded = POCA.load(tmp_path / "poca", env=env)
    np.testing.assert_allclose(loaded.predict(obs, deterministic=True)[0], a1, rtol=1e-6)
    with th.no_grad():
        obs_t = th.as_tensor(obs[:3]).unsqueeze(0)
        mask = th.ones((1, 3), dtype=th.bool)
        assert loaded.policy.predict_group_values(obs_t, mask).item() == pytest.approx(
            model.policy.predict_group_values(obs_t, mask).item(), rel=1e-6
        )
    loaded.learn(16, reset_num_timesteps=False)  # continues training


def test_linear_schedules_decay_to_ml_agents_floors():
    env = SacrificeVecEnv()
    model = POCA("MlpPolicy", env, learning_rate=1e-3, clip_range=0.3, ent_coef=0.01, **SMALL)
    assert model.lr_schedule(1.0) == pytest.approx(1e-3)
    assert model.lr_schedule(0.0) == pytest.approx(1e-10)
    assert model.clip_range_schedule(0.0) == pytest.approx(0.1)
    assert model.ent_coef_schedule(0.0) == pytest.approx(1e-5)
    constant = POCA("MlpPolicy", env, schedule="constant", **SMALL)
    assert constant.clip_range_schedule(0.0) == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(schedule="cosine"), "schedule"),
        (dict(batch_size=0), "batch_size"),
        (dict(clip_range=-1.0), "clip"),
        (dict(time_horizon=0), "time_horizon must be a whole number"),
        (dict(time_horizon=2.5), "time_horizon must be a whole number"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        POCA("MlpPolicy", SacrificeVecEnv(), **kwargs)


def test_time_horizon_cuts_every_n_decisions_of_an_agents_episode_across_rollouts():
    """``chunk_ends`` marks every ``time_horizon``-th decision since the episode started or the last
    cut, counting decisions only (not placeholder steps), across rollout boundaries, never at an
    episode's end; the returns then stop there (tests/test_poca_buffers.py)."""
    horizon = 3
    model = POCA("MlpPolicy", SacrificeVecEnv(n_instances=2, horizon=7), time_horizon=horizon, **SMALL)
    env = model.env
    counts = np.zeros(env.num_envs, dtype=int)
    marked = 0
    for _ in range(3):  # three rollouts of 16 steps, one learn() each, the counts carried over
        model.learn(16 * env.num_envs, reset_num_timesteps=False)
        buffer = model.rollout_buffer
        for t in range(buffer.buffer_size):
            counts += buffer.active[t]
            want = buffer.active[t] & (counts >= horizon) & ~buffer.dones[t]
            np.testing.assert_array_equal(buffer.chunk_ends[t], want)
            counts[want | buffer.dones[t]] = 0
            marked += want.sum()
    assert marked > 0
    assert POCA("MlpPolicy", SacrificeVecEnv(), **SMALL).learn(16).rollout_buffer.chunk_ends.sum() == 0


def test_callbacks_logger_and_tensorboard(tmp_path):
    class Count(BaseCallback):
        def __init__(self):
            super().__init__()
            self.steps = 0

        def _on_step(self) -> bool:
            self.steps += 1
            return True

    callback = Count()
    model = POCA("MlpPolicy", SacrificeVecEnv(), tensorboard_log=str(tmp_path), **SMALL)
    model.learn(32, callback=callback, progress_bar=True)
    assert callback.steps == SMALL["n_steps"]  # one rollout of 16 steps x 3 slots covers 32
    assert any(tmp_path.rglob("events.*"))


def test_group_attention_handles_any_group_size():
    model = POCA("MlpPolicy", SacrificeVecEnv(), **SMALL)
    policy = model.policy
    obs = th.randn(2, 5, 4)
    mask = th.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=th.bool)
    values = policy.predict_group_values(obs, mask)
    # padding content must not matter
    obs2 = obs.clone()
    obs2[0, 2:] = 99.0
    assert policy.predict_group_values(obs2, mask)[0].item() == pytest.approx(values[0].item(), abs=1e-5)
    # groups of one: baseline with zero groupmates
    b = policy.predict_baselines(obs[:, 0], obs[:, :0], th.zeros(2, 0, 1), th.zeros(2, 0, dtype=th.bool))
    assert b.shape == (2,)


@pytest.mark.parametrize("n_mates", [0, 1, 3])
@pytest.mark.parametrize("action", ["discrete", "box"])
def test_fused_critic_pass_equals_separate_value_and_baseline(n_mates, action):
    policy = POCA("MlpPolicy", SacrificeVecEnv(action), **SMALL).policy
    gen = th.Generator().manual_seed(n_mates)
    own, mates = th.randn(6, 4, generator=gen), th.randn(6, n_mates, 4, generator=gen)
    action_dim = 1 if action == "discrete" else 2
    mate_actions = th.randint(0, 3, (6, n_mates, action_dim), generator=gen).float()
    mate_mask = th.rand(6, n_mates, generator=gen) > 0.3
    values, baselines = policy.predict_values_and_baselines(own, mates, mate_actions, mate_mask)
    members = th.cat([own.unsqueeze(1), mates], dim=1)
    member_mask = th.cat([th.ones(6, 1, dtype=th.bool), mate_mask], dim=1)
    th.testing.assert_close(values, policy.predict_group_values(members, member_mask))
    th.testing.assert_close(baselines, policy.predict_baselines(own, mates, mate_actions, mate_mask))


def test_single_entity_attention_shortcut_equals_full_attention():
    attention = POCA("MlpPolicy", SacrificeVecEnv(), **SMALL).policy.critic.attention
    entities = th.randn(5, 1, attention.attention.embed_dim)
    mask = th.ones(5, 1, dtype=th.bool)
    padded = th.cat([entities, th.randn(5, 1, entities.shape[-1])], dim=1)
    padded_mask = th.cat([mask, th.zeros(5, 1, dtype=th.bool)], dim=1)
    # With a padded second entity the full attention runs; pooling sees only the first.
    th.testing.assert_close(attention(entities, mask), attention(padded, padded_mask))


def test_critic_attention_equals_torch_multihead_attention():
    """The critic's attention block is nn.MultiheadAttention's computation (forward and gradients)."""
    from torch import nn

    attention = POCA("MlpPolicy", SacrificeVecEnv(), **SMALL).policy.critic.attention
    gen = th.Generator().manual_seed(0)
    entities = th.randn(7, 3, attention.attention.embed_dim, generator=gen)
    mask = th.rand(7, 3, generator=gen) > 0.4
    mask[:, 0] = True

    def reference(x: th.Tensor) -> th.Tensor:
        normed = attention.input_norm(x)
        attended, _ = attention.attention(normed, normed, normed, key_padding_mask=~mask, need_weights=False)
        mixed = attention.residual_norm(x + attention.output(attended))
        weights = mask.unsqueeze(-1).float()
        return (mixed * weights).sum(dim=1) / weights.sum(dim=1)

    assert isinstance(attention.attention, nn.MultiheadAttention)
    out = attention(entities, mask)
    th.testing.assert_close(out, reference(entities))
    grads = th.autograd.grad(out.square().sum(), list(attention.parameters()))
    expected = th.autograd.grad(reference(entities).square().sum(), list(attention.parameters()))
    for grad, want in zip(grads, expected):
        th.testing.assert_close(grad, want)


def test_critic_pass_by_group_size_equals_the_padded_pass():
    """Rows whose groups lost members go through at their own width: the same V and b."""
    critic = POCA("MlpPolicy", SacrificeVecEnv(), **SMALL).policy.critic
    gen = th.Generator().manual_seed(1)
    features = th.randn(9, 4, critic.obs_encoder[0].in_features, generator=gen)
    actions = th.randn(9, 3, critic.obs_action_encoder[0].in_features - features.shape[-1], generator=gen)
    sizes = th.tensor([4, 1, 2, 3, 2, 4, 1, 3, 2])
    mask = th.arange(4) < sizes.unsqueeze(1)
    values, baselines = critic.value_and_baseline(features, actions, mask)
    entities, entity_mask = critic.value_and_baseline_entities(features, actions, mask)
    padded = critic._pool(entities, entity_mask)
    th.testing.assert_close(values, padded[:9])
    th.testing.assert_close(baselines, padded[9:])
    assert critic.max_entities == 4


@pytest.mark.parametrize("branches", [[5], [3, 2, 4]])
@pytest.mark.parametrize("masked", [False, True])
def test_fast_categorical_sampling_equals_sb3_contrib_distribution(branches, masked):
    """POCAPolicy's paths without distribution objects (forward, evaluate_actions) give the same
    actions (the same draws), and log-probabilities, entropies and gradients equal to float rounding
    (one log_softmax of the masked logits for sb3-contrib's two normalisations)."""
    from sb3_contrib.common.maskable.distributions import make_masked_proba_distribution

    from unity_sb3.algorithms.poca.sampling import sample_masked_categorical

    space = spaces.Discrete(branches[0]) if len(branches) == 1 else spaces.MultiDiscrete(branches)
    gen = th.Generator().manual_seed(len(branches))
    logits = th.randn(64, sum(branches), generator=gen) * 3
    masks = None
    if masked:
        masks = (th.rand(64, sum(branches), generator=gen) > 0.4).numpy()
        start = 0
        for size in branches:  # at least one allowed action per branch
            masks[:, start] = True
            start += size
    for deterministic in (False, True):
        distribution = make_masked_proba_distribution(space).proba_distribution(action_logits=logits)
        if masks is not None:
            distribution.apply_masking(masks)
        th.manual_seed(3)
        want = distribution.get_actions(deterministic=deterministic)
        want_log_prob = distribution.log_prob(want)
        th.manual_seed(3)
        actions, log_prob = sample_masked_categorical(logits, branches, masks, deterministic)
        assert th.equal(actions, want)
        th.testing.assert_close(log_prob, want_log_prob, rtol=1e-6, atol=1e-6)

    # log-probabilities and entropies of given actions (the update's path), with their gradients
    from unity_sb3.algorithms.poca.sampling import masked_categorical_log_prob_entropy

    leaf = logits.clone().requires_grad_(True)
    distribution = make_masked_proba_distribution(space).proba_distribution(action_logits=leaf)
    if masks is not None:
        distribution.apply_masking(th.as_tensor(masks))
    want_log_prob, want_entropy = distribution.log_prob(want), distribution.entropy()
    want_grad = th.autograd.grad((want_log_prob + 0.1 * want_entropy).sum(), leaf)[0]
    log_prob, entropy = masked_categorical_log_prob_entropy(
        leaf, branches, want, None if masks is None else th.as_tensor(masks)
    )
    grad = th.autograd.grad((log_prob + 0.1 * entropy).sum(), leaf)[0]
    th.testing.assert_close(log_prob, want_log_prob, rtol=1e-6, atol=1e-6)
    th.testing.assert_close(entropy, want_entropy, rtol=1e-6, atol=1e-6)
    th.testing.assert_close(grad, want_grad, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- PettingZoo


def _pistonball_like():
    from pettingzoo.test import parallel_api_test  # noqa: F401  (ensures pettingzoo present)
    from pettingzoo.utils.env import ParallelEnv

    class Tiny(ParallelEnv):
        """4 agents; an agent that picks 1 terminates; the episode truncates after 5 steps."""

        metadata = {"name": "tiny_v0"}

        def __init__(self):
            self.possible_agents = [f"a{i}" for i in range(4)]
            self.agents = []

        def observation_space(self, agent):
            return spaces.Dict(
                {"observation": spaces.Box(0, 1, (2,), np.float32), "action_mask": spaces.MultiBinary(2)}
            )

        def action_space(self, agent):
            return spaces.Discrete(2)

        def _obs(self, agent):
            return {
                "observation": np.array([self.t / 5, 1.0], np.float32),
                "action_mask": np.array([1, 1], np.int8),
            }

        def reset(self, seed=None, options=None):
            self.agents = list(self.possible_agents)
            self.t = 0
            return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

        def step(self, actions):
            self.t += 1
            obs = {a: self._obs(a) for a in self.agents}
            rew = {a: float(actions[a]) for a in self.agents}
            term = {a: bool(actions[a] == 1) for a in self.agents}
            trunc = {a: self.t >= 5 for a in self.agents}
            self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
            return obs, rew, term, trunc, {a: {} for a in obs}

    return Tiny()


@pytest.mark.parametrize(
    "group_fn",
    [None, lambda name: 1 + int(name[1:]) % 2, lambda name: 0],
    ids=["one_group", "two_groups", "solo"],
)
def test_pettingzoo_adapter_slots_groups_and_learning(group_fn):
    venv = PettingZooVecEnv(_pistonball_like(), group_fn=group_fn)
    obs = venv.reset()
    assert obs.shape == (4, 2) and venv.action_masks().shape == (4, 2)
    obs, _, dones, infos = venv.step(np.array([1, 0, 0, 0]))
    assert dones.tolist() == [True, False, False, False]
    assert infos[0]["TimeLimit.truncated"] is False and not infos[0]["active"]
    assert all(info["active"] for info in infos[1:])
    expected_groups = [1 if group_fn is None else group_fn(f"a{i}") for i in range(1, 4)]
    assert [info["group_id"] for info in infos[1:]] == expected_groups
    for _ in range(4):
        obs, _rewards, dones, infos = venv.step(np.zeros(4, dtype=int))
    assert dones[1:].all() and all(info["TimeLimit.truncated"] for info in infos[1:])
    assert all(info["active"] for info in infos)  # env reset: every slot has a new agent
    model = POCA("MlpPolicy", venv, **SMALL).learn(64)
    buffer = model.rollout_buffer
    assert buffer.has_masks
    if group_fn is not None and group_fn("a0") == 0:
        assert buffer.mates.shape[2] == 0  # groups of one: no groupmates anywhere


def test_pettingzoo_adapter_refuses_mixed_spaces():
    env = _pistonball_like()
    env.action_space = lambda agent: spaces.Discrete(2 if agent == "a0" else 3)
    with pytest.raises(ValueError, match="pad_action_space"):
        PettingZooVecEnv(env)


def test_pettingzoo_adapter_takes_unity_groups_from_infos():
    from unity_sb3 import UnityParallelEnv

    # Escape with 6 agents: two rooms, i.e. two Unity groups of 3
    penv = UnityParallelEnv("Escape", open_kwargs={"num_agents": 6, "seed": 0})
    try:
        venv = PettingZooVecEnv(penv)
        venv.reset()
        groups = [info["group_id"] for info in venv.reset_infos]
        assert len(set(groups)) == 2 and sorted(groups.count(g) for g in set(groups)) == [3, 3]
        _, _, _, infos = venv.step(np.zeros(6, dtype=int))
        assert {info["group_id"] for info in infos if info["active"]} == set(groups)
        # an explicit group_fn still wins
        solo = PettingZooVecEnv(penv, group_fn=lambda _: 0)
        solo.reset()
        assert {info["group_id"] for info in solo.reset_infos} == {0}
    finally:
        penv.close()


def test_poca_silences_the_plain_sb3_inactive_warning():
    import warnings

    from stable_baselines3.common.vec_env import VecMonitor

    from unity_sb3 import UnityVecEnv

    venv = UnityVecEnv("Escape", open_kwargs={"num_agents": 3, "seed": 0})
    model = POCA("MlpPolicy", VecMonitor(venv), **SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model.learn(256)  # agents die: inactive slots occur, and POCA skips them without a warning
    assert venv.warn_inactive is False
    venv.close()


# ------------------------------------------------- group rewards, out-of-phase mates, reset infos


def _scripted_group(agents, **kwargs):
    from unity_sb3 import UnityVecEnv
    from unity_sb3.scenes.scripted import ScriptedEnv

    return UnityVecEnv(ScriptedEnv(agents), **kwargs)


@pytest.mark.parametrize("add_group_reward", [False, True])
def test_group_reward_counts_once_per_agent_per_step(add_group_reward):
    """3 agents in one group, individual reward 0.5 and group reward 1 per step: each agent's
    team reward is 3 * 0.5 + 1 = 2.5 whether or not the env also put the group reward into the
    reward (before: 3 * 1.5 = 4.5 with add_group_reward=True)."""
    from unity_sb3.scenes.scripted import ScriptedAgent

    agents = [ScriptedAgent(reward=0.5, group_id=1, group_reward=1.0) for _ in range(3)]
    venv = _scripted_group(agents, add_group_reward=add_group_reward)
    model = POCA("MlpPolicy", venv, **SMALL).learn(48)
    buffer = model.rollout_buffer
    assert buffer.active.all()
    np.testing.assert_allclose(buffer.rewards, 0.5)  # the individual reward alone
    np.testing.assert_allclose(buffer.group_rewards, 1.0)
    np.testing.assert_allclose(buffer.team_rewards, 2.5)
    venv.close()


def test_group_reward_added_by_a_normalizing_wrapper_is_refused():
    from stable_baselines3.common.vec_env import VecNormalize

    from unity_sb3.scenes.scripted import ScriptedAgent

    venv = _scripted_group([ScriptedAgent(group_id=1, group_reward=1.0)] * 2, add_group_reward=True)
    model = POCA("MlpPolicy", VecNormalize(venv, norm_reward=True), **SMALL)
    with pytest.raises(ValueError, match="add_group_reward"):
        model.learn(16)
    venv.close()


def test_alive_groupmate_between_decisions_stays_in_critic_and_baseline():
    """Two groupmates decide on alternate steps: each decision sees the other with its last
    observation and action, in V and in the baseline, across rollout boundaries too."""
    from unity_sb3.scenes.scripted import ScriptedAgent

    agents = [ScriptedAgent(period=2, group_id=1), ScriptedAgent(period=2, start=1, group_id=1)]
    venv = _scripted_group(agents, num_slots=2)
    # learning rate 0: the stored values stay those of the current critic
    model = POCA("MlpPolicy", venv, learning_rate=0.0, schedule="constant", **SMALL).learn(16)
    model.learn(16, reset_num_timesteps=False)  # the second starts with a mate from the first
    buffer: POCARolloutBuffer = model.rollout_buffer
    assert buffer.active.sum(axis=1).tolist() == [1] * SMALL["n_steps"]  # one decision per step
    for t in range(buffer.buffer_size):
        i = int(np.flatnonzero(buffer.active[t])[0])
        sample = buffer._gather(np.array([t * 2 + i]))
        assert sample.mate_mask.tolist() == [[True]], f"row {t}: the waiting groupmate is missing"
        mate_obs = sample.mate_observations[0, 0].numpy()
        if t > 0:  # its last decision was the previous row
            np.testing.assert_array_equal(mate_obs, buffer.observations[t - 1, 1 - i])
            np.testing.assert_array_equal(sample.mate_actions[0, 0].numpy(), buffer.actions[t - 1, 1 - i])
        assert mate_obs[0] == 1 - i  # scripted observation column 0: the agent's index
        with th.no_grad():
            both = th.as_tensor(np.stack([buffer.observations[t, i], mate_obs]))[None]
            value = model.policy.predict_group_values(both, th.ones((1, 2), dtype=th.bool)).item()
        assert buffer.values[t, i] == pytest.approx(value, abs=1e-5)
    # the rollout-end bootstrap of slot 0 (deciding next) also sees slot 1 as it last decided
    last = buffer.buffer_size - 1
    assert buffer.active[last].tolist() == [False, True]
    with th.no_grad():
        both = th.as_tensor(np.stack([model._last_obs[0], buffer.observations[last, 1]]))[None]
        last_value = model.policy.predict_group_values(both, th.ones((1, 2), dtype=th.bool)).item()
    expected = buffer.team_rewards[last - 1, 0] + model.gamma * last_value
    assert buffer.returns[last - 1, 0] == pytest.approx(expected, abs=1e-5)
    venv.close()


def test_dead_groupmate_leaves_the_critic():
    """SacrificeVecEnv: a dead agent's slot is inactive until its group ends; it is not a mate."""
    model = POCA("MlpPolicy", SacrificeVecEnv(), **SMALL).learn(48)
    b = model.rollout_buffer
    for t in range(b.buffer_size):
        for i in np.flatnonzero(b.active[t]):
            mates = b.mates[t, i][b.mates[t, i] >= 0]
            assert set(mates.tolist()) == set(np.flatnonzero(b.active[t]).tolist()) - {i}


@pytest.mark.parametrize("wrapper", ["VecMonitor", "VecNormalize"])
def test_first_step_after_reset_reads_reset_infos_through_wrappers(wrapper):
    """The slot whose agent has not asked yet at reset is inactive in the first row, and the
    other slot's first decision is in its group (before: every slot active and ungrouped)."""
    from stable_baselines3.common import vec_env

    from unity_sb3.scenes.scripted import ScriptedAgent

    agents = [ScriptedAgent(period=2, group_id=1), ScriptedAgent(period=2, start=1, group_id=1)]
    venv = _scripted_group(agents, num_slots=2)
    assert [info["active"] for info in venv.reset_infos] == [True, False]
    model = POCA("MlpPolicy", getattr(vec_env, wrapper)(venv), **SMALL).learn(16)
    buffer = model.rollout_buffer
    assert buffer.active[0].tolist() == [True, False]
    assert buffer.group_keys[0, 0] == buffer.group_keys[1, 1]  # slot 1's agent joins at row 1
    venv.close()


class RenamingSacrificeVecEnv(SacrificeVecEnv):
    """SacrificeVecEnv whose group gets a new group id every group episode (as Unity groups
    created per episode do); observation column 3 carries the id, so rows can be checked."""

    def _reset_all(self) -> None:
        super()._reset_all()
        self.episode = np.zeros(self.n_instances, dtype=int)

    def _info(self, i: int) -> dict[str, Any]:
        return {**super()._info(i), "group_id": self._group_id(i // 3)}

    def _group_id(self, g: int) -> int:
        return 1 + 100 * g + int(self.episode[g])

    def _obs(self) -> np.ndarray:
        obs = super()._obs()
        for g in range(self.n_instances):
            obs[3 * g : 3 * g + 3, 3] = self._group_id(g) / 1000.0
        return obs

    def step_wait(self):
        before = self.t.copy()
        obs, rewards, dones, infos = super().step_wait()
        ended = (self.t == 0) & (before > 0)
        self.episode[ended] += 1
        for g in np.flatnonzero(ended):  # new ids for the new group episode
            obs[3 * g : 3 * g + 3, 3] = self._group_id(g) / 1000.0
            for i in range(3 * g, 3 * g + 3):
                infos[i]["group_id"] = self._group_id(g)
        return obs, rewards, dones, infos


def test_group_codes_stay_distinct_when_the_table_is_pruned():
    """A full group-code table must not merge groups or re-code a living group mid-rollout."""
    env = RenamingSacrificeVecEnv(n_instances=2)
    model = POCA("MlpPolicy", env, **SMALL).learn(48)
    # fill the table past its limit: the next new group id must not restart the codes
    model._group_codes.update({("filler", k): 10**9 + k for k in range(100_001)})
    model.learn(48, reset_num_timesteps=False)
    b = model.rollout_buffer
    rows, cols = np.nonzero(b.active)
    groups = [(int(c) // 3, round(float(b.observations[r, c, 3]) * 1000)) for r, c in zip(rows, cols)]
    codes = b.group_keys[rows, cols].tolist()
    code_of: dict[tuple[int, int], set[int]] = {}
    group_of: dict[int, set[tuple[int, int]]] = {}
    for group, code in zip(groups, codes):
        code_of.setdefault(group, set()).add(code)
        group_of.setdefault(code, set()).add(group)
    assert len(code_of) > 2, "the rollout should hold several group episodes"
    assert all(len(v) == 1 for v in code_of.values()), f"a group changed code mid-rollout: {code_of}"
    assert all(len(v) == 1 for v in group_of.values()), f"two groups share a code: {group_of}"
    assert len(model._group_codes) <= model.max_group_codes + env.num_envs
