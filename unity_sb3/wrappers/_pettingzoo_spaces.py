"""What the agents of a :class:`~unity_sb3.wrappers.pettingzoo_env.UnityParallelEnv` look like:
their names, how many of them each behavior may name, and their observations with the action
mask (the rules are in that module's docstring).

A behavior's action mask has the structure ``action_space.sample(mask=...)`` accepts, 1 =
allowed, in one of three kinds: ``"discrete"`` (one ``int8`` vector for ``Discrete``, under
``"action_mask"``), ``"branches"`` (a tuple of one vector per branch for ``MultiDiscrete``,
under ``"action_mask"``) and ``"hybrid"`` (that tuple for the discrete part of a hybrid ``Dict``
or ``Tuple`` action space, under ``"discrete_action_mask"``: no mask fits ``sample`` of the
whole space).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from gymnasium import spaces
from mlagents_envs.base_env import DecisionSteps

import unity_sb3.unity  # noqa: F401  (protobuf compat before mlagents_envs)
from unity_sb3.spaces import BehaviorSpaces
from unity_sb3.wrappers.behavior import split_behavior_name

OBSERVATION_KEY = "observation"
MASK_KEY = "action_mask"
#: hybrid behaviors: no mask fits ``action_space.sample(mask=...)``, so the discrete part's goes here
DISCRETE_MASK_KEY = "discrete_action_mask"

#: the kinds of action mask (see the module docstring)
MaskKind = Literal["discrete", "branches", "hybrid"]


# ---------------------------------------------------------------------- observations and masks
def mask_kind(bs: BehaviorSpaces) -> MaskKind | None:
    """The kind of action mask a behavior's observations carry.

    :param bs: the behavior's spaces.
    :return: ``"discrete"``, ``"branches"`` or ``"hybrid"``; ``None`` for a behavior without
        discrete actions or a hybrid one with ``hybrid="box"``.
    """
    if not bs.branches:
        return None
    if bs.is_hybrid:
        return None if bs.hybrid == "box" else "hybrid"
    return "discrete" if len(bs.branches) == 1 else "branches"


def mask_key(kind: MaskKind) -> str:
    """The observation key of an action mask.

    :param kind: the kind of mask.
    :return: ``"discrete_action_mask"`` for a hybrid behavior, else ``"action_mask"``.
    """
    return DISCRETE_MASK_KEY if kind == "hybrid" else MASK_KEY


def mask_space(branches: Sequence[int], kind: MaskKind) -> spaces.Space:
    """The space of an action mask: one ``int8`` ``Box`` per branch, a ``Tuple`` of them unless ``"discrete"``.

    :param branches: the size of each discrete branch.
    :param kind: the kind of mask.
    :return: the mask's space.
    """
    if kind == "discrete":
        return spaces.Box(0, 1, shape=(branches[0],), dtype=np.int8)
    return spaces.Tuple(tuple(spaces.Box(0, 1, shape=(b,), dtype=np.int8) for b in branches))


class MaskedObservations:
    """One behavior's observations as the PettingZoo env hands them out: bare, or with the action mask.

    :param behavior_spaces: the behavior's spaces.
    :param action_masks: add the action mask to observations of behaviors with discrete actions.
    """

    def __init__(self, behavior_spaces: BehaviorSpaces, action_masks: bool = True) -> None:
        self.behavior_spaces = behavior_spaces
        #: the kind of mask the observations carry; ``None``: none, observations are bare
        self.kind: MaskKind | None = mask_kind(behavior_spaces) if action_masks else None
        self.observation_space: spaces.Space = behavior_spaces.observation_space
        if self.kind is not None:
            self.observation_space = spaces.Dict(
                {
                    OBSERVATION_KEY: behavior_spaces.observation_space,
                    mask_key(self.kind): mask_space(behavior_spaces.branches, self.kind),
                }
            )

    def observation(self, obs: Any, mask: Any) -> Any:
        """An agent's observation as the env hands it out.

        :param obs: the agent's observation in the behavior's observation space.
        :param mask: its mask from :meth:`mask_value` (ignored when there is no mask).
        :return: ``obs``, or ``{"observation": obs, <mask key>: mask}``.
        """
        if self.kind is None:
            return obs
        return {OBSERVATION_KEY: obs, mask_key(self.kind): mask}

    def masks(self, dec: DecisionSteps) -> np.ndarray | None:
        """Every deciding agent's flat mask, 1 = allowed.

        :param dec: the behavior's decision steps.
        :return: ``(len(dec), sum(branches))`` ``int8``, or ``None`` when there is no mask.
        """
        if self.kind is None:
            return None
        return self.behavior_spaces.action_masks(dec.action_mask, len(dec)).astype(np.int8)

    def mask_value(self, flat: np.ndarray | None) -> Any:
        """One agent's mask in the structure of the mask space.

        :param flat: the agent's row of :meth:`masks`; ``None`` for all ones (a terminal observation).
        :return: an ``int8`` vector (``"discrete"``), a tuple of one per branch, or ``None`` when
            there is no mask.
        """
        if self.kind is None:
            return None
        branches = self.behavior_spaces.branches
        if flat is None:
            flat = np.ones(sum(branches), dtype=np.int8)
        if self.kind == "discrete":
            return np.array(flat, dtype=np.int8)
        edges = np.cumsum(branches)[:-1]
        return tuple(np.array(part, dtype=np.int8) for part in np.split(flat, edges))


# ---------------------------------------------------------------------- agent names
def display_names(behaviors: Sequence[str]) -> dict[str, str]:
    """The prefix of each behavior's agent names: its name without ``?team=``, spaces as ``_``.

    :param behaviors: the exposed behaviors' full names.
    :return: behavior -> prefix; ``"<name>_team<t>"`` where two behaviors share a name, and the
        full names when the prefixes would still collide.
    """
    bases = [split_behavior_name(b)[0] for b in behaviors]
    names = {}
    for b, base in zip(behaviors, bases):
        clean = base.replace(" ", "_") or "agent"
        if bases.count(base) > 1:
            clean = f"{clean}_team{split_behavior_name(b)[1]}"
        names[b] = clean
    if len(set(names.values())) != len(names):  # pathological names: fall back to the full ones
        names = {b: b for b in behaviors}
    return names


def capacities(max_agents: int | Mapping[str, int] | None, behaviors: Sequence[str]) -> dict[str, int | None]:
    """How many agents each behavior may name in one episode.

    :param max_agents: an int for every behavior, a mapping behavior (full name or name without
        ``?team=``) -> int, or ``None`` (no limit).
    :param behaviors: the exposed behaviors' full names.
    :return: behavior -> capacity, ``None`` for no limit.
    :raises ValueError: for a capacity below 1.
    """
    if max_agents is None:
        return dict.fromkeys(behaviors)
    if isinstance(max_agents, Mapping):
        caps: dict[str, int | None] = {}
        lookup = {**{split_behavior_name(k)[0]: v for k, v in max_agents.items()}, **max_agents}
        for b in behaviors:
            cap = lookup.get(b, lookup.get(split_behavior_name(b)[0]))
            caps[b] = None if cap is None else int(cap)
    else:
        caps = dict.fromkeys(behaviors, int(max_agents))
    for b, cap in caps.items():
        if cap is not None and cap < 1:
            raise ValueError(f"max_agents for {b!r} must be >= 1, got {cap}")
    return caps
