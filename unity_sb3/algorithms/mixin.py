"""Pieces shared by the project's PPO and SAC: reward-signal configuration and the BC hook.

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
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from typing import Any

from unity_sb3.algorithms.reward_signals.settings import RewardSignalConfigError


def make_bc_module(algorithm: Any, config: Mapping[str, Any] | None) -> Any | None:
    """Build the behavioral-cloning term for ``algorithm`` from its ``behavioral_cloning`` config.

    The BC implementation lives in :mod:`unity_sb3.algorithms.bc`. Contract with it:
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
    try:
        bc = importlib.import_module("unity_sb3.algorithms.bc")
    except ModuleNotFoundError as error:
        if error.name != "unity_sb3.algorithms.bc":
            raise
        raise NotImplementedError(
            "behavioral_cloning=... needs unity_sb3.algorithms.bc, which this installation does not have. "
            "Pass behavioral_cloning=None, or use GAIL (reward_signals={'gail': {...}}) for imitation."
        ) from None
    factory = getattr(bc, "make_bc_module", None)
    if factory is None:
        raise NotImplementedError(
            "unity_sb3.algorithms.bc has no make_bc_module(algorithm, settings): the BC term during "
            "PPO/SAC training is not available in this version. Pass behavioral_cloning=None."
        )
    return factory(algorithm, dict(config))


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


class SavedComponentsMixin:
    """Saving and loading of the reward signals' and the BC module's state (PPO and SAC).

    Put it before the SB3 class (``class PPO(SavedComponentsMixin, stable_baselines3.PPO)``).
    The signals' networks and optimizers and the BC module's state go into the saved model; a
    model saved with them loads into one built without them (their state is dropped).
    """

    signals: Any
    _bc: Any

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
