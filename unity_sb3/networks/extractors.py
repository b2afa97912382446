"""Visual encoders sized for Unity's cameras and grid sensors, as SB3 features extractors.

SB3's ``NatureCNN`` needs images of at least 36x36 pixels, while Unity scenes often send small
top-down cameras or grid sensors (GridWorld: 3x32x32, Match3: one pixel per board cell). ML-Agents
picks a visual encoder per behavior with ``network_settings.vis_encode_type``; these classes
offer the same five choices to any SB3 / sb3-contrib algorithm and to :class:`unity_sb3.POCA`:

======================  ===========================================================  ============
``encoder``             layers (channel-first input)                                 min. side
======================  ===========================================================  ============
``"simple"``            conv 8x8/4 (16) -> conv 4x4/2 (32) -> dense                 20
``"nature_cnn"``        conv 8x8/4 (32) -> conv 4x4/2 (64) -> conv 3x3/1 (64) -> dense 36
``"resnet"``            3 stacks of conv 3x3 + max-pool 3x3/2 + 2 residual blocks     15
                        (16, 32, 32 channels, Swish) -> dense
``"match3"``            conv 3x3/1 (35) -> conv 3x3/1 (144) -> dense (for boards)     5
``"fully_connected"``   flatten -> dense                                              1
======================  ===========================================================  ============

Convolutions and dense layers use LeakyReLU (ResNet: Swish, then ReLU after its dense layer)
and the dense layer starts from Kaiming-normal weights, as ML-Agents' encoders do.

Usage::

    from unity_sb3.networks.extractors import UnityMultiInputExtractor

    model = MaskablePPO(
        "MultiInputPolicy",
        env,
        policy_kwargs=dict(
            features_extractor_class=UnityMultiInputExtractor,
            # goal_keys: goal-signal observations that condition the rest (ML-Agents' "hyper")
            features_extractor_kwargs=dict(encoder="simple", goal_keys=["GoalSensor"]),
        ),
    )

Images are channel-first ``(C, H, W)``, as :class:`unity_sb3.UnityVecEnv` offers them. Inside
an SB3 policy, ``normalize_images=True`` (SB3's default) already scales uint8 images to [0, 1]
before the extractor sees them; called on its own, :class:`UnityCnn` scales uint8 tensors by
1/255 itself, so both paths give the same features. Float images are used as they are.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch as th
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_flattened_obs_dim
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from unity_sb3.networks.attention import ATTENTION_EMBEDDING_SIZE, EntityAttention
from unity_sb3.networks.conditioning import HyperNetwork

ENCODERS = ("simple", "nature_cnn", "resnet", "match3", "fully_connected")

# Smallest image side each encoder accepts (ML-Agents' ModelUtils.MIN_RESOLUTION_FOR_ENCODER).
MIN_RESOLUTION: dict[str, int] = {
    "fully_connected": 1,
    "match3": 5,
    "resnet": 15,
    "simple": 20,
    "nature_cnn": 36,
}


def _check_encoder(encoder: str) -> str:
    if not isinstance(encoder, str) or encoder not in ENCODERS:
        raise ValueError(
            f"Unknown visual encoder {encoder!r}: choose one of {', '.join(map(repr, ENCODERS))}."
        )
    return encoder


def encoders_for(height: int, width: int) -> list[str]:
    """The encoders that accept an image of ``height`` x ``width`` pixels, largest first.

    :param height: image height in pixels.
    :param width: image width in pixels.
    """
    side = min(height, width)
    fits = [name for name, size in MIN_RESOLUTION.items() if size <= side]
    return sorted(fits, key=lambda name: -MIN_RESOLUTION[name])


def check_resolution(encoder: str, shape: tuple[int, ...], key: str | None = None) -> None:
    """Raise a ``ValueError`` naming the encoders that fit when ``shape`` is too small for ``encoder``.

    :param encoder: one of :data:`ENCODERS`.
    :param shape: the image shape, channel-first ``(C, H, W)``.
    :param key: the observation's key in a ``Dict`` space, for the message.
    """
    _check_encoder(encoder)
    _, height, width = shape
    need = MIN_RESOLUTION[encoder]
    if min(height, width) >= need:
        return
    where = f"Observation {key!r}: image" if key is not None else "Image"
    fits = encoders_for(height, width)
    message = (
        f"{where} of shape {tuple(shape)} (channels, height, width) is {height}x{width} pixels, smaller "
        f"than the {need}x{need} the {encoder!r} encoder needs. Use encoder={fits[0]!r}"
        + (f" (also possible: {', '.join(map(repr, fits[1:]))})" if len(fits) > 1 else "")
        + f", or render the image at {need}x{need} or larger."
    )
    if min(shape[0], shape[1]) >= need > shape[2]:
        message += (
            f" Shape {tuple(shape)} looks channel-last (height, width, channels): these encoders take "
            "channel-first images (UnityVecEnv's default layout, or wrap the env in SB3's VecTransposeImage)."
        )
    raise ValueError(message)


def _swish(x: th.Tensor) -> th.Tensor:
    """x * sigmoid(x), written out so that ONNX opset 9 exports it (ML-Agents' Swish)."""
    return x * th.sigmoid(x)


class _Swish(nn.Module):
    """:func:`_swish` as a layer."""

    def forward(self, x: th.Tensor) -> th.Tensor:
        return _swish(x)


class _ResidualBlock(nn.Module):
    """x + conv(swish(conv(swish(x)))), both convolutions 3x3 with padding 1 (shape-preserving)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            _Swish(),
            nn.Conv2d(channels, channels, 3, 1, padding=1),
            _Swish(),
            nn.Conv2d(channels, channels, 3, 1, padding=1),
        )

    def forward(self, x: th.Tensor) -> th.Tensor:
        return x + self.body(x)


def conv_body(encoder: str, channels: int) -> nn.Sequential:
    """ML-Agents' visual encoder ``encoder`` up to its dense layer, flattened at the end.

    :param encoder: one of :data:`ENCODERS`; the image must be at least ``MIN_RESOLUTION[encoder]``
        pixels a side.
    :param channels: input channels of the channel-first images it takes.
    """
    if encoder == "simple":
        layers = [nn.Conv2d(channels, 16, 8, 4), nn.LeakyReLU(), nn.Conv2d(16, 32, 4, 2), nn.LeakyReLU()]
    elif encoder == "nature_cnn":
        layers = [
            nn.Conv2d(channels, 32, 8, 4),
            nn.LeakyReLU(),
            nn.Conv2d(32, 64, 4, 2),
            nn.LeakyReLU(),
            nn.Conv2d(64, 64, 3, 1),
            nn.LeakyReLU(),
        ]
    elif encoder == "match3":
        layers = [nn.Conv2d(channels, 35, 3, 1), nn.LeakyReLU(), nn.Conv2d(35, 144, 3, 1), nn.LeakyReLU()]
    elif encoder == "resnet":
        layers = []
        last = channels
        for width in (16, 32, 32):
            layers += [nn.Conv2d(last, width, 3, 1, padding=1), nn.MaxPool2d(3, 2)]
            layers += [_ResidualBlock(width), _ResidualBlock(width)]
            last = width
        layers.append(_Swish())
    else:  # fully_connected
        layers = []
    return nn.Sequential(*layers, nn.Flatten())


class UnityCnn(BaseFeaturesExtractor):
    """One image observation through one of ML-Agents' visual encoders.

    :param observation_space: a 3-D ``Box``, channel-first ``(C, H, W)``, uint8 in [0, 255] or
        float (used as it is).
    :param features_dim: size of the output (the encoder's dense layer; ML-Agents uses
        ``hidden_units``, 128 by default).
    :param encoder: ``"simple"``, ``"nature_cnn"``, ``"resnet"``, ``"match3"`` or
        ``"fully_connected"`` (see :data:`MIN_RESOLUTION` for the smallest side each accepts).
    :raises ValueError: for a space that is not a 3-D ``Box``, an unknown encoder, or an image
        smaller than the encoder's minimum resolution (the message names the encoders that fit).
    """

    def __init__(
        self, observation_space: spaces.Box, features_dim: int = 128, encoder: str = "simple"
    ) -> None:
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 3:
            shape = getattr(observation_space, "shape", None)
            raise ValueError(
                f"UnityCnn takes one image: a 3-D Box (channels, height, width), got {observation_space} "
                f"(shape {shape}). Use UnityMultiInputExtractor for Dict observations or vectors."
            )
        if not isinstance(features_dim, int) or features_dim < 1:
            raise ValueError(f"features_dim must be a positive integer, got {features_dim!r}.")
        _check_encoder(encoder)
        check_resolution(encoder, observation_space.shape)
        super().__init__(observation_space, features_dim)
        self.encoder = encoder
        channels, height, width = observation_space.shape
        self.conv = conv_body(encoder, channels)
        with th.no_grad():
            n_flat = self.conv(th.zeros(1, channels, height, width)).shape[1]
        dense = nn.Linear(n_flat, features_dim)
        nn.init.kaiming_normal_(dense.weight, nonlinearity="leaky_relu")
        nn.init.zeros_(dense.bias)
        activation = nn.ReLU() if encoder == "resnet" else nn.LeakyReLU()
        self.dense = nn.Sequential(dense, activation)

    def forward(self, observations: th.Tensor) -> th.Tensor:
        """:param observations: shape (batch, C, H, W); uint8 tensors are scaled by 1/255.

        :return: shape (batch, features_dim).
        """
        if observations.dtype == th.uint8:
            observations = observations.float() / 255.0
        return self.dense(self.conv(observations.float()))


class HyperLinear(nn.Module):
    """A dense layer whose weights are a linear function of a goal signal (ML-Agents' "hyper" conditioning).

    ``y = relu(x @ W(g) + b(g))`` with ``W(g) = sum_k g_k W_k``: for a one-hot goal, one dense layer
    per goal. ML-Agents' hypernetwork can put Swish hidden layers between goal and weights; without
    them the layer stays small (``goal_dim * in * out`` weights) and exports to ONNX opset 9 (MatMul).

    :param in_features: size of the conditioned input.
    :param goal_features: size of the goal signal.
    :param out_features: size of the output.
    """

    def __init__(self, in_features: int, goal_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.goal_features, self.out_features = in_features, goal_features, out_features
        self.weight = nn.Parameter(
            th.randn(goal_features, in_features * out_features) * (2.0 / in_features) ** 0.5
        )
        self.bias = nn.Linear(goal_features, out_features)

    def forward(self, x: th.Tensor, goal: th.Tensor) -> th.Tensor:
        """:param x: shape (batch, in_features). :param goal: shape (batch, goal_features).

        :return: shape (batch, out_features).
        """
        weight = (goal @ self.weight).reshape(-1, self.in_features, self.out_features)
        return th.relu(th.bmm(x.unsqueeze(1), weight).squeeze(1) + self.bias(goal))


def _joined(parts: list[th.Tensor]) -> th.Tensor:
    """The parts side by side along axis 1, without a copy when there is only one."""
    return parts[0] if len(parts) == 1 else th.cat(parts, dim=1)


class UnityMultiInputExtractor(BaseFeaturesExtractor):
    """Every observation of a Unity behavior: images through :class:`UnityCnn`, the rest flattened.

    A drop-in for SB3's ``CombinedExtractor`` (``MultiInputPolicy``) that also accepts a single
    ``Box``. Every 3-D ``Box`` is an image (camera, render texture or grid sensor, uint8 or
    float, channel-first), as in ML-Agents; vectors and discrete spaces are flattened (discrete
    ones arrive one-hot from SB3's preprocessing). The parts are concatenated in the space's key
    order. Every 2-D ``Box`` is a variable-length (``BufferSensor``) observation ``(max_entities,
    entity_size)``: with ``entities="attention"`` (default) the entities go through ML-Agents'
    entity embedding and residual self-attention (:class:`unity_sb3.networks.attention.EntityAttention`,
    conditioned on the other observations' features) and its ``entity_embedding_size`` features
    come last; ``entities="flatten"`` pads-and-flattens them instead (with a warning).

    Goal signals (ML-Agents' ``ObservationType.GOAL_SIGNAL`` sensors, e.g. GridWorld's
    ``"GoalSensor"``) named in ``goal_keys`` are not concatenated: they set the weights of a
    :class:`HyperLinear` layer applied to the other observations' features, as ML-Agents'
    ``conditioning_type: hyper`` does. A policy that must act differently per goal learns much
    faster that way: with MaskablePPO, GridWorld (32x32 camera + goal, ``encoder="simple"``) did not
    learn within 200k steps with the goal concatenated, and reached a mean episode reward of 0.8
    after about 50k steps with it (``examples/maskable_ppo_gridworld.py``).

    :param observation_space: a ``Dict`` of observations, or one ``Box``.
    :param encoder: visual encoder for every image (see :class:`UnityCnn`).
    :param cnn_output_dim: features per image (ML-Agents' ``hidden_units``).
    :param goal_keys: keys of goal-signal observations (vectors, or images encoded by their own
        :class:`UnityCnn` of ``cnn_output_dim`` features) that condition the features; empty: none
        (every observation is concatenated).
    :param goal_hidden_dim: output size of the goal-conditioned layer (then ``features_dim``).
    :param hidden_layers: sizes of dense Swish layers applied last (ML-Agents' network body of
        ``num_layers`` x ``hidden_units``), so that the body can sit before an LSTM or be shared by
        actor and critic (``net_arch=dict(pi=[], vf=[])``); empty: none (``features_dim`` is the
        concatenation's, or ``goal_hidden_dim``).
    :raises ValueError: as :class:`UnityCnn`, naming the observation key; for unknown or
        variable-length goal keys, goal keys that leave nothing to condition, or non-positive layer sizes.
    :param entities: ``"attention"`` or ``"flatten"``: how 2-D (entity) observations are encoded.
    :param entity_embedding_size: size of the attention's embeddings and output (ML-Agents: 128).
    :param goal_features: also encode the goal signals as ordinary observations (concatenated with the
        rest) and condition on those encodings, as ML-Agents' ``hyper`` does (the ML-Agents config
        mapping sets it); False (default): the goals only condition, the vector raw, an image through
        its own :class:`UnityCnn`.
    :param goal_conditioning: ``"linear"`` (default): a :class:`HyperLinear` layer of
        ``goal_hidden_dim`` (ReLU) between the observations' features and ``hidden_layers``;
        ``"hypernetwork"``: ML-Agents' ``ConditionalEncoder``, the last of ``hidden_layers`` being a
        :class:`~unity_sb3.networks.conditioning.HyperNetwork` (Swish), or, without ``hidden_layers``,
        one such layer of ``goal_hidden_dim`` (the ML-Agents config mapping sets it).
    """

    def __init__(
        self,
        observation_space: spaces.Dict | spaces.Box,
        encoder: str = "simple",
        cnn_output_dim: int = 128,
        goal_keys: Sequence[str] = (),
        goal_hidden_dim: int = 128,
        hidden_layers: Sequence[int] = (),
        entities: str = "attention",
        entity_embedding_size: int = ATTENTION_EMBEDDING_SIZE,
        goal_features: bool = False,
        goal_conditioning: str = "linear",
    ) -> None:
        _check_encoder(encoder)
        if goal_conditioning not in ("linear", "hypernetwork"):
            raise ValueError(
                f"goal_conditioning must be 'linear' or 'hypernetwork', got {goal_conditioning!r}."
            )
        if entities not in ("attention", "flatten"):
            raise ValueError(f"entities must be 'attention' or 'flatten', got {entities!r}.")
        hidden_layers = list(hidden_layers)
        if not all(isinstance(n, int) and n > 0 for n in hidden_layers):
            raise ValueError(f"hidden_layers must be positive integers (layer sizes), got {hidden_layers!r}.")
        if isinstance(observation_space, spaces.Dict):
            subspaces = dict(observation_space.spaces)
        elif isinstance(observation_space, spaces.Box):
            subspaces = {"": observation_space}
        else:
            raise ValueError(
                f"UnityMultiInputExtractor takes a Dict or Box observation space, got {observation_space}."
            )
        if isinstance(goal_keys, str):
            goal_keys = [goal_keys]
        goal_keys = list(goal_keys)
        for key in goal_keys:
            if key not in subspaces or not isinstance(observation_space, spaces.Dict):
                raise ValueError(
                    f"goal_keys: {key!r} is not an observation key; keys: {', '.join(map(repr, subspaces))}."
                )
            if isinstance(subspaces[key], spaces.Box) and len(subspaces[key].shape) == 2:
                raise ValueError(
                    f"goal_keys: {key!r} is a variable-length (entity) observation {subspaces[key]}; goal "
                    "signals must be vectors or images (ML-Agents does not condition on entity lists either)."
                )
        if goal_keys and len(goal_keys) == len(subspaces) and not goal_features:
            raise ValueError("goal_keys name every observation: nothing is left for the goal to condition.")
        super().__init__(observation_space, features_dim=1)
        self.encoder = encoder
        self.single = not isinstance(observation_space, spaces.Dict)
        extractors: dict[str, nn.Module] = {}
        entity_keys: list[str] = []
        total = 0
        for key, subspace in subspaces.items():
            if key in goal_keys and not goal_features:
                continue
            if isinstance(subspace, spaces.Box) and len(subspace.shape) == 2:
                if entities == "attention":
                    entity_keys.append(key)
                    continue
                warnings.warn(
                    f"Observation {key!r} of shape {subspace.shape} is a variable-length (entity) observation "
                    "(max_entities, entity_size); entities='flatten' pads and flattens it, which ties "
                    "the policy to the entities' order. entities='attention' (default) encodes it as ML-Agents does.",
                    stacklevel=2,
                )
            if isinstance(subspace, spaces.Box) and len(subspace.shape) == 3:
                check_resolution(encoder, subspace.shape, key=None if self.single else key)
                extractors[key] = UnityCnn(subspace, features_dim=cnn_output_dim, encoder=encoder)
                total += cnn_output_dim
            else:
                extractors[key] = nn.Flatten()
                total += get_flattened_obs_dim(subspace)
        self.keys = list(extractors)
        self.goal_keys = [k for k in subspaces if k in goal_keys]  # in the space's order
        self.goal_features = goal_features
        # ModuleDict names must be non-empty and free of dots; Unity sensor names usually are
        names = [k if k and "." not in k else f"obs_{i}" for i, k in enumerate(self.keys)]
        if len(set(names)) < len(names):
            names = [f"obs_{i}" for i in range(len(names))]
        self.extractors = nn.ModuleDict(dict(zip(names, extractors.values())))
        self.entity_keys = entity_keys
        self.attention: EntityAttention | None = None
        if entity_keys:
            shapes = [tuple(subspaces[k].shape) for k in entity_keys]
            self.attention = EntityAttention(total, shapes, embedding_size=entity_embedding_size)  # type: ignore[arg-type]
            total += entity_embedding_size
        self.conditioning: HyperLinear | HyperNetwork | None = None
        goal_encoders: dict[str, nn.Module] = {}
        goal_dim = 0
        for i, key in enumerate([] if goal_features else self.goal_keys):
            subspace = subspaces[key]
            name = key if key and "." not in key else f"goal_{i}"
            if isinstance(subspace, spaces.Box) and len(subspace.shape) == 3:
                # an image goal conditions through its encoding, as ML-Agents' goal processors
                check_resolution(encoder, subspace.shape, key=key)
                goal_encoders[name] = UnityCnn(subspace, features_dim=cnn_output_dim, encoder=encoder)
                goal_dim += cnn_output_dim
            else:
                goal_encoders[name] = nn.Flatten()
                goal_dim += get_flattened_obs_dim(subspace)
        self.goal_encoders = nn.ModuleDict(goal_encoders) if goal_encoders else None
        if goal_features:  # the goals' own features condition: their encoders are the features'
            goal_dim = sum(
                cnn_output_dim
                if len(getattr(subspaces[k], "shape", ())) == 3
                else get_flattened_obs_dim(subspaces[k])
                for k in self.goal_keys
            )
        # with a hypernetwork the body comes first and its last layer is the conditioned one (ML-Agents'
        # ConditionalEncoder); a HyperLinear layer conditions the features before the body
        self.conditions_last = bool(self.goal_keys) and goal_conditioning == "hypernetwork"
        plain = hidden_layers[:-1] if self.conditions_last and hidden_layers else hidden_layers
        if self.goal_keys and not self.conditions_last:
            self.conditioning = HyperLinear(total, goal_dim, goal_hidden_dim)
            total = goal_hidden_dim
        layers: list[nn.Module] = []
        for size in plain:
            layers += [nn.Linear(total, size), _Swish()]
            total = size
        self.body = nn.Sequential(*layers) if layers else None
        if self.conditions_last:
            size = hidden_layers[-1] if hidden_layers else goal_hidden_dim
            self.conditioning = HyperNetwork(total, size, goal_dim, size)
            total = size
        self._features_dim = total

    def forward(self, observations: th.Tensor | dict[str, th.Tensor]) -> th.Tensor:
        """:param observations: a dict of tensors with a leading batch axis, or one tensor.

        :return: shape (batch, features_dim).
        """
        if self.single:
            inputs = [observations]
        else:
            inputs = [observations[key] for key in self.keys]  # type: ignore[index]
        parts = [extractor(x).float() for extractor, x in zip(self.extractors.values(), inputs)]
        if self.attention is not None:
            x_self = _joined(parts) if parts else None
            ents = [observations] if self.single else [observations[k] for k in self.entity_keys]  # type: ignore[index]
            parts.append(self.attention(x_self, ents))
        features = _joined(parts)
        if self.conditioning is None:
            return features if self.body is None else self.body(features)
        if self.goal_features:
            goal = _joined([parts[self.keys.index(k)] for k in self.goal_keys])
        else:
            goal = _joined(
                [
                    encode(observations[k]).float()  # type: ignore[index]
                    for encode, k in zip(self.goal_encoders.values(), self.goal_keys)  # type: ignore[union-attr]
                ]
            )
        if self.conditions_last:
            if self.body is not None:
                features = self.body(features)
            return _swish(self.conditioning(features, goal))
        features = self.conditioning(features, goal)
        return features if self.body is None else self.body(features)
