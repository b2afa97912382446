"""CurriculumCallback: lessons advance on episode returns, reach every Unity instance, resume from a state."""

from __future__ import annotations

import csv
import struct
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from csharp_channels import PARAMS_GUID, csharp_environment_parameter, csharp_split, f32, wire
from curricula import medium_state, scale_curriculum, three_lessons
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv

from unity_sb3.callbacks.curriculum import CurriculumCallback
from unity_sb3.unity.channels import UnityChannels
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.unity.parameters import EnvironmentParameters


# ------------------------------------------------------------------ the SB3 callback
class TinyEnv(gym.Env):
    """One-step-reward env carrying the channels like a Unity-backed env does."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(
        self, channels: UnityChannels | None = None, behavior_name: str = "B", length: int = 4
    ) -> None:
        self.unity_sb3_channels = channels or UnityChannels()
        self.behavior_name = behavior_name
        self.length = length
        self.t = 0
        self.resets = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.resets += 1
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= self.length, False, {}


class FakeModel:
    """What BaseCallback uses of an algorithm."""

    def __init__(self, env, folder: str, total: int = 1000) -> None:
        self.env = env
        self.logger = configure(folder, ["csv"])
        self.num_timesteps = 0
        self._total_timesteps = total
        self._last_obs = None
        self._last_episode_starts = None

    def get_env(self):
        return self.env


def decode_messages(channels: UnityChannels) -> list[tuple[str, object]]:
    """Drain the environment-parameters queue into (key, value or sampler type), as Unity reads it."""
    out: list[tuple[str, object]] = []
    for message in channels.environment_parameters.message_queue:
        data = bytes(message)
        (length,) = struct.unpack_from("<i", data, 0)
        key = data[4 : 4 + length].decode("ascii")
        (kind,) = struct.unpack_from("<i", data, 4 + length)
        if kind == 0:
            out.append((key, struct.unpack_from("<f", data, 8 + length)[0]))
        else:
            out.append((key, ("sampler", struct.unpack_from("<i", data, 12 + length)[0])))
    channels.environment_parameters.message_queue = []
    return out


def decode_float_parameters(channels: UnityChannels) -> dict[str, object]:
    return dict(decode_messages(channels))


def step(callback: CurriculumCallback, model: FakeModel, rewards, dones, infos) -> None:
    model.num_timesteps += len(rewards)
    callback.update_locals(
        {"rewards": np.asarray(rewards, float), "dones": np.asarray(dones), "infos": infos}
    )
    assert callback.on_step()


def make_callback(tmp_path, config, n_envs=1, **kwargs):
    venv = DummyVecEnv([lambda: TinyEnv()] * n_envs)
    model = FakeModel(venv, str(tmp_path))
    callback = CurriculumCallback(config, **kwargs)
    callback.init_callback(model)
    callback.on_training_start({}, {})
    return callback, model, venv


def test_callback_advances_after_min_lesson_length_episodes(tmp_path) -> None:
    config = {
        "difficulty": {
            "curriculum": [
                {
                    "name": "easy",
                    "value": 1.0,
                    "completion_criteria": {
                        "behavior": "B",
                        "threshold": 5,
                        "min_lesson_length": 3,
                        "signal_smoothing": False,
                    },
                },
                {
                    "name": "hard",
                    "value": {
                        "sampler_type": "uniform",
                        "sampler_parameters": {"min_value": 2, "max_value": 4},
                    },
                },
            ]
        }
    }
    callback, model, venv = make_callback(tmp_path, config, n_envs=2)
    channels = venv.envs[0].unity_sb3_channels
    assert decode_float_parameters(channels) == {"difficulty": 1.0}  # lesson 0 sent at training start
    assert callback.behavior_name == "B"  # read from the training env
    assert model.logger.name_to_value["curriculum/difficulty"] == 0
    episode = {"episode": {"r": 10.0, "l": 4}}
    step(callback, model, [0, 0], [True, False], [episode, {}])
    step(callback, model, [0, 0], [True, False], [episode, {}])
    # another behavior's episodes do not count
    step(callback, model, [0, 0], [False, True], [{}, {"episode": {"r": 99.0}, "behavior_name": "Other"}])
    assert callback.parameters.lesson_numbers["difficulty"] == 0
    assert decode_float_parameters(channels) == {}
    step(callback, model, [0, 0], [False, True], [{}, episode])
    assert callback.parameters.lesson_numbers["difficulty"] == 1
    assert decode_float_parameters(channels)["difficulty"][0] == "sampler"
    assert len(callback.reward_buffer) == 0  # cleared on a lesson change, as mlagents-learn does
    assert model.logger.name_to_value["curriculum/difficulty"] == 1


def test_callback_sums_step_rewards_without_monitor(tmp_path) -> None:
    crit = {"behavior": "B", "threshold": 2.5, "min_lesson_length": 1, "signal_smoothing": False}
    config = {
        "p": {
            "curriculum": [{"name": "a", "value": 0, "completion_criteria": crit}, {"name": "b", "value": 1}]
        }
    }
    callback, model, _ = make_callback(tmp_path, config)
    step(callback, model, [1.0], [False], [{}])
    step(callback, model, [1.0], [False], [{}])
    step(callback, model, [0.5], [True], [{}])  # return 2.5: not strictly greater
    assert callback.parameters.lesson_numbers["p"] == 0
    step(callback, model, [2.0], [False], [{}])
    step(callback, model, [1.0], [True], [{}])  # return 3.0, counted from the episode start
    assert callback.parameters.lesson_numbers["p"] == 1


def test_callback_smoothing_needs_several_checks(tmp_path) -> None:
    crit = {"behavior": "B", "threshold": 5, "min_lesson_length": 1}  # smoothing on
    config = {
        "p": {
            "curriculum": [{"name": "a", "value": 0, "completion_criteria": crit}, {"name": "b", "value": 1}]
        }
    }
    callback, model, _ = make_callback(tmp_path, config)
    step(callback, model, [0], [True], [{"episode": {"r": 6.0}}])  # 0.75 * 6 = 4.5
    assert callback.parameters.lesson_numbers["p"] == 0
    assert callback.parameters.smoothed_values["p"] == pytest.approx(4.5)
    step(callback, model, [0], [False], [{}])  # 0.25 * 4.5 + 0.75 * 6 = 5.625 > 5
    assert callback.parameters.lesson_numbers["p"] == 1


def test_callback_progress_measure(tmp_path) -> None:
    crit = {"behavior": "B", "measure": "progress", "threshold": 0.5}
    config = {
        "p": {
            "curriculum": [{"name": "a", "value": 0, "completion_criteria": crit}, {"name": "b", "value": 1}]
        }
    }
    callback, model, _ = make_callback(tmp_path, config)
    model._total_timesteps = 100
    model.num_timesteps = 49
    step(callback, model, [0], [False], [{}])  # 50 / 100: not strictly greater
    assert callback.parameters.lesson_numbers["p"] == 0
    step(callback, model, [0], [False], [{}])  # 51 / 100
    assert callback.parameters.lesson_numbers["p"] == 1


def test_callback_max_steps_overrides_total_timesteps(tmp_path) -> None:
    crit = {"behavior": "B", "measure": "progress", "threshold": 0.5}
    config = {
        "p": {
            "curriculum": [{"name": "a", "value": 0, "completion_criteria": crit}, {"name": "b", "value": 1}]
        }
    }
    callback, model, _ = make_callback(tmp_path, config, max_steps=10)
    model.num_timesteps = 5
    step(callback, model, [0], [False], [{}])
    assert callback.parameters.lesson_numbers["p"] == 1


def test_callback_require_reset_resets_at_rollout_end(tmp_path) -> None:
    callback, model, venv = make_callback(tmp_path, three_lessons(require_reset=True))
    model._last_obs = np.full((1, 2), 7.0, np.float32)
    model._last_episode_starts = np.zeros(1, bool)
    resets = venv.envs[0].resets
    step(callback, model, [0], [True], [{"episode": {"r": 3.0}}])
    assert callback.parameters.lesson_numbers["difficulty"] == 1
    assert venv.envs[0].resets == resets  # not in the middle of a rollout
    callback.on_rollout_end()
    assert venv.envs[0].resets == resets + 1
    np.testing.assert_array_equal(model._last_obs, np.zeros((1, 2)))
    assert model._last_episode_starts.all()
    callback.on_rollout_end()  # only once per lesson change
    assert venv.envs[0].resets == resets + 1


def test_callback_takes_parameters_stored_by_open_unity(tmp_path) -> None:
    channels = UnityChannels(parameters=EnvironmentParameters(three_lessons()))
    venv = DummyVecEnv([lambda: TinyEnv(channels)] * 2)  # two slots, one Unity instance
    model = FakeModel(venv, str(tmp_path))
    callback = CurriculumCallback()
    callback.init_callback(model)
    assert callback.parameters is channels.parameters
    assert callback.channels == [channels]


def test_every_instance_records_the_lessons_the_callback_advances(tmp_path) -> None:
    # two Unity instances opened from the same config each parse their own EnvironmentParameters
    a = UnityChannels(parameters=EnvironmentParameters(three_lessons()))
    b = UnityChannels(parameters=EnvironmentParameters(three_lessons()))
    venv = DummyVecEnv([lambda: TinyEnv(a), lambda: TinyEnv(b)])
    model = FakeModel(venv, str(tmp_path))
    callback = CurriculumCallback()
    callback.init_callback(model)
    callback.on_training_start({}, {})
    step(callback, model, [0, 0], [True, False], [{"episode": {"r": 3.0}}, {}])
    assert a.parameters is b.parameters is callback.parameters
    assert b.parameters.lesson_numbers == {"difficulty": 1, "gravity": 0}


def test_callback_without_parameters_is_a_clear_error(tmp_path) -> None:
    venv = DummyVecEnv([lambda: TinyEnv()])
    with pytest.raises(UnityConfigurationError, match="no environment parameters"):
        CurriculumCallback().init_callback(FakeModel(venv, str(tmp_path)))


def test_callback_sends_to_every_unity_instance(tmp_path) -> None:
    a, b = UnityChannels(), UnityChannels()
    venv = DummyVecEnv([lambda: TinyEnv(a), lambda: TinyEnv(b)])
    model = FakeModel(venv, str(tmp_path))
    callback = CurriculumCallback(three_lessons())
    callback.init_callback(model)
    callback.on_training_start({}, {})
    decode_messages(a)
    decode_messages(b)
    step(callback, model, [0, 0], [True, False], [{"episode": {"r": 3.0}}, {}])
    assert (
        decode_float_parameters(a)
        == decode_float_parameters(b)
        == pytest.approx({"difficulty": 1.0, "gravity": 9.81})
    )


def test_curriculum_inside_ppo(tmp_path) -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    channels = UnityChannels()
    venv = VecMonitor(DummyVecEnv([lambda: TinyEnv(channels, length=4)]))
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, device="cpu")
    model.set_logger(configure(str(tmp_path), ["csv"]))
    crit = {"behavior": "B", "threshold": 3.5, "min_lesson_length": 2, "signal_smoothing": False}
    config = {
        "p": {
            "curriculum": [{"name": "a", "value": 0, "completion_criteria": crit}, {"name": "b", "value": 1}]
        }
    }
    callback = CurriculumCallback(config)
    model.learn(32, callback=callback)
    assert callback.parameters.lesson_numbers["p"] == 1
    # the lesson changed after the second episode (step 8): message sent, then logged
    assert decode_messages(channels) == [("p", 0.0), ("p", 1.0)]
    with open(tmp_path / "progress.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(r["curriculum/p"]) for r in rows] == [1.0, 1.0]


# ------------------------------------------------------------------ curriculum state (resume)
def parameter_messages(channels: UnityChannels) -> list[tuple]:
    """The environment-parameter messages queued for Unity, as its C# channel reads them."""
    return [csharp_environment_parameter(p) for g, p in csharp_split(wire(channels)) if g == PARAMS_GUID]


def test_curriculum_callback_resumes_inside_ppo(tmp_path) -> None:
    """A state loaded before ``learn`` (parameters found on the env at training start): the
    lessons are the saved ones, the scene is reset with their values before the first
    training step, and the recent episode returns continue."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecMonitor

    from unity_sb3.callbacks.curriculum import CurriculumCallback
    from unity_sb3.open import open_unity
    from unity_sb3.wrappers.vec_env import UnityVecEnv

    env = open_unity(
        "Ball3D",
        transport="inprocess",
        num_agents=2,
        report_parameters=True,
        environment_parameters=scale_curriculum(),
    )
    venv = VecMonitor(UnityVecEnv([env]))
    channels = env.unity_sb3_channels
    scales: list[float] = []

    def drain() -> None:
        scales.extend(v for v, _ in channels.stats.get_and_reset_stats().get("Environment/BallScale", []))

    class AtStart(BaseCallback):
        def _on_training_start(self) -> None:
            drain()
            self.first_training_scales = scales[-2:]  # the episodes training starts with

        def _on_step(self) -> bool:
            return True

    try:
        drain()
        assert scales and set(scales) == {1.0}, "opened at lesson 0"
        callback = CurriculumCallback()
        with pytest.raises(UnityConfigurationError, match="no environment parameters yet"):
            callback.state_dict()
        callback.load_state_dict({"parameters": medium_state(), "reward_buffer": [1.0, 2.0, 3.0]})
        model = PPO("MlpPolicy", venv, n_steps=8, batch_size=16, n_epochs=1, device="cpu", seed=0)
        at_start = AtStart()
        model.learn(16, callback=[callback, at_start])
        drain()
        assert callback.parameters is channels.parameters
        assert callback.parameters.lesson_numbers == {"scale": 1, "gravity": 0}
        assert at_start.first_training_scales == [1.5, 1.5], "reset with the loaded lesson before training"
        assert env.side_channels.environment_parameters["scale"] == 1.5
        assert scales[-1] == 1.5 and 1.0 not in scales[scales.index(1.5) :]
        state = callback.state_dict()
        assert state["parameters"]["lesson_numbers"] == {"scale": 1, "gravity": 0}
        assert state["parameters"]["smoothed_values"]["scale"] == 3.25
        assert state["reward_buffer"][:3] == [1.0, 2.0, 3.0]
        model.learn(16, callback=callback, reset_num_timesteps=False)
        assert callback.parameters.lesson_numbers == {"scale": 1, "gravity": 0}
        assert list(callback.reward_buffer)[:3] == [1.0, 2.0, 3.0], "a second learn() keeps the returns"
    finally:
        venv.close()


def test_curriculum_callback_load_with_parameters_queues_values_at_once() -> None:
    from unity_sb3.callbacks.curriculum import CurriculumCallback

    channels = UnityChannels()
    callback = CurriculumCallback(scale_curriculum(), channels=channels)
    with pytest.raises(UnityConfigurationError, match="'scale' was saved in lesson 5"):
        callback.load_state_dict({"parameters": {"lesson_numbers": {"scale": 5}}})
    assert parameter_messages(channels) == [], "nothing sent for a refused state"
    with pytest.raises(UnityConfigurationError, match="reward_buffer must be a list"):
        callback.load_state_dict({"parameters": medium_state(), "reward_buffer": "1, 2"})
    callback.load_state_dict({"parameters": medium_state(), "reward_buffer": [4.0]})
    assert parameter_messages(channels) == [("scale", "Float", 1.5), ("gravity", "Float", f32(9.81))]
    assert callback.state_dict() == {"parameters": medium_state(), "reward_buffer": [4.0]}


def test_curriculum_callback_resends_values_to_a_restarted_instance(tmp_path) -> None:
    from unity_sb3.callbacks.curriculum import CurriculumCallback

    first = UnityChannels()
    env = SimpleNamespace(unity_sb3_channels=first, num_envs=1)
    model = FakeModel(env, str(tmp_path))
    callback = CurriculumCallback(scale_curriculum(), behavior_name="3DBall")
    callback.load_state_dict({"parameters": medium_state()})
    callback.init_callback(model)
    callback.update_locals({"rewards": np.zeros(1), "dones": np.zeros(1, bool), "infos": [{}]})
    callback.on_step()
    second = UnityChannels()  # the re-opened instance; it got lesson-0 values when it opened
    env.unity_sb3_channels = second
    callback.update_locals(
        {"rewards": np.zeros(1), "dones": np.ones(1, bool), "infos": [{"restarted": True}]}
    )
    callback.on_step()
    assert callback.channels == [second]
    assert parameter_messages(second) == [("scale", "Float", 1.5), ("gravity", "Float", f32(9.81))]
