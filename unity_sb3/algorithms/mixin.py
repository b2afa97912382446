"""What the project's PPO and SAC share: their reward signals, their BC term, and saving both.

Reward signals are configured with the same dictionary an ML-Agents trainer YAML uses under
``reward_signals``, so a config can be carried over unchanged::

    {
        "extrinsic": {"strength": 1.0, "gamma": 0.99},
        "curiosity": {"strength": 0.02, "gamma": 0.99, "learning_rate": 3e-4,
                      "network_settings": {"hidden_units": 64}},
        "rnd": {"strength": 0.01},
        "gail": {"strength": 0.01, "demo_path": "Expert.demo", "use_actions": False, "use_vail": False},
    }

Unknown signal names or keys raise a :class:`RewardSignalConfigError` that suggests the
closest valid spelling. Missing keys take ML-Agents' defaults (``settings.py``), except that
``gamma`` defaults to the algorithm's own ``gamma`` argument (0.99 unless changed), so an SB3
user who sets ``gamma=0.95`` does not silently get 0.99 on the extrinsic head.

:class:`SignalsAndBCMixin` builds the signals and the BC term from those arguments, runs the BC
update, computes intrinsic rewards, and saves and loads the components' state with the model.
What each algorithm does with the signals (PPO's value heads, SAC's Q streams) stays in its class.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from torch import nn

from unity_sb3.algorithms import bc
from unity_sb3.algorithms.reward_signals import make_reward_signals
from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError, parse_reward_signals


def make_bc_module(algorithm: Any, config: Mapping[str, Any] | None) -> Any | None:
    """Build the behavioral-cloning term for ``algorithm`` from its ``behavioral_cloning`` config.

    The BC implementation is :func:`unity_sb3.algorithms.bc.make_bc_module`. Contract with it:
    ``bc.make_bc_module(algorithm, settings: dict) -> module`` where ``module.update() -> dict[str,
    float]`` runs one BC update (PPO calls it once after each policy update, SAC after each gradient
    step) and returns values to log under ``behavioral_cloning/<key>``. When the module has
    ``state_dict``/``load_state_dict`` it is saved and loaded with the model.

    :param algorithm: the PPO/SAC instance (its policy is built).
    :param config: the user's ``behavioral_cloning`` dict, or ``None``.
    :return: the module, or ``None`` when ``config`` is ``None``.
    """
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise RewardSignalConfigError(
            f"behavioral_cloning must be a dict like {{'demo_path': ..., 'strength': 0.5}}, got {config!r}."
        )
    return bc.make_bc_module(algorithm, dict(config))


def log_stats(logger: Any, prefix: str, stats: Mapping[str, list[float]]) -> None:
    """Record the mean of each list of values under ``prefix/<key>`` in an SB3 logger."""
    for key, values in stats.items():
        if len(values) > 0:
            logger.record(f"{prefix}/{key}", float(sum(values) / len(values)))


def drop_absent_components(algorithm: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Saved parameters minus those of components the loading model does not have.

    A model saved with behavioral cloning (``_bc``) or reward signals (``signals.*``) can be
    loaded with those switched off (``custom_objects={"behavioral_cloning": None}``); SB3
    would then call ``load_state_dict`` on ``None``. Their saved state is dropped, with a warning.

    :param algorithm: the model being loaded into.
    :param params: SB3's ``{name: state_dict}`` from the saved file.
    """
    kept = {}
    for name, state in params.items():
        owner = name.split(".")[0]
        component = getattr(algorithm, owner, None) if owner in ("_bc", "signals") else True
        if component is None or (owner == "signals" and not component):
            warnings.warn(
                f"The saved model has {owner.strip('_')} state but this model was built without it; "
                f"dropping '{name}'.",
                stacklevel=3,
            )
            continue
        kept[name] = state
    return kept


class SignalsAndBCMixin:
    """The reward signals and the BC term of PPO and SAC: building, using, saving and loading them.

    Put it before the SB3 class (``class PPO(SignalsAndBCMixin, stable_baselines3.PPO)``). The
    algorithm calls :meth:`_init_signals_and_bc` in ``__init__`` (before SB3's), then
    :meth:`_setup_signals` and :meth:`_setup_bc` in ``_setup_model``. The signals' networks and
    optimizers and the BC module's state go into the saved model; a model saved with them loads
    into one built without them (their state is dropped, with a warning).
    """

    reward_signals: dict | None
    behavioral_cloning: dict | None
    signals: nn.ModuleDict | None
    _bc: Any
    _heads: list[str]
    _signal_settings: dict[str, dict]

    def _init_signals_and_bc(self, reward_signals: dict | None, behavioral_cloning: dict | None) -> None:
        """Keep the user's settings; the components are built by ``_setup_model``."""
        self.reward_signals = reward_signals
        self.behavioral_cloning = behavioral_cloning
        self.signals = None
        self._bc = None
        self._heads = []

    def _setup_signals(self, config: dict | None) -> dict[str, dict] | None:
        """Parse ``config`` and build its intrinsic signals (``self.signals``, one head per entry).

        :param config: the ``reward_signals`` dict to use (an algorithm may put a default in).
        :return: the parsed settings in config order, or ``None``: no signals, plain SB3 training.
        """
        parsed = parse_reward_signals(config, default_gamma=self.gamma)  # type: ignore[attr-defined]
        if parsed is not None:
            self._signal_settings = parsed
            self._heads = list(parsed)
            self.signals = make_reward_signals(
                parsed,
                self.observation_space,  # type: ignore[attr-defined]
                self.action_space,  # type: ignore[attr-defined]
                self.device,  # type: ignore[attr-defined]
                model=self,
            )
        return parsed

    def _setup_bc(self) -> None:
        """Build the BC term from ``behavioral_cloning`` (after the policy and the signals)."""
        self._bc = make_bc_module(self, self.behavioral_cloning)

    def _update_bc(self) -> None:
        """One BC update, its values logged under ``behavioral_cloning/``."""
        if self._bc is None:
            return
        for key, value in (self._bc.update() or {}).items():
            self.logger.record(f"behavioral_cloning/{key}", float(value))  # type: ignore[attr-defined]

    def intrinsic_rewards(
        self, obs: Any, actions: Any, next_obs: Any, dones: Any = None
    ) -> dict[str, np.ndarray]:
        """``{signal: strength * reward}`` of each intrinsic signal for a batch of transitions.

        :param obs: ``(batch, *obs_shape)`` (dict for ``Dict`` spaces).
        :param actions: ``(batch, ...)`` actions.
        :param next_obs: ``(batch, *obs_shape)`` true next observations.
        :param dones: ``(batch,)`` episode ends (GAIL with ``use_actions``), optional.
        """
        if self.signals is None:
            return {}
        return {
            name: self._signal_settings[name]["strength"] * signal.reward(obs, actions, next_obs, dones)
            for name, signal in self.signals.items()
        }

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "signals", "_bc", "_signal_settings"]  # type: ignore[misc]

    def set_parameters(
        self,
        load_path_or_dict: str | dict[str, Any],
        exact_match: bool = True,
        device: str | Any = "auto",
    ) -> None:
        from stable_baselines3.common.save_util import load_from_zip_file

        if not isinstance(load_path_or_dict, dict):
            _, load_path_or_dict, _ = load_from_zip_file(load_path_or_dict, device=device, load_data=False)
        super().set_parameters(drop_absent_components(self, load_path_or_dict), exact_match, device)  # type: ignore[misc]

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts, others = super()._get_torch_save_params()  # type: ignore[misc]
        if self.signals is not None and len(self.signals) > 0:
            state_dicts = [*state_dicts, "signals", *(f"signals.{name}.optimizer" for name in self.signals)]
        if self._bc is not None and hasattr(self._bc, "state_dict"):
            state_dicts = [*state_dicts, "_bc"]
        return state_dicts, others
