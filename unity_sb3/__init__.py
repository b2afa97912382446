"""unity_sb3: Unity ML-Agents scenes under Gymnasium, PettingZoo and Stable-Baselines3.

Importing the package makes ``mlagents_envs`` importable on a modern protobuf (see
:mod:`unity_sb3.unity.compat`) and registers the embedded scenes as gymnasium ids
(``unity_sb3/Ball3D-v0``, ...). Everything else is imported lazily on first use, so
``import unity_sb3`` stays cheap (no torch import).
"""

from __future__ import annotations

import importlib
from typing import Any

from unity_sb3.unity import compat as _compat  # noqa: F401  (side effect: protobuf compat)
from unity_sb3.version import __version__

# public name -> module that defines it
_LAZY: dict[str, str] = {
    "open_unity": "unity_sb3.open",
    "UnityVecEnv": "unity_sb3.wrappers.vec_env",
    "UnityGymEnv": "unity_sb3.wrappers.gym_env",
    "UnityToGymWrapper": "unity_sb3.wrappers.gym_compat",
    "UnityParallelEnv": "unity_sb3.wrappers.pettingzoo_env",
    "UnityAECEnv": "unity_sb3.wrappers.pettingzoo_env",
    "load_demo": "unity_sb3.demos.reader",
    "Demonstration": "unity_sb3.demos.reader",
    "pretrain_bc": "unity_sb3.algorithms.bc",
    "PPO": "unity_sb3.algorithms.ppo.ppo",
    "RecurrentPPO": "unity_sb3.algorithms.recurrent_ppo",
    "SAC": "unity_sb3.algorithms.sac.sac",
    "POCA": "unity_sb3.algorithms.poca",
    "RecurrentPOCA": "unity_sb3.algorithms.poca",
    "to_onnx": "unity_sb3.export",
    "OnnxPolicy": "unity_sb3.export.onnx_policy",
    "RayUnityVecEnv": "unity_sb3.wrappers.ray_vec_env",
    "PettingZooVecEnv": "unity_sb3.wrappers.pettingzoo_vec_env",
    "UnityMultiInputExtractor": "unity_sb3.networks.extractors",
    "UnityCnn": "unity_sb3.networks.extractors",
    "LockstepUnity": "unity_sb3.wrappers.lockstep",
    "MultiBehaviorTrainer": "unity_sb3.multi_behavior",
    "SelfPlayCallback": "unity_sb3.callbacks.self_play",
    "self_play_callbacks": "unity_sb3.callbacks.self_play",
    "SelfPlaySettings": "unity_sb3.selfplay.settings",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'unity_sb3' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _register_gymnasium_ids() -> None:
    try:
        from unity_sb3.scenes.registration import register_gymnasium_ids
    except ImportError:  # scenes not built yet in this checkout
        return
    register_gymnasium_ids()


_register_gymnasium_ids()
