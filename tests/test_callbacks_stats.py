"""StatsCallback: the stats Unity sends reach SB3's logger, aggregated as each stat asks."""

from __future__ import annotations

import csv
import math
from types import SimpleNamespace

import numpy as np
import pytest
from csharp_channels import csharp_stat
from stable_baselines3.common.logger import configure

from unity_sb3.callbacks.stats import StatsCallback
from unity_sb3.unity.channels import UnityChannels

from mlagents_envs.side_channel.side_channel_manager import SideChannelManager  # isort: skip


def read_progress(folder) -> list[dict[str, float]]:
    """SB3's progress.csv as one dict per dump (missing values are NaN)."""
    with open(folder / "progress.csv", newline="") as handle:
        return [
            {k: float(v) if v != "" else math.nan for k, v in row.items()} for row in csv.DictReader(handle)
        ]


class FakeModel:
    def __init__(self, env: object, folder: str) -> None:
        self.env = env
        self.logger = configure(folder, ["csv"])
        self.num_timesteps = 0

    def get_env(self) -> object:
        return self.env


def feed(channels: UnityChannels, *stats: tuple[str, float, int]) -> None:
    data = b"".join(csharp_stat(*s) for s in stats)
    SideChannelManager(channels.all()).process_side_channel_message(data)


def test_stats_callback_honors_aggregation(tmp_path) -> None:
    a, b = UnityChannels(), UnityChannels()  # two Unity instances
    env = SimpleNamespace(get_attr=lambda name: [a, b], num_envs=2)
    model = FakeModel(env, str(tmp_path))
    callback = StatsCallback(prefix="unity/")
    callback.init_callback(model)
    callback.on_training_start({}, {})
    avg, last, total, hist = 0, 1, 2, 3
    feed(a, ("avg", 1.0, avg), ("last", 5.0, last), ("sum", 1.0, total), ("hist", 1.0, hist))
    feed(b, ("avg", 2.0, avg), ("sum", 2.0, total), ("hist", 2.0, hist))
    callback.on_step()
    feed(a, ("avg", 6.0, avg), ("last", 7.0, last), ("sum", 4.0, total), ("hist", 6.0, hist))
    callback.on_step()
    model.logger.dump(1)
    # a new logging period starts from scratch
    feed(b, ("sum", 10.0, total), ("avg", 4.0, avg))
    callback.on_step()
    model.logger.dump(2)
    first, second = read_progress(tmp_path)
    assert first["unity/avg"] == pytest.approx(3.0)
    assert first["unity/last"] == pytest.approx(7.0)
    assert first["unity/sum"] == pytest.approx(7.0)
    assert first["unity/hist"] == pytest.approx(3.0)
    assert second["unity/sum"] == pytest.approx(10.0)
    assert second["unity/avg"] == pytest.approx(4.0)
    assert np.isnan(second["unity/last"])


def test_stats_callback_inside_ppo(tmp_path) -> None:
    gym = pytest.importorskip("gymnasium")
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    class StatsEnv(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def __init__(self) -> None:
            self.unity_sb3_channels = UnityChannels()
            self.t = 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(2, np.float32), {}

        def step(self, action):
            self.t += 1
            feed(self.unity_sb3_channels, ("steps", 1.0, 2), ("t", float(self.t), 1))
            return np.zeros(2, np.float32), 0.0, self.t % 8 == 0, False, {}

    model = PPO("MlpPolicy", DummyVecEnv([StatsEnv]), n_steps=16, batch_size=16, n_epochs=1, device="cpu")
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(32, callback=StatsCallback())
    rows = read_progress(tmp_path)
    assert [row["steps"] for row in rows] == [16.0, 16.0]
    assert [row["t"] for row in rows] == [16.0, 32.0]
