"""Random Network Distillation (Burda et al. 2018) as ML-Agents configures it.

A fixed, randomly initialised target network and a trained predictor of the same shape encode
the *next* observation (the state the transition reached); the reward is the squared error
``||predictor(s') - target(s')||^2``, which falls on states seen often. The target is never
trained but is saved with the model, so rewards survive save/load.
"""

from __future__ import annotations

from typing import ClassVar

import torch as th
from gymnasium import spaces

from unity_sb3.algorithms.reward_signals.base import RewardSignal, SignalBatch, masked_mean
from unity_sb3.algorithms.reward_signals.networks import ObservationEncoder


class RNDSignal(RewardSignal):
    """RND reward signal; settings as ML-Agents' ``rnd`` (learning rate 1e-4 by default)."""

    name: ClassVar[str] = "rnd"
    ignore_done: ClassVar[bool] = True

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        settings: dict,
        device: th.device | str = "auto",
    ) -> None:
        super().__init__(observation_space, action_space, settings, device)
        self.target = ObservationEncoder(observation_space, settings["network_settings"])
        self.predictor = ObservationEncoder(observation_space, settings["network_settings"])
        self.target.requires_grad_(False)
        self.to(self.device)
        self.optimizer = th.optim.Adam(self.predictor.parameters(), lr=settings["learning_rate"])

    def _error(self, observations, update_normalization: bool = False) -> th.Tensor:
        with th.no_grad():
            target = self.target(observations, update_normalization=update_normalization)
        prediction = self.predictor(observations, update_normalization=update_normalization)
        return ((prediction - target) ** 2).sum(dim=1)

    def _reward(self, batch: SignalBatch) -> th.Tensor:
        return self._error(batch.next_observations)

    def _update(self, batch: SignalBatch) -> dict[str, float]:
        loss = masked_mean(self._error(batch.next_observations, update_normalization=True), batch.weights)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}
