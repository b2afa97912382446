"""Algorithm names as the command line and RL Zoo spell them -> algorithm classes.

Imports are lazy: naming ``tqc`` does not import ``poca`` and vice versa.
"""

from __future__ import annotations

import importlib

from stable_baselines3.common.base_class import BaseAlgorithm

from unity_sb3.validation import close_matches

# name -> "module:attribute"; the project's PPO/SAC are SB3's plus reward signals and BC.
ALGORITHMS: dict[str, str] = {
    "ppo": "unity_sb3.algorithms.ppo.ppo:PPO",
    "sac": "unity_sb3.algorithms.sac.sac:SAC",
    "a2c": "stable_baselines3:A2C",
    "td3": "stable_baselines3:TD3",
    "ddpg": "stable_baselines3:DDPG",
    "dqn": "stable_baselines3:DQN",
    "maskable_ppo": "sb3_contrib:MaskablePPO",
    "recurrent_ppo": "sb3_contrib:RecurrentPPO",
    "ppo_memory": "unity_sb3.algorithms.recurrent_ppo:RecurrentPPO",
    "tqc": "sb3_contrib:TQC",
    "trpo": "sb3_contrib:TRPO",
    "poca": "unity_sb3.algorithms.poca:POCA",
    "poca_memory": "unity_sb3.algorithms.poca:RecurrentPOCA",
}
# used when the project's own class is not importable (e.g. in a partial checkout)
_FALLBACKS = {"ppo": "stable_baselines3:PPO", "sac": "stable_baselines3:SAC"}


def algorithm_class(name: str) -> type[BaseAlgorithm]:
    """Return the algorithm class registered under ``name`` (case-insensitive).

    :raises ValueError: for an unknown name, with the closest known names.
    """
    key = name.lower().replace("-", "_")
    if key not in ALGORITHMS:
        close = close_matches(key, ALGORITHMS, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"Unknown algorithm {name!r}.{hint} Known: {', '.join(sorted(ALGORITHMS))}.")
    try:
        return _load(ALGORITHMS[key])
    except ImportError:
        if key not in _FALLBACKS:
            raise
        return _load(_FALLBACKS[key])


def _load(target: str) -> type[BaseAlgorithm]:
    module, attribute = target.split(":")
    return getattr(importlib.import_module(module), attribute)
