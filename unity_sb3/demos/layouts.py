"""Demonstrations' observations and actions in the two layouts they are read in, and arrays brought in.

A :class:`~unity_sb3.demos.dataset.Demonstration` hands out its records in Unity's layout
(:class:`UnityLayout`: one array per sensor, continuous and discrete actions apart) or in an
observation space's (:class:`SpaceLayout`, through :class:`~unity_sb3.spaces.BehaviorSpaces`);
:func:`layout_converter` picks one. The functions below bring arrays from either layout (or from
a policy's channel order) into Unity's, checking their shapes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from mlagents_envs.base_env import ActionSpec, BehaviorSpec

__all__ = [
    "Layout",
    "SpaceLayout",
    "UnityLayout",
    "as_rows",
    "continues",
    "layout_converter",
    "unity_actions",
    "unity_observations",
]

Layout = Literal["auto", "unity", "space"]


class UnityLayout:
    """Observations and actions as Unity arrays."""

    def __init__(self, spec: BehaviorSpec) -> None:
        self.spec = spec

    def obs(self, obs_list: list[np.ndarray]) -> Any:
        return obs_list[0] if len(obs_list) == 1 else obs_list

    def acts(self, continuous: np.ndarray, discrete: np.ndarray) -> Any:
        a = self.spec.action_spec
        if a.continuous_size and a.discrete_size:
            return {"continuous": continuous, "discrete": discrete}
        return discrete if a.discrete_size else continuous


class SpaceLayout:
    """Observations and actions through ``unity_sb3.spaces.BehaviorSpaces``."""

    def __init__(self, spaces: Any) -> None:
        self.spaces = spaces
        self._obs = getattr(spaces, "obs_to_space", None) or spaces.observations
        self._acts = getattr(spaces, "actions_from_unity", None) or spaces.from_unity_actions

    def obs(self, obs_list: list[np.ndarray]) -> Any:
        return self._obs(obs_list)

    def acts(self, continuous: np.ndarray, discrete: np.ndarray) -> Any:
        return self._acts(continuous, discrete)


def _behavior_spaces_class() -> type | None:
    try:
        from unity_sb3.spaces import BehaviorSpaces
    except ModuleNotFoundError as exc:  # the module is not there yet; any other error surfaces
        if exc.name not in ("unity_sb3.spaces", "unity_sb3"):
            raise
        return None
    return BehaviorSpaces


def layout_converter(spec: BehaviorSpec, layout: Layout, spaces: Any) -> UnityLayout | SpaceLayout:
    if layout not in ("auto", "unity", "space"):
        raise ValueError(f"layout must be 'auto', 'unity' or 'space', got {layout!r}")
    if spaces is not None:
        if layout == "unity":
            raise ValueError("spaces= is for layout 'space' (or 'auto'); drop it or the layout='unity'")
        return SpaceLayout(spaces)
    if layout == "unity":
        return UnityLayout(spec)
    cls = _behavior_spaces_class()
    if cls is None:
        if layout == "space":
            raise ImportError("layout='space' needs unity_sb3.spaces.BehaviorSpaces, which is not available")
        return UnityLayout(spec)
    return SpaceLayout(cls(spec))


def as_rows(value: Any, shape: tuple[int, ...], dtype: Any, name: str) -> np.ndarray:
    if value is None:
        return np.zeros(shape, dtype=dtype)
    array = np.asarray(value)
    if array.shape != shape:
        if array.size == math.prod(shape) and array.shape[:1] == shape[:1]:
            array = array.reshape(shape)
        else:
            raise ValueError(f"{name} has shape {array.shape}, expected {shape}")
    return np.ascontiguousarray(array, dtype=dtype)


def unity_observations(obs: Any, spec: BehaviorSpec, name: str) -> list[np.ndarray]:
    """Observations in Unity's layout from Unity or observation-space layout."""
    specs = spec.observation_specs
    if isinstance(obs, Mapping):
        keys = _space_keys(spec)
        if set(keys) <= set(obs):
            items = [obs[k] for k in keys]
        elif len(obs) == len(specs):
            items = list(obs.values())
        else:
            raise ValueError(f"{name} is a dict with keys {sorted(obs)}; expected {keys}")
    elif isinstance(obs, (list, tuple)):
        items = list(obs)
    else:
        items = [obs]
    if len(items) != len(specs):
        raise ValueError(f"{name} has {len(items)} observation arrays, the spec has {len(specs)}")
    out = []
    for i, (item, o_spec) in enumerate(zip(items, specs)):
        array = np.asarray(item)
        shape = tuple(o_spec.shape)
        if array.shape[1:] != shape:
            if len(shape) == 3 and array.ndim == 4 and array.shape[1:] == (shape[2], shape[0], shape[1]):
                array = array.transpose(0, 2, 3, 1)  # channel-first batch for an HWC spec
            elif len(shape) == 3 and array.ndim == 4 and array.shape[1:] == (shape[1], shape[2], shape[0]):
                array = array.transpose(0, 3, 1, 2)  # channel-last batch for a CHW spec
            elif array.ndim >= 1 and array.size == len(array) * math.prod(shape):
                array = array.reshape((len(array), *shape))
            else:
                raise ValueError(f"{name}[{i}] has shape {array.shape}; expected (M, *{shape})")
        if array.dtype == np.uint8:
            array = array.astype(np.float32) / np.float32(255.0)
        out.append(np.ascontiguousarray(array, dtype=np.float32))
    return out


def _space_keys(spec: BehaviorSpec) -> list[str]:
    try:
        from unity_sb3.spaces import observation_keys

        return list(observation_keys(spec.observation_specs))
    except ImportError:
        return [s.name or f"obs_{i}" for i, s in enumerate(spec.observation_specs)]


def unity_actions(acts: Any, action_spec: ActionSpec, m: int) -> tuple[np.ndarray, np.ndarray]:
    c, b = action_spec.continuous_size, action_spec.discrete_size
    if isinstance(acts, Mapping):
        cont, disc = acts.get("continuous"), acts.get("discrete")
    elif isinstance(acts, tuple) and len(acts) == 2:
        cont, disc = acts
    elif c and b:
        raise ValueError(
            "hybrid actions need a dict {'continuous', 'discrete'} or a tuple (continuous, discrete)"
        )
    elif c:
        cont, disc = acts, None
    else:
        cont, disc = None, acts
    cont = as_rows(cont, (m, c), np.float32, "continuous actions") if c else np.zeros((m, 0), np.float32)
    disc = as_rows(disc, (m, b), np.int32, "discrete actions") if b else np.zeros((m, 0), np.int32)
    return cont, disc


def continues(i: int, obs_list: list[np.ndarray], next_list: list[np.ndarray], dones: np.ndarray) -> bool:
    """Whether transition ``i + 1`` continues transition ``i``'s episode."""
    if dones[i] or i + 1 >= len(dones):
        return False
    return all(np.array_equal(n[i], o[i + 1]) for n, o in zip(next_list, obs_list))
