"""ML-Agents' goal conditioning (``network_settings.goal_conditioning_type: hyper``).

ML-Agents' ``ConditionalEncoder`` (``mlagents/trainers/torch_entities/conditioning.py``) is the
network body of a policy that sees goal signals: ``num_layers`` dense Swish layers of
``hidden_units``, the last one's weights generated from the goal encoding by a
:class:`HyperNetwork` instead of learned directly. :class:`HyperNetwork` is that layer;
:class:`~unity_sb3.networks.extractors.UnityMultiInputExtractor` builds the body around it
(``goal_conditioning="hypernetwork"``).
"""

from __future__ import annotations

import torch as th
from torch import nn

from unity_sb3.networks.attention import Swish, layer_norm

#: hidden layers of the hypernetwork (ML-Agents' ``ConditionalEncoder`` builds them with 2)
HYPER_LAYERS = 2


class HyperNetwork(nn.Module):
    """A dense layer whose weights a small network computes from the goal (ML-Agents' ``HyperNetwork``).

    ``y = x @ W(g) + b``: the goal ``g`` goes through ``num_layers`` dense Swish layers of
    ``hidden_size``, a parameter-free layer norm and a dense layer of ``in_features * out_features``
    outputs, reshaped to ``W(g)``; the bias ``b`` is learned directly (the hypernetwork does not
    generate it). Initialised as ML-Agents': the hidden layers Kaiming-normal with zero bias, the
    output layer uniform in ``+-sqrt(1 / (hidden_size * in_features))`` with zero bias, ``b`` zero.
    No activation is applied to ``y`` (ML-Agents puts a Swish after the layer).

    :param in_features: size of the conditioned input ``x``.
    :param out_features: size of the output ``y``.
    :param goal_features: size of the goal ``g`` (its encoding).
    :param hidden_size: units of the hypernetwork's hidden layers (ML-Agents: ``hidden_units``).
    :param num_layers: hidden layers of the hypernetwork.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        goal_features: int,
        hidden_size: int,
        num_layers: int = HYPER_LAYERS,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        layers: list[nn.Module] = []
        size = goal_features
        for _ in range(num_layers):
            linear = nn.Linear(size, hidden_size)
            nn.init.kaiming_normal_(linear.weight, nonlinearity="leaky_relu")
            nn.init.zeros_(linear.bias)
            layers += [linear, Swish()]
            size = hidden_size
        self.hidden = nn.Sequential(*layers)
        self.weights = nn.Linear(size, in_features * out_features)
        bound = (1.0 / (size * in_features)) ** 0.5
        nn.init.uniform_(self.weights.weight, -bound, bound)
        nn.init.zeros_(self.weights.bias)
        self.bias = nn.Parameter(th.zeros(out_features))

    def forward(self, x: th.Tensor, goal: th.Tensor) -> th.Tensor:
        """:param x: shape (batch, in_features). :param goal: shape (batch, goal_features).

        :return: shape (batch, out_features).
        """
        weight = self.weights(layer_norm(self.hidden(goal))).reshape(-1, self.in_features, self.out_features)
        return th.bmm(x.unsqueeze(1), weight).squeeze(1) + self.bias
