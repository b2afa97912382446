"""ML-Agents' scene-dependent network choices, resolved against the env: goal conditioning, entity observations."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from gymnasium import spaces
from mlagents_envs.base_env import (
    ActionSpec,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)
from stable_baselines3.common.torch_layers import FlattenExtractor

from unity_sb3.config.mlagents_network import goal_signal_keys, resolve_mlagents_network, variable_length_keys
from unity_sb3.config.mlagents_schema import MLAgentsConfigWarning
from unity_sb3.networks.extractors import UnityMultiInputExtractor
from unity_sb3.spaces import BehaviorSpaces

_NONE = DimensionProperty.NONE


def _env(*, flatten: bool = False, goal: bool = True) -> SimpleNamespace:
    """A stand-in VecEnv over GridWorld-like specs: a vector, a goal one-hot (when ``goal``)."""
    specs = [ObservationSpec((4,), (_NONE,), ObservationType.DEFAULT, "Ray")]
    if goal:
        specs.append(ObservationSpec((2,), (_NONE,), ObservationType.GOAL_SIGNAL, "GoalSensor"))
    behavior_spaces = BehaviorSpaces(BehaviorSpec(specs, ActionSpec.create_discrete((5,))), flatten=flatten)
    return SimpleNamespace(
        num_envs=1, spaces=behavior_spaces, observation_space=behavior_spaces.observation_space
    )


def _kwargs(extractor: type = UnityMultiInputExtractor) -> dict:
    return {
        "policy_kwargs": {
            "features_extractor_class": extractor,
            "features_extractor_kwargs": {"encoder": "simple"},
        }
    }


def test_goal_signal_keys_come_from_the_behavior_spec() -> None:
    assert goal_signal_keys(_env()) == ["GoalSensor"]
    assert goal_signal_keys(_env(goal=False)) == []
    assert (
        goal_signal_keys(SimpleNamespace(observation_space=spaces.Box(-1, 1, (3,)))) == []
    )  # not a Unity env


def test_hyper_conditions_on_the_goal_signals(capsys) -> None:
    kwargs = _kwargs()
    resolve_mlagents_network({"goal_conditioning_type": "hyper", "hidden_units": 32}, kwargs, _env())
    extractor_kwargs = kwargs["policy_kwargs"]["features_extractor_kwargs"]
    assert extractor_kwargs == {
        "encoder": "simple",
        "goal_keys": ["GoalSensor"],
        "goal_hidden_dim": 32,
        "goal_features": True,  # ML-Agents encodes the goals with the other observations too
    }
    assert "goal signals GoalSensor condition" in capsys.readouterr().out
    extractor = UnityMultiInputExtractor(_env().observation_space, **extractor_kwargs)
    assert extractor.goal_keys == ["GoalSensor"] and extractor.features_dim == 32


def test_variable_length_goal_signal_stays_an_entity_observation(capsys) -> None:
    """ML-Agents gives an entity list's goal encoding size 0: it conditions nothing (``test_var_len_obs_and_goal_*``)."""
    specs = [
        ObservationSpec(
            (10, 5), (DimensionProperty.VARIABLE_SIZE, _NONE), ObservationType.GOAL_SIGNAL, "goal_buffer"
        ),
        ObservationSpec((10, 5), (DimensionProperty.VARIABLE_SIZE, _NONE), ObservationType.DEFAULT, "buffer"),
    ]
    behavior_spaces = BehaviorSpaces(BehaviorSpec(specs, ActionSpec.create_discrete((2,))))
    env = SimpleNamespace(
        num_envs=1, spaces=behavior_spaces, observation_space=behavior_spaces.observation_space
    )
    kwargs = _kwargs()
    resolve_mlagents_network({"goal_conditioning_type": "hyper", "hidden_units": 32}, kwargs, env)
    assert "goal_keys" not in kwargs["policy_kwargs"]["features_extractor_kwargs"]
    out = capsys.readouterr().out
    assert "goal signals goal_buffer are variable-length: encoded as ordinary entity observations" in out
    extractor = UnityMultiInputExtractor(
        env.observation_space, **kwargs["policy_kwargs"]["features_extractor_kwargs"]
    )
    assert sorted(extractor.entity_keys) == ["buffer", "goal_buffer"]


def test_none_keeps_goals_as_plain_observations() -> None:
    kwargs = _kwargs()
    resolve_mlagents_network({"goal_conditioning_type": "none", "hidden_units": 32}, kwargs, _env())
    assert "goal_keys" not in kwargs["policy_kwargs"]["features_extractor_kwargs"]


@pytest.mark.parametrize(
    ("env", "extractor", "why"),
    [
        (_env(flatten=True), UnityMultiInputExtractor, "flattened into one vector"),
        (_env(), FlattenExtractor, "the features extractor is FlattenExtractor"),
    ],
)
def test_hyper_that_cannot_apply_is_reported(env: SimpleNamespace, extractor: type, why: str) -> None:
    kwargs = _kwargs(extractor)
    with pytest.warns(MLAgentsConfigWarning, match=why):
        resolve_mlagents_network({"goal_conditioning_type": "hyper", "hidden_units": 32}, kwargs, env)
    assert "goal_keys" not in kwargs["policy_kwargs"]["features_extractor_kwargs"]


def test_no_goal_signal_changes_nothing() -> None:
    kwargs = _kwargs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve_mlagents_network(
            {"goal_conditioning_type": "hyper", "hidden_units": 32}, kwargs, _env(goal=False)
        )
    assert kwargs == _kwargs()


def test_flattened_entity_observation_is_reported() -> None:
    space = spaces.Dict({"ray": spaces.Box(-1, 1, (4,)), "buffer": spaces.Box(-1, 1, (6, 3), np.float32)})
    assert variable_length_keys(space) == ["buffer"] and variable_length_keys(spaces.Box(-1, 1, (6, 3))) == [
        ""
    ]
    env = SimpleNamespace(num_envs=1, observation_space=space)
    with pytest.warns(
        MLAgentsConfigWarning, match=r"observation 'buffer' of shape \(6, 3\) is a variable-length"
    ):
        resolve_mlagents_network(
            {"goal_conditioning_type": "hyper", "hidden_units": 32}, _kwargs(FlattenExtractor), env
        )


def test_entity_observation_with_attention_is_not_a_warning(capsys) -> None:
    space = spaces.Dict({"ray": spaces.Box(-1, 1, (4,)), "buffer": spaces.Box(-1, 1, (6, 3), np.float32)})
    env = SimpleNamespace(num_envs=1, observation_space=space)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MLAgentsConfigWarning)
        resolve_mlagents_network({"goal_conditioning_type": "hyper", "hidden_units": 32}, _kwargs(), env)
    assert (
        "observation 'buffer' of shape (6, 3): entity embedding and self-attention" in capsys.readouterr().out
    )
