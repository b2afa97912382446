"""MultiBehaviorTrainer: one model per behavior of a scene, learning at once in lockstep threads."""

from __future__ import annotations

import numpy as np
import pytest
import sb3_contrib
from multi_behavior_scenes import HUNTER, PREY, Duel
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecMonitor

from unity_sb3 import POCA, PPO, SAC, MultiBehaviorTrainer
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers.lockstep import LockstepUnity

SMALL = {"n_steps": 16, "batch_size": 32, "n_epochs": 1, "seed": 0, "device": "cpu"}


def duel() -> Duel:
    return Duel(seed=0, num_agents=2)  # 2 hunters, 4 prey in groups of 2


class Boom(BaseCallback):
    """Raises at the learner's ``at``-th step."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def _on_step(self) -> bool:
        if self.n_calls >= self.at:
            raise ValueError("boom")
        return True


def test_ppo_and_poca_learn_their_behaviors_at_once_then_save_and_load(tmp_path):
    trainer = MultiBehaviorTrainer(
        duel(),
        {
            "Hunter": lambda env: PPO("MlpPolicy", env, **SMALL),
            "Prey": lambda env: POCA("MlpPolicy", env, **SMALL),
        },
        view_kwargs={"Prey": {"flatten_obs": True}},  # its two vector observations in one
    )
    assert isinstance(trainer.envs["Hunter"], VecMonitor)
    assert (trainer.views["Hunter"].behavior_name, trainer.views["Prey"].behavior_name) == (HUNTER, PREY)
    assert (trainer.views["Hunter"].num_envs, trainer.views["Prey"].num_envs) == (2, 4)
    trainer.learn({"Hunter": 64, "Prey": 128})
    assert trainer.models["Hunter"].num_timesteps >= 64 and trainer.models["Prey"].num_timesteps >= 128
    assert sum(trainer.lockstep.unity_steps) >= 32  # both learned on the same Unity steps
    written = trainer.save(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        "Hunter/model.zip",
        "Prey/model.zip",
    ]
    space = trainer.envs["Prey"].observation_space
    space.seed(0)
    obs = np.stack([space.sample() for _ in range(4)])
    before = trainer.models["Prey"].predict(obs, deterministic=True)[0]
    trainer.load(tmp_path)
    assert isinstance(trainer.models["Prey"], POCA)
    np.testing.assert_array_equal(trainer.models["Prey"].predict(obs, deterministic=True)[0], before)
    trainer.learn(32, reset_num_timesteps=False)  # the views were detached after the first learn
    assert trainer.models["Hunter"].num_timesteps >= 96
    trainer.close()


def test_sac_and_an_sb3_contrib_algorithm_learn_side_by_side():
    trainer = MultiBehaviorTrainer(
        duel(),
        {
            HUNTER: lambda env: SAC("MlpPolicy", env, learning_starts=8, batch_size=16, seed=0, device="cpu"),
            PREY: lambda env: sb3_contrib.MaskablePPO("MultiInputPolicy", env, **SMALL),
        },
    )
    trainer.learn(64)
    assert all(model.num_timesteps >= 64 for model in trainer.models.values())
    trainer.close()


def test_a_crashing_learner_stops_the_others_and_its_error_names_the_behavior():
    lock = LockstepUnity(duel(), step_timeout=30)
    trainer = MultiBehaviorTrainer(
        lock,
        {
            "Hunter": lambda env: PPO("MlpPolicy", env, **SMALL),
            "Prey": lambda env: POCA("MlpPolicy", env, **SMALL),
        },
        callbacks={"Prey": Boom(at=5)},
        view_kwargs={"Prey": {"flatten_obs": True}},
    )
    with pytest.raises(ValueError, match="boom") as info:
        trainer.learn(10_000)
    assert "behavior 'Prey'" in "".join(getattr(info.value, "__notes__", [])) or "Prey" in str(info.value)
    assert trainer.models["Hunter"].num_timesteps < 10_000  # aborted, not run to the end
    trainer.close()
    assert not lock.closed  # the caller's LockstepUnity stays open
    lock.close()


def test_bad_trainer_arguments_say_what_is_wrong():
    make = {"Hunter": lambda env: PPO("MlpPolicy", env, **SMALL)}
    with pytest.raises(UnityConfigurationError, match=r"callbacks names behaviors \['Goalie'\]"):
        MultiBehaviorTrainer(duel(), make, callbacks={"Goalie": Boom(1)})
    with pytest.raises(UnityConfigurationError, match="returned dict, not an SB3 algorithm"):
        MultiBehaviorTrainer(duel(), {"Hunter": lambda env: {}})
    trainer = MultiBehaviorTrainer(duel(), make)
    with pytest.raises(UnityConfigurationError, match=r"total_timesteps names behaviors \['Prey'\]"):
        trainer.learn({"Prey": 10})
    with pytest.raises(FileNotFoundError, match="Hunter"):
        trainer.load("/nonexistent")
    trainer.close()
