"""Supervised pretraining of an SB3 model's actor from expert demonstrations."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.logger import HumanOutputFormat, Logger

from unity_sb3.algorithms.bc.adapters import Batch, LossKind, PolicyAdapter, make_adapter, reached_parameters
from unity_sb3.algorithms.bc.data import BCData, DemoSource, bc_data, take

__all__ = ["pretrain_bc"]


def pretrain_bc(
    model: Any,
    demos: DemoSource,
    *,
    epochs: int = 10,
    batch_size: int = 256,
    learning_rate: float = 1e-3,
    validation_split: float = 0.1,
    progress_bar: bool = False,
    critic_warmup: bool = False,
    gamma: float | None = None,
    seed: int | None = None,
    loss: LossKind = "auto",
    sequence_length: int = 16,
    critic_learning_rate: float | None = None,
) -> dict[str, list[float]]:
    """Clone expert behaviour into ``model``'s actor before (or instead of) RL.

    Works for ``ActorCriticPolicy`` models (PPO, A2C, the project's PPO), sb3-contrib's
    MaskablePPO (the demo's action masks are applied) and RecurrentPPO, and for SAC/TD3-style
    actors. The loss is the negative log-likelihood of the demo actions for discrete actions
    and, by default, the squared error of the deterministic action for continuous ones (see
    :mod:`unity_sb3.algorithms.bc.adapters`). A fresh Adam optimizer trains only the
    parameters the loss reaches; the model's own optimizer is untouched.

    Behind ``VecNormalize``, demo observations are normalised with its statistics (not updated).
    Recurrent policies train on sequences of ``sequence_length`` steps cut from each
    trajectory, each started from a zero LSTM state (as ML-Agents' BC does).

    With ``critic_warmup`` the critic is fitted, in the same epochs, to the demo's discounted
    returns: Monte Carlo returns per trajectory, bootstrapped with the critic's current value
    of the last observation when a trajectory ended without a true terminal state (time limit,
    end of the recording). Only parameters the actor does not use are trained there, so the
    warm-up cannot change the cloned policy. For SAC/TD3 the twin Q networks are fitted at the
    demo actions and copied into the target networks. This keeps the first RL updates from
    wrecking the cloned policy with advantages from an untrained critic.

    Losses are recorded in the model's logger (``bc/loss``, ``bc/val_loss``,
    ``bc/value_loss``, ``bc/val_value_loss``) and dumped once per epoch with the epoch as the
    step; before the model has a logger (no ``learn()`` yet) they are printed when
    ``model.verbose >= 1``.

    :param model: an SB3 model whose spaces the demonstration fits.
    :param demos: a ``.demo`` path, directory or list of paths, a :class:`Demonstration`, a dict
        of arrays in the model's spaces (``observations``, ``actions``; optional ``rewards``,
        ``dones``, ``truncated``, ``next_observations``, ``action_masks``), or an
        ``(observations, actions)`` tuple. See :func:`unity_sb3.algorithms.bc.data.bc_data`.
    :param epochs: passes over the training transitions.
    :param batch_size: transitions per gradient step (recurrent: ``batch_size // sequence_length``
        sequences, at least one).
    :param learning_rate: Adam learning rate of the actor.
    :param validation_split: fraction held out to measure ``val_loss``: whole trajectories
        when there are at least 5, else the last part of each trajectory. 0: no validation.
    :param progress_bar: show a tqdm bar over epochs.
    :param critic_warmup: also fit the critic to the demo's returns (needs rewards).
    :param gamma: discount of those returns; default: the model's (its extrinsic head's).
    :param seed: seed of the split and of the shuffling (the global RNGs are not touched).
    :param loss: ``"auto"``, ``"nll"`` or ``"mse"`` (continuous actions only).
    :param sequence_length: steps per sequence for recurrent policies.
    :param critic_learning_rate: Adam learning rate of the critic; default ``learning_rate``.
    :return: per-epoch history: ``loss`` (and ``val_loss``; ``value_loss`` / ``val_value_loss``
        with the warm-up), each a list of ``epochs`` floats.
    :raises DemoSpecError: the demonstration does not fit the model's spaces.
    """
    _check_positive_int(epochs, "epochs")
    _check_positive_int(batch_size, "batch_size")
    _check_positive_int(sequence_length, "sequence_length")
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
    if not 0.0 <= validation_split < 1.0:
        raise ValueError(f"validation_split must be in [0, 1), got {validation_split!r}")
    adapter = make_adapter(model, loss)
    data = bc_data(model, demos)
    rng = np.random.default_rng(seed)
    train_idx, val_idx = split_indices(data, validation_split, rng)
    sampler = Sampler(adapter, data, batch_size, sequence_length)
    if critic_warmup:
        gamma = default_gamma(model) if gamma is None else float(gamma)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        returns, tails = data.discounted_returns(gamma)
        sampler.returns = th.as_tensor(returns, device=adapter.device)
        sampler.tails = th.as_tensor(tails, device=adapter.device)

    model.policy.set_training_mode(True)
    first, _ = next(sampler.minibatches(train_idx, rng=None))
    actor_params = reached_parameters(adapter.actor_loss(first).mean(), adapter.actor_modules())
    actor_optimizer = th.optim.Adam(actor_params, lr=learning_rate)
    critic_optimizer = None
    if critic_warmup:
        actor_ids = {id(p) for p in actor_params}
        critic_params = [
            p
            for p in reached_parameters(adapter.values(first).mean(), adapter.critic_modules())
            if id(p) not in actor_ids
        ]
        if not critic_params:
            raise ValueError(
                "critic_warmup: every critic parameter is shared with the actor, so fitting the critic would "
                "change the cloned policy; use critic_warmup=False"
            )
        critic_optimizer = th.optim.Adam(critic_params, lr=critic_learning_rate or learning_rate)

    logger, own_logger = _logger(model)
    history: dict[str, list[float]] = {"loss": []}
    if len(val_idx):
        history["val_loss"] = []
    if critic_warmup:
        history["value_loss"] = []
        if len(val_idx):
            history["val_value_loss"] = []
    bar = _progress(epochs, progress_bar)
    try:
        for epoch in range(epochs):
            if critic_warmup:
                sampler.update_end_values()
            totals = np.zeros(2)
            weight = 0.0
            for batch, rows in sampler.minibatches(train_idx, rng):
                n = float(batch.valid.sum().item())
                actor_loss = weighted_mean(adapter.actor_loss(batch), batch.valid)
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()
                totals[0] += actor_loss.item() * n
                if critic_optimizer is not None:
                    value_loss = sampler.value_loss(batch, rows)
                    critic_optimizer.zero_grad()
                    value_loss.backward()
                    critic_optimizer.step()
                    totals[1] += value_loss.item() * n
                weight += n
            record = {"loss": totals[0] / weight}
            if critic_warmup:
                record["value_loss"] = totals[1] / weight
            if len(val_idx):
                record.update(sampler.evaluate(val_idx, critic_warmup))
            for key, value in record.items():
                history[key].append(float(value))
                logger.record(f"bc/{key}", float(value))
            logger.record("bc/epoch", epoch + 1)
            logger.dump(step=epoch + 1)
            if bar is not None:
                bar.update(1)
                bar.set_postfix({k: f"{v:.4g}" for k, v in record.items()})
    finally:
        if bar is not None:
            bar.close()
        if own_logger:
            logger.close()
        model.policy.set_training_mode(False)
    if critic_warmup:
        adapter.sync_targets()
    elif hasattr(adapter.model, "actor_target"):
        # TD3's target actor starts as a copy of the actor; keep it that way
        adapter.model.actor_target.load_state_dict(adapter.model.actor.state_dict())
    return history


# ---------------------------------------------------------------------------------- helpers
def _check_positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def default_gamma(model: Any) -> float:
    """The discount of the model's environment-reward head (the project's PPO/SAC) or its ``gamma``."""
    settings = getattr(model, "_signal_settings", None) or {}
    if "extrinsic" in settings:
        return float(settings["extrinsic"]["gamma"])
    return float(getattr(model, "gamma", 0.99))


def weighted_mean(values: th.Tensor, weights: th.Tensor) -> th.Tensor:
    """The mean of ``values`` weighted by ``weights``, dividing by at least 1 (all-zero weights give 0).

    :param values: per-sample losses
    :param weights: per-sample weights of the same shape (the batch's ``valid`` mask)
    """
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


def split_indices(data: BCData, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Training and validation transition indices (see ``validation_split`` of :func:`pretrain_bc`)."""
    m = len(data)
    everything = np.arange(m)
    if fraction == 0.0 or m < 2:
        return everything, everything[:0]
    n_traj = data.n_trajectories
    if n_traj >= 5:
        n_val = min(max(1, round(fraction * n_traj)), n_traj - 1)
        val = np.isin(data.trajectory, rng.choice(n_traj, n_val, replace=False))
    else:
        starts = np.flatnonzero(data.episode_starts)
        lengths = np.diff(np.append(starts, m))
        position = everything - np.repeat(starts, lengths)
        keep = np.repeat(np.ceil(lengths * (1.0 - fraction)).astype(np.int64), lengths)
        val = position >= keep
    if val.all() or not val.any():
        val = np.zeros(m, dtype=bool)
        val[-max(1, round(fraction * m)) :] = True
    return everything[~val], everything[val]


class Sampler:
    """Minibatches of a :class:`BCData` for an adapter (sequences for recurrent policies).

    :param adapter: the model's adapter.
    :param data: the expert data.
    :param batch_size: transitions per minibatch.
    :param sequence_length: steps per sequence (recurrent policies only).
    """

    def __init__(self, adapter: PolicyAdapter, data: BCData, batch_size: int, sequence_length: int) -> None:
        self.adapter = adapter
        self.data = data
        self.batch_size = batch_size
        self.sequence_length = sequence_length
        self.targets = adapter.target_actions(data.actions)
        self.returns: th.Tensor | None = None
        self.tails: th.Tensor | None = None
        self.end_values = th.zeros(data.n_trajectories, device=adapter.device)
        self.trajectory = th.as_tensor(data.trajectory, device=adapter.device)
        model = adapter.model
        self.normalizer = model.get_vec_normalize_env() if hasattr(model, "get_vec_normalize_env") else None

    def observations(self, obs: Any) -> Any:
        """Raw demo observations as the policy sees them (``VecNormalize`` statistics of now)."""
        return obs if self.normalizer is None else self.normalizer.normalize_obs(obs)

    def units(self, indices: np.ndarray) -> np.ndarray:
        """Transitions (``(n,)``), or padded sequences (``(n_seq, L)``, -1 = padding) for recurrent policies."""
        if not self.adapter.recurrent:
            return indices
        if len(indices) == 0:
            return np.zeros((0, self.sequence_length), dtype=np.int64)
        breaks = np.flatnonzero(
            (np.diff(indices) != 1)
            | (self.data.trajectory[indices[1:]] != self.data.trajectory[indices[:-1]])
        )
        sequences = []
        for run in np.split(indices, breaks + 1):
            for start in range(0, len(run), self.sequence_length):
                chunk = run[start : start + self.sequence_length]
                padded = np.full(self.sequence_length, -1, dtype=np.int64)
                padded[: len(chunk)] = chunk
                sequences.append(padded)
        return np.stack(sequences)

    def minibatches(
        self, indices: np.ndarray, rng: np.random.Generator | None
    ) -> Iterator[tuple[Batch, np.ndarray]]:
        """``(batch, rows)`` over ``indices``, shuffled with ``rng`` (in order when None)."""
        units = self.units(indices)
        order = np.arange(len(units)) if rng is None else rng.permutation(len(units))
        per_batch = (
            max(1, self.batch_size // self.sequence_length) if self.adapter.recurrent else self.batch_size
        )
        for start in range(0, len(units), per_batch):
            rows = units[order[start : start + per_batch]]
            yield self.make(rows), rows.reshape(-1)

    def make(self, rows: np.ndarray) -> Batch:
        flat = rows.reshape(-1)
        valid = flat >= 0
        safe = np.where(valid, flat, 0)
        masks = None if self.data.action_masks is None else self.data.action_masks[safe]
        starts = None
        if self.adapter.recurrent:
            starts = np.zeros(rows.shape, dtype=np.float32)
            starts[:, 0] = 1.0
            starts = starts.reshape(-1)
        return self.adapter.batch(
            self.observations(take(self.data.observations, safe)),
            self.targets[safe],
            masks=masks,
            valid=valid.astype(np.float32),
            episode_starts=starts,
            n_seq=len(rows) if self.adapter.recurrent else 0,
        )

    def update_end_values(self) -> None:
        """Recompute the critic's value of each non-terminal trajectory's bootstrap observation."""
        data = self.data
        open_ends = np.flatnonzero(~data.end_terminal)
        values = th.zeros(data.n_trajectories, device=self.adapter.device)
        if len(open_ends):
            if data.end_observations is not None:
                end_obs = take(data.end_observations, open_ends)
            else:  # no next observation known: the last transition's own observation stands in
                last = np.flatnonzero(np.append(data.trajectory[1:] != data.trajectory[:-1], True))
                end_obs = take(data.observations, last[open_ends])
            for start in range(0, len(open_ends), 4096):
                chunk = take(end_obs, slice(start, start + 4096))
                values[open_ends[start : start + 4096]] = self.adapter.end_values(
                    self.observations(chunk)
                ).reshape(-1)
        self.end_values = values

    def value_loss(self, batch: Batch, rows: np.ndarray) -> th.Tensor:
        assert self.returns is not None and self.tails is not None
        safe = th.as_tensor(np.where(rows >= 0, rows, 0), device=self.adapter.device)
        target = self.returns[safe] + self.tails[safe] * self.end_values[self.trajectory[safe]]
        errors = (self.adapter.values(batch) - target) ** 2  # (..., B)
        return weighted_mean(errors.reshape(-1, len(safe)).mean(dim=0), batch.valid)

    def evaluate(self, indices: np.ndarray, with_values: bool) -> dict[str, float]:
        """Mean validation losses over ``indices`` (no gradient)."""
        totals, weight = np.zeros(2), 0.0
        with th.no_grad():
            for batch, rows in self.minibatches(indices, rng=None):
                n = float(batch.valid.sum().item())
                totals[0] += weighted_mean(self.adapter.actor_loss(batch), batch.valid).item() * n
                if with_values:
                    totals[1] += self.value_loss(batch, rows).item() * n
                weight += n
        out = {"val_loss": totals[0] / max(weight, 1.0)}
        if with_values:
            out["val_value_loss"] = totals[1] / max(weight, 1.0)
        return out


def _logger(model: Any) -> tuple[Logger, bool]:
    """The model's logger, or a temporary one (stdout when ``verbose >= 1``) before ``learn()``."""
    existing = getattr(model, "_logger", None)
    if existing is not None:
        return existing, False
    formats = [HumanOutputFormat(sys.stdout)] if getattr(model, "verbose", 0) >= 1 else []
    return Logger(folder=None, output_formats=formats), True


def _progress(epochs: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=epochs, desc="behavioral cloning", unit="epoch")
