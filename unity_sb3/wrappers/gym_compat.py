"""ML-Agents' ``UnityToGymWrapper`` on Gymnasium, for code written against it.

``mlagents_envs.envs.unity_gym_env.UnityToGymWrapper`` (ML-Agents 1.x; ``gym_unity`` before) needs the
old ``gym`` package. Code built on it changes one import::

    from unity_sb3.wrappers.gym_compat import UnityToGymWrapper  # was mlagents_envs.envs.unity_gym_env

    env = UnityToGymWrapper(UnityEnvironment("builds/Basic"), uint8_visual=True)

and keeps ML-Agents' arguments and observations: one agent of the scene's one behavior; a single
observation (the first visual one, else every vector observation concatenated) or, with
``allow_multiple_obs``, a ``Tuple`` of the visual observations followed by the vectors concatenated
(buffer sensors are left out, as there); images in the layout Unity's spec gives, float in [0, 1]
or ``uint8_visual`` (``255 * x`` truncated, as ML-Agents converts); ``flatten_branched`` turns
several discrete branches into one ``Discrete`` over their combinations (in ``itertools.product``
order). What changes is Gymnasium's API: ``reset()`` returns ``(obs, info)`` and ``step()``
``(obs, reward, terminated, truncated, info)``, which is what Stable-Baselines3 2.x takes.
:class:`~unity_sb3.wrappers.gym_env.UnityGymEnv` does the work (masks, truncation, one agent of
several, hybrid actions); use it directly for what ML-Agents' wrapper did not offer.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from mlagents_envs.base_env import BaseEnv

from unity_sb3.spaces import is_visual
from unity_sb3.unity.compat import channel_axis
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers.gym_env import UnityGymEnv

__all__ = ["UnityToGymWrapper"]


class UnityToGymWrapper(gym.Wrapper):
    """ML-Agents' gym wrapper: its arguments and observations, Gymnasium's API (see the module docstring).

    :param unity_env: the ``BaseEnv`` (closed with the wrapper).
    :param uint8_visual: visual observations as uint8 in [0, 255] instead of float in [0, 1].
    :param flatten_branched: several discrete branches as one ``Discrete`` over their combinations.
    :param allow_multiple_obs: every observation, as a ``Tuple`` (visual ones first, then the vectors
        concatenated), instead of the first visual one or the vectors.
    :param action_space_seed: seed of ``action_space.sample()``.
    """

    def __init__(
        self,
        unity_env: BaseEnv,
        uint8_visual: bool = False,
        flatten_branched: bool = False,
        allow_multiple_obs: bool = False,
        action_space_seed: int | None = None,
    ) -> None:
        inner = UnityGymEnv(unity_env, visual="float", hybrid="dict")
        super().__init__(inner)
        behavior = inner.spaces
        if behavior.continuous_size and behavior.branches:
            inner.close()
            raise UnityConfigurationError(
                "ML-Agents' gym wrapper has no hybrid (continuous + discrete) actions; use "
                "unity_sb3.UnityGymEnv(env, hybrid='dict' | 'tuple' | 'box') for this behavior"
            )
        specs = behavior.obs_specs
        self._keys = behavior.keys
        self._single = len(specs) == 1  # UnityGymEnv gives the array itself, not a Dict
        self._visual = [i for i, spec in enumerate(specs) if is_visual(spec)]
        self._vectors = [i for i, spec in enumerate(specs) if len(spec.shape) == 1]
        if not self._visual and not self._vectors:
            inner.close()
            raise UnityConfigurationError("there are no visual or vector observations to give")
        self._hwc = {
            i: channel_axis(tuple(specs[i].shape), tuple(specs[i].dimension_property)) == 2
            for i in self._visual
        }
        if uint8_visual and not self._visual:
            warnings.warn("uint8_visual has no effect: the behavior has no visual observation", stacklevel=2)
        self.uint8_visual = uint8_visual and bool(self._visual)
        self._allow_multiple_obs = allow_multiple_obs
        if len(self._visual) + len(self._vectors) > 1 and not allow_multiple_obs:
            warnings.warn(
                "the behavior has several observations; only the first visual one (or the vectors, without "
                "one) is given. Pass allow_multiple_obs=True for all of them",
                stacklevel=2,
            )
        parts: list[spaces.Space] = []
        for i in self._visual:
            shape = tuple(int(d) for d in specs[i].shape)
            parts.append(
                spaces.Box(0, 255, shape, np.uint8)
                if self.uint8_visual
                else spaces.Box(0.0, 1.0, shape, np.float32)
            )
        if self._vectors:
            size = sum(int(specs[i].shape[0]) for i in self._vectors)
            parts.append(spaces.Box(-np.inf, np.inf, (size,), np.float32))
        self.observation_space = spaces.Tuple(parts) if allow_multiple_obs else parts[0]
        self._combinations: list[tuple[int, ...]] | None = None
        if flatten_branched and len(behavior.branches) > 1:
            self._combinations = list(itertools.product(*(range(b) for b in behavior.branches)))
            self.action_space = spaces.Discrete(len(self._combinations))
        elif flatten_branched and behavior.continuous_size:
            warnings.warn("flatten_branched has no effect: the actions are continuous", stacklevel=2)
        if action_space_seed is not None:
            self.action_space.seed(action_space_seed)
        self.visual_obs: np.ndarray | None = None

    def _observation(self, obs: Any) -> Any:
        """UnityGymEnv's observation (an array, or a Dict by sensor) in ML-Agents' wrapper's form."""
        by_sensor = (lambda i: obs) if self._single else (lambda i: obs[self._keys[i]])
        images = []
        for i in self._visual:
            image = by_sensor(i)  # channel-first float in [0, 1]
            if self._hwc[i]:
                image = np.moveaxis(image, 0, -1)
            images.append((255.0 * image).astype(np.uint8) if self.uint8_visual else image.astype(np.float32))
        self.visual_obs = images[0] if images else None
        vectors = [np.asarray(by_sensor(i), np.float32) for i in self._vectors]
        parts = images + ([np.concatenate(vectors)] if vectors else [])
        return tuple(parts) if self._allow_multiple_obs else parts[0]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        return self._observation(obs), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self._combinations is not None:
            action = np.asarray(self._combinations[int(action)])
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._observation(obs), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        """The latest visual observation, as ML-Agents' wrapper returns it (no new frame is drawn)."""
        return self.visual_obs
