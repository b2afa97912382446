"""Unity's StatsSideChannel values into the SB3 logger."""

from __future__ import annotations

from collections.abc import Sequence

from stable_baselines3.common.callbacks import BaseCallback

from unity_sb3.unity import compat as _compat  # noqa: F401  (before any mlagents_envs import)

from mlagents_envs.side_channel.stats_side_channel import (  # isort: skip
    StatsAggregationMethod,
)
from unity_sb3.unity.channels import UnityChannels, as_channel_list, find_channels

__all__: list[str] = []


class StatsCallback(BaseCallback):
    """Forward the stats Unity records (``StatsRecorder.Add``) to SB3's logger.

    Values that arrive between two logger dumps are combined by their aggregation method:
    ``AVERAGE`` -> mean, ``MOST_RECENT`` -> last value, ``SUM`` -> sum, ``HISTOGRAM`` -> mean
    of the values. Stats of every Unity instance are combined.

    :param channels: the channels to read; ``None`` finds them on the training env.
    :param prefix: prepended to every key (Unity keys may already hold a ``/``).
    :param verbose: unused, for SB3's callback signature.
    """

    def __init__(
        self,
        channels: UnityChannels | Sequence[UnityChannels] | None = None,
        prefix: str = "",
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        self._given_channels = as_channel_list(channels)
        self.channels: list[UnityChannels] = []
        self.prefix = prefix

    def _init_callback(self) -> None:
        self.channels = self._given_channels or find_channels(self.training_env)

    def _on_step(self) -> bool:
        self.forward()
        return True

    def _on_rollout_end(self) -> None:
        self.forward()

    def forward(self) -> None:
        """Read every channel's pending stats into the logger now."""
        for channels in self.channels:
            for key, values in channels.stats.get_and_reset_stats().items():
                self.record(self.prefix + key, values)

    def record(self, key: str, values: Sequence[tuple[float, StatsAggregationMethod]]) -> None:
        """Record ``(value, aggregation)`` pairs of one key with their aggregation honored."""
        log = self.logger
        for value, method in values:
            value = float(value)
            if method == StatsAggregationMethod.MOST_RECENT:
                log.record(key, value)
            elif method == StatsAggregationMethod.SUM:
                log.record(key, float(log.name_to_value.get(key, 0.0)) + value)
            else:  # AVERAGE and HISTOGRAM: mean over the logging period
                log.record_mean(key, value)
