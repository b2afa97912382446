"""POCA with memory: actor and critic memories carried per slot, reset at episode starts, held by
inactive slots, training sequences that replay collection exactly, save/load, and a group memory
task learned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch as th
import yaml
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv
from test_poca import SacrificeVecEnv

from unity_sb3.algorithms.poca import POCA, POCAPolicy, RecurrentPOCA

SMALL = dict(n_steps=16, batch_size=32, n_epochs=2, seed=0)
MEMORY = dict(net_arch=[32], critic_embed_dim=16, memory_size=8, sequence_length=4)


def _model(action: str = "discrete", sequence_length: int = 4, **policy_kwargs: Any) -> RecurrentPOCA:
    env = SacrificeVecEnv(action, n_instances=2, masks=action != "box")
    policy_kwargs = {**MEMORY, "sequence_length": sequence_length, **policy_kwargs}
    return RecurrentPOCA("MlpLstmPolicy", env, policy_kwargs=policy_kwargs, **SMALL)


def _collect(model: RecurrentPOCA, rollouts: int = 1) -> list[dict[str, np.ndarray]]:
    """``rollouts`` rollouts without training (the env reset once); each one's critic results and
    memories, copied before the next rollout overwrites them."""
    _, callback = model._setup_learn(rollouts * model.n_steps * model.n_envs)
    kept = []
    for _ in range(rollouts):
        carried_in = model.rollout_buffer.critic_carry.copy()
        model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps)
        buffer = model.rollout_buffer
        names = ("active", "values", "baselines", "value_memories", "baseline_memories", "critic_carry")
        kept.append({"carried_in": carried_in, **{name: getattr(buffer, name).copy() for name in names}})
    return kept


def _replay(model: RecurrentPOCA) -> int:
    """Check that every training minibatch of sequences replays the actor's log-probabilities and the
    critic's values and baselines that collection computed; return the rows seen."""
    n_rows = 0
    for batch in model.rollout_buffer.get(model.batch_size):
        assert batch.sequence_mask.shape[1] == model.policy.sequence_length
        assert int(batch.sequence_mask.sum()) == batch.old_log_prob.shape[0]
        actions = batch.actions
        if isinstance(model.action_space, spaces.Discrete):
            actions = actions.long().flatten()
        elif isinstance(model.action_space, spaces.MultiDiscrete):
            actions = actions.long()
        with th.no_grad():
            log_prob, _ = model.policy.evaluate_sequences(batch, actions)
            values, baselines = model.policy.values_and_baselines_by_sequence(batch)
        th.testing.assert_close(log_prob, batch.old_log_prob, atol=1e-4, rtol=1e-4)
        th.testing.assert_close(values, batch.old_values, atol=1e-5, rtol=1e-5)
        th.testing.assert_close(baselines, batch.old_baselines, atol=1e-5, rtol=1e-5)
        n_rows += batch.old_log_prob.shape[0]
    return n_rows


def test_memory_advances_only_for_deciding_slots_and_resets_at_episode_starts():
    model = _model()
    _collect(model)
    buffer = model.rollout_buffer
    assert np.abs(buffer.memories[1:]).sum() > 0 and not np.abs(buffer.memories[0]).any()
    # one acting step from known memories: deciding slots advance, the others hold theirs,
    # an episode start zeroes the memory before the step (deciding or not)
    before = th.randn(6, 8)
    model._memories = before.clone()
    model._last_episode_starts = np.array([0, 0, 0, 0, 1, 1], dtype=bool)
    deciding = np.array([1, 0, 1, 0, 1, 0], dtype=bool)
    obs = th.as_tensor(buffer.observations[3])
    buffer.reset()
    with th.no_grad():
        model._act(obs, None, deciding)
        _, _, advanced = model.policy.act(
            obs, before, th.as_tensor(model._last_episode_starts, dtype=th.float32)
        )
    after = model._memories
    th.testing.assert_close(after[[0, 2, 4]], advanced[[0, 2, 4]])
    th.testing.assert_close(after[[1, 3]], before[[1, 3]])
    th.testing.assert_close(after[5], th.zeros(8))
    th.testing.assert_close(th.as_tensor(buffer.memories[0]), before)  # stored before acting
    _, _, from_zero = model.policy.act(obs[4:5], model.policy.initial_memories(1), th.zeros(1))
    th.testing.assert_close(advanced[4:5], from_zero.detach())


@pytest.mark.parametrize("action", ["discrete", "multidiscrete", "box"])
@pytest.mark.parametrize("sequence_length", [1, 3, 16])
def test_training_sequences_replay_the_log_probs_values_and_baselines_of_collection(action, sequence_length):
    model = _model(action, sequence_length)
    _collect(model)
    # every active row once, no inactive row; the critic's unroll gives the stored V and b
    assert _replay(model) == int(model.rollout_buffer.active.sum())
    # the next rollout's critic pass starts from the memories carried out of this one
    _, callback = model._setup_learn(model.n_steps * model.n_envs, reset_num_timesteps=False)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps)
    assert _replay(model) == int(model.rollout_buffer.active.sum())


def test_training_sequences_start_at_episode_starts_and_never_cross_one():
    """ML-Agents' cut: no sequence holds an episode start after its first step, every episode start
    (as the slot's decisions see it) begins one, and each slot's active rows are covered once."""
    model = _model(sequence_length=6)
    _collect(model)
    buffer = model.rollout_buffer
    flags = buffer.decision_episode_starts().reshape(-1)
    chunks = buffer.sequences()
    assert flags.any()
    assert not any(flags[chunk[1:]].any() for chunk in chunks)
    assert sum(flags[chunk[0]] for chunk in chunks) == flags.sum()
    assert max(len(chunk) for chunk in chunks) <= 6
    covered = np.sort(np.concatenate(chunks))
    np.testing.assert_array_equal(covered, np.flatnonzero(buffer.active.reshape(-1)))
    lengths = [len(chunk) for chunk in chunks]
    assert min(lengths) < 6  # episodes of the scene end between cuts: a fixed cut would give 6s


def test_training_sequences_restart_after_each_time_horizon_cut():
    """With ``time_horizon``, ML-Agents' trajectories also end every ``time_horizon`` decisions: no
    sequence crosses such a cut, the decision after one begins a sequence, and the sequences still
    replay collection (the one after a cut unrolls from the stored memory: the episode goes on)."""
    model = _model(sequence_length=6)
    model.time_horizon = 2
    _collect(model)
    buffer = model.rollout_buffer
    cuts = buffer.chunk_ends.reshape(-1)
    assert cuts.any()
    chunks = buffer.sequences()
    assert not any(cuts[chunk[:-1]].any() for chunk in chunks)
    firsts = {int(chunk[0]) for chunk in chunks}
    for row, slot in zip(*np.nonzero(buffer.chunk_ends)):
        later = np.flatnonzero(buffer.active[row + 1 :, slot])
        if later.size:
            assert (row + 1 + later[0]) * buffer.n_envs + slot in firsts
    assert max(len(chunk) for chunk in chunks) <= 2
    assert _replay(model) == int(buffer.active.sum())


def test_critic_memories_are_carried_across_rollouts_and_reset_at_episode_starts():
    model = _model(sequence_length=16)
    first, second = _collect(model, rollouts=2)
    buffer = model.rollout_buffer
    # the first rollout starts from zero critic memories, the second from what the first carried out
    assert not first["carried_in"].any()
    np.testing.assert_array_equal(second["carried_in"], first["critic_carry"])
    assert np.abs(first["critic_carry"]).sum() > 0
    for kept in (first, second):
        rows, cols = np.nonzero(kept["active"])
        assert np.abs(kept["value_memories"][rows[rows > 0], cols[rows > 0]]).sum() > 0
        # V and baseline are two memories through one LSTM: they differ once groupmates act
        assert not np.allclose(kept["value_memories"][rows, cols], kept["baseline_memories"][rows, cols])
    # each slot's first stored memories of the second rollout are the carried ones
    for slot in range(model.n_envs):
        first_row = np.flatnonzero(second["active"][:, slot])[0]
        np.testing.assert_array_equal(
            second["value_memories"][first_row, slot], second["carried_in"][slot, 0]
        )
        np.testing.assert_array_equal(
            second["baseline_memories"][first_row, slot], second["carried_in"][slot, 1]
        )
    # where an episode started since the slot's previous decision, V and b come from zero memories
    flags = buffer.decision_episode_starts()
    rows, cols = np.nonzero(flags & buffer.active)
    carried = np.abs(buffer.value_memories[rows, cols]).sum(axis=1) > 0
    assert carried.any(), "no reset with a nonzero memory before it: the test would prove nothing"
    sample = buffer._gather(rows * buffer.n_envs + cols)
    with th.no_grad():
        encoding, count = model.policy.critic_encodings(
            sample.observations, sample.mate_observations, sample.mate_actions, sample.mate_mask
        )
        zero = model.policy.critic.memory.initial_memories(2 * rows.size)
        out, _ = model.policy.critic.memory(encoding.flatten(0, 1).unsqueeze(1), zero)
        from_zero = model.policy.critic.read_out(out[:, 0], count.flatten(0, 1)).reshape(2, -1).numpy()
    np.testing.assert_allclose(buffer.values[rows, cols], from_zero[0], atol=1e-5)
    np.testing.assert_allclose(buffer.baselines[rows, cols], from_zero[1], atol=1e-5)
    # the memory carried out of a rollout is zero where an episode starts after the slot's last decision
    ended = buffer.started_after_last_decision()
    assert ended.any()
    assert not buffer.critic_carry[ended].any() and np.abs(buffer.critic_carry[~ended]).sum(axis=(1, 2)).all()
    # an env reset forgets them
    model._setup_learn(1)
    assert not model.rollout_buffer.critic_carry.any()


def test_critic_memory_is_saved_and_its_plain_passes_refuse_to_run_without_memories(tmp_path):
    model = _model(sequence_length=3).learn(64)
    _collect(model)
    batch = next(model.rollout_buffer.get(model.batch_size))
    model.save(tmp_path / "critic.zip")
    loaded = RecurrentPOCA.load(tmp_path / "critic.zip")
    assert "critic.memory.lstm.weight_hh_l0" in loaded.policy.state_dict()
    with th.no_grad():
        expected = model.policy.values_and_baselines_by_sequence(batch)
        got = loaded.policy.values_and_baselines_by_sequence(batch)
    for want, have in zip(expected, got):
        th.testing.assert_close(have, want)
    with pytest.raises(RuntimeError, match="has memory"):
        model.policy.predict_values_and_baselines(
            batch.observations, batch.mate_observations, batch.mate_actions, batch.mate_mask
        )


def test_predict_carries_memory_and_episode_start_resets_it(tmp_path):
    model = _model().learn(64)
    obs = np.random.default_rng(0).uniform(-1, 1, (3, 4)).astype(np.float32)
    _, first = model.predict(obs, deterministic=True)
    assert first.shape == (3, 8) and np.abs(first).sum() > 0
    _, carried = model.predict(obs, state=first, episode_start=np.zeros(3), deterministic=True)
    assert not np.allclose(carried, first)
    _, restarted = model.predict(obs, state=first, episode_start=np.ones(3), deterministic=True)
    np.testing.assert_allclose(restarted, first, atol=1e-6)

    model.save(tmp_path / "poca_memory.zip")
    loaded = RecurrentPOCA.load(tmp_path / "poca_memory.zip")
    assert (loaded.policy.memory_size, loaded.policy.sequence_length) == (8, 4)
    for state in (None, first):
        expected = model.predict(obs, state=state, deterministic=True)
        actions, memories = loaded.predict(obs, state=state, deterministic=True)
        np.testing.assert_array_equal(actions, expected[0])
        np.testing.assert_allclose(memories, expected[1], atol=1e-6)
    loaded.set_env(SacrificeVecEnv(n_instances=2))
    loaded.learn(32, reset_num_timesteps=False)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: _model(memory_size=7), "positive even"),
        (lambda: _model(sequence_length=0), "sequence_length"),
        (lambda: _model(net_arch=[]), "at least one actor layer"),
        (lambda: RecurrentPOCA(POCAPolicy, SacrificeVecEnv()), "needs a memory policy"),
    ],
)
def test_bad_memory_settings_raise_clear_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_state_of_the_wrong_shape_is_refused():
    model = _model()
    with pytest.raises(ValueError, match="memories"):
        model.predict(np.zeros((3, 4), np.float32), state=np.zeros((2, 8)))


class CueVecEnv(VecEnv):
    """Groups of two agents. Each sees its own cue (+-1) at the first of three steps and zeros
    after; at the last step each must answer the cue (action 1 for +1, 0 for -1). The group
    reward is +1 if both answered right, else 0. No memory: at best 1/4 of the groups win."""

    length = 3

    def __init__(self, n_groups: int = 4, seed: int = 0) -> None:
        self.n_groups = n_groups
        self.render_mode = None
        self.rng = np.random.default_rng(seed)
        super().__init__(2 * n_groups, spaces.Box(-1.0, 1.0, (2,), np.float32), spaces.Discrete(2))
        self._new_episode()

    def _new_episode(self) -> None:
        self.t = 0
        self.cue = self.rng.choice([-1.0, 1.0], self.num_envs).astype(np.float32)

    def _obs(self) -> np.ndarray:
        obs = np.zeros((self.num_envs, 2), dtype=np.float32)
        obs[:, 0] = self.cue if self.t == 0 else 0.0
        obs[:, 1] = self.t / self.length
        return obs

    def _info(self, i: int) -> dict[str, Any]:
        return {"group_id": 1, "instance": i // 2, "group_reward": 0.0}

    def reset(self) -> np.ndarray:
        self._new_episode()
        self.reset_infos = [self._info(i) for i in range(self.num_envs)]
        return self._obs()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(-1)

    def step_wait(self):
        self.t += 1
        infos = [self._info(i) for i in range(self.num_envs)]
        dones = np.zeros(self.num_envs, dtype=bool)
        if self.t == self.length:
            right = (self._actions == (self.cue > 0)).reshape(self.n_groups, 2).all(axis=1)
            terminal = self._obs()
            for i, info in enumerate(infos):
                info.update(group_reward=float(right[i // 2]), terminal_observation=terminal[i])
                info["TimeLimit.truncated"] = False
            dones[:] = True
            self._new_episode()
        return self._obs(), np.zeros(self.num_envs, dtype=np.float32), dones, infos

    def close(self) -> None:
        pass

    def get_attr(self, attr_name, indices=None):
        return [getattr(self, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name, value, indices=None):
        setattr(self, attr_name, value)

    def env_method(self, method_name, *args, indices=None, **kwargs):
        return [getattr(self, method_name)(*args, **kwargs) for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False for _ in self._get_indices(indices)]


#: settings of the cue task's runs (also benchmarks/poca_memory.py's)
CUE_SETTINGS: dict[str, Any] = dict(n_steps=48, batch_size=96, n_epochs=4, learning_rate=3e-3, ent_coef=0.01)
CUE_STEPS = 12_000


def cue_model(memory: bool, seed: int = 0) -> POCA:
    """RecurrentPOCA (an LSTM of 16 units) or POCA with the same layers and settings on the cue task."""
    kwargs: dict[str, Any] = dict(net_arch=[32], critic_embed_dim=16)
    if memory:
        kwargs.update(memory_size=32, sequence_length=3)
        return RecurrentPOCA(
            "MlpLstmPolicy", CueVecEnv(seed=seed), policy_kwargs=kwargs, seed=seed, **CUE_SETTINGS
        )
    return POCA("MlpPolicy", CueVecEnv(seed=seed), policy_kwargs=kwargs, seed=seed, **CUE_SETTINGS)


def group_win_rate(model: POCA, episodes: int = 50) -> float:
    """Share of groups whose two agents both answered their cue, acting deterministically."""
    env = CueVecEnv(seed=123)
    obs, state, starts, wins = env.reset(), None, np.ones(env.num_envs, dtype=bool), []
    while len(wins) < episodes:
        actions, state = model.predict(obs, state, starts, deterministic=True)
        obs, _, starts, infos = env.step(actions)
        if starts.all():
            wins += [infos[2 * g]["group_reward"] for g in range(env.n_groups)]
    return float(np.mean(wins))


@pytest.mark.slow
def test_group_learns_a_cue_only_memory_can_hold():
    assert group_win_rate(cue_model(memory=True).learn(CUE_STEPS)) >= 0.9
    assert group_win_rate(cue_model(memory=False).learn(CUE_STEPS)) <= 0.5


def _dungeon_escape_with_memory(memory: dict[str, int]) -> dict[str, Any]:
    config = Path(__file__).resolve().parent / "data" / "mlagents_configs" / "DungeonEscape_poca.yaml"
    data = yaml.safe_load(config.read_text())
    behavior = next(iter(data["behaviors"].values()))
    behavior["network_settings"]["memory"] = memory
    return data


def test_poca_yaml_memory_maps_onto_recurrent_poca_with_both_settings_honoured():
    from unity_sb3.config.mlagents import convert_mlagents_config

    run = convert_mlagents_config(_dungeon_escape_with_memory({"memory_size": 32, "sequence_length": 8}))
    assert run.algo == "poca_memory"
    assert run.hyperparams["policy_kwargs"].endswith("memory_size=32, sequence_length=8)")
    assert not [row.source for row in run.unhonored if "memory" in row.source or "critic" in row.note]
    table = run.table()
    assert "centralised critic after its attention" in table and "critic has no memory" not in table


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::unity_sb3.config.mlagents_schema.MLAgentsConfigWarning")
def test_poca_memory_config_trains_through_the_command(tmp_path):
    from unity_sb3.cli import main

    data = _dungeon_escape_with_memory({"memory_size": 16, "sequence_length": 4})
    behavior = next(iter(data["behaviors"].values()))
    behavior["hyperparameters"].update(batch_size=32, buffer_size=64, num_epoch=1)
    behavior["network_settings"].update(hidden_units=8, num_layers=1)
    behavior["max_steps"] = 128
    config = tmp_path / "memory.yaml"
    config.write_text(yaml.safe_dump(data))
    args = ["train", "--env", "Escape", "--config", str(config), "--results-dir", str(tmp_path)]
    assert main([*args, "--run-id", "mem", "--no-progress", "--transport", "inprocess"]) == 0
    model = RecurrentPOCA.load(tmp_path / "mem" / "model.zip")
    assert type(model.policy).__name__ == "RecurrentPOCAPolicy"
    assert (model.policy.memory.hidden_size, model.policy.sequence_length) == (8, 4)


@pytest.mark.parametrize("action", ["discrete", "multidiscrete", "box"])
def test_onnx_export_carries_the_memory_as_predict(action, tmp_path):
    """Unity's recurrent contract: recurrent_in/out (batch, 1, memory_size) equal predict's memory, step by step."""
    from unity_sb3.export import (
        check_onnx,
        infer_behavior_spec,
        inspect_onnx,
        predict_unity_actions,
        run_onnx,
        to_onnx,
    )

    model = _model(action)
    path = to_onnx(model, tmp_path / "policy.onnx")
    info = inspect_onnx(path)
    assert info.memory_size == 8 and info.inputs["recurrent_in"] == ("batch", 1, 8)
    assert check_onnx(path, infer_behavior_spec(model.observation_space, model.action_space)) == []
    rng = np.random.default_rng(0)
    memories, state, starts = np.zeros((5, 1, 8), np.float32), None, np.ones(5, bool)
    for _ in range(3):
        obs = [rng.uniform(-1, 1, size=(5, 4)).astype(np.float32)]
        expected, state = predict_unity_actions(model, obs, state=state, episode_start=starts)
        starts = np.zeros(5, bool)
        got = run_onnx(path, obs, memories=memories)
        memories = got["recurrent_out"]
        np.testing.assert_allclose(memories[:, 0], state, atol=2e-5)
        if expected.continuous.size:
            np.testing.assert_allclose(got["continuous_actions"], expected.continuous, atol=2e-5)
        if expected.discrete.size:
            np.testing.assert_array_equal(got["discrete_actions"], expected.discrete)


def test_hybrid_actions_train_with_memory_and_predict_the_tuple():
    from unity_sb3.scenes import make_scene
    from unity_sb3.wrappers.vec_env import UnityVecEnv

    env = UnityVecEnv(make_scene("HybridLine", seed=0, num_agents=4), hybrid="tuple")
    model = RecurrentPOCA("MlpLstmPolicy", env, policy_kwargs={**MEMORY, "net_arch": [16]}, **SMALL).learn(
        128
    )
    (continuous, discrete), memories = model.predict(env.reset(), deterministic=True)
    assert continuous.shape == (4, 1) and discrete.shape == (4, 1) and memories.shape == (4, 8)
    env.close()
