"""Small networks shared by the reward signals: an observation encoder and an action flattener.

The encoder follows ML-Agents' ``NetworkBody`` in spirit: each observation (vector, image, or each
entry of a ``Dict``) is processed on its own (images by ML-Agents' visual encoder
``vis_encode_type``, the same as :mod:`unity_sb3.networks.extractors` gives the policies; the rest flattened), the results
are concatenated, optionally joined by extra unencoded inputs (actions for GAIL), and passed
through ``num_layers`` dense layers of ``hidden_units`` with a Swish-like activation (SiLU).
Rank-2 (``BufferSensor``) observations go through ML-Agents' entity attention
(:class:`unity_sb3.networks.attention.EntityAttention`) conditioned on the other observations,
as ML-Agents' ``ObservationEncoder`` does for every network body, reward signals' included.
"""

from __future__ import annotations

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_flattened_obs_dim, is_image_space, preprocess_obs
from torch import nn

from unity_sb3.algorithms.distributions import action_layout, is_hybrid_space
from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError
from unity_sb3.networks.attention import ATTENTION_EMBEDDING_SIZE, EntityAttention
from unity_sb3.networks.extractors import MIN_RESOLUTION, conv_body, encoders_for

TensorObs = th.Tensor | dict[str, th.Tensor]


class RunningNormalizer(nn.Module):
    """Running mean / variance of vector inputs (ML-Agents' ``normalize: true``), saved in the state dict.

    :param size: number of features.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.register_buffer("mean", th.zeros(size))
        self.register_buffer("var", th.ones(size))
        self.register_buffer("count", th.tensor(1e-4))

    @th.no_grad()
    def update(self, x: th.Tensor) -> None:
        batch_mean, batch_var, n = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        self.var = (self.var * self.count + batch_var * n + delta**2 * self.count * n / total) / total
        self.count = total

    def forward(self, x: th.Tensor) -> th.Tensor:
        return th.clamp((x - self.mean) / th.sqrt(self.var + 1e-8), -5.0, 5.0)


def _cnn(n_channels: int, height: int, width: int, encode_type: str) -> nn.Sequential:
    """ML-Agents' visual encoder ``encode_type`` (the policies' :func:`unity_sb3.networks.extractors.conv_body`);
    for an image smaller than it accepts, the largest encoder that fits (ML-Agents refuses such an
    image; a reward signal keeps training with a smaller encoder instead)."""
    if min(height, width) < MIN_RESOLUTION[encode_type]:
        encode_type = encoders_for(height, width)[0]
    return conv_body(encode_type, n_channels)


class ObservationEncoder(nn.Module):
    """Encode a batch of observations of ``observation_space`` into ``(batch, hidden_units)``.

    :param observation_space: a ``Box`` (vector or image), ``Discrete``/``MultiDiscrete``/``MultiBinary``,
        or a ``Dict`` of those. Images are recognised as SB3 does (uint8, 3-D, channel-first or last).
    :param network_settings: a full ML-Agents ``network_settings`` dict (see ``common.py``).
    :param extra_inputs: size of unencoded inputs concatenated before the dense layers (0 for none).
    """

    def __init__(
        self, observation_space: spaces.Space, network_settings: dict, extra_inputs: int = 0
    ) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.hidden_units = int(network_settings["hidden_units"])
        self.normalize = bool(network_settings["normalize"])
        encode_type = network_settings["vis_encode_type"]
        if isinstance(observation_space, spaces.Dict):
            subspaces = dict(observation_space.spaces)
        else:
            subspaces = {"": observation_space}
        self._keys = list(subspaces)
        self.processors = nn.ModuleDict()
        self.normalizers = nn.ModuleDict()
        self._entity_keys: list[str] = []
        total = 0
        for key, space in subspaces.items():
            name = key or "obs"
            if not isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
                raise RewardSignalConfigError(
                    f"Reward signals cannot encode observation space {space} (key {key!r}); "
                    "supported: Box, Discrete, MultiDiscrete, MultiBinary and a Dict of them."
                )
            if isinstance(space, spaces.Box) and len(space.shape) == 2:
                self._entity_keys.append(key)
                continue
            if is_image_space(space, check_channels=False, normalized_image=False) and len(space.shape) == 3:
                shape = space.shape
                channels_first = shape[0] < shape[-1]
                c, h, w = shape if channels_first else (shape[2], shape[0], shape[1])
                cnn = _cnn(c, h, w, encode_type)
                with th.no_grad():
                    size = cnn(th.zeros(1, c, h, w)).shape[1]
                self.processors[name] = _ImageProcessor(cnn, channels_first)
                total += size
            elif isinstance(space, spaces.Box) and len(space.shape) == 3:
                # float images (e.g. visual="float" in the wrappers): Unity layout HWC unless clearly CHW
                shape = space.shape
                channels_first = shape[0] < shape[-1] and shape[0] <= 4
                c, h, w = shape if channels_first else (shape[2], shape[0], shape[1])
                cnn = _cnn(c, h, w, encode_type)
                with th.no_grad():
                    size = cnn(th.zeros(1, c, h, w)).shape[1]
                self.processors[name] = _ImageProcessor(cnn, channels_first)
                total += size
            else:
                size = get_flattened_obs_dim(space)
                self.processors[name] = nn.Flatten()
                if self.normalize and isinstance(space, spaces.Box):
                    self.normalizers[name] = RunningNormalizer(size)
                total += size
        self._subspaces = subspaces
        self._fixed_keys = [k for k in self._keys if k not in self._entity_keys]
        self.attention: EntityAttention | None = None
        if self._entity_keys:
            shapes = [tuple(subspaces[k].shape) for k in self._entity_keys]
            self.attention = EntityAttention(total, shapes)  # type: ignore[arg-type]
            total += ATTENTION_EMBEDDING_SIZE
        layers: list[nn.Module] = []
        in_size = total + extra_inputs
        for _ in range(int(network_settings["num_layers"])):
            layers += [nn.Linear(in_size, self.hidden_units), nn.SiLU()]
            in_size = self.hidden_units
        self.dense = nn.Sequential(*layers)
        self.output_size = in_size

    def _inputs(self, obs: TensorObs, update_normalization: bool) -> list[th.Tensor]:
        obs_dict = obs if isinstance(obs, dict) else {"": obs}
        parts = []
        for key in self._fixed_keys:
            name = key or "obs"
            x = preprocess_obs(obs_dict[key], self._subspaces[key], normalize_images=True)
            x = self.processors[name](x.float())
            if name in self.normalizers:
                if update_normalization:
                    self.normalizers[name].update(x)
                x = self.normalizers[name](x)
            parts.append(x)
        if self.attention is not None:
            x_self = th.cat(parts, dim=1) if parts else None
            parts.append(self.attention(x_self, [obs_dict[k].float() for k in self._entity_keys]))
        return parts

    def forward(
        self, obs: TensorObs, extra: th.Tensor | None = None, update_normalization: bool = False
    ) -> th.Tensor:
        """:param obs: a batch as SB3 gives it (tensor, or dict of tensors).
        :param extra: ``(batch, extra_inputs)`` unencoded inputs, or ``None``.
        :param update_normalization: update the running statistics with this batch first.
        :return: ``(batch, output_size)`` encodings."""
        parts = self._inputs(obs, update_normalization)
        if extra is not None:
            parts.append(extra)
        return self.dense(th.cat(parts, dim=1))


class _ImageProcessor(nn.Module):
    def __init__(self, cnn: nn.Module, channels_first: bool) -> None:
        super().__init__()
        self.cnn = cnn
        self.channels_first = channels_first

    def forward(self, x: th.Tensor) -> th.Tensor:
        if not self.channels_first:
            x = x.permute(0, 3, 1, 2)
        return self.cnn(x)


class ActionFlattener:
    """Turn a batch of actions of ``action_space`` into floats: continuous as they are, discrete and
    multi-discrete as concatenated one-hot vectors (ML-Agents' ``ActionFlattener``).

    :param action_space: ``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``, or a hybrid
        ``Tuple(Box, MultiDiscrete)`` whose actions come as flat rows (continuous values, then branch
        indices; they flatten to the continuous values, then the one-hots).
    """

    def __init__(self, action_space: spaces.Space) -> None:
        self.action_space = action_space
        if isinstance(action_space, spaces.Box):
            self.continuous_size = int(np.prod(action_space.shape))
            self.branches: list[int] = []
        elif isinstance(action_space, spaces.Discrete):
            self.continuous_size = 0
            self.branches = [int(action_space.n)]
        elif isinstance(action_space, spaces.MultiDiscrete):
            self.continuous_size = 0
            self.branches = [int(n) for n in np.asarray(action_space.nvec).ravel()]
        elif isinstance(action_space, spaces.MultiBinary):
            self.continuous_size = 0
            self.branches = [2] * int(np.prod(action_space.shape))
        elif is_hybrid_space(action_space):
            self.continuous_size, self.branches = action_layout(action_space)
        else:
            raise RewardSignalConfigError(
                "Reward signals support Box, Discrete, MultiDiscrete, MultiBinary and hybrid Tuple(Box, "
                f"MultiDiscrete) actions, got {action_space}."
            )
        self.flattened_size = self.continuous_size + sum(self.branches)

    def discrete(self, actions: th.Tensor) -> th.Tensor:
        """``(batch, n_branches)`` long tensor of branch indices."""
        return actions.reshape(actions.shape[0], -1)[:, self.continuous_size :].long()

    def continuous(self, actions: th.Tensor) -> th.Tensor:
        """``(batch, continuous_size)`` float tensor."""
        return actions.reshape(actions.shape[0], -1)[:, : self.continuous_size].float()

    def __call__(self, actions: th.Tensor) -> th.Tensor:
        """:param actions: ``(batch, ...)`` actions as SB3 stores them.
        :return: ``(batch, flattened_size)`` floats."""
        if not self.branches:
            return self.continuous(actions)
        indices = self.discrete(actions)
        onehots = [
            nn.functional.one_hot(indices[:, i].clamp(0, n - 1), n).float()
            for i, n in enumerate(self.branches)
        ]
        if self.continuous_size > 0:  # hybrid
            onehots.insert(0, self.continuous(actions))
        return th.cat(onehots, dim=1)
