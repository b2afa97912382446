"""``OnnxPolicy``: ONNX models in Unity's format acting on a ``BaseEnv`` as Unity's inference runs them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from mlagents_envs.base_env import ActionSpec, BehaviorSpec, DecisionSteps
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import PPO
from test_export import (
    SENSOR_ORDER,
    export,
    make_model,
    random_masks,
    scale_head,
    sensor_order_model,
    unity_observations,
    vector,
    with_float_discrete_actions,
)

from unity_sb3.cli import main
from unity_sb3.export import onnx_policy, predict_unity_actions, run_onnx
from unity_sb3.export.onnx_policy import OnnxPolicy, onnx_episode_returns
from unity_sb3.export.specs import entities_from_onnx
from unity_sb3.scenes import make_scene
from unity_sb3.selfplay.matches import play_matches
from unity_sb3.unity.errors import UnityConfigurationError

UNITY_3DBALL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "models" / "3DBall.onnx"


def unity_3dball() -> Path:
    if not UNITY_3DBALL.is_file():
        pytest.skip(f"Unity's 3DBall.onnx not found at {UNITY_3DBALL} (shared/ must sit beside the checkout)")
    return UNITY_3DBALL


def decision_steps(obs: list[np.ndarray], agent_ids, masks: list[np.ndarray] | None = None) -> DecisionSteps:
    n = len(agent_ids)
    zeros = np.zeros(n, np.float32)
    return DecisionSteps(obs, zeros, np.asarray(agent_ids, np.int32), masks, np.zeros(n, np.int32), zeros)


def test_unitys_own_3dball_model_keeps_every_ball_up() -> None:
    """Unity's trained 3DBall policy, run as Unity runs it (its deterministic outputs), on the embedded scene."""
    policy = OnnxPolicy(unity_3dball(), deterministic=True)
    assert policy.continuous_output == "deterministic_continuous_actions" and policy.memory_size == 0
    returns = onnx_episode_returns(make_scene("Ball3D", seed=3), policy, episodes=12)
    assert returns == pytest.approx([100.0] * 12, abs=1e-3)  # max_steps 5000 / 5 decisions x 0.1 each


def test_sampled_actions_unless_deterministic() -> None:
    policy = OnnxPolicy(unity_3dball())
    assert policy.continuous_output == "continuous_actions"  # Unity's default: Deterministic Inference off
    env = make_scene("Ball3D", seed=0)
    env.reset()
    dec, _ = env.get_steps("3DBall?team=0")
    spec = env.behavior_specs["3DBall?team=0"]
    first, second = policy.act(dec, spec), policy.act(dec, spec)
    assert first.continuous.shape == (12, 2) and not np.array_equal(first.continuous, second.continuous)
    mean = run_onnx(UNITY_3DBALL, dec.obs)["deterministic_continuous_actions"]
    np.testing.assert_array_equal(
        OnnxPolicy(UNITY_3DBALL, deterministic=True).act(dec, spec).continuous, mean
    )


def test_inputs_are_laid_out_as_unitys_inference_writes_them(tmp_path) -> None:
    """Visual observations HWC -> NCHW, buffer sensors as Unity writes them, masks as 1 = allowed: the
    model answers the agents as ``predict`` answers the same observations behind the wrappers."""
    spec, model = SENSOR_ORDER, sensor_order_model()
    path = export(model, tmp_path, spec)
    feeds = unity_observations(spec, n=32)  # the ONNX layout
    allowed = random_masks((3, 2), n=32)
    # what a DecisionSteps holds: images as the spec lays them out, a buffer sensor's rows, masks True = masked
    unity_obs = [feeds[0], np.moveaxis(feeds[1], 1, -1), entities_from_onnx(feeds[2])]
    masked = [~allowed[:, :3], ~allowed[:, 3:]]
    got = OnnxPolicy(path, deterministic=True).act(decision_steps(unity_obs, range(32), masked), spec)
    expected, _ = predict_unity_actions(model, feeds, behavior_spec=spec, action_masks=allowed)
    np.testing.assert_array_equal(got.discrete, expected.discrete)
    assert got.discrete.dtype == np.int32 and len(np.unique(got.discrete[:, 0])) > 1
    chosen = np.stack(
        [allowed[np.arange(32), got.discrete[:, 0]], allowed[np.arange(32), 3 + got.discrete[:, 1]]]
    )
    assert chosen.all()  # never a masked action


def test_memories_are_carried_per_agent_and_dropped_at_its_episode_end(tmp_path) -> None:
    spec = BehaviorSpec([vector(5)], ActionSpec(2, ()))
    model = make_model(
        RecurrentPPO, spec, "MlpLstmPolicy", policy_kwargs=dict(net_arch=[16], lstm_hidden_size=8)
    )
    path = export(model, tmp_path, spec)
    policy = OnnxPolicy(path, deterministic=True)
    assert policy.memory_size == 16  # h and c of the actor's LSTM
    obs = unity_observations(spec, n=3, seed=4)[0]
    policy.act(decision_steps([obs[:2]], [10, 11]), spec)
    first = dict(policy.memories)
    assert set(first) == {10, 11} and np.abs(first[11]).max() > 0
    got = policy.act(decision_steps([obs[1:]], [11, 12]), spec)  # 11 goes on, 12 is new
    reference = np.stack([first[11], np.zeros(16, np.float32)])[:, None]
    expected = run_onnx(path, [obs[1:]], memories=reference)
    np.testing.assert_allclose(got.continuous, expected["deterministic_continuous_actions"], atol=1e-6)
    np.testing.assert_allclose(policy.memories[11], expected["recurrent_out"][0, 0], atol=1e-6)
    policy.end_episodes([11])
    assert 11 not in policy.memories and set(policy.memories) == {10, 12}
    again = policy.act(decision_steps([obs[1:2]], [11]), spec)  # as a new agent: from zeros
    fresh = run_onnx(path, [obs[1:2]])["deterministic_continuous_actions"]
    np.testing.assert_allclose(again.continuous, fresh, atol=1e-6)


def test_discrete_actions_written_as_floats_are_read_as_integers(tmp_path) -> None:
    """Older exporters wrote discrete actions as float32; the runner rounds them, as Unity's older inference."""
    spec = BehaviorSpec([vector(5)], ActionSpec(0, (3, 2)))
    model = make_model(PPO, spec, policy_kwargs=dict(net_arch=[16]))
    scale_head(model, 30.0)
    path = export(model, tmp_path, spec)
    floats = with_float_discrete_actions(path, tmp_path / "float.onnx")
    obs = unity_observations(spec, n=16, seed=5)
    steps = decision_steps(obs, range(16))
    expected = OnnxPolicy(path, deterministic=True).act(steps, spec).discrete
    lenient = OnnxPolicy(floats, deterministic=True)
    lenient.check("Agent?team=0", spec)  # not refused for its output type
    got = lenient.act(steps, spec).discrete
    assert got.dtype == np.int32 and len(np.unique(got[:, 0])) > 1
    np.testing.assert_array_equal(got, expected)


def test_a_model_for_another_behavior_is_refused_with_every_mismatch() -> None:
    policy = OnnxPolicy(unity_3dball())
    with pytest.raises(
        UnityConfigurationError, match=r"does not fit behavior 'GridWorld\?team=0'.*obs_0 has shape"
    ):
        onnx_episode_returns(make_scene("GridWorld"), policy, episodes=1)


def test_old_model_versions_are_refused_with_what_to_do(monkeypatch) -> None:
    real = onnx_policy.inspect_onnx
    monkeypatch.setattr(onnx_policy, "inspect_onnx", lambda path: dataclasses.replace(real(path), version=2))
    with pytest.raises(UnityConfigurationError, match=r"version 2 \(ML-Agents 1.x.*export the model again"):
        OnnxPolicy(unity_3dball())
    with pytest.raises(FileNotFoundError, match="no ONNX model"):
        OnnxPolicy("missing.onnx")


def test_a_recurrent_onnx_opponent_plays_tennis_and_forgets_ended_agents(tmp_path) -> None:
    env = make_scene("Tennis", seed=0, num_agents=2)
    name = "Tennis?team=1"
    model = make_model(
        RecurrentPPO,
        env.behavior_specs[name],
        "MlpLstmPolicy",
        policy_kwargs=dict(net_arch=[8], lstm_hidden_size=4),
    )
    policy = OnnxPolicy(export(model, tmp_path, env.behavior_specs[name]))
    ended: list[int] = []
    forget = policy.end_episodes
    policy.end_episodes = lambda ids: (ended.extend(int(i) for i in ids), forget(ids))  # type: ignore[method-assign]
    result = play_matches(env, {0: "random", 1: policy.player(env)}, episodes=4, max_unity_steps=20_000)
    assert result.games == 4 and ended
    assert not set(ended) & set(policy.memories)  # the memories left are of agents still playing


def test_cli_evaluates_an_onnx_model_on_a_scene(capsys) -> None:
    model = str(unity_3dball())
    assert main(["eval", model, "--env", "Ball3D", "--episodes", "3"]) == 0
    assert "3DBall.onnx on Ball3D: mean reward 100.00 +/- 0.00 over 3 episodes" in capsys.readouterr().out
    assert main(["eval", model, "--episodes", "3"]) == 2
    assert "name the scene or build with --env" in capsys.readouterr().err
    assert main(["eval", model, "--env", "GridWorld", "--episodes", "1"]) == 2
    assert "does not fit behavior" in capsys.readouterr().err


def test_cli_plays_games_between_onnx_models(tmp_path, capsys) -> None:
    spec = make_scene("Tennis").behavior_specs["Tennis?team=0"]
    path = str(export(make_model(PPO, spec), tmp_path, spec))
    args = ["eval", path, "--env", "Tennis", "--episodes", "2", "--opponent"]
    assert main([*args, "random", "--team", "1"]) == 0
    assert "policy.onnx vs random on Tennis: team 1:" in capsys.readouterr().out
    assert main([*args, path]) == 0  # the model against itself
    assert f"policy.onnx vs {path} on Tennis: team 0:" in capsys.readouterr().out
    assert main([*args, "random", "--team", "5"]) == 2
    assert "the scene's teams are [0, 1]; --team 5 is not one of them" in capsys.readouterr().err


def test_a_model_acts_on_what_the_protocol_delivers(tmp_path) -> None:
    """Through the stand-in player (PNG images, masks and ids as a Unity build sends them), the model gets
    exactly the inputs the SB3 policy it was exported from reads as the same observations."""
    from unity_sb3.networks.extractors import UnityMultiInputExtractor
    from unity_sb3.open import open_unity

    env = open_unity("GridWorld", transport="player", find_free_port=True, num_agents=3, timeout_wait=60)
    try:
        env.reset()
        name = next(iter(env.behavior_specs))
        spec = env.behavior_specs[name]
        model = make_model(
            MaskablePPO,
            spec,
            "MultiInputPolicy",
            policy_kwargs=dict(net_arch=[16], features_extractor_class=UnityMultiInputExtractor),
        )
        scale_head(model, 30.0)  # decisive: actions that differ between agents and steps
        policy = OnnxPolicy(export(model, tmp_path, spec), deterministic=True)
        answer = policy.player(env)
        for _ in range(5):
            dec, _ = env.get_steps(name)
            feeds = policy.inputs(dec, spec)
            assert feeds["obs_0"].shape[1:] == (3, 32, 32)  # NCHW, whatever layout the protocol's spec has
            actions = answer(name, dec)
            expected, _ = predict_unity_actions(
                model,
                [feeds[f"obs_{i}"] for i in range(len(spec.observation_specs))],
                behavior_spec=spec,
                action_masks=feeds["action_masks"].astype(bool),
            )
            np.testing.assert_array_equal(actions.discrete, expected.discrete)
            masked = dec.action_mask[0]  # True = not allowed, as Unity sends it
            assert masked.any() and not masked[np.arange(len(dec)), actions.discrete[:, 0]].any()
            env.set_actions(name, actions)
            env.step()
    finally:
        env.close()
