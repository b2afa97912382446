"""``--initialize-from``: a new run starts from another run's weights and normalizer, at step 0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from test_run_behaviors import strikers_vs_goalie_two_trainers, train_args

from unity_sb3 import POCA, PPO
from unity_sb3.cli import main
from unity_sb3.run_state import InitializeError, initialization_source, initialize_parameters

TINY = ["--n-timesteps", "300", "--no-progress", "--transport", "inprocess"]


def flat_config(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text("n_steps: 25\nbatch_size: 100\nn_epochs: 1\nnormalize: true\n" + text)
    return str(path)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def train_first_run(tmp_path: Path) -> list[str]:
    """Train run ``first`` under ``tmp_path``; the ``--results-dir`` arguments."""
    results = ["--results-dir", str(tmp_path)]
    assert (
        main(["train", *results, "--run-id", "first", "--config", flat_config(tmp_path, "a.yml", ""), *TINY])
        == 0
    )
    return results


def test_a_run_starts_from_another_runs_weights_and_statistics(tmp_path: Path, capsys) -> None:
    results = train_first_run(tmp_path)
    # new settings (learning rate, seed), the same network: from the run id, as mlagents-learn's flag
    second = flat_config(tmp_path, "b.yml", "learning_rate: 0.0001\n")
    args = ["train", *results, "--run-id", "second", "--config", second, "--seed", "3", *TINY]
    assert main([*args, "--initialize-from", "first"]) == 0
    out = capsys.readouterr().out
    first = tmp_path / "first"
    assert f"Initialized from {first / 'model.zip'} and {first / 'vecnormalize.pkl'}" in out
    saved = yaml.safe_load((tmp_path / "second" / "config.yaml").read_text())
    assert saved["initialize_from"] == str(first) and saved["hyperparams"]["learning_rate"] == 0.0001
    assert PPO.load(tmp_path / "second" / "model.zip").num_timesteps == 300  # counted from 0, not 300 + 300


def test_initialize_parameters_copies_weights_optimizer_and_normalizer(tmp_path: Path) -> None:
    from stable_baselines3.common.vec_env import VecNormalize

    from unity_sb3.wrappers.vec_env import UnityVecEnv

    def env() -> VecNormalize:
        return VecNormalize(UnityVecEnv("Ball3D", open_kwargs={"transport": "inprocess", "num_agents": 2}))

    trained_env = env()
    trained = PPO("MlpPolicy", trained_env, n_steps=32, batch_size=32, n_epochs=1, seed=0)
    trained.learn(64)
    (tmp_path / "run").mkdir()
    trained.save(tmp_path / "run" / "model.zip")
    trained_env.save(str(tmp_path / "run" / "vecnormalize.pkl"))
    fresh_env = env()
    fresh = PPO("MlpPolicy", fresh_env, n_steps=32, batch_size=32, n_epochs=1, seed=1)
    assert not same_weights(fresh.policy, trained.policy)
    initialize_parameters(fresh, initialization_source(tmp_path / "run"), fresh_env)
    assert same_weights(fresh.policy, trained.policy) and fresh.num_timesteps == 0
    assert fresh.policy.optimizer.state_dict()["state"], "Adam's moments come along"
    np.testing.assert_array_equal(fresh_env.obs_rms.mean, trained_env.obs_rms.mean)
    assert fresh_env.obs_rms.count == trained_env.obs_rms.count
    fresh_env.close()
    trained_env.close()


def test_a_network_that_does_not_fit_is_refused_before_training(tmp_path: Path, capsys) -> None:
    results = train_first_run(tmp_path)
    narrow = flat_config(tmp_path, "b.yml", "policy_kwargs: 'dict(net_arch=[8])'\n")
    code = main(
        ["train", *results, "--run-id", "second", "--config", narrow, "--initialize-from", "first", *TINY]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "its network does not fit this run's PPO" in err and "same algorithm, behavior and network" in err
    assert not (tmp_path / "second" / "model.zip").exists()


@pytest.mark.parametrize("source", ["nowhere", "folder_without_model"])
def test_a_missing_source_is_a_clear_error(tmp_path: Path, source: str, capsys) -> None:
    (tmp_path / "folder_without_model").mkdir()
    code = main(
        ["train", "--results-dir", str(tmp_path), "--run-id", "r", "--initialize-from", source, *TINY]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"--initialize-from {source}" in err or f"--initialize-from {tmp_path / source}" in err
    assert "no such model file or run folder" in err or "no model at" in err
    with pytest.raises(InitializeError, match=r"Give a model \.zip, a checkpoint"):
        initialization_source(tmp_path / "folder_without_model")


def test_every_behavior_of_a_run_starts_from_its_own_folder(tmp_path: Path, capsys) -> None:
    config = strikers_vs_goalie_two_trainers(tmp_path)
    assert main(train_args(tmp_path, config, "StrikersVsGoalie")) == 0
    first = tmp_path / "results" / "run"
    args = train_args(tmp_path, config, "StrikersVsGoalie", "--initialize-from", str(first))
    args[args.index("--run-id") + 1] = "second"
    assert main(args) == 0
    out = capsys.readouterr().out
    for behavior in ("Goalie", "Striker"):
        assert f"Initialized from {first / behavior / 'model.zip'}" in out
    striker = POCA.load(tmp_path / "results" / "second" / "Striker" / "model.zip")
    assert 200 <= striker.num_timesteps < 400  # this run's steps only
