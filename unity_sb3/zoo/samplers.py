"""Hyperparameter samplers for ``-optimize`` on Unity scenes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ON_POLICY = ("ppo", "maskable_ppo", "recurrent_ppo", "poca", "a2c")
OFF_POLICY = ("sac", "td3", "tqc")


def sample_unity_params(algo: str, trial: Any) -> dict[str, Any]:
    """Suggest hyperparameters for ``algo`` on a Unity scene (raw trial params, see :func:`convert_unity_params`).

    Unity scenes put many agents in one ``VecEnv``, so ``n_steps`` (per slot) is sampled small:
    12 agents x 128 steps is already ML-Agents' 3DBall buffer of 1536 agent steps.
    """
    params: dict[str, Any] = {
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 3e-3, log=True),
        "one_minus_gamma": trial.suggest_float("one_minus_gamma", 1e-3, 0.05, log=True),
        "net_arch": trial.suggest_categorical("net_arch", ["small", "medium", "large"]),
    }
    if algo in ON_POLICY:
        params["n_steps"] = trial.suggest_categorical("n_steps", [16, 32, 64, 128, 256])
        params["gae_lambda"] = trial.suggest_categorical("gae_lambda", [0.9, 0.95, 0.99])
        params["ent_coef"] = trial.suggest_float("ent_coef", 1e-5, 0.05, log=True)
        if algo != "a2c":
            params["batch_size"] = trial.suggest_categorical("batch_size", [64, 128, 256, 512])
            params["n_epochs"] = trial.suggest_categorical("n_epochs", [3, 5, 10])
            params["clip_range"] = trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3])
        if algo == "recurrent_ppo":
            params["lstm_hidden_size"] = trial.suggest_categorical("lstm_hidden_size", [32, 64, 128])
    elif algo in OFF_POLICY:
        params["batch_size"] = trial.suggest_categorical("batch_size", [64, 128, 256])
        params["buffer_size"] = trial.suggest_categorical("buffer_size", [10_000, 100_000, 1_000_000])
        params["learning_starts"] = trial.suggest_categorical("learning_starts", [0, 1000, 10_000])
        params["tau"] = trial.suggest_categorical("tau", [0.005, 0.01, 0.02])
        params["gradient_steps"] = trial.suggest_categorical("gradient_steps", [1, 2, 4])
    else:
        raise ValueError(
            f"No Unity hyperparameter sampler for {algo!r}; known: {', '.join(ON_POLICY + OFF_POLICY)}."
        )
    return convert_unity_params(params)


def convert_unity_params(params: dict[str, Any]) -> dict[str, Any]:
    """Raw trial params -> constructor arguments (also used to reload a trial from storage)."""
    out = dict(params)
    if "one_minus_gamma" in out:
        out["gamma"] = 1.0 - out.pop("one_minus_gamma")
    policy_kwargs = dict(out.get("policy_kwargs") or {})
    if "net_arch" in out:
        size = {"small": 64, "medium": 128, "large": 256}[out.pop("net_arch")]
        policy_kwargs["net_arch"] = [size, size]
    if "lstm_hidden_size" in out:
        policy_kwargs["lstm_hidden_size"] = out.pop("lstm_hidden_size")
    if policy_kwargs:
        out["policy_kwargs"] = policy_kwargs
    return out


def unity_sampler(algo: str) -> Callable[[Any, int, int, dict], dict[str, Any]]:
    """The sampler rl-zoo3's ``HYPERPARAMS_SAMPLER`` takes for ``algo``: :func:`sample_unity_params`
    behind rl-zoo3's signature ``(trial, n_actions, n_envs, additional_args)``."""

    def sample(trial: Any, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
        return sample_unity_params(algo, trial)

    return sample
