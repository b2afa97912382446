"""Curiosity: the Intrinsic Curiosity Module (Pathak et al. 2017) as ML-Agents configures it.

A state encoder phi feeds an inverse model (predict the action from phi(s), phi(s')) and a
forward model (predict phi(s') from phi(s) and the action). The reward is the forward model's
error ``0.5 * ||f(phi(s), a) - phi(s')||^2``, clipped so that ``strength * reward <= 1`` and zero
until the first update (both as ML-Agents). Loss: ``10 * (0.2 * forward + 0.8 * inverse)``;
inverse loss is the squared error for continuous actions and the cross-entropy summed over
branches for discrete ones; placeholder (inactive) steps are masked out of both.
"""

from __future__ import annotations

from typing import ClassVar

import torch as th
from gymnasium import spaces
from torch import nn

from unity_sb3.algorithms.reward_signals.base import RewardSignal, SignalBatch, masked_mean
from unity_sb3.algorithms.reward_signals.networks import ObservationEncoder


class CuriositySignal(RewardSignal):
    """Curiosity (ICM) reward signal. See the module docstring; settings as ML-Agents' ``curiosity``."""

    name: ClassVar[str] = "curiosity"
    ignore_done: ClassVar[bool] = True
    forward_weight: ClassVar[float] = 0.2
    loss_multiplier: ClassVar[float] = 10.0
    model_units: ClassVar[int] = 256

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        settings: dict,
        device: th.device | str = "auto",
    ) -> None:
        super().__init__(observation_space, action_space, settings, device)
        self.encoder = ObservationEncoder(observation_space, settings["network_settings"])
        h = self.encoder.output_size
        flat = self.action_flattener
        self.inverse_body = nn.Sequential(nn.Linear(2 * h, self.model_units), nn.SiLU())
        self.inverse_head = nn.Linear(self.model_units, flat.continuous_size + sum(flat.branches))
        self.forward_model = nn.Sequential(
            nn.Linear(h + flat.flattened_size, self.model_units), nn.SiLU(), nn.Linear(self.model_units, h)
        )
        # a buffer, so that it is saved with the model
        self.register_buffer("has_updated", th.tensor(False))
        self.to(self.device)
        self.optimizer = th.optim.Adam(self.parameters(), lr=settings["learning_rate"])

    def _forward_error(
        self, batch: SignalBatch, update_normalization: bool = False
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        phi = self.encoder(batch.observations, update_normalization=update_normalization)
        phi_next = self.encoder(batch.next_observations)
        predicted = self.forward_model(th.cat([phi, self.action_flattener(batch.actions)], dim=1))
        error = 0.5 * ((predicted - phi_next) ** 2).sum(dim=1)
        return error, phi, phi_next

    def _inverse_error(self, phi: th.Tensor, phi_next: th.Tensor, actions: th.Tensor) -> th.Tensor:
        out = self.inverse_head(self.inverse_body(th.cat([phi, phi_next], dim=1)))
        flat = self.action_flattener
        c = flat.continuous_size
        loss = th.zeros(out.shape[0], device=out.device)
        if c > 0:
            loss = ((out[:, :c] - flat.continuous(actions)) ** 2).sum(dim=1)
        if flat.branches:  # discrete, or the discrete half of hybrid actions
            indices = flat.discrete(actions)
            for i, logits in enumerate(th.split(out[:, c:], flat.branches, dim=1)):
                loss = loss + nn.functional.cross_entropy(logits, indices[:, i], reduction="none")
        return loss

    def _reward(self, batch: SignalBatch) -> th.Tensor:
        error, _, _ = self._forward_error(batch)
        if self.strength > 0:
            error = th.clamp(error, max=1.0 / self.strength)
        return error * self.has_updated.float()

    def losses(self, batch: SignalBatch, update_normalization: bool = False) -> tuple[th.Tensor, th.Tensor]:
        """``(forward_loss, inverse_loss)`` on ``batch``, masked by its weights.

        :param update_normalization: first add the batch's observations to the encoder's running
            statistics (``network_settings.normalize``).
        """
        error, phi, phi_next = self._forward_error(batch, update_normalization)
        inverse = self._inverse_error(phi, phi_next, batch.actions)
        return masked_mean(error, batch.weights), masked_mean(inverse, batch.weights)

    def _update(self, batch: SignalBatch) -> dict[str, float]:
        forward_loss, inverse_loss = self.losses(batch, update_normalization=True)
        loss = self.loss_multiplier * (
            self.forward_weight * forward_loss + (1.0 - self.forward_weight) * inverse_loss
        )
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.has_updated.fill_(True)
        return {"forward_loss": forward_loss.item(), "inverse_loss": inverse_loss.item()}
