"""Shipped RL Zoo style hyperparameters, user overrides, and the algorithm registry."""

from __future__ import annotations

from pathlib import Path

import pytest
import stable_baselines3
import torch.nn as nn

from unity_sb3.algorithms.registry import algorithm_class
from unity_sb3.config.hyperparams import gym_id, load_hyperparams
from unity_sb3.config.model_args import parse_policy_kwargs


def test_shipped_ball3d_ppo() -> None:
    params = load_hyperparams("ppo", "Ball3D")
    assert params["n_timesteps"] > 0 and params["policy"] == "MlpPolicy"
    assert isinstance(parse_policy_kwargs(params["policy_kwargs"]), dict)


def test_user_config_overrides(tmp_path: Path) -> None:
    flat = tmp_path / "flat.yml"
    flat.write_text("n_steps: 32\nn_timesteps: 1000\n")
    assert load_hyperparams("ppo", "Ball3D", flat)["n_steps"] == 32
    zoo = tmp_path / "zoo.yml"
    zoo.write_text("unity_sb3/Ball3D-v0:\n  n_epochs: 7\n")
    assert load_hyperparams("ppo", "Ball3D", zoo)["n_epochs"] == 7
    wrong = tmp_path / "wrong.yml"
    wrong.write_text("unity_sb3/Ball3d-v0:\n  n_epochs: 7\n")
    with pytest.raises(KeyError, match="Did you mean"):
        load_hyperparams("ppo", "Ball3D", wrong)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config file not found"):
        load_hyperparams("ppo", "Ball3D", tmp_path / "nope.yml")


def test_policy_kwargs_strings() -> None:
    kwargs = parse_policy_kwargs("dict(net_arch=[32, 32], activation_fn=nn.ReLU)")
    assert kwargs == {"net_arch": [32, 32], "activation_fn": nn.ReLU}
    with pytest.raises(ValueError, match="must evaluate to a dict"):
        parse_policy_kwargs("[1, 2]")


def test_gym_id() -> None:
    assert gym_id("Ball3D") == "unity_sb3/Ball3D-v0"
    assert gym_id("unity_sb3/Ball3D-v0") == "unity_sb3/Ball3D-v0"


@pytest.mark.parametrize("name", ["a2c", "TD3", "maskable-ppo", "recurrent_ppo", "tqc"])
def test_registry_resolves(name: str) -> None:
    assert issubclass(algorithm_class(name), stable_baselines3.common.base_class.BaseAlgorithm)


def test_registry_did_you_mean() -> None:
    with pytest.raises(ValueError, match="Did you mean ppo"):
        algorithm_class("ppoo")


def test_run_config_with_python_objects_saves_as_plain_yaml() -> None:
    import yaml

    from unity_sb3.run import plain

    text = yaml.safe_dump(
        plain({"policy_kwargs": {"activation_fn": nn.ReLU, "net_arch": (8, 8)}, "lr": 1e-3})
    )
    assert "torch.nn.modules.activation.ReLU" in text and "lr: 0.001" in text
