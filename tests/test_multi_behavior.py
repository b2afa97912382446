"""MultiBehaviorTrainer: one model per behavior of a scene, learning at once in lockstep threads."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import sb3_contrib

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.base_env import (
    ActionSpec,
    ActionTuple,
    BaseEnv,
    BehaviorMapping,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
    TerminalSteps,
)
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
    two = MultiBehaviorTrainer(duel(), {**make, "Prey": lambda env: POCA("MultiInputPolicy", env, **SMALL)})
    with pytest.raises(UnityConfigurationError, match="give one per behavior"):
        two.learn(10, callback=Boom(1))
    two.close()
    with pytest.raises(FileNotFoundError, match="Hunter"):
        trainer.load("/nonexistent")
    trainer.close()


def _vector(size: int) -> ObservationSpec:
    return ObservationSpec((size,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "obs")


class TwoSignals(BaseEnv):
    """Two behaviors that each learn from their own action only: a "Pointer" (continuous) is paid
    +1 when its action has the sign of its observation, a "Picker" (3 discrete choices, every other
    step) +1 when it picks the index its one-hot observation shows. Episodes last 8 steps."""

    SPECS: ClassVar[dict[str, BehaviorSpec]] = {
        "Pointer?team=0": BehaviorSpec([_vector(1)], ActionSpec.create_continuous(1)),
        "Picker?team=0": BehaviorSpec([_vector(3)], ActionSpec.create_discrete((3,))),
    }

    def __init__(self, agents: int = 4, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.n = agents
        self.t = 0
        self.next_id = 0
        self.actions: dict[str, ActionTuple] = {}
        self.steps: dict[str, tuple[DecisionSteps, TerminalSteps]] = {}

    @property
    def behavior_specs(self) -> BehaviorMapping:
        return BehaviorMapping(self.SPECS)

    def reset(self) -> None:
        self.t = 0
        self.ids = {name: self._ids() for name in self.SPECS}
        self.reward = {name: np.zeros(self.n, np.float32) for name in self.SPECS}
        self._emit(ended=False)

    def _ids(self) -> np.ndarray:
        self.next_id += self.n
        return np.arange(self.next_id - self.n, self.next_id)

    def _asks(self, name: str) -> bool:
        return name.startswith("Pointer") or self.t % 2 == 0

    def _emit(self, ended: bool) -> None:
        self.obs = {
            "Pointer?team=0": self.rng.choice([-1.0, 1.0], size=(self.n, 1)).astype(np.float32),
            "Picker?team=0": np.eye(3, dtype=np.float32)[self.rng.integers(0, 3, self.n)],
        }
        for name, spec in self.SPECS.items():
            term = TerminalSteps.empty(spec)
            if ended:
                term = TerminalSteps(
                    [self.obs[name]],
                    self.reward[name],
                    np.zeros(self.n, bool),
                    self.ids[name],
                    np.zeros(self.n, np.int64),
                    np.zeros(self.n, np.float32),
                )
                self.ids[name] = self._ids()
                self.reward[name] = np.zeros(self.n, np.float32)
            dec = DecisionSteps.empty(spec)
            if self._asks(name) or ended:
                dec = DecisionSteps(
                    [self.obs[name]],
                    self.reward[name].copy(),
                    self.ids[name],
                    None,
                    np.zeros(self.n, np.int64),
                    np.zeros(self.n, np.float32),
                )
                self.reward[name][:] = 0.0
            self.steps[name] = (dec, term)
        self.last_obs = self.obs

    def step(self) -> None:
        pointer = self.actions.pop("Pointer?team=0", None)
        if pointer is not None:
            sign = np.sign(pointer.continuous[:, 0])
            self.reward["Pointer?team=0"] += (sign == self.last_obs["Pointer?team=0"][:, 0]).astype(
                np.float32
            )
        picker = self.actions.pop("Picker?team=0", None)
        if picker is not None:
            right = picker.discrete[:, 0] == self.last_obs["Picker?team=0"].argmax(1)
            self.reward["Picker?team=0"] += right.astype(np.float32)
        self.t += 1
        self._emit(ended=self.t % 8 == 0)

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        self.actions[behavior_name] = action

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        raise NotImplementedError

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        return self.steps[behavior_name]

    def close(self) -> None:
        pass


@pytest.mark.slow
def test_two_behaviors_each_learn_their_own_task_in_lockstep():
    trainer = MultiBehaviorTrainer(
        TwoSignals(agents=8),
        {
            "Pointer": lambda env: PPO(
                "MlpPolicy", env, n_steps=64, batch_size=128, learning_rate=3e-3, seed=0
            ),
            "Picker": lambda env: POCA(
                "MlpPolicy", env, n_steps=64, batch_size=128, learning_rate=3e-3, seed=0
            ),
        },
    )
    trainer.learn(12_000)
    pointer, picker = trainer.models["Pointer"], trainer.models["Picker"]
    signs = np.array([[-1.0], [1.0]], np.float32)
    assert (np.sign(pointer.predict(signs, deterministic=True)[0][:, 0]) == signs[:, 0]).all()
    picks = picker.predict(np.eye(3, dtype=np.float32), deterministic=True)[0]
    assert list(np.asarray(picks).reshape(-1)) == [0, 1, 2]
    trainer.close()
