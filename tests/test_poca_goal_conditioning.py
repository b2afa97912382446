"""POCA built from an ML-Agents trainer config with ``goal_conditioning_type: hyper`` on a team whose
agents see a goal signal: as ML-Agents' POCA, the actor's body is a ``ConditionalEncoder`` (its last
layer a HyperNetwork) and the centralised critic encodes the goal as an ordinary observation; it
learns, saves and loads, and exports to ONNX as ``predict`` acts (with and without memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch as th
import yaml
from goal_line import TEAM_BEHAVIOR, GoalLineTeam

from unity_sb3 import UnityVecEnv
from unity_sb3.algorithms.poca import POCA, RecurrentPOCA
from unity_sb3.algorithms.registry import algorithm_class
from unity_sb3.config.mlagents import convert_mlagents_config
from unity_sb3.config.model_args import prepare_model_args
from unity_sb3.export import check_onnx, inspect_onnx, predict_unity_actions, run_onnx, to_onnx
from unity_sb3.networks.conditioning import HyperNetwork

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

HIDDEN = 16
#: ML-Agents' POCA settings, small: two body layers of 16, the goal conditioning spelt out
SETTINGS: dict[str, Any] = {
    "trainer_type": "poca",
    "hyperparameters": {"batch_size": 16, "buffer_size": 64, "learning_rate": 3.0e-4},
    "network_settings": {"hidden_units": HIDDEN, "num_layers": 2, "goal_conditioning_type": "hyper"},
    "max_steps": 256,
}
MEMORY = {"memory": {"memory_size": 8, "sequence_length": 4}}


def _scene() -> GoalLineTeam:
    """Two agents in a group; observation 0 is the goal signal, observation 1 an ordinary vector."""
    return GoalLineTeam(2, discrete=True, seed=0, num_vector=2, goal_indices=(0,))


def _build(tmp_path: Path, capsys, memory: bool = False) -> tuple[Any, UnityVecEnv, str]:
    """The model ``unity-sb3 train --config`` builds from the YAML, its env and what the mapping printed."""
    settings = {
        **SETTINGS,
        "network_settings": {**SETTINGS["network_settings"], **(MEMORY if memory else {})},
    }
    config = tmp_path / "poca.yaml"
    config.write_text(yaml.safe_dump({"behaviors": {TEAM_BEHAVIOR: settings}}))
    hyper = convert_mlagents_config(config).as_hyperparams()
    algo = hyper.pop("algo")
    for key in ("n_timesteps", "policy", "normalize", "open_kwargs", "summary_freq"):
        hyper.pop(key, None)
    env = UnityVecEnv(_scene())
    policy, kwargs = prepare_model_args(algo, "auto", hyper, env)
    model = algorithm_class(algo)(policy, env, seed=0, device="cpu", **kwargs)
    return model, env, capsys.readouterr().out


def _hypernetworks(module: th.nn.Module) -> list[HyperNetwork]:
    return [m for m in module.modules() if isinstance(m, HyperNetwork)]


@pytest.mark.parametrize("memory", [False, True], ids=["plain", "memory"])
def test_only_the_actor_is_goal_conditioned_as_mlagents(tmp_path, capsys, memory: bool) -> None:
    model, env, out = _build(tmp_path, capsys, memory)
    policy = model.policy
    assert type(model) is (RecurrentPOCA if memory else POCA)
    goal, plain = env.observation_space.spaces  # Dict keys in the scene's order: the goal first
    # the actor: ML-Agents' ConditionalEncoder, num_layers of hidden_units, the last one a HyperNetwork
    actor = policy.features_extractor
    assert actor.goal_keys == [goal] and actor.conditions_last
    assert isinstance(actor.conditioning, HyperNetwork) and len(_hypernetworks(actor)) == 1
    assert actor.conditioning.out_features == HIDDEN and actor.features_dim == HIDDEN
    assert sum(isinstance(m, th.nn.Linear) for m in actor.body) == 1  # the plain first layer
    assert policy.net_arch == [] and len(policy.actor_net) == 0  # the body is all in the extractor
    if memory:
        assert policy.memory.hidden_size == 4  # memory_size 8 / 2, reading the body's 16 features
    # the critic: no conditioning, the goal encoded with the other observations (1 + 1 features)
    critic = policy.critic_features_extractor
    assert critic.goal_keys == [] and _hypernetworks(critic) == [] and critic.features_dim == 2
    assert _hypernetworks(policy.critic) == []
    assert f"goal signals {goal} generate the weights of the last of the body's 2 layers of the actor" in out
    assert "the centralised critic encodes them with the other observations" in out
    assert plain not in actor.goal_keys
    env.close()


def test_learns_predicts_saves_and_loads(tmp_path, capsys) -> None:
    model, env, _ = _build(tmp_path, capsys)
    model.learn(128)
    assert model.num_timesteps >= 128
    obs = env.reset()
    actions, _ = model.predict(obs, deterministic=True)
    assert actions.shape == (env.num_envs,)
    model.save(tmp_path / "poca.zip")
    loaded = POCA.load(tmp_path / "poca.zip", device="cpu")
    assert loaded.policy.critic_features_extractor_kwargs == model.policy.critic_features_extractor_kwargs
    assert _hypernetworks(loaded.policy.critic_features_extractor) == []
    assert isinstance(loaded.policy.features_extractor.conditioning, HyperNetwork)
    for name, value in model.policy.state_dict().items():
        th.testing.assert_close(loaded.policy.state_dict()[name], value)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], actions)
    loaded.set_env(env)
    loaded.learn(64, reset_num_timesteps=False)
    env.close()


def _goal_observations(n: int, seed: int) -> list[np.ndarray]:
    """Both observations drawn at random, the goal as the scene's +-1."""
    rng = np.random.default_rng(seed)
    return [
        rng.choice([-1.0, 1.0], size=(n, 1)).astype(np.float32),
        rng.normal(0.0, 2.0, size=(n, 1)).astype(np.float32),
    ]


@pytest.mark.parametrize("memory", [False, True], ids=["plain", "memory"])
def test_onnx_export_acts_as_predict(tmp_path, capsys, memory: bool) -> None:
    model, env, _ = _build(tmp_path, capsys, memory)
    with th.no_grad():  # decisive logits: the argmax must not be a near tie
        for p in model.policy.action_net.parameters():
            p.mul_(30.0)
    spec = _scene().spec
    path = to_onnx(model, tmp_path / "poca.onnx", behavior_spec=spec)
    assert check_onnx(path, spec) == []
    # only the actor is exported: no critic, so no trace of its plain extractor
    assert not any("critic" in init.name for init in onnx.load(str(path)).graph.initializer)
    size = inspect_onnx(path).memory_size
    assert size == (8 if memory else 0)
    n = 16
    memories, state, starts = np.zeros((n, 1, max(size, 1)), np.float32), None, np.ones(n, bool)
    seen = []
    for step in range(3 if memory else 1):
        obs = _goal_observations(n, seed=step)
        expected, state = predict_unity_actions(
            model, obs, behavior_spec=spec, state=state if memory else None, episode_start=starts
        )
        starts = np.zeros(n, bool)
        got = run_onnx(path, obs, memories=memories if memory else None)
        np.testing.assert_array_equal(got["discrete_actions"], expected.discrete)
        seen.append(expected.discrete)
        if memory:
            memories = got["recurrent_out"]
            np.testing.assert_allclose(memories[:, 0], state, atol=2e-5)
    assert len(np.unique(np.concatenate(seen))) > 1  # the observations matter
    env.close()
