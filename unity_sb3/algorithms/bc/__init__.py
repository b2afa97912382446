"""Behavioral cloning from Unity ``.demo`` files (or arrays) for SB3 models.

- :func:`pretrain_bc`: supervised pretraining of a model's actor (PPO, A2C, MaskablePPO,
  RecurrentPPO, SAC, TD3), with a validation split and an optional critic warm-up;
- :func:`make_bc_module` / :class:`BehavioralCloning`: ML-Agents' ``behavioral_cloning`` term
  inside the project's PPO and SAC (``unity_sb3.PPO(..., behavioral_cloning={...})``);
- :func:`bc_data`: demonstrations converted to a model's observation and action spaces.
"""

from __future__ import annotations

from unity_sb3.algorithms.bc.adapters import make_adapter
from unity_sb3.algorithms.bc.data import BCData, bc_data, find_behavior_spaces
from unity_sb3.algorithms.bc.online import BC_DEFAULTS, BehavioralCloning, make_bc_module
from unity_sb3.algorithms.bc.pretrain import pretrain_bc

__all__ = [
    "BC_DEFAULTS",
    "BCData",
    "BehavioralCloning",
    "bc_data",
    "find_behavior_spaces",
    "make_adapter",
    "make_bc_module",
    "pretrain_bc",
]
