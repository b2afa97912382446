"""Unity's ``check_environment_trains`` (``mlagents/trainers/tests/check_env_trains.py``) for this project.

A learning test of Unity's ``test_simple_rl.py`` is an ML-Agents trainer config, a scene from
``simple_test_envs.py`` (here :mod:`goal_line`) and a threshold: train for the config's
``max_steps`` agent-steps, then the mean of the last 5 episode rewards the scene recorded during
training must exceed the threshold. Here the config goes through the same mapping as
``unity-sb3 train --config`` (:func:`unity_sb3.config.mlagents.convert_mlagents_config`, then
:func:`unity_sb3.config.model_args.prepare_model_args`), so a test checks both that the mapping
honours the settings and that the algorithm it picks learns within Unity's budget.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from unity_sb3 import UnityVecEnv
from unity_sb3.algorithms.registry import algorithm_class
from unity_sb3.config.mlagents import convert_mlagents_config
from unity_sb3.config.model_args import prepare_model_args
from unity_sb3.run import HYBRID_ALGOS

LAST_N = 5
#: Unity's ``ppo_dummy_config()`` / ``sac_dummy_config()`` / ``poca_dummy_config()`` (``dummy_config.py``)
PPO_CONFIG: dict[str, Any] = {
    "trainer_type": "ppo",
    "hyperparameters": {
        "learning_rate": 5.0e-3,
        "learning_rate_schedule": "constant",
        "batch_size": 16,
        "buffer_size": 64,
    },
    "network_settings": {"num_layers": 1, "hidden_units": 32},
    "summary_freq": 500,
    "max_steps": 3000,
    "threaded": False,
}
POCA_CONFIG: dict[str, Any] = {**copy.deepcopy(PPO_CONFIG), "trainer_type": "poca"}
SAC_CONFIG: dict[str, Any] = {
    "trainer_type": "sac",
    "hyperparameters": {
        "learning_rate": 5.0e-3,
        "learning_rate_schedule": "constant",
        "batch_size": 8,
        "buffer_init_steps": 100,
        "buffer_size": 5000,
        "tau": 0.01,
        "init_entcoef": 0.01,
    },
    "network_settings": {"num_layers": 1, "hidden_units": 16},
    "summary_freq": 100,
    "max_steps": 1000,
    "threaded": False,
}
BASE_CONFIGS = {"ppo": PPO_CONFIG, "sac": SAC_CONFIG, "poca": POCA_CONFIG}


def evolve(trainer: str, **changes: Any) -> dict[str, Any]:
    """Unity's ``attr.evolve`` of a dummy config: ``hyperparameters`` and ``network_settings`` are
    merged key by key, everything else replaced.

    :param trainer: ``"ppo"``, ``"sac"`` or ``"poca"``.
    """
    config = copy.deepcopy(BASE_CONFIGS[trainer])
    for key, value in changes.items():
        if key in ("hyperparameters", "network_settings"):
            config[key].update(value)
        else:
            config[key] = value
    return config


class _StopAtBudget(BaseCallback):
    """Stops training once the scene has taken ``budget`` agent-steps (Unity's ``max_steps``)."""

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.budget = budget

    def _on_step(self) -> bool:
        return self.num_timesteps < self.budget


def train_on(
    scene: Any, behavior: str, trainer_settings: dict[str, Any], seed: int, visual: str = "float"
) -> Any:
    """Train on ``scene`` as ``unity-sb3 train --config`` would with these trainer settings.

    :param scene: a ``BaseEnv`` with ``final_rewards`` (the episode rewards, in order).
    :param behavior: the scene's behavior name.
    :param trainer_settings: one behavior's ML-Agents trainer settings (``max_steps`` is the budget
        in agent-steps).
    :param seed: the training seed.
    :param visual: the images' format (:class:`unity_sb3.spaces.BehaviorSpaces`); ``"float"``: the
        values as ML-Agents' trainer sees them (Unity's test scenes draw images of -1 and +1, which
        the SB3-style uint8 format would clip to 0 and 255).
    :return: the trained model.
    """
    hyper = convert_mlagents_config({"behaviors": {behavior: trainer_settings}}).as_hyperparams()
    algo, budget = hyper.pop("algo"), int(hyper.pop("n_timesteps"))
    for key in ("policy", "normalize", "open_kwargs", "summary_freq"):
        hyper.pop(key, None)
    env = UnityVecEnv(scene, hybrid="tuple" if algo in HYBRID_ALGOS else "box", visual=visual)
    policy, kwargs = prepare_model_args(algo, "auto", hyper, env)
    model = algorithm_class(algo)(policy, env, seed=seed, **kwargs)
    model.learn(total_timesteps=budget, callback=_StopAtBudget(budget))
    env.close()
    return model


def processed_reward(final_rewards: list[float]) -> float:
    """Unity's ``default_reward_processor``: the mean of the last 5 episode rewards (NaN if none)."""
    last = final_rewards[-LAST_N:]
    return float(np.mean(last)) if last else float("nan")


def train_behaviors_on(
    scene: Any, trainer_settings: dict[str, dict[str, Any]], seed: int, run_dir: Any
) -> dict[str, Any]:
    """Train every behavior of ``scene`` at once as ``unity-sb3 train --config`` would (self-play where
    the settings have it): each behavior's settings mapped alone, then
    :func:`unity_sb3.run_behaviors.train_behaviors` for its ``max_steps``.

    :param trainer_settings: behavior name (a base name such as ``"1D"`` for all its teams) -> its
        ML-Agents trainer settings.
    :param run_dir: the run folder (models, checkpoints, self-play state).
    :return: behavior -> the path of its saved model.
    """
    from unity_sb3.run import RUN_SETTINGS, RunConfig
    from unity_sb3.run_behaviors import train_behaviors

    configs = {}
    for name, settings in trainer_settings.items():
        hyper = convert_mlagents_config({"behaviors": {name: settings}}).as_hyperparams()
        config = RunConfig(
            env=scene,
            algo=hyper.pop("algo"),
            n_timesteps=int(hyper.pop("n_timesteps")),
            seed=seed,
            behavior=name,
            policy=hyper.pop("policy"),
            normalize=hyper.pop("normalize"),
            self_play=hyper.pop("self_play", None),
        )
        for key in ("open_kwargs", "summary_freq", *RUN_SETTINGS):
            hyper.pop(key, None)
        config.hyperparams = hyper
        configs[name] = config
    return train_behaviors(configs, run_dir, progress=False, num_threads=1)
