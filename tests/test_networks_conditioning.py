"""ML-Agents' goal conditioning: the HyperNetwork layer and the conditioned body of UnityMultiInputExtractor."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces

from unity_sb3.networks.conditioning import HyperNetwork
from unity_sb3.networks.extractors import UnityMultiInputExtractor


def test_hypernetwork_is_initialised_as_ml_agents_and_generates_a_layer_per_goal() -> None:
    th.manual_seed(0)
    layer = HyperNetwork(in_features=6, out_features=4, goal_features=3, hidden_size=8)
    assert [m.out_features for m in layer.hidden if isinstance(m, th.nn.Linear)] == [
        8,
        8,
    ]  # two hidden layers
    assert all(m.bias.abs().sum() == 0 for m in layer.hidden if isinstance(m, th.nn.Linear))
    bound = (1.0 / (8 * 6)) ** 0.5
    assert layer.weights.weight.abs().max() <= bound and layer.weights.bias.abs().sum() == 0
    assert layer.weights.out_features == 6 * 4 and layer.bias.abs().sum() == 0
    x = th.randn(5, 6)
    goals = th.eye(3)[[0, 1, 2, 0, 1]]
    y = layer(x, goals)
    assert y.shape == (5, 4)
    # row by row: x @ W(goal) + b, W the hypernetwork's output for that goal
    with th.no_grad():
        weight = layer.weights(th.nn.functional.layer_norm(layer.hidden(goals), (8,), eps=1e-5))
        expected = th.einsum("bi,bio->bo", x, weight.reshape(5, 6, 4)) + layer.bias
    th.testing.assert_close(y, expected)
    # the same input under two goals: two different layers
    assert not th.allclose(layer(x[:1], goals[:1]), layer(x[:1], goals[1:2]))
    y.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in layer.parameters())


def _space() -> spaces.Dict:
    return spaces.Dict(
        {"goal": spaces.Box(0, 1, (3,), np.float32), "ray": spaces.Box(-1, 1, (5,), np.float32)}
    )


@pytest.mark.parametrize("hidden_layers", [[], [16], [16, 12]])
def test_the_conditioned_body_is_ml_agents_conditional_encoder(hidden_layers: list[int]) -> None:
    """``goal_conditioning="hypernetwork"``: the body's plain layers first, the last one generated
    from the goal encoding, a Swish after each (ML-Agents' ``ConditionalEncoder``, one conditioned layer)."""
    extractor = UnityMultiInputExtractor(
        _space(),
        goal_keys=["goal"],
        goal_features=True,
        goal_hidden_dim=10,
        hidden_layers=hidden_layers,
        goal_conditioning="hypernetwork",
    )
    last = hidden_layers[-1] if hidden_layers else 10
    assert extractor.features_dim == last and isinstance(extractor.conditioning, HyperNetwork)
    assert extractor.conditioning.out_features == last
    assert (extractor.body is None) == (len(hidden_layers) < 2)
    obs = {"goal": th.eye(3)[[0, 1, 2, 2]], "ray": th.randn(4, 5)}
    features = th.cat([obs["goal"], obs["ray"]], dim=1)  # the goal is encoded with the rest, in key order
    hidden = features if extractor.body is None else extractor.body(features)
    expected = th.nn.functional.silu(extractor.conditioning(hidden, obs["goal"]))
    th.testing.assert_close(extractor(obs), expected)


def test_unknown_goal_conditioning_is_refused() -> None:
    with pytest.raises(ValueError, match="goal_conditioning must be 'linear' or 'hypernetwork'"):
        UnityMultiInputExtractor(_space(), goal_keys=["goal"], goal_conditioning="film")


def test_recurrent_ppo_runs_the_conditioned_body_before_its_lstms(tmp_path) -> None:
    """As the ML-Agents mapping builds a goal-conditioned PPO with memory: each of actor and critic has
    its own extractor holding the body (last layer generated from the goal), then its LSTM."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    from unity_sb3 import RecurrentPPO

    class GoalEnv(gym.Env):
        observation_space = _space()
        action_space = spaces.Discrete(3)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), float(action == 1), False, False, {}

    extractor = dict(
        goal_keys=["goal"],
        goal_features=True,
        goal_hidden_dim=16,
        hidden_layers=[16, 16],
        goal_conditioning="hypernetwork",
    )
    model = RecurrentPPO(
        "MultiInputLstmPolicy",
        DummyVecEnv([GoalEnv, GoalEnv]),
        n_steps=16,
        batch_size=16,
        n_epochs=1,
        memory_size=8,
        sequence_length=4,
        seed=0,
        policy_kwargs=dict(
            net_arch=dict(pi=[], vf=[]),
            features_extractor_class=UnityMultiInputExtractor,
            features_extractor_kwargs=extractor,
        ),
    )
    policy = model.policy
    assert policy.pi_features_extractor is not policy.vf_features_extractor
    assert isinstance(policy.pi_features_extractor.conditioning, HyperNetwork)
    assert policy.lstm_actor.lstm.input_size == 16  # the LSTM reads the conditioned body
    before = [p.clone() for p in policy.pi_features_extractor.conditioning.parameters()]
    model.learn(32)
    after = list(policy.pi_features_extractor.conditioning.parameters())
    assert any(not th.equal(a, b) for a, b in zip(after, before))
