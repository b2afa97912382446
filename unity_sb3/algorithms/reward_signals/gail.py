"""GAIL (Ho & Ermon 2016), with the optional VAIL bottleneck (Peng et al. 2018), as ML-Agents does it.

A discriminator D(s[, a, done]) in (0, 1) learns to tell expert transitions (D -> 1) from the
policy's (D -> 0); the reward is ``-log(1 - D)``, large where the policy looks like the expert.
Loss: ``-log D(expert) - log(1 - D(policy))`` + ``10 *`` a gradient penalty (the gradient norm
of D at random interpolations of expert and policy inputs is pushed towards 1), and with
``use_vail`` a 128-unit stochastic bottleneck whose KL to N(0, 1) is held near 0.5 by an
adaptive multiplier beta. The action input (``use_actions``) also carries the done flag.

Expert data come from ``demo_path`` (``.demo`` files) or from ``demonstrations``: a
``Demonstration``, a tuple ``(observations, actions[, dones])`` or a dict with those keys,
observations laid out as the algorithm's observation space gives them. They are converted by
behavioral cloning's code (:func:`unity_sb3.algorithms.bc.data.bc_data`), so expert and policy
batches share one layout whatever the env's ``visual``, ``flatten_obs`` and action options.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium import spaces
from torch import nn

from unity_sb3.algorithms.reward_signals.base import RewardSignal, SignalBatch, as_tensor, masked_mean
from unity_sb3.algorithms.reward_signals.networks import ObservationEncoder
from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError


class ExpertData:
    """Expert transitions as arrays in the algorithm's spaces.

    :param observations: ``(n, *obs_shape)`` array, or a dict of those for ``Dict`` spaces.
    :param actions: ``(n, ...)`` actions (indices for discrete spaces).
    :param dones: ``(n,)`` episode ends; zeros when not given.
    """

    def __init__(self, observations: Any, actions: Any, dones: Any = None) -> None:
        self.observations = observations
        self.actions = np.asarray(actions)
        self.n = int(self.actions.shape[0])
        self.dones = (
            np.zeros(self.n, np.float32) if dones is None else np.asarray(dones, np.float32).reshape(-1)
        )
        sizes = (
            {k: len(v) for k, v in observations.items()}
            if isinstance(observations, dict)
            else {"": len(observations)}
        )
        if self.n == 0 or any(size != self.n for size in sizes.values()) or len(self.dones) != self.n:
            raise RewardSignalConfigError(
                f"GAIL expert data: observations ({sizes}), actions ({self.n}) and dones ({len(self.dones)}) "
                "must have the same non-zero number of rows."
            )


def load_expert_data(
    settings: dict, observation_space: spaces.Space, action_space: spaces.Space, model: Any = None
) -> ExpertData:
    """Expert data for GAIL from ``settings["demonstrations"]`` or ``settings["demo_path"]``.

    The conversion is behavioral cloning's (:func:`unity_sb3.algorithms.bc.data.bc_data`), so GAIL's
    expert batches are in exactly the layout the policy sees: a ``.demo`` file or a
    ``Demonstration`` goes through the ``BehaviorSpaces`` of the model's ``UnityVecEnv`` (its
    visual format, ``Dict`` keys and ``flatten_obs``), or, without one, through the
    ``BehaviorSpaces`` options whose spaces equal ``observation_space`` and ``action_space``.

    :param settings: the parsed ``gail`` settings.
    :param observation_space: the algorithm's observation space.
    :param action_space: the algorithm's action space.
    :param model: the algorithm (its env tells the demo's layout), or ``None``.
    :raises RewardSignalConfigError: the data do not fit the spaces.
    """
    from unity_sb3.algorithms.bc.data import bc_data  # lazy: the demo modules read protobuf files

    data = settings.get("demonstrations")
    if data is None:
        data = settings["demo_path"]
    if isinstance(data, ExpertData):
        return data
    if isinstance(data, (tuple, list)) and len(data) == 3 and not isinstance(data[0], (str, os.PathLike)):
        data = {"observations": data[0], "actions": data[1], "dones": data[2]}
    if model is None:
        model = SimpleNamespace(observation_space=observation_space, action_space=action_space)
    try:
        expert = bc_data(model, data)
    except ValueError as error:  # DemoSpecError too
        raise RewardSignalConfigError(f"reward_signals['gail'] expert data: {error}") from error
    except TypeError as error:  # not a kind of data bc_data takes
        raise RewardSignalConfigError(
            f"reward_signals['gail'] expert data: {error} (or an ExpertData, or (observations, actions, dones))"
        ) from error
    return ExpertData(expert.observations, expert.actions.reshape(len(expert), -1), expert.dones)


class GAILSignal(RewardSignal):
    """GAIL reward signal; settings as ML-Agents' ``gail`` plus ``demonstrations`` for in-memory data.

    :param expert: the expert data, else read from the settings on first use.
    :param model: the algorithm that owns the signal; the demo is converted for its env as
        behavioral cloning converts it (``None``: by the spaces alone).
    """

    name: ClassVar[str] = "gail"
    ignore_done: ClassVar[bool] = False
    gradient_penalty_weight: ClassVar[float] = 10.0
    z_size: ClassVar[int] = 128
    beta_step: ClassVar[float] = 0.0005
    mutual_information: ClassVar[float] = 0.5
    epsilon: ClassVar[float] = 1e-7

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        settings: dict,
        device: th.device | str = "auto",
        expert: ExpertData | None = None,
        model: Any = None,
    ) -> None:
        super().__init__(observation_space, action_space, settings, device)
        self.use_actions = bool(settings["use_actions"])
        self.use_vail = bool(settings["use_vail"])
        extra = self.action_flattener.flattened_size + 1 if self.use_actions else 0
        self.encoder = ObservationEncoder(observation_space, settings["network_settings"], extra_inputs=extra)
        h = self.encoder.output_size
        if self.use_vail:
            self.z_mu = nn.Linear(h, self.z_size)
            nn.init.kaiming_normal_(self.z_mu.weight)
            self.z_mu.weight.data *= 0.1
            nn.init.zeros_(self.z_mu.bias)
            self.z_sigma = nn.Parameter(th.ones(self.z_size))
            self.register_buffer("beta", th.tensor(0.0))
            h = self.z_size
        self.estimator = nn.Linear(h, 1)
        nn.init.xavier_uniform_(self.estimator.weight, gain=0.2)
        nn.init.zeros_(self.estimator.bias)
        self.to(self.device)
        self.optimizer = th.optim.Adam(self.parameters(), lr=settings["learning_rate"])
        # loaded on first use, so a saved model loads (e.g. for inference) without its demo files
        self._expert = expert
        self._model = model  # its env gives the demo's layout (see load_expert_data)
        self._expert_tensors: tuple[Any, th.Tensor, th.Tensor] | None = None

    @property
    def expert(self) -> ExpertData:
        """The expert transitions (read from ``demo_path`` / ``demonstrations`` on first access)."""
        if self._expert is None:
            self._expert = load_expert_data(
                self.settings, self.observation_space, self.action_space, self._model
            )
        return self._expert

    def _expert_on_device(self) -> tuple[Any, th.Tensor, th.Tensor]:
        if self._expert_tensors is None:
            expert = self.expert
            self._expert_tensors = (
                as_tensor(expert.observations, self.device),
                as_tensor(expert.actions, self.device).reshape(expert.n, -1),
                as_tensor(expert.dones, self.device, th.float32),
            )
        return self._expert_tensors

    def _extra(self, actions: th.Tensor, dones: th.Tensor | None) -> th.Tensor | None:
        if not self.use_actions:
            return None
        if dones is None:
            dones = th.zeros(actions.shape[0], device=actions.device)
        return th.cat([self.action_flattener(actions), dones.reshape(-1, 1).float()], dim=1)

    def _estimate_from_hidden(self, hidden: th.Tensor, noise: bool) -> tuple[th.Tensor, th.Tensor | None]:
        mu = None
        if self.use_vail:
            mu = self.z_mu(hidden)
            hidden = mu + th.randn_like(mu) * self.z_sigma if noise else mu
        return th.sigmoid(self.estimator(hidden)).squeeze(1), mu

    def estimate(self, batch: SignalBatch, noise: bool = False) -> tuple[th.Tensor, th.Tensor | None]:
        """``(D(batch), z_mu)``: the probability that each transition is the expert's, ``(batch,)``."""
        hidden = self.encoder(batch.observations, self._extra(batch.actions, batch.dones))
        return self._estimate_from_hidden(hidden, noise)

    def _reward(self, batch: SignalBatch) -> th.Tensor:
        estimate, _ = self.estimate(batch, noise=False)
        return -th.log(1.0 - estimate * (1.0 - self.epsilon))

    def sample_expert(self, n: int) -> SignalBatch:
        """``n`` expert transitions drawn uniformly with replacement, observations as the policy
        sees them (normalised with the model's ``VecNormalize`` statistics of now, as BC does)."""
        obs, actions, dones = self._expert_on_device()
        idx = th.randint(0, self.expert.n, (n,), device=self.device)
        normalizer = self._vec_normalize()
        if normalizer is None:
            sampled = {k: v[idx] for k, v in obs.items()} if isinstance(obs, dict) else obs[idx]
        else:
            rows, raw = idx.cpu().numpy(), self.expert.observations
            raw = {k: v[rows] for k, v in raw.items()} if isinstance(raw, dict) else raw[rows]
            sampled = as_tensor(normalizer.normalize_obs(raw), self.device)
        return SignalBatch(sampled, actions[idx], sampled, dones[idx], None)

    def _vec_normalize(self) -> Any:
        """The model's ``VecNormalize`` (whose statistics the rollout observations carry), or None."""
        model = self._model
        return model.get_vec_normalize_env() if hasattr(model, "get_vec_normalize_env") else None

    def _gradient_penalty(self, policy: SignalBatch, expert: SignalBatch) -> th.Tensor:
        def mix(a: th.Tensor, b: th.Tensor) -> th.Tensor:
            a, b = a.float(), b.float()
            eps = th.rand(a.shape, device=a.device)
            return (eps * a + (1 - eps) * b).detach().requires_grad_(True)

        if isinstance(policy.observations, dict):
            obs = {k: mix(policy.observations[k], expert.observations[k]) for k in policy.observations}
            obs_inputs = list(obs.values())
        else:
            obs = mix(policy.observations, expert.observations)
            obs_inputs = [obs]
        extra = None
        inputs = obs_inputs
        if self.use_actions:
            extra = mix(self._extra(policy.actions, policy.dones), self._extra(expert.actions, expert.dones))
            inputs = [*obs_inputs, extra]
        # images are interpolated as floats; the encoder scales uint8 images, so pre-scale them here
        hidden = self.encoder.dense(
            th.cat(self._encode_float(obs) + ([extra] if extra is not None else []), dim=1)
        )
        estimate, _ = self._estimate_from_hidden(hidden, noise=True)
        gradients = th.autograd.grad(estimate.sum(), inputs, create_graph=True)
        squared = sum(g.reshape(g.shape[0], -1).pow(2).sum(dim=1) for g in gradients)
        norm = th.sqrt(squared + self.epsilon)
        return ((norm - 1.0) ** 2).mean()

    def _encode_float(self, obs: Any) -> list[th.Tensor]:
        # like ObservationEncoder._inputs, but on already-float inputs that keep their graph
        enc = self.encoder
        obs_dict = obs if isinstance(obs, dict) else {"": obs}
        parts = []
        for key in enc._fixed_keys:
            name = key or "obs"
            space = enc._subspaces[key]
            x = obs_dict[key]
            if isinstance(space, spaces.Box) and space.dtype == np.uint8:
                x = x / 255.0
            elif isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
                from stable_baselines3.common.preprocessing import preprocess_obs

                x = preprocess_obs(x.round().long(), space)  # interpolation is meaningless for indices
            x = enc.processors[name](x.float())
            if name in enc.normalizers:
                x = enc.normalizers[name](x)
            parts.append(x)
        if enc.attention is not None:  # rank-2 observations, after the fixed ones (ObservationEncoder)
            x_self = th.cat(parts, dim=1) if parts else None
            parts.append(enc.attention(x_self, [obs_dict[k].float() for k in enc._entity_keys]))
        return parts

    def _update(self, batch: SignalBatch) -> dict[str, float]:
        n = batch.actions.shape[0]
        expert = self.sample_expert(n)
        if len(self.encoder.normalizers) > 0:  # ML-Agents normalises with the expert's statistics
            with th.no_grad():
                self.encoder._inputs(expert.observations, update_normalization=True)
        policy_estimate, policy_mu = self.estimate(batch, noise=True)
        expert_estimate, expert_mu = self.estimate(expert, noise=True)
        # the policy term is masked (placeholder steps excluded); expert data are all real
        discriminator_loss = -(
            th.log(expert_estimate + self.epsilon).mean()
            + masked_mean(th.log(1.0 - policy_estimate + self.epsilon), batch.weights)
        )
        loss = discriminator_loss
        stats = {
            "loss": discriminator_loss.item(),
            "policy_estimate": masked_mean(policy_estimate, batch.weights).item(),
            "expert_estimate": expert_estimate.mean().item(),
        }
        if self.use_vail:
            kl = th.mean(
                -th.sum(
                    1 + th.log(self.z_sigma**2) - 0.5 * expert_mu**2 - 0.5 * policy_mu**2 - self.z_sigma**2,
                    dim=1,
                )
            )
            loss = loss + self.beta.item() * (kl - self.mutual_information)
            with th.no_grad():
                self.beta.copy_(
                    th.clamp(self.beta + self.beta_step * (kl - self.mutual_information), min=0.0)
                )
            stats["kl_loss"] = kl.item()
            stats["beta"] = self.beta.item()
        if self.gradient_penalty_weight > 0:
            penalty = self.gradient_penalty_weight * self._gradient_penalty(batch, expert)
            loss = loss + penalty
            stats["gradient_penalty"] = penalty.item()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return stats
