"""ML-Agents trainer configs -> unity-sb3 runs: the real example configs, the mapping, errors, warnings."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch.nn as nn
import yaml
from gymnasium import spaces

from unity_sb3.callbacks.curriculum import mlagents_callbacks
from unity_sb3.config.mlagents import convert_mlagents_config, is_mlagents_config, load_mlagents_hyperparams
from unity_sb3.config.mlagents_legacy import is_legacy_config, upgrade_legacy_config
from unity_sb3.config.mlagents_schema import MLAgentsConfigError, MLAgentsConfigWarning
from unity_sb3.config.model_args import prepare_model_args, resolve_schedule
from unity_sb3.networks.extractors import UnityMultiInputExtractor
from unity_sb3.unity.errors import UnityConfigurationError

CONFIGS = Path(__file__).resolve().parent / "data" / "mlagents_configs"


def _load(name: str) -> dict:
    return yaml.safe_load((CONFIGS / name).read_text())


def _env(num_envs: int, space: spaces.Space | None = None) -> SimpleNamespace:
    return SimpleNamespace(num_envs=num_envs, observation_space=space or spaces.Box(-1, 1, (8,), np.float32))


def _unhonored(run) -> set[str]:
    return {row.source for row in run.unhonored}


# ------------------------------------------------------------------------------ the real configs
def test_3dball_ppo_mapping() -> None:
    run = convert_mlagents_config(CONFIGS / "3DBall_ppo.yaml")
    h = run.hyperparams
    assert (run.behavior, run.algo, run.n_timesteps) == ("3DBall", "ppo", 500_000)
    assert h["batch_size"] == 64 and h["mlagents_per_slot"] == {"buffer_size": 12000}
    assert h["ent_coef"] == "lin_0.001_1e-05"  # beta_schedule follows the linear learning rate
    assert h["gae_lambda"] == 0.99 and h["n_epochs"] == 3 and h["gamma"] == 0.99
    assert h["learning_rate"] == "lin_0.0003_1e-10" and h["clip_range"] == "lin_0.2_0.1"
    assert run.normalize == {"norm_obs": True, "norm_reward": False}
    assert "reward_signals" not in h  # extrinsic only at strength 1: plain SB3 PPO
    assert h["policy_kwargs"] == (
        "dict(net_arch=[128, 128], activation_fn=nn.SiLU, features_extractor_class=UnityMultiInputExtractor,"
        " features_extractor_kwargs=dict(encoder='simple', cnn_output_dim=128), share_features_extractor=False,"
        " ortho_init=False)"
    )
    assert h["time_horizon"] == 1000 and not _unhonored(run)  # every setting of Unity's 3DBall is honored
    assert not {"summary_freq", "keep_checkpoints"} & _unhonored(run)
    assert run.cadence == {"keep_checkpoints": 5, "summary_freq": 12000}
    assert "hyperparameters.batch_size" not in _unhonored(run)
    # SB3's gradient clipping stays (ML-Agents has none), and the table says so
    assert "max_grad_norm" not in h and "max_grad_norm=0.5" in run.table()


def test_3dball_sac_mapping() -> None:
    run = convert_mlagents_config(CONFIGS / "3DBall_sac.yaml")
    h = run.hyperparams
    assert run.algo == "sac" and run.n_timesteps == 100_000
    assert h["buffer_size"] == 200_000 and h["batch_size"] == 64 and h["tau"] == 0.005
    assert h["learning_starts"] == 0 and h["ent_coef"] == "auto_0.5" and h["learning_rate"] == 0.0003
    assert h["mlagents_per_slot"] == {"steps_per_update": 10.0}
    assert _unhonored(run) == {"threaded"} and "time_horizon" not in h  # SAC: nothing to cut
    assert "hyperparameters.reward_signal_steps_per_update" not in _unhonored(run)  # same as steps_per_update


@pytest.mark.parametrize(
    ("name", "signals"),
    [
        ("Pyramids_ppo.yaml", {"extrinsic", "curiosity"}),
        ("PyramidsRND_ppo.yaml", {"extrinsic", "rnd"}),
        ("Pyramids_imitation.yaml", {"extrinsic", "curiosity", "gail"}),
    ],
)
def test_pyramids_reward_signals(name: str, signals: set[str]) -> None:
    run = convert_mlagents_config(CONFIGS / name)
    assert set(run.hyperparams["reward_signals"]) == signals
    original = _load(name)["behaviors"]["Pyramids"]["reward_signals"]
    for signal in signals:  # passed through unchanged: unity_sb3's PPO reads ML-Agents' keys
        assert run.hyperparams["reward_signals"][signal] == original[signal]
    if name == "Pyramids_imitation.yaml":
        assert run.hyperparams["behavioral_cloning"] == {
            "demo_path": "Project/Assets/ML-Agents/Examples/Pyramids/Demos/ExpertPyramid.demo",
            "strength": 0.5,
            "steps": 150000,
        }
        assert run.n_timesteps == 10_000_000  # "1.0e7"


def test_dungeon_escape_poca_mapping() -> None:
    run = convert_mlagents_config(CONFIGS / "DungeonEscape_poca.yaml")
    h = run.hyperparams
    assert run.algo == "poca"
    assert h["schedule"] == "constant" and h["learning_rate"] == 0.0003 and h["ent_coef"] == 0.01
    assert h["clip_range"] == 0.2 and h["max_grad_norm"] is None
    assert "critic_embed_dim=256" in h["policy_kwargs"]


def test_table_lists_every_mapping(capsys) -> None:
    with pytest.warns(MLAgentsConfigWarning) as record:
        params = load_mlagents_hyperparams(CONFIGS / "3DBall_sac.yaml")
    table = capsys.readouterr().out
    assert (
        "ML-Agents key" in table
        and "hyperparameters.init_entcoef" in table
        and "ent_coef='auto_0.5'" in table
    )
    assert "train_freq / gradient_steps" in table
    messages = [str(w.message) for w in record]
    assert any(m.startswith("ML-Agents setting threaded=True is not honored") for m in messages)
    assert len(messages) == len(convert_mlagents_config(CONFIGS / "3DBall_sac.yaml").unhonored)
    assert params["algo"] == "sac" and params["policy"] == "auto" and params["n_timesteps"] == 100_000


def test_is_mlagents_config() -> None:
    assert is_mlagents_config(_load("3DBall_ppo.yaml"))
    assert not is_mlagents_config({"unity_sb3/Ball3D-v0": {"n_steps": 8}})


# ------------------------------------------------------------------------------ resolution
@pytest.mark.parametrize(("slots", "n_steps"), [(12, 1000), (7, 1715), (1, 12000)])
def test_buffer_size_becomes_n_steps_per_slot(slots: int, n_steps: int) -> None:
    params = convert_mlagents_config(CONFIGS / "3DBall_ppo.yaml").hyperparams
    _, kwargs = prepare_model_args("ppo", "auto", params, _env(slots))
    assert kwargs["n_steps"] == n_steps and "mlagents_per_slot" not in kwargs


def test_batch_size_clamped_to_rollout() -> None:
    _, kwargs = prepare_model_args(
        "ppo", "MlpPolicy", {"batch_size": 64, "mlagents_per_slot": {"buffer_size": 10}}, _env(3)
    )
    assert kwargs["n_steps"] == 4 and kwargs["batch_size"] == 12


@pytest.mark.parametrize(("slots", "train_freq", "gradient_steps"), [(12, 1, 1), (40, 1, 4), (2, 5, 1)])
def test_sac_steps_per_update(slots: int, train_freq: int, gradient_steps: int) -> None:
    params = convert_mlagents_config(CONFIGS / "3DBall_sac.yaml").hyperparams
    _, kwargs = prepare_model_args("sac", "auto", params, _env(slots))
    assert (kwargs["train_freq"], kwargs["gradient_steps"]) == (train_freq, gradient_steps)


def test_schedules_and_policy_kwargs_resolved() -> None:
    params = convert_mlagents_config(CONFIGS / "3DBall_ppo.yaml").hyperparams
    policy, kwargs = prepare_model_args("ppo", "auto", params, _env(12))
    assert policy == "MlpPolicy"
    assert kwargs["learning_rate"](1.0) == pytest.approx(3e-4) and kwargs["learning_rate"](
        0.0
    ) == pytest.approx(1e-10)
    assert kwargs["clip_range"](0.0) == pytest.approx(0.1) and kwargs["clip_range"](0.5) == pytest.approx(
        0.15
    )
    assert kwargs["policy_kwargs"] == {
        "net_arch": [128, 128],
        "activation_fn": nn.SiLU,
        "features_extractor_class": UnityMultiInputExtractor,
        "features_extractor_kwargs": {"encoder": "simple", "cnn_output_dim": 128},
        "share_features_extractor": False,
        "ortho_init": False,
    }
    assert resolve_schedule("lin_0.5")(0.5) == pytest.approx(0.25)  # RL Zoo's form decays to 0
    assert resolve_schedule(0.3) == 0.3
    with pytest.raises(MLAgentsConfigError, match="lin_<start>"):
        resolve_schedule("lin_a_b_c")
    with pytest.raises(MLAgentsConfigError, match="ent_coef cannot be a schedule"):
        prepare_model_args("a2c", "MlpPolicy", {"ent_coef": "lin_0.1"}, _env(1))
    _, kwargs = prepare_model_args("ppo", "MlpPolicy", {"ent_coef": "lin_0.1_0.01"}, _env(1))
    assert kwargs["ent_coef"](0.0) == pytest.approx(0.01)  # unity_sb3.PPO takes an ent_coef schedule


@pytest.mark.parametrize(
    ("space", "policy"),
    [
        (spaces.Box(-1, 1, (8,), np.float32), "MlpPolicy"),
        (spaces.Box(0, 255, (3, 36, 36), np.uint8), "CnnPolicy"),
        (
            spaces.Dict({"a": spaces.Box(0, 255, (3, 36, 36), np.uint8), "b": spaces.Box(-1, 1, (2,))}),
            "MultiInputPolicy",
        ),
    ],
)
def test_auto_policy(space: spaces.Space, policy: str) -> None:
    assert prepare_model_args("ppo", "auto", {}, _env(1, space))[0] == policy
    assert prepare_model_args("ppo", "MlpPolicy", {}, _env(1, space))[0] == "MlpPolicy"


# ------------------------------------------------------------------------------ other settings
def test_memory_maps_to_the_recurrent_ppo_with_its_signals() -> None:
    data = _load("3DBall_ppo.yaml")
    data["behaviors"]["3DBall"]["network_settings"]["memory"] = {"memory_size": 64, "sequence_length": 16}
    data["behaviors"]["3DBall"]["reward_signals"]["curiosity"] = {"strength": 0.01}
    run = convert_mlagents_config(data)
    assert run.algo == "ppo_memory"
    assert run.hyperparams["memory_size"] == 64 and run.hyperparams["sequence_length"] == 16
    assert set(run.hyperparams["reward_signals"]) == {"extrinsic", "curiosity"}
    assert not {"network_settings.memory.sequence_length", "reward_signals"} & _unhonored(run)
    sac = _load("3DBall_sac.yaml")
    sac["behaviors"]["3DBall"]["network_settings"]["memory"] = {"memory_size": 64}
    run = convert_mlagents_config(sac)
    assert run.algo == "sac" and "network_settings.memory" not in _unhonored(run)  # SAC's Lstm policies


@pytest.mark.parametrize(
    ("space", "policy"),
    [
        (spaces.Box(-1, 1, (8,), np.float32), "MlpLstmPolicy"),
        (spaces.Box(0, 255, (3, 36, 36), np.uint8), "CnnLstmPolicy"),
        (spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Box(-1, 1, (3,))}), "MultiInputLstmPolicy"),
    ],
)
@pytest.mark.parametrize("algo", ["recurrent_ppo", "ppo_memory"])
def test_auto_policy_of_recurrent_ppo_is_its_lstm_policy(space: spaces.Space, policy: str, algo: str) -> None:
    assert prepare_model_args(algo, "auto", {}, _env(1, space))[0] == policy


@pytest.mark.filterwarnings("ignore::unity_sb3.config.mlagents_schema.MLAgentsConfigWarning")
def test_memory_config_trains_through_the_command(tmp_path: Path) -> None:
    from unity_sb3.cli import main

    data = _load("3DBall_ppo.yaml")
    behavior = data["behaviors"]["3DBall"]
    behavior["hyperparameters"].update(batch_size=24, buffer_size=48, num_epoch=1)
    behavior["network_settings"].update(hidden_units=8, num_layers=1, memory={"memory_size": 16})
    behavior["max_steps"] = 96
    config = tmp_path / "memory.yaml"
    config.write_text(yaml.safe_dump(data))
    args = ["train", "--env", "Ball3D", "--config", str(config), "--results-dir", str(tmp_path)]
    assert main([*args, "--run-id", "mem", "--no-progress", "--transport", "inprocess"]) == 0
    from unity_sb3 import RecurrentPPO

    model = RecurrentPPO.load(tmp_path / "mem" / "model.zip")
    assert type(model.policy).__name__ == "RecurrentActorCriticPolicy"
    assert model.policy.lstm_actor.hidden_size == 8  # memory_size 16 = hidden + cell state
    assert model.policy.net_arch == [8]  # the body before the LSTM


@pytest.mark.parametrize("encoder", ["simple", "resnet"])
def test_ppo_critic_has_its_own_encoders_with_mlagents_initialisation(encoder: str) -> None:
    """ML-Agents' ValueNetwork has its own observation encoders, initialised as ML-Agents does
    (PyTorch's default for the convolutions): SB3's orthogonal initialisation (gain sqrt 2) would
    make the convolutions ~2.4x larger; with it Unity's one-image resnet test failed 1 in 11 seeds,
    4 in 11 with separate encoders (benchmarks/RESULTS.md)."""
    import gymnasium as gym
    import torch
    from stable_baselines3.common.vec_env import DummyVecEnv

    from unity_sb3.algorithms.registry import algorithm_class

    class ImageEnv(gym.Env):
        observation_space = spaces.Dict({"image": spaces.Box(0, 1, (3, 36, 36), np.float32)})
        action_space = spaces.Box(-1, 1, (2,), np.float32)

        def reset(self, *, seed=None, options=None):
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, False, False, {}

    data = _load("3DBall_ppo.yaml")
    data["behaviors"]["3DBall"]["network_settings"]["vis_encode_type"] = encoder
    run = convert_mlagents_config(data)
    env = DummyVecEnv([ImageEnv])
    params = {**run.hyperparams, "mlagents_per_slot": {"buffer_size": 64}}
    policy, kwargs = prepare_model_args(run.algo, run.policy, params, env)
    torch.manual_seed(0)
    model = algorithm_class(run.algo)(policy, env, **kwargs)
    actor, critic = model.policy.pi_features_extractor, model.policy.vf_features_extractor
    assert actor is not critic
    assert not set(map(id, actor.parameters())) & set(map(id, critic.parameters()))
    convs = [m for m in actor.modules() if isinstance(m, nn.Conv2d)]
    assert convs
    for conv in convs:
        fan_in = conv.weight[0].numel()
        # PyTorch's default: uniform within 1/sqrt(fan_in), std 1/sqrt(3 fan_in); orthogonal gain sqrt 2: ~sqrt(2/fan_in)
        assert conv.weight.abs().max().item() <= 1 / fan_in**0.5 + 1e-6
    assert "ortho_init=False" in run.table()


@pytest.mark.parametrize("memory", [False, True])
def test_shared_critic_puts_one_body_under_both_heads(memory: bool) -> None:
    from gymnasium.envs.classic_control import CartPoleEnv
    from stable_baselines3.common.vec_env import DummyVecEnv

    from unity_sb3.algorithms.registry import algorithm_class

    data = _load("3DBall_ppo.yaml")
    behavior = data["behaviors"]["3DBall"]
    behavior["hyperparameters"]["shared_critic"] = True
    behavior["network_settings"].update(hidden_units=16, num_layers=2)
    if memory:
        behavior["network_settings"]["memory"] = {"memory_size": 8}
    run = convert_mlagents_config(data)
    assert "hyperparameters.shared_critic" not in _unhonored(run)
    env = DummyVecEnv([CartPoleEnv])
    params = {**run.hyperparams, "mlagents_per_slot": {"buffer_size": 64}}
    policy, kwargs = prepare_model_args(run.algo, run.policy, params, env)
    model = algorithm_class(run.algo)(policy, env, **kwargs)
    body = model.policy.features_extractor.body
    assert [layer.out_features for layer in body if isinstance(layer, nn.Linear)] == [16, 16]
    assert model.policy.share_features_extractor
    assert model.policy.mlp_extractor.latent_dim_pi == model.policy.mlp_extractor.latent_dim_vf
    assert not list(model.policy.mlp_extractor.parameters())  # no separate actor / critic layers
    if memory:
        assert model.policy.lstm_actor is not model.policy.lstm_critic  # ML-Agents shares one: not here


def test_environment_parameters_and_curriculum() -> None:
    run = convert_mlagents_config(CONFIGS / "WallJump_curriculum.yaml", behavior="BigWallJump")
    params = run.open_kwargs["environment_parameters"]
    assert params["big_wall_height"]["curriculum"][0]["name"] == "Lesson0"  # `- Lesson0:` form accepted
    assert run.n_timesteps == 20_000_000
    [callback] = mlagents_callbacks(run.open_kwargs, "BigWallJump?team=0")
    assert type(callback).__name__ == "CurriculumCallback"
    data = _load("3DBall_ppo.yaml")
    data["environment_parameters"] = {
        "mass": {"sampler_type": "uniform", "sampler_parameters": {"min_value": 0.5, "max_value": 2}}
    }
    run = convert_mlagents_config(data)
    assert run.open_kwargs["environment_parameters"]["mass"]["sampler_type"] == "uniform"
    assert mlagents_callbacks(run.open_kwargs) == []  # samplers only: no curriculum to drive


def test_engine_and_env_settings() -> None:
    data = _load("3DBall_ppo.yaml")
    data["engine_settings"] = {"time_scale": 5, "no_graphics": True}
    data["env_settings"] = {"env_args": ["-logFile", "-"], "base_port": 6000, "num_envs": 4}
    data["checkpoint_settings"] = {"run_id": "x"}
    data["torch_settings"] = {"device": "cpu"}
    run = convert_mlagents_config(data)
    assert run.open_kwargs["engine_settings"]["time_scale"] == 5
    assert run.open_kwargs["engine_settings"]["width"] == 84  # ML-Agents' defaults for the rest
    assert run.open_kwargs["no_graphics"] is True
    assert run.open_kwargs["additional_args"] == ["-logFile", "-"] and run.open_kwargs["base_port"] == 6000
    assert {"checkpoint_settings.run_id", "torch_settings.device"} <= _unhonored(run)
    assert run.num_envs == 4 and run.as_hyperparams()["num_envs"] == 4  # unity-sb3 train --num-envs


@pytest.mark.parametrize(
    ("file", "behavior", "algo", "expected"),
    [
        # default section, then the behavior's own settings on top; flat keys to their sections
        (
            "legacy_ppo_trainer_config.yaml",
            "3DBall",
            "ppo",
            {"batch_size": 64, "gae_lambda": 0.99, "n_timesteps": 500000},
        ),
        (
            "legacy_ppo_trainer_config.yaml",
            "Hallway",
            "ppo_memory",
            {"batch_size": 128, "n_timesteps": 10_000_000},
        ),
        ("legacy_ppo_trainer_config.yaml", "Pyramids", "ppo", {"batch_size": 128, "n_timesteps": 10_000_000}),
        (
            "legacy_sac_trainer_config.yaml",
            "3DBall",
            "sac",
            {"batch_size": 64, "tau": 0.005, "n_timesteps": 500000},
        ),
    ],
)
def test_old_format_configs_map_as_their_upgrade_does(
    file: str, behavior: str, algo: str, expected: dict
) -> None:
    run = convert_mlagents_config(CONFIGS / file, behavior=behavior)
    hyper = run.as_hyperparams()
    assert run.algo == algo and {k: hyper[k] for k in expected} == expected
    assert run.rows[0].value == "ML-Agents <= 0.16 format"
    current = convert_mlagents_config(upgrade_legacy_config(_load(file))[0], behavior=behavior)
    assert current.as_hyperparams() == hyper  # the same run as the upgraded file gives


def test_old_format_memory_signals_and_self_play() -> None:
    hallway = convert_mlagents_config(CONFIGS / "legacy_ppo_trainer_config.yaml", behavior="Hallway")
    assert hallway.as_hyperparams()["memory_size"] == 128  # use_recurrent + memory_size + sequence_length
    pyramids = convert_mlagents_config(CONFIGS / "legacy_ppo_trainer_config.yaml", behavior="Pyramids")
    assert set(pyramids.as_hyperparams()["reward_signals"]) == {"extrinsic", "curiosity"}
    tennis = convert_mlagents_config(CONFIGS / "legacy_sac_trainer_config.yaml", behavior="Tennis")
    assert tennis.self_play.play_against_latest_model_ratio == 0.5  # its 0.14-era name
    # SAC's train_interval and num_update have no place in the current format: reported, not dropped silently
    assert {"Tennis.num_update", "Tennis.train_interval"} == _unhonored(tennis)


def test_old_format_errors_say_what_to_change() -> None:
    with pytest.raises(MLAgentsConfigError, match="names its trainer with 'trainer: ppo'"):
        convert_mlagents_config({"3DBall": {"batch_size": 64}, "default": {"beta": 0.01}})
    with pytest.raises(MLAgentsConfigError, match="'offline_bc' trainer is a behavioral_cloning section"):
        convert_mlagents_config({"3DBall": {"trainer": "offline_bc"}})
    assert not is_legacy_config({"n_steps": 25, "batch_size": 100})  # a flat RL Zoo style file
    assert not is_legacy_config({"unity_sb3/Ball3D-v0": {"n_steps": 25}})


def test_even_checkpoints_need_checkpoints_to_keep() -> None:
    data = _load("3DBall_ppo.yaml")
    data["behaviors"]["3DBall"].update(even_checkpoints=True, keep_checkpoints=0)
    with pytest.raises(MLAgentsConfigError, match=r"keep_checkpoints is 0\. Give keep_checkpoints > 0"):
        convert_mlagents_config(data)


def test_the_configuration_mlagents_learn_writes_for_a_run() -> None:
    """``results/<run-id>/configuration.yaml`` of mlagents-learn 1.1.0: every section with ML-Agents' defaults."""
    run = convert_mlagents_config(CONFIGS / "Hallway_configuration.yaml")
    assert run.algo == "ppo_memory" and run.n_timesteps == 10_000_000
    assert run.open_kwargs["no_graphics"] is True and run.open_kwargs["no_graphics_monitor"] is False
    assert run.cadence == {"checkpoint_every": 500000, "keep_checkpoints": 5, "summary_freq": 20000}
    # the defaults written as nulls and falses ask for nothing; these settings do, and are left to flags
    assert _unhonored(run) == {
        "env_settings.env_path",
        "env_settings.seed",
        "checkpoint_settings.run_id",
        "checkpoint_settings.resume",
        "checkpoint_settings.results_dir",
    }


def test_num_areas_copies_the_training_area(monkeypatch) -> None:
    import unity_sb3.open as open_module

    data = _load("3DBall_ppo.yaml")
    data["env_settings"] = {"num_areas": 3}
    kwargs = convert_mlagents_config(data).open_kwargs
    assert kwargs["num_areas"] == 3
    scene = open_module.open_unity("Ball3D", transport="inprocess", **kwargs)
    assert scene.num_agents == 36  # Ball3D's 12 areas, three times
    assert open_module.open_unity("Ball3D", transport="inprocess", num_agents=2, num_areas=3).num_agents == 6
    sent: dict[str, int] = {}

    def local_env(file_name, *, num_areas, **_):
        sent["n"] = num_areas
        return SimpleNamespace()

    monkeypatch.setattr(open_module, "LocalUnityEnvironment", local_env)
    open_module.open_unity("builds/Game.x86_64", **kwargs)
    assert sent == {"n": 3}  # a build gets it in the handshake, for its TrainingAreaReplicator
    with pytest.raises(UnityConfigurationError, match="num_areas must be a whole number >= 1"):
        open_module.open_unity("Ball3D", transport="inprocess", num_areas=0)


def test_no_graphics_monitor_gives_worker_0_graphics(monkeypatch) -> None:
    import unity_sb3.open as open_module

    data = _load("3DBall_ppo.yaml")
    data["engine_settings"] = {"no_graphics": False, "no_graphics_monitor": True}
    kwargs = convert_mlagents_config(data).open_kwargs
    launched: dict[int, bool] = {}

    def local_env(file_name, *, worker_id, no_graphics, **_):
        launched[worker_id] = no_graphics
        return SimpleNamespace()

    monkeypatch.setattr(open_module, "LocalUnityEnvironment", local_env)
    for worker in range(3):
        open_module.open_unity("builds/Game.x86_64", worker_id=worker, **kwargs)
    assert launched == {
        0: False,
        1: True,
        2: True,
    }  # as mlagents_envs: no_graphics or (monitor and worker != 0)


def test_default_settings_fill_a_behavior() -> None:
    data = {
        "default_settings": {"trainer_type": "ppo", "hyperparameters": {"beta": 0.02}, "max_steps": 1000},
        "behaviors": {"3DBall": {"hyperparameters": {"batch_size": 32, "buffer_size": 320}}},
    }
    run = convert_mlagents_config(data)
    assert (
        run.hyperparams["ent_coef"] == "lin_0.02_1e-05"
        and run.hyperparams["batch_size"] == 32
        and run.n_timesteps == 1000
    )
    other = convert_mlagents_config(data, behavior="Other?team=0")  # not listed: default_settings
    assert other.behavior == "Other" and other.hyperparams["ent_coef"] == "lin_0.02_1e-05"


def test_several_behaviors_need_a_choice() -> None:
    with pytest.raises(MLAgentsConfigError, match=r"several behaviors.*--behavior"):
        convert_mlagents_config(CONFIGS / "WallJump_curriculum.yaml")
    assert (
        convert_mlagents_config(
            CONFIGS / "WallJump_curriculum.yaml", behavior="SmallWallJump?team=0"
        ).n_timesteps
        == 5_000_000
    )
    with pytest.raises(MLAgentsConfigError, match="not in the config's behaviors"):
        convert_mlagents_config(CONFIGS / "3DBall_ppo.yaml", behavior="Walker")
    data = _load("3DBall_ppo.yaml")
    data["behaviors"]["Other"] = data["behaviors"]["3DBall"]
    assert convert_mlagents_config(data, env="Ball3D").behavior == "3DBall"  # the embedded scene's behavior


@pytest.mark.parametrize(
    ("path", "key", "value", "match"),
    [
        ((), "enviroment_parameters", {}, "Did you mean 'environment_parameters'"),
        (("behaviors", "3DBall"), "max_step", 10, "Did you mean 'max_steps'"),
        (("behaviors", "3DBall", "hyperparameters"), "bata", 0.1, "Did you mean 'beta'"),
        (
            ("behaviors", "3DBall", "hyperparameters"),
            "tau",
            0.1,
            r"Unknown key 'tau' in behaviors.3DBall.hyperparameters \(ppo\)",
        ),
        (("behaviors", "3DBall", "network_settings"), "hiden_units", 8, "Did you mean 'hidden_units'"),
        (("behaviors", "3DBall", "reward_signals"), "curiousity", {}, "Did you mean 'curiosity'"),
        (("behaviors", "3DBall"), "trainer_type", "ppp", "Did you mean 'ppo'"),
        (
            ("behaviors", "3DBall", "network_settings"),
            "vis_encode_type",
            "natur_cnn",
            "Did you mean 'nature_cnn'",
        ),
        (("behaviors", "3DBall", "network_settings"), "memory", {"memory_size": 63}, "must be even"),
        (("behaviors", "3DBall", "hyperparameters"), "batch_size", 20000, "must not exceed buffer_size"),
        (("behaviors", "3DBall", "hyperparameters"), "beta", "a lot", "must be a number"),
        (("behaviors", "3DBall"), "behavioral_cloning", {"strength": 0.5}, "needs demo_path"),
        ((), "engine_settings", {"timescale": 2}, "Did you mean 'time_scale'"),
        ((), "env_settings", {"max_lifetime_restart": 3}, "Did you mean 'max_lifetime_restarts'"),
        (
            (),
            "env_settings",
            {"max_lifetime_restarts": -2},
            r"env_settings.max_lifetime_restarts must be a whole number >= 0, or -1 for no limit; got -2",
        ),
        (
            (),
            "env_settings",
            {"max_lifetime_restarts": "ten"},
            r"max_lifetime_restarts must be a whole number",
        ),
        ((), "env_settings", {"max_lifetime_restarts": 2.5}, r"max_lifetime_restarts must be a whole number"),
        (
            (),
            "env_settings",
            {"max_lifetime_restarts": True},
            r"max_lifetime_restarts must be a whole number",
        ),
        ((), "env_settings", {"restarts_rate_limit_n": -3}, r"env_settings.restarts_rate_limit_n must be"),
        ((), "env_settings", {"restarts_rate_limit_n": [1]}, r"env_settings.restarts_rate_limit_n must be"),
        (
            (),
            "env_settings",
            {"restarts_rate_limit_period_s": 0},
            r"env_settings.restarts_rate_limit_period_s must be a positive number of seconds",
        ),
        (
            (),
            "env_settings",
            {"restarts_rate_limit_period_s": "soon"},
            r"env_settings.restarts_rate_limit_period_s must be a number",
        ),
        (
            ("behaviors", "3DBall", "hyperparameters"),
            "save_replay_buffer",
            True,
            r"Unknown key 'save_replay_buffer' in behaviors.3DBall.hyperparameters \(ppo\)",
        ),
    ],
)
def test_bad_configs(path: tuple[str, ...], key: str, value, match: str) -> None:
    data = _load("3DBall_ppo.yaml")
    node = data
    for part in path:
        node = node[part]
    node[key] = value
    with pytest.raises(MLAgentsConfigError, match=match):
        convert_mlagents_config(data)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_bad_save_replay_buffer(value) -> None:
    data = _load("3DBall_sac.yaml")
    data["behaviors"]["3DBall"]["hyperparameters"]["save_replay_buffer"] = value
    with pytest.raises(
        MLAgentsConfigError,
        match=r"behaviors.3DBall.hyperparameters.save_replay_buffer must be true or false",
    ):
        convert_mlagents_config(data)


@pytest.mark.parametrize(
    ("env_settings", "restarts", "restart_on_crash"),
    [
        ({}, {}, False),  # no restart key: the command's default (off)
        ({"base_port": 6000}, {}, False),
        ({"max_lifetime_restarts": 5}, {"max_restarts": 5}, True),
        ({"max_lifetime_restarts": -1}, {"max_restarts": -1}, True),
        ({"max_lifetime_restarts": 0}, {"max_restarts": 0}, False),  # ML-Agents never restarts then
        ({"restarts_rate_limit_n": 3}, {"restarts_rate_limit_n": 3}, True),  # lifetime default 10
        (
            {"max_lifetime_restarts": 4, "restarts_rate_limit_n": -1, "restarts_rate_limit_period_s": 30},
            {"max_restarts": 4, "restarts_rate_limit_n": -1, "restarts_rate_limit_period_s": 30.0},
            True,
        ),
        ({"max_lifetime_restarts": None}, {}, False),  # null: ML-Agents' default, not given
    ],
)
def test_env_settings_restarts_map(env_settings: dict, restarts: dict, restart_on_crash: bool) -> None:
    data = _load("3DBall_ppo.yaml")
    data["env_settings"] = env_settings
    run = convert_mlagents_config(data)
    assert run.restarts == restarts and run.restart_on_crash is restart_on_crash
    hyper = run.as_hyperparams()
    if restarts:
        assert {k: hyper[k] for k in restarts} == restarts and hyper["restart_on_crash"] is restart_on_crash
        mapped = {row.source for row in run.rows}
        assert {f"env_settings.{key}" for key in env_settings} <= mapped
        assert not {s for s in _unhonored(run) if s.startswith("env_settings.")}
        assert "restart_on_crash=" in run.table()
    else:
        assert not {"restart_on_crash", "max_restarts", "restarts_rate_limit_n"} & set(hyper)


def test_sac_save_replay_buffer_maps() -> None:
    run = convert_mlagents_config(CONFIGS / "3DBall_sac.yaml")  # save_replay_buffer: false
    assert run.save_replay_buffer is False and "save_replay_buffer" not in run.as_hyperparams()
    data = _load("3DBall_sac.yaml")
    data["behaviors"]["3DBall"]["hyperparameters"]["save_replay_buffer"] = True
    run = convert_mlagents_config(data)
    assert run.save_replay_buffer is True and run.as_hyperparams()["save_replay_buffer"] is True
    assert "hyperparameters.save_replay_buffer" not in _unhonored(run)
    assert "--save-replay-buffer" in run.table()


@pytest.mark.parametrize(
    ("env_settings", "flags", "expected"),
    [
        # (restart_on_crash, max_restarts, restarts_rate_limit_n, restarts_rate_limit_period_s)
        ({}, [], (False, 10, 1, 60.0)),
        (
            {"max_lifetime_restarts": 5, "restarts_rate_limit_n": 2, "restarts_rate_limit_period_s": 30},
            [],
            (True, 5, 2, 30.0),
        ),
        ({"max_lifetime_restarts": 5}, ["--max-restarts", "7"], (True, 7, 1, 60.0)),
        ({"max_lifetime_restarts": 5}, ["--no-restart-on-crash"], (False, 5, 1, 60.0)),
        ({"max_lifetime_restarts": 5}, ["--max-restarts", "0"], (False, 0, 1, 60.0)),
        ({"max_lifetime_restarts": 0}, [], (False, 0, 1, 60.0)),
        ({"max_lifetime_restarts": 0}, ["--max-restarts", "2"], (True, 2, 1, 60.0)),
        ({"max_lifetime_restarts": 0}, ["--restart-on-crash"], (True, 0, 1, 60.0)),
        ({"restarts_rate_limit_n": 2}, ["--restarts-rate-limit-period-s", "5"], (True, 10, 2, 5.0)),
    ],
)
def test_command_line_overrides_env_settings(
    tmp_path: Path, env_settings: dict, flags: list[str], expected: tuple
) -> None:
    from unity_sb3.run import config_from_args

    data = _load("3DBall_ppo.yaml")
    data["env_settings"] = env_settings
    config_file = tmp_path / "restarts.yaml"
    config_file.write_text(yaml.safe_dump(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MLAgentsConfigWarning)
        config = config_from_args(_args(config_file, tmp_path, *flags))
    got = (
        config.restart_on_crash,
        config.max_restarts,
        config.restarts_rate_limit_n,
        config.restarts_rate_limit_period_s,
    )
    assert got == expected
    assert not set(config.hyperparams) & {"restart_on_crash", "max_restarts", "restarts_rate_limit_n"}


@pytest.mark.parametrize(("flags", "expected"), [([], True), (["--no-save-replay-buffer"], False)])
def test_save_replay_buffer_from_the_config_and_its_override(
    tmp_path: Path, flags: list[str], expected: bool
) -> None:
    from unity_sb3.run import config_from_args

    data = _load("3DBall_sac.yaml")
    data["behaviors"]["3DBall"]["hyperparameters"]["save_replay_buffer"] = True
    config_file = tmp_path / "sac.yaml"
    config_file.write_text(yaml.safe_dump(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MLAgentsConfigWarning)
        config = config_from_args(_args(config_file, tmp_path, *flags))
    assert config.algo == "sac" and config.save_replay_buffer is expected
    assert "save_replay_buffer" not in config.hyperparams  # a run setting, not a SAC argument


@pytest.mark.parametrize(
    ("settings", "cadence"),
    [
        ({}, {}),  # not given: unity-sb3 train's defaults (checkpoint every 50000, keep 5, no summary)
        ({"keep_checkpoints": 2}, {"keep_checkpoints": 2}),
        ({"keep_checkpoints": 0}, {"keep_checkpoints": 0}),  # ML-Agents: 0 keeps all
        ({"keep_checkpoints": -1}, {"keep_checkpoints": 0}),  # ... and so does anything below
        ({"checkpoint_interval": 500000}, {"checkpoint_every": 500000}),
        ({"summary_freq": "5.0e4"}, {"summary_freq": 50000}),
        ({"summary_freq": None, "keep_checkpoints": None}, {}),
        # even_checkpoints: every max_steps / keep_checkpoints steps (3DBall_ppo.yaml: max_steps 500000)
        (
            {"even_checkpoints": True, "keep_checkpoints": 4, "checkpoint_interval": 1000},
            {"checkpoint_every": 125000, "keep_checkpoints": 4},
        ),
        (
            {"even_checkpoints": True},
            {"checkpoint_every": 100000, "keep_checkpoints": 5},
        ),  # ML-Agents' keep 5
        ({"even_checkpoints": False, "checkpoint_interval": 1000}, {"checkpoint_every": 1000}),
    ],
)
def test_checkpoint_and_summary_cadence_map(settings: dict, cadence: dict) -> None:
    data = _load("3DBall_ppo.yaml")
    behavior = data["behaviors"]["3DBall"]
    for key in ("keep_checkpoints", "checkpoint_interval", "summary_freq"):
        behavior.pop(key, None)
    behavior.update(settings)
    run = convert_mlagents_config(data)
    assert run.cadence == cadence
    hyper = run.as_hyperparams()
    assert {
        k: hyper[k] for k in ("checkpoint_every", "keep_checkpoints", "summary_freq") if k in hyper
    } == cadence
    assert not {"keep_checkpoints", "checkpoint_interval", "summary_freq"} & _unhonored(run)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("summary_freq", 0, "summary_freq must be >= 1"),
        ("checkpoint_interval", 0, "checkpoint_interval must be >= 1"),
        ("summary_freq", 1.5, "summary_freq must be a whole number"),
        ("keep_checkpoints", "many", "keep_checkpoints must be a number"),
        ("even_checkpoints", "yes", "even_checkpoints must be true or false"),
    ],
)
def test_bad_cadence_values(key: str, value, match: str) -> None:
    data = _load("3DBall_ppo.yaml")
    data["behaviors"]["3DBall"][key] = value
    with pytest.raises(MLAgentsConfigError, match=match):
        convert_mlagents_config(data)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], (50_000, 5, 12000)),  # 3DBall_ppo.yaml: keep_checkpoints 5, summary_freq 12000
        (["--keep-checkpoints", "0", "--summary-freq", "300"], (50_000, 0, 300)),
        (["--checkpoint-every", "1000"], (1000, 5, 12000)),
    ],
)
def test_command_line_overrides_checkpoint_and_summary_settings(
    tmp_path: Path, flags: list[str], expected: tuple
) -> None:
    from unity_sb3.run import config_from_args

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MLAgentsConfigWarning)
        config = config_from_args(_args(CONFIGS / "3DBall_ppo.yaml", tmp_path, *flags))
    assert (config.checkpoint_every, config.keep_checkpoints, config.summary_freq) == expected
    assert not {"checkpoint_every", "keep_checkpoints", "summary_freq"} & set(config.hyperparams)


@pytest.mark.parametrize(
    "flags", [["--keep-checkpoints", "-1"], ["--summary-freq", "0"], ["--checkpoint-every", "x"]]
)
def test_bad_checkpoint_and_summary_flags(tmp_path: Path, flags: list[str], capsys) -> None:
    with pytest.raises(SystemExit):
        _args(CONFIGS / "3DBall_ppo.yaml", tmp_path, *flags)
    err = capsys.readouterr().err
    assert f"argument {flags[0]}:" in err and ("whole number" in err or "> 0" in err), err


def test_empty_behaviors_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MLAgentsConfigError, match="at least one behavior"):
        convert_mlagents_config({"behaviors": {}})
    with pytest.raises(FileNotFoundError):
        convert_mlagents_config(tmp_path / "nope.yaml")


# ------------------------------------------------------------------------------ unity-sb3 train
def _args(config: Path, tmp_path: Path, *extra: str) -> argparse.Namespace:
    from unity_sb3.cli import build_parser

    return build_parser().parse_args(
        ["train", "--config", str(config), "--transport", "inprocess", "--results-dir", str(tmp_path), *extra]
    )


def test_load_hyperparams_and_config_from_args(tmp_path: Path) -> None:
    from unity_sb3.config.hyperparams import load_hyperparams
    from unity_sb3.run import config_from_args

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MLAgentsConfigWarning)
        assert load_hyperparams("ppo", "Ball3D", CONFIGS / "3DBall_sac.yaml")["algo"] == "sac"
        config = config_from_args(_args(CONFIGS / "3DBall_sac.yaml", tmp_path))
    assert config.algo == "sac" and config.n_timesteps == 100_000 and config.policy == "auto"
    assert config.normalize == {"norm_obs": True, "norm_reward": False}
    yaml.safe_dump(config.hyperparams)  # plain data: saved in the run's config.yaml


def test_train_from_mlagents_config_end_to_end(tmp_path: Path, demo_dir: Path) -> None:
    """The real 3DBall config, made tiny, plus BC from the real recording and a curriculum."""
    from unity_sb3.algorithms.registry import algorithm_class
    from unity_sb3.run import config_from_args, train

    data = _load("3DBall_ppo.yaml")
    behavior = data["behaviors"]["3DBall"]
    behavior["hyperparameters"].update(buffer_size=120, batch_size=60)
    behavior["network_settings"]["hidden_units"] = 16
    behavior["max_steps"] = 240
    behavior["behavioral_cloning"] = {
        "demo_path": str(demo_dir / "Expert3DBall.demo"),
        "strength": 0.5,
        "steps": 1000,
    }
    data["environment_parameters"] = {
        "mass": {
            "curriculum": [
                {
                    "name": "light",
                    "value": 1.0,
                    "completion_criteria": {"measure": "progress", "behavior": "3DBall", "threshold": 0.4},
                },
                {"name": "heavy", "value": 2.0},
            ]
        }
    }
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(yaml.safe_dump(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MLAgentsConfigWarning)
        config = config_from_args(_args(config_file, tmp_path))
    model_path = train(config, tmp_path / "run", progress=False)
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["hyperparams"]["mlagents_per_slot"] == {"buffer_size": 120}
    assert (tmp_path / "run" / "vecnormalize.pkl").is_file()  # network_settings.normalize
    model = algorithm_class("ppo").load(model_path, device="cpu")
    assert model.n_steps == 10 and model.num_timesteps >= 240  # 120 agent steps / 12 agents
    assert model.policy.activation_fn is nn.SiLU
    assert model.behavioral_cloning["strength"] == 0.5
