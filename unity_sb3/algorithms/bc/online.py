"""A behavioral-cloning term during RL, like ML-Agents' ``behavioral_cloning`` trainer setting.

``unity_sb3.PPO(..., behavioral_cloning={...})`` and ``unity_sb3.SAC(...)`` build a
:class:`BehavioralCloning` through :func:`make_bc_module` (the hook in
:mod:`unity_sb3.algorithms.mixin`). As in ML-Agents (``components/bc/module.py``), it has its
own Adam optimizer over the actor's parameters and runs its own minibatches of demo data after
each policy update: once per PPO update, once per SAC gradient step (ML-Agents' SAC trainer calls
``bc_module.update()`` once per SAC update round). Its learning rate is ``strength`` times the
algorithm's *initial* learning rate (``lr_schedule(1)``, ML-Agents' ``policy_learning_rate``),
annealed linearly to zero over
``steps`` environment steps by BC's own schedule; the algorithm's schedule does not apply to it
(a translated YAML with a linear ``learning_rate_schedule`` would otherwise decay BC twice).

Settings (ML-Agents' ``BehavioralCloningSettings`` names and defaults, plus two of ours):

- ``demo_path``: a ``.demo`` file, a directory of them, or a list;
- ``demonstrations``: (ours) the data itself instead of a path: a ``Demonstration`` or arrays
  in the model's spaces (anything :func:`~unity_sb3.algorithms.bc.data.bc_data` takes);
- ``strength`` (1.0): BC learning rate = ``strength`` * the algorithm's initial learning rate;
- ``steps`` (0): anneal ``strength`` linearly to 0 over this many environment steps; 0 = constant;
- ``batch_size`` (None): demo transitions per minibatch; default: the algorithm's ``batch_size``;
- ``num_epoch`` (None): passes per update; default 3 for PPO and SAC alike (ML-Agents'
  ``default_num_epoch``; it does not follow the trainer's ``num_epoch``);
- ``samples_per_update`` (0): demo transitions per pass, 0 = all of them;
- ``loss`` (ours, ``"auto"``): see :mod:`unity_sb3.algorithms.bc.adapters`.

Each update runs :func:`minibatches_per_update` minibatches, ML-Agents' ``BCModule.update`` rule:
per pass ``n // batch`` full minibatches of the shuffled demo (the remainder is skipped), capped at
``samples_per_update // batch`` when that is above 0. A ``samples_per_update`` below ``batch_size``
therefore means the whole demo, as in ML-Agents (a warning says so). With the defaults, SAC runs
``3 * (n // batch_size)`` BC minibatches per gradient step, as ML-Agents does; set
``samples_per_update`` to cap that on a large demo.

The settings and the optimizer state are saved and loaded with the model; the demo data is
not. A loaded model reads ``demo_path`` again (a missing file only warns at load time, and is
an error at the next BC update while the strength is above 0). To point a loaded model at the
demo's new location, pass ``custom_objects={"behavioral_cloning": {..., "demo_path": new}}`` to
``load``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch as th

from unity_sb3 import validation
from unity_sb3.algorithms.bc.adapters import LOSS_KINDS, make_adapter, reached_parameters
from unity_sb3.algorithms.bc.data import BCData, bc_data
from unity_sb3.algorithms.bc.pretrain import Sampler, weighted_mean
from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError, check_keys

__all__ = ["BC_DEFAULTS", "BehavioralCloning", "make_bc_module", "minibatches_per_update"]

BC_DEFAULTS: dict[str, Any] = {
    "demo_path": None,
    "demonstrations": None,
    "strength": 1.0,
    "steps": 0,
    "batch_size": None,
    "num_epoch": None,
    "samples_per_update": 0,
    "loss": "auto",
}
DEFAULT_NUM_EPOCH = 3  # ML-Agents' ``default_num_epoch`` for every trainer (``torch_optimizer.py``)
_MIN_LEARNING_RATE = 1e-10  # ML-Agents stops updating below this


def minibatches_per_update(
    n_experiences: int, batch_size: int, num_epoch: int, samples_per_update: int, sequence_length: int = 1
) -> int:
    """How many BC minibatches one update runs: ML-Agents' ``BCModule.update`` rule.

    A minibatch holds ``max(min(batch_size, n) // L, 1)`` sequences of ``L`` steps (one step each
    without memory). A pass takes every full minibatch of the shuffled demo, at most
    ``samples_per_update // <sequences per minibatch>`` of them when that is above 0 (so a
    ``samples_per_update`` below the minibatch means no cap), then ``// L`` of those.

    :param n_experiences: demo steps (with memory: sequences * ``sequence_length``, padding included).
    :param batch_size: demo steps per minibatch.
    :param num_epoch: passes per update.
    :param samples_per_update: cap on demo steps per pass; 0 = no cap.
    :param sequence_length: steps per sequence (1 without memory).
    :return: minibatches per update (0 for an empty demo).
    """
    n_sequences = max(min(batch_size, n_experiences) // sequence_length, 1)
    possible = n_experiences // n_sequences
    cap = samples_per_update // n_sequences
    per_pass = possible if cap == 0 else min(possible, cap)
    return num_epoch * (per_pass // sequence_length)


def parse_bc_settings(config: Mapping[str, Any], algorithm: Any) -> dict[str, Any]:
    """Validate a ``behavioral_cloning`` dict and fill in the defaults for ``algorithm``.

    :raises RewardSignalConfigError: unknown keys, bad values, or no demonstration given.
    """
    where = "behavioral_cloning"
    check_keys(config, tuple(BC_DEFAULTS), where)
    s = {**BC_DEFAULTS, **config}
    if s["demo_path"] is None and s["demonstrations"] is None:
        raise RewardSignalConfigError(
            f"{where} needs expert data: 'demo_path' (a .demo file or directory) or 'demonstrations' "
            "(a Demonstration, or a dict of arrays in the model's spaces)."
        )
    if s["demo_path"] is not None and s["demonstrations"] is not None:
        raise RewardSignalConfigError(f"{where}: give 'demo_path' or 'demonstrations', not both.")
    if s["demo_path"] is not None and not isinstance(s["demo_path"], (str, os.PathLike, Sequence)):
        raise RewardSignalConfigError(
            f"{where}.demo_path must be a path or a list of paths, got {s['demo_path']!r}."
        )
    s["strength"] = validation.number(
        s["strength"], f"{where}.strength", low=0, error=RewardSignalConfigError
    )
    defaults = {
        "batch_size": int(getattr(algorithm, "batch_size", 64) or 64),
        "num_epoch": DEFAULT_NUM_EPOCH,
        "samples_per_update": 0,
    }
    for key, low in (("steps", 0), ("batch_size", 1), ("num_epoch", 1), ("samples_per_update", 0)):
        value = s[key] if s[key] is not None else defaults[key]
        if not validation.is_int(value) or value < low:
            raise RewardSignalConfigError(f"{where}.{key} must be an integer >= {low}, got {value!r}.")
        s[key] = int(value)
    if 0 < s["samples_per_update"] < s["batch_size"]:
        warnings.warn(
            f"{where}.samples_per_update={s['samples_per_update']} is below batch_size={s['batch_size']}: "
            "as in ML-Agents it caps nothing and every update passes over the whole demo. "
            "Set it to a multiple of batch_size to cap the minibatches per update.",
            stacklevel=2,
        )
    validation.choice(s["loss"], LOSS_KINDS, f"{where}.loss", RewardSignalConfigError)
    return s


class BehavioralCloning:
    """The BC term of one algorithm (see the module docstring).

    :param algorithm: the PPO/SAC instance; its policy must be built.
    :param config: the user's ``behavioral_cloning`` dict.
    """

    def __init__(self, algorithm: Any, config: Mapping[str, Any]) -> None:
        self.algorithm = algorithm
        self.settings = parse_bc_settings(config, algorithm)
        self.adapter = make_adapter(algorithm, self.settings["loss"])
        self.n_updates = 0
        self._sampler: Sampler | None = None
        self._per_pass = 0
        self._rng = np.random.default_rng(getattr(algorithm, "seed", None))
        params = reached_parameters(
            self.adapter.actor_loss(self._probe_batch()).mean(), self.adapter.actor_modules()
        )
        self.optimizer = th.optim.Adam(
            params, lr=self.base_learning_rate() * max(self.settings["strength"], 1e-12)
        )
        if getattr(algorithm, "num_timesteps", 0) == 0:
            self.data()  # a new model: fail now on a missing file or a wrong spec
        else:
            try:
                self.data()
            except FileNotFoundError as error:  # a loaded model: the demo may be needed only later
                warnings.warn(
                    f"behavioral_cloning: {error}; it is needed at the next BC update", stacklevel=2
                )

    def _probe_batch(self) -> Any:
        """Two sampled observations/actions: to find which parameters the BC loss reaches."""
        algo = self.algorithm
        samples = [algo.observation_space.sample() for _ in range(2)]
        if isinstance(samples[0], dict):
            obs: Any = {k: np.stack([s[k] for s in samples]) for k in samples[0]}
        else:
            obs = np.stack(samples)
        actions = self.adapter.target_actions(np.stack([algo.action_space.sample() for _ in range(2)]))
        starts = np.array([1.0, 0.0], dtype=np.float32) if self.adapter.recurrent else None
        return self.adapter.batch(obs, actions, episode_starts=starts, n_seq=1)

    def data(self) -> BCData:
        """The demo data in the model's spaces (read on first use)."""
        if self._sampler is None:
            source = self.settings["demonstrations"]
            if source is None:
                source = self.settings["demo_path"]
            data = bc_data(self.algorithm, source)
            self._sampler = Sampler(
                self.adapter,
                data,
                self.settings["batch_size"],
                sequence_length=getattr(self.algorithm, "sequence_length", 16),
            )
            self._per_pass = self._minibatches_per_pass(self._sampler)
        return self._sampler.data

    def base_learning_rate(self) -> float:
        """The algorithm's initial learning rate (its schedule at progress remaining 1)."""
        return float(self.algorithm.lr_schedule(1.0))

    def current_strength(self) -> float:
        """``strength``, linearly annealed to 0 over ``steps`` environment steps (when > 0)."""
        strength, steps = self.settings["strength"], self.settings["steps"]
        if steps > 0:
            strength *= max(0.0, 1.0 - getattr(self.algorithm, "num_timesteps", 0) / steps)
        return strength

    def update(self) -> dict[str, float]:
        """One BC update: ``num_epoch`` passes over (a sample of) the demo data.

        :return: ``loss`` (mean over minibatches), ``strength`` and ``learning_rate`` now.
        """
        strength = self.current_strength()
        learning_rate = self.base_learning_rate() * strength
        if learning_rate <= _MIN_LEARNING_RATE:
            return {"strength": strength, "learning_rate": 0.0}
        self.data()
        sampler = self._sampler
        assert sampler is not None
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        everything = np.arange(len(sampler.data))
        per_pass = self._per_pass
        losses = []
        self.algorithm.policy.set_training_mode(True)
        for _ in range(self.settings["num_epoch"]):
            for k, (batch, _rows) in enumerate(sampler.minibatches(everything, self._rng)):
                if k >= per_pass:
                    break
                loss = weighted_mean(self.adapter.actor_loss(batch), batch.valid)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                losses.append(loss.item())
        self.n_updates += 1
        loss_mean = float(np.mean(losses)) if losses else 0.0
        return {"loss": loss_mean, "strength": strength, "learning_rate": learning_rate}

    def _minibatches_per_pass(self, sampler: Sampler) -> int:
        """Minibatches each of the ``num_epoch`` passes runs (:func:`minibatches_per_update`, one pass)."""
        length = sampler.sequence_length if self.adapter.recurrent else 1
        n_experiences = len(sampler.units(np.arange(len(sampler.data)))) * length
        return minibatches_per_update(
            n_experiences, self.settings["batch_size"], 1, self.settings["samples_per_update"], length
        )

    # --- saved with the model (``_get_torch_save_params`` of the project's PPO/SAC)
    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "n_updates": self.n_updates}

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        if strict and set(state) != {"optimizer", "n_updates"}:
            raise KeyError(
                f"behavioral_cloning state has keys {sorted(state)}, expected optimizer and n_updates"
            )
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.n_updates = int(state.get("n_updates", 0))


def make_bc_module(algorithm: Any, settings: dict[str, Any]) -> BehavioralCloning:
    """The hook's factory (see :func:`unity_sb3.algorithms.mixin.make_bc_module`)."""
    return BehavioralCloning(algorithm, settings)
