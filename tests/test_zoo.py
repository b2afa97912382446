"""RL Zoo bridge: algorithms registered, Unity scenes as one UnityVecEnv, train / enjoy / -optimize."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import optuna
import pytest
import yaml

from unity_sb3 import zoo
from unity_sb3.algorithms.registry import algorithm_class
from unity_sb3.config.hyperparams import HYPERPARAMS_DIR, load_hyperparams
from unity_sb3.config.model_args import prepare_model_args
from unity_sb3.run import RUN_SETTINGS
from unity_sb3.scenes import scene_class

FAST = ["--num-threads", "1", "--seed", "3", "--verbose", "0"]


def test_register_adds_the_project_algorithms() -> None:
    from rl_zoo3 import hyperparams_opt
    from rl_zoo3.utils import ALGOS

    zoo.register()
    zoo.register()  # idempotent
    for name in ("poca", "maskable_ppo", "recurrent_ppo"):
        assert ALGOS[name] is algorithm_class(name)
        assert name in hyperparams_opt.HYPERPARAMS_SAMPLER
    assert ALGOS["ppo"].__module__ == "unity_sb3.algorithms.ppo.ppo"  # reward_signals / BC keys work
    assert ALGOS["sac"].__module__ == "unity_sb3.algorithms.sac.sac"


def test_unity_ids() -> None:
    assert zoo.is_unity_id("unity_sb3/Ball3D-v0") and not zoo.is_unity_id("CartPole-v1")
    with pytest.raises(ValueError, match="needs the Unity build"):
        zoo.make_unity_vec_env(zoo.BUILD_ID)
    with pytest.raises(ValueError, match="only for unity_sb3/Unity-v0"):
        zoo.make_unity_vec_env("unity_sb3/Ball3D-v0", env_kwargs={"target": "x"})
    with pytest.raises(ValueError, match="must be >= 1"):
        zoo.make_unity_vec_env("unity_sb3/Ball3D-v0", n_instances=0)


def test_make_unity_vec_env_splits_kwargs(monkeypatch) -> None:
    env = zoo.make_unity_vec_env(
        "unity_sb3/Ball3D-v0",
        n_instances=2,
        env_kwargs={"num_agents": 3, "transport": "inprocess", "render_mode": "human"},
    )
    try:
        assert env.num_envs == 6  # all agents of both instances are slots
        assert sorted(set(env.venv.worker_ids)) == [0, 1]
    finally:
        env.close()
    import unity_sb3.open as open_module
    from unity_sb3.scenes import make_scene

    calls = []

    def fake_open_unity(target, **kwargs):
        calls.append((target, kwargs))
        return make_scene(target, seed=kwargs["seed"])

    monkeypatch.setattr(open_module, "open_unity", fake_open_unity)
    env = zoo.make_unity_vec_env(
        "unity_sb3/Ball3D-v0",
        n_instances=2,
        seed=7,
        env_kwargs={"num_slots": 4, "base_port": 6000},
        first_worker_id=5,
    )
    try:
        assert env.num_envs == 4  # num_slots went to UnityVecEnv, the rest to open_unity
        assert calls == [
            ("Ball3D", {"worker_id": 5, "seed": 7, "base_port": 6000}),
            ("Ball3D", {"worker_id": 6, "seed": 8, "base_port": 6000}),
        ]
    finally:
        env.close()


def _entries() -> list[tuple[str, str]]:
    return [
        (path.stem, env_id)
        for path in sorted(HYPERPARAMS_DIR.glob("*.yml"))
        for env_id in yaml.safe_load(path.read_text())
    ]


@pytest.mark.parametrize(("algo", "env_id"), _entries())
def test_shipped_hyperparams_build_a_model(algo: str, env_id: str) -> None:
    """Every shipped entry is valid for both readers: unity-sb3 train and RL Zoo (safe_load, no rl-zoo-only keys)."""
    params = load_hyperparams(algo, env_id.split("/")[1].removesuffix("-v0"))
    params.pop("n_timesteps")
    params.pop("normalize", None)
    for key in (
        "self_play",
        *RUN_SETTINGS,
    ):  # run settings of unity-sb3 train (RL Zoo drops them), not arguments
        params.pop(key, None)
    open_kwargs = {"transport": "inprocess", **params.pop("open_kwargs", {})}
    policy = params.pop("policy")
    # RL Zoo trains one behavior: a competitive scene's entry must build a model for each of them
    behaviors = scene_class(env_id.split("/")[1].removesuffix("-v0")).BEHAVIORS or (None,)
    for behavior in behaviors:
        kwargs = dict(open_kwargs, behavior_name=behavior) if behavior else open_kwargs
        env = zoo.make_unity_vec_env(env_id, env_kwargs=kwargs)
        try:
            policy_arg, model_kwargs = prepare_model_args(algo, policy, dict(params), env)
            model = algorithm_class(algo)(policy_arg, env, device="cpu", **model_kwargs)
            assert model.observation_space == env.observation_space
        finally:
            env.close()


def _train(tmp_path: Path, algo: str, env_id: str, *extra: str) -> Path:
    zoo.train(["--algo", algo, "--env", env_id, "-f", str(tmp_path), *FAST, *extra])
    [run] = (tmp_path / algo).glob(f"{env_id.replace('/', '-')}_*")
    return run


@pytest.mark.parametrize(
    ("algo", "env_id", "params"),
    [
        ("ppo", "unity_sb3/Ball3D-v0", ["n_steps:20", "batch_size:120"]),
        ("sac", "unity_sb3/Ball3D-v0", ["learning_starts:100", "gradient_steps:1"]),
        ("poca", "unity_sb3/Escape-v0", ["n_steps:16", "batch_size:96"]),
        ("maskable_ppo", "unity_sb3/GridWorld-v0", ["n_steps:16", "batch_size:72"]),
    ],
)
def test_train_and_enjoy(tmp_path: Path, algo: str, env_id: str, params: list[str]) -> None:
    run = _train(
        tmp_path, algo, env_id, "-n", "480", "--eval-freq", "240", "--eval-episodes", "2", "-params", *params
    )
    name = env_id.replace("/", "-")
    assert (run / f"{name}.zip").is_file() and (run / "best_model.zip").is_file()
    # one UnityVecEnv: a single monitor file for all agents
    assert [p.name for p in run.glob("*.monitor.csv")] == ["0.monitor.csv"]
    evaluations = np.load(run / "evaluations.npz")
    # --eval-freq counts agent steps (480 of them: evaluations after 240 and 480), not VecEnv steps
    # (rounded down to whole VecEnv steps: GridWorld's 9 slots evaluate at 234 and 468)
    assert len(evaluations["timesteps"]) == 2 and 240 - 12 < evaluations["timesteps"][0] <= 240
    saved = yaml.unsafe_load((run / name / "config.yml").read_text())  # rl-zoo3 dumps an OrderedDict
    assert saved["policy"] in ("MlpPolicy", "MultiInputPolicy")  # default conf: unity_sb3/config/hyperparams
    mean, episodes = zoo.enjoy(
        [
            "--algo",
            algo,
            "--env",
            env_id,
            "-f",
            str(tmp_path),
            "-n",
            "400",
            "--no-render",
            "--episodes",
            "3",
            "--verbose",
            "0",
        ]
    )
    assert episodes >= 3 and np.isfinite(mean)


def test_reward_signals_from_a_zoo_file(tmp_path: Path) -> None:
    conf = tmp_path / "conf.yml"
    conf.write_text(
        yaml.safe_dump(
            {
                "unity_sb3/PyramidsLite-v0": {
                    "n_timesteps": 256,
                    "policy": "MlpPolicy",
                    "n_steps": 16,
                    "batch_size": 64,
                    "open_kwargs": {"num_agents": 4},
                    "reward_signals": {"extrinsic": {}, "rnd": {"strength": 0.01}},
                }
            }
        )
    )
    run = _train(tmp_path, "ppo", "unity_sb3/PyramidsLite-v0", "--eval-freq", "-1", "-conf", str(conf))
    model = algorithm_class("ppo").load(run / "unity_sb3-PyramidsLite-v0.zip", device="cpu")
    assert set(model.reward_signals) == {"extrinsic", "rnd"}
    assert model.n_envs == 4  # open_kwargs reached the scene


def test_curriculum_from_a_zoo_file_advances_training_and_evaluation(tmp_path: Path, monkeypatch) -> None:
    from unity_sb3.scenes.base import EmbeddedScene

    real_param, scales = EmbeddedScene._param, {}

    def param(self, key: str, n: int):
        values = real_param(self, key, n)
        if key == "scale":  # each scene instance (training, evaluation): the scale of every episode begun
            scales.setdefault(id(self), []).extend(values.tolist())
        return values

    monkeypatch.setattr(EmbeddedScene, "_param", param)
    criteria = {"measure": "progress", "threshold": 0.25, "behavior": "3DBall", "min_lesson_length": 1}
    lessons = [{"name": "a", "value": 1.0, "completion_criteria": criteria}, {"name": "b", "value": 1.5}]
    conf = tmp_path / "conf.yml"
    entry = {"n_timesteps": 960, "policy": "MlpPolicy", "n_steps": 10, "batch_size": 120}
    entry["open_kwargs"] = {
        "transport": "inprocess",
        "environment_parameters": {"scale": {"curriculum": lessons}},
    }
    conf.write_text(yaml.safe_dump({"unity_sb3/Ball3D-v0": entry}))
    args = ["--eval-freq", "480", "--eval-episodes", "12", "--save-freq", "120", "-conf", str(conf)]
    run = _train(tmp_path, "ppo", "unity_sb3/Ball3D-v0", *args)
    training, evaluation = scales.values()  # the training env opens first
    # both begin at lesson a and end at lesson b (the evaluation env's last episodes begin after 480 steps)
    for began in (training, evaluation):
        assert began[0] == 1.0 and began[-1] == 1.5 and set(began) == {1.0, 1.5}, began
    # enjoy plays at the lesson training ended at, not at lesson 0
    scales.clear()
    args = [
        "--algo",
        "ppo",
        "--env",
        "unity_sb3/Ball3D-v0",
        "-f",
        str(tmp_path),
        "-n",
        "20",
        "--verbose",
        "0",
    ]
    zoo.enjoy(args)
    [played] = scales.values()
    assert set(played) == {1.5}, played
    # a checkpoint carries the lessons it was saved at: lesson a until 25% of the 960 steps
    assert (run / "rl_model_120_steps.curriculum.json").is_file()
    for steps, lesson in (("120", 1.0), ("960", 1.5)):
        scales.clear()
        zoo.enjoy([*args, "--load-checkpoint", steps])
        [played] = scales.values()
        assert set(played) == {lesson}, (steps, played)


def test_optimize_two_trials(tmp_path: Path) -> None:
    zoo.train(
        [
            *("--algo", "ppo", "--env", "unity_sb3/Ball3D-v0", "-f", str(tmp_path), *FAST, "-n", "360"),
            *(
                "-optimize",
                "--n-trials",
                "2",
                "--n-evaluations",
                "1",
                "--eval-episodes",
                "2",
                "--no-optim-plots",
            ),
            *("--sampler", "random", "--pruner", "none", "--env-kwargs", "num_agents:4"),
        ]
    )
    [report] = (tmp_path / "ppo").glob("report_*.csv")
    rows = list(csv.DictReader(report.open()))
    assert len(rows) == 2 and all(row["state"] == "COMPLETE" for row in rows)
    assert all(np.isfinite(float(row["value"])) for row in rows)  # each trial was evaluated


@pytest.mark.parametrize("algo", ["ppo", "maskable_ppo", "recurrent_ppo", "poca", "a2c", "sac", "td3", "tqc"])
def test_unity_samplers_give_valid_constructor_arguments(algo: str) -> None:
    trial = optuna.trial.FixedTrial(
        {
            "learning_rate": 3e-4,
            "one_minus_gamma": 0.01,
            "net_arch": "small",
            "n_steps": 16,
            "gae_lambda": 0.95,
            "ent_coef": 0.01,
            "batch_size": 64,
            "n_epochs": 3,
            "clip_range": 0.2,
            "lstm_hidden_size": 32,
            "buffer_size": 10_000,
            "learning_starts": 0,
            "tau": 0.005,
            "gradient_steps": 1,
        }
    )
    kwargs = zoo.sample_unity_params(algo, trial)
    assert kwargs["gamma"] == pytest.approx(0.99) and kwargs["policy_kwargs"]["net_arch"] == [64, 64]
    scene = "unity_sb3/GridWorld-v0" if algo == "maskable_ppo" else "unity_sb3/Ball3D-v0"
    env = zoo.make_unity_vec_env(scene, env_kwargs={"image_size": 36} if algo == "maskable_ppo" else {})
    try:
        policy = {"recurrent_ppo": "MlpLstmPolicy", "maskable_ppo": "MultiInputPolicy"}.get(algo, "MlpPolicy")
        algorithm_class(algo)(policy, env, device="cpu", **kwargs)
    finally:
        env.close()
    with pytest.raises(ValueError, match="No Unity hyperparameter sampler"):
        zoo.sample_unity_params("dqn", trial)


def test_non_unity_ids_are_plain_rl_zoo(tmp_path: Path) -> None:
    run = _train(tmp_path, "a2c", "CartPole-v1", "-n", "64", "--eval-freq", "-1")
    assert (run / "CartPole-v1.zip").is_file()
    assert sorted(p.name for p in run.glob("*.monitor.csv")) == [
        f"{i}.monitor.csv" for i in range(8)
    ]  # zoo's n_envs


def test_main_usage_and_unknown_command(capsys) -> None:
    assert zoo.main([]) == 2
    assert zoo.main(["--help"]) == 0
    assert "unity_sb3.zoo" in capsys.readouterr().out
    assert zoo.main(["fly"]) == 2
    assert "Unknown command 'fly'" in capsys.readouterr().out
