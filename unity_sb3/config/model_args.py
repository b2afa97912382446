"""Saved (plain-data) hyperparameters -> constructor arguments for an environment."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from unity_sb3.config.mlagents_schema import SCHEDULE_KEYS, MLAgentsConfigError
from unity_sb3.validation import did_you_mean

__all__: list[str] = []


# --------------------------------------------------------------------------------------------
# Resolution once the environment exists
# --------------------------------------------------------------------------------------------
def resolve_schedule(value: Any) -> Any:
    """``"lin_<start>"`` (to 0, RL Zoo) or ``"lin_<start>_<end>"`` -> an SB3 schedule; other values as they are."""
    if not (isinstance(value, str) and value.startswith("lin_")):
        return value
    from stable_baselines3.common.utils import FloatSchedule, LinearSchedule

    parts = value.split("_")[1:]
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 2):
        raise MLAgentsConfigError(f"bad schedule {value!r}: write lin_<start> or lin_<start>_<end>.")
    start, end = numbers[0], numbers[1] if len(numbers) == 2 else 0.0
    return FloatSchedule(LinearSchedule(start, end, 1.0))


# algorithms whose policies carry an LSTM: "auto" picks their Lstm policy names
_RECURRENT_ALGOS = ("recurrent_ppo", "ppo_memory")

# ``ent_coef`` may be a schedule for these (the project's PPO and POCA); SB3's others take a number
_ENT_COEF_SCHEDULE_ALGOS = ("poca_memory", "ppo", "ppo_memory", "poca")


def _auto_policy(observation_space: Any, algo: str = "", memory: bool = False) -> str:
    """SB3's policy name for ``observation_space``: Mlp, Cnn or MultiInput (``...LstmPolicy`` for
    recurrent algorithms such as sb3-contrib's RecurrentPPO, and with ``memory``: ``policy_kwargs``
    holding ``memory_size``, as the project's SAC takes it)."""
    from gymnasium import spaces
    from stable_baselines3.common.preprocessing import is_image_space

    if isinstance(observation_space, spaces.Dict):
        name = "MultiInputPolicy"
    elif is_image_space(observation_space):
        name = "CnnPolicy"
    else:
        name = "MlpPolicy"
    if memory or algo.lower().replace("-", "_") in _RECURRENT_ALGOS:
        name = name.replace("Policy", "LstmPolicy")
    return name


def _entity_extractor_by_default(policy: Any, kwargs: dict[str, Any], observation_space: Any) -> None:
    """A ``MultiInput...`` policy over a ``Dict`` with a variable-length (rank-2, ``BufferSensor``)
    observation gets :class:`~unity_sb3.networks.extractors.UnityMultiInputExtractor` (ML-Agents'
    entity attention) unless the arguments name a features extractor: SB3's ``CombinedExtractor``
    would pad and flatten the entities without saying so."""
    from gymnasium import spaces

    if not (isinstance(policy, str) and policy.startswith("MultiInput")):
        return
    if not isinstance(observation_space, spaces.Dict):
        return
    if not any(isinstance(s, spaces.Box) and len(s.shape) == 2 for s in observation_space.spaces.values()):
        return
    policy_kwargs = dict(kwargs.get("policy_kwargs") or {})
    if "features_extractor_class" in policy_kwargs:
        return
    from unity_sb3.networks.extractors import UnityMultiInputExtractor

    policy_kwargs["features_extractor_class"] = UnityMultiInputExtractor
    kwargs["policy_kwargs"] = policy_kwargs
    print("variable-length observation: UnityMultiInputExtractor (ML-Agents' entity attention) encodes it")


def prepare_model_args(
    algo: str, policy: Any, hyperparams: Mapping[str, Any], env: Any
) -> tuple[Any, dict[str, Any]]:
    """Turn saved (plain-data) hyperparameters into constructor arguments for ``env``.

    Resolves ``mlagents_per_slot`` against ``env.num_envs`` (PPO/POCA/RecurrentPPO
    ``buffer_size`` -> ``n_steps``; SAC ``steps_per_update`` -> ``train_freq`` and
    ``gradient_steps``), linear schedule strings, ``policy_kwargs`` strings,
    ``policy="auto"`` (``...LstmPolicy`` for RecurrentPPO), ML-Agents' entity attention for a
    ``MultiInput`` policy over a variable-length observation, and ``mlagents_network`` (ML-Agents'
    goal conditioning against the env's goal-signal observations, see
    :func:`unity_sb3.config.mlagents_network.resolve_mlagents_network`).

    :param algo: algorithm name.
    :param policy: policy name or class; ``"auto"`` picks from the observation space.
    :param hyperparams: constructor arguments as saved.
    :param env: the (VecEnv) environment the model will train on.
    :return: ``(policy, kwargs)``.
    """
    kwargs = dict(hyperparams)
    n_slots = int(getattr(env, "num_envs", 1))
    per_slot = kwargs.pop("mlagents_per_slot", None) or {}
    if "buffer_size" in per_slot:
        buffer = int(per_slot["buffer_size"])
        kwargs["n_steps"] = max(1, math.ceil(buffer / n_slots))
        rollout = kwargs["n_steps"] * n_slots
        if int(kwargs.get("batch_size", 1)) > rollout:
            kwargs["batch_size"] = rollout
        print(
            f"buffer_size {buffer} with {n_slots} slots -> n_steps={kwargs['n_steps']} ({rollout} agent steps per update)"
        )
    if "steps_per_update" in per_slot:
        per_update = float(per_slot["steps_per_update"])
        if per_update <= n_slots:
            kwargs["train_freq"], kwargs["gradient_steps"] = 1, max(1, round(n_slots / per_update))
        else:
            kwargs["train_freq"], kwargs["gradient_steps"] = max(1, round(per_update / n_slots)), 1
        print(
            f"steps_per_update {per_update:g} with {n_slots} slots -> train_freq={kwargs['train_freq']}, "
            f"gradient_steps={kwargs['gradient_steps']}"
        )
    network = kwargs.pop("mlagents_network", None)
    for key in SCHEDULE_KEYS:
        if key in kwargs:
            if (
                key == "ent_coef"
                and isinstance(kwargs[key], str)
                and kwargs[key].startswith("lin_")
                and algo not in _ENT_COEF_SCHEDULE_ALGOS
            ):
                raise MLAgentsConfigError(
                    f"{algo}: ent_coef cannot be a schedule ({kwargs[key]!r}); give a number."
                )
            kwargs[key] = resolve_schedule(kwargs[key])
    if isinstance(kwargs.get("policy_kwargs"), str):
        kwargs["policy_kwargs"] = parse_policy_kwargs(kwargs["policy_kwargs"])
    if policy == "auto":
        memory = "memory_size" in (kwargs.get("policy_kwargs") or {})
        policy = _auto_policy(env.observation_space, algo, memory)
    _entity_extractor_by_default(policy, kwargs, env.observation_space)
    if network is not None:
        from unity_sb3.config.mlagents_network import resolve_mlagents_network

        resolve_mlagents_network(network, kwargs, env)
    _check_hyperparameter_names(algo, kwargs)
    return policy, kwargs


def _check_hyperparameter_names(algo: str, kwargs: Mapping[str, Any]) -> None:
    """A misspelt hyperparameter gets its closest valid name (instead of ``__init__``'s TypeError)."""
    import inspect

    from unity_sb3.algorithms.registry import algorithm_class

    try:
        cls = algorithm_class(algo)
    except (ValueError, ImportError):
        return
    names: set[str] = set()
    for klass in cls.__mro__:  # subclasses hand **kwargs on to their parents
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names.update(p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    else:
        return  # takes any keyword: nothing to check against
    names = {n for n in names if not n.startswith("_")} - {"self", "policy", "env"}
    for key in kwargs:
        if key not in names:
            raise ValueError(
                f"Unknown hyperparameter {key!r} for {algo} ({cls.__name__}).{did_you_mean(key, sorted(names))} "
                f"Valid ones: {', '.join(sorted(names))}."
            )


def parse_policy_kwargs(value: str | dict | None) -> dict[str, Any]:
    """RL Zoo writes ``policy_kwargs`` as a Python expression string; accept that or a dict.

    The string sees ``dict``, ``list``, ``tuple``, ``nn`` (``torch.nn``) and this project's
    features extractors ``UnityMultiInputExtractor`` and ``UnityCnn`` (:mod:`unity_sb3.networks.extractors`).
    """
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    import torch.nn as nn

    from unity_sb3.networks.extractors import UnityCnn, UnityMultiInputExtractor

    namespace = {
        "dict": dict,
        "nn": nn,
        "list": list,
        "tuple": tuple,
        "UnityMultiInputExtractor": UnityMultiInputExtractor,
        "UnityCnn": UnityCnn,
        "__builtins__": {},
    }
    result = eval(value, namespace)  # trusted: comes from our own or the user's YAML file
    if not isinstance(result, dict):
        raise ValueError(f"policy_kwargs must evaluate to a dict, got {type(result).__name__}: {value!r}")
    return result
