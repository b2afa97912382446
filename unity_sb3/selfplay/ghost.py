"""A frozen copy of a trained policy that answers Unity agents directly: the ghost of self-play.

ML-Agents' ghost trainer runs a snapshot of the learning policy for the opposing team's agents;
those agents never reach a learner. :class:`GhostPolicy` is that snapshot on SB3: a deep copy of
the learner's policy (same class and architecture) whose weights are replaced by a snapshot's.
It is an *answerer* of the lockstep coordinator (``answerer(behavior_name, decision_steps)``):
it turns Unity's ``DecisionSteps`` into observations exactly as the learner's
:class:`~unity_sb3.wrappers.vec_env.UnityVecEnv` view does (the view's
:class:`~unity_sb3.spaces.BehaviorSpaces`), samples actions (``deterministic=False``, as
ML-Agents' policies act while training), honours discrete action masks, and returns an
``ActionTuple``.

A learner trained under ``VecNormalize`` normalizes observations outside its policy; ML-Agents keeps
the normalizer inside the policy, so its snapshots carry it. :func:`normalizer_weights` adds the
``VecNormalize`` statistics to a snapshot's weights (keys under :data:`NORMALIZER_PREFIX`) and a
ghost loading such weights normalizes with the statistics of *its* snapshot.
"""

from __future__ import annotations

import copy
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces as gym_spaces
from mlagents_envs.base_env import ActionTuple, DecisionSteps
from stable_baselines3.common.distributions import CategoricalDistribution, MultiCategoricalDistribution
from stable_baselines3.common.policies import BasePolicy
from torch.distributions import Categorical

from unity_sb3.spaces import BehaviorSpaces

__all__ = ["NORMALIZER_PREFIX", "GhostPolicy", "ObsTransform", "normalizer_weights"]

#: observations (as the view gives them to the learner) -> what the policy takes, e.g. VecNormalize
ObsTransform = Callable[[Any], Any]
# a masked logit: low enough that exp() is 0 in float32, as sb3-contrib masks
_MASKED_LOGIT = -1e8
#: keys of the observation statistics a snapshot carries beside the policy's weights
NORMALIZER_PREFIX = "vec_normalize/"


def normalizer_weights(vec_normalize: Any) -> dict[str, th.Tensor]:
    """The observation statistics of an SB3 ``VecNormalize`` as tensors to store with a snapshot.

    :return: ``{"vec_normalize/<key>/mean": ..., ".../var": ..., "vec_normalize/clip_obs": ...,
        "vec_normalize/epsilon": ...}`` (``<key>`` empty for a non-Dict space); ``{}`` when it does
        not normalize observations.
    """
    if not getattr(vec_normalize, "norm_obs", False):
        return {}
    stats = vec_normalize.obs_rms
    items = stats.items() if isinstance(stats, dict) else [("", stats)]
    out = {}
    for key, rms in items:
        out[f"{NORMALIZER_PREFIX}{key}/mean"] = th.as_tensor(np.array(rms.mean, dtype=np.float64))
        out[f"{NORMALIZER_PREFIX}{key}/var"] = th.as_tensor(np.array(rms.var, dtype=np.float64))
    out[f"{NORMALIZER_PREFIX}clip_obs"] = th.tensor(float(vec_normalize.clip_obs), dtype=th.float64)
    out[f"{NORMALIZER_PREFIX}epsilon"] = th.tensor(float(vec_normalize.epsilon), dtype=th.float64)
    return out


class GhostPolicy:
    """A frozen copy of ``policy`` answering agents with the weights of a snapshot.

    :param policy: the learner's SB3 policy (``model.policy``: PPO's ``ActorCriticPolicy``,
        MaskablePPO's, POCA's ``POCAPolicy``, SAC's ``SACPolicy``, ...); it is deep-copied, never
        changed. Recurrent policies are refused (a ghost would need each agent's memory).
    :param spaces: the learner view's observation and action conversion (``view.spaces``).
    :param deterministic: take the most likely action (ML-Agents' ghosts sample: ``False``).
    :param obs_transform: applied to the converted observations before the policy when the loaded
        weights carry no normalizer statistics (:func:`normalizer_weights`); ``None`` for none.
    """

    def __init__(
        self,
        policy: BasePolicy,
        spaces: BehaviorSpaces,
        *,
        deterministic: bool = False,
        obs_transform: ObsTransform | None = None,
    ) -> None:
        if not isinstance(policy, BasePolicy):
            raise TypeError(f"GhostPolicy needs an SB3 policy (model.policy), got {type(policy).__name__}")
        if hasattr(policy, "lstm_actor"):
            raise ValueError(
                f"{type(policy).__name__} is recurrent; a self-play ghost keeps no per-agent memory. "
                "Train self-play with a feed-forward policy (no network_settings.memory)."
            )
        _check_same_space(policy.observation_space, spaces.observation_space, "observation")
        _check_same_space(policy.action_space, spaces.action_space, "action")
        self.policy = _frozen_copy(policy)
        self.policy.set_training_mode(False)
        for parameter in self.policy.parameters():
            parameter.requires_grad_(False)
        self.spaces = spaces
        self.deterministic = deterministic
        self.obs_transform = obs_transform
        self._masks_in_predict = "action_masks" in inspect.signature(self.policy.predict).parameters
        self._lock = threading.Lock()
        self._normalizer: dict[str, Any] | None = None
        #: how many agent decisions this ghost has answered (ML-Agents' ``ghost_step`` counts these)
        self.decisions = 0

    def load_weights(self, weights: Mapping[str, th.Tensor]) -> None:
        """Act with ``weights`` from now on: a ``state_dict`` of the same policy class, plus the
        normalizer statistics of :func:`normalizer_weights` when the learner has them."""
        stats = {
            k[len(NORMALIZER_PREFIX) :]: v for k, v in weights.items() if k.startswith(NORMALIZER_PREFIX)
        }
        policy = {k: v for k, v in weights.items() if not k.startswith(NORMALIZER_PREFIX)}
        with self._lock:
            self.policy.load_state_dict(policy)
            self._normalizer = _read_normalizer(stats) if stats else None

    def state_dict(self) -> dict[str, th.Tensor]:
        """The policy weights the ghost acts with."""
        return self.policy.state_dict()

    def __call__(self, behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        """The lockstep answerer: actions for every agent of ``decision_steps``, in its order."""
        return self.act(decision_steps)

    def act(self, decision_steps: DecisionSteps) -> ActionTuple:
        """Sample one action per agent of ``decision_steps``.

        :param decision_steps: Unity's agents asking for a decision (any field types a
            ``BaseEnv`` may give: arrays or lists).
        :return: ``ActionTuple`` with ``continuous`` ``(n, c)`` and ``discrete`` ``(n, branches)``.
        """
        n = len(decision_steps)
        if n == 0:
            return ActionTuple(
                continuous=np.zeros((0, self.spaces.continuous_size), np.float32),
                discrete=np.zeros((0, len(self.spaces.branches)), np.int32),
            )
        obs = self.spaces.observations([np.asarray(o) for o in decision_steps.obs])
        masks = None
        if self.spaces.mask_size and decision_steps.action_mask is not None:
            masks = self.spaces.action_masks(decision_steps.action_mask, n)
        with self._lock:
            if self._normalizer is not None:
                obs = _normalize(obs, self._normalizer)
            elif self.obs_transform is not None:
                obs = self.obs_transform(obs)
            actions = self._predict(obs, masks)
            self.decisions += n
        return self.spaces.to_unity_actions(actions, n)

    def _predict(self, obs: Any, masks: np.ndarray | None) -> Any:
        # a Box action space (continuous, or hybrid as one Box) takes no mask, as the learner's does not
        if masks is None or masks.all() or isinstance(self.spaces.action_space, gym_spaces.Box):
            return self.policy.predict(obs, deterministic=self.deterministic)[0]
        if self._masks_in_predict:
            return self.policy.predict(obs, deterministic=self.deterministic, action_masks=masks)[0]
        return self._masked_sample(obs, masks)

    def _masked_sample(self, obs: Any, masks: np.ndarray) -> np.ndarray:
        """Sample discrete actions of a policy that knows no masks with the forbidden logits removed."""
        if not hasattr(self.policy, "get_distribution"):
            raise ValueError(
                f"{type(self.policy).__name__} has no action distribution to mask; use a discrete "
                "actor-critic policy (PPO, MaskablePPO, POCA) for scenes with action masks"
            )
        obs_tensor, _ = self.policy.obs_to_tensor(obs)
        allowed = th.as_tensor(masks, dtype=th.bool, device=self.policy.device)
        with th.no_grad():
            distribution = self.policy.get_distribution(obs_tensor)
            if isinstance(distribution, CategoricalDistribution):
                branches = [distribution.distribution]
            elif isinstance(distribution, MultiCategoricalDistribution):
                branches = list(distribution.distribution)
            else:
                raise ValueError(
                    f"cannot apply action masks to a {type(distribution).__name__}; the scene's masks "
                    "need a Discrete or MultiDiscrete action space"
                )
            sizes = [int(b.logits.shape[-1]) for b in branches]
            choices = []
            for branch, mask in zip(branches, th.split(allowed, sizes, dim=1)):
                logits = th.where(mask, branch.logits, th.full_like(branch.logits, _MASKED_LOGIT))
                masked = Categorical(logits=logits)
                choices.append(th.argmax(masked.probs, dim=1) if self.deterministic else masked.sample())
            actions = th.stack(choices, dim=1).cpu().numpy()
        return actions[:, 0] if isinstance(distribution, CategoricalDistribution) else actions


def _frozen_copy(policy: BasePolicy) -> BasePolicy:
    """``copy.deepcopy(policy)`` for a policy that has trained: SB3 keeps the last action distribution
    on the policy (``action_dist``), and after a training step its tensors belong to an autograd
    graph, which ``deepcopy`` refuses. Those tensors are copied detached (the next forward pass
    replaces them anyway); the policy itself is left as it is."""
    memo: dict[int, Any] = {id(t): t.detach().clone() for t in _graph_tensors(policy)}
    return copy.deepcopy(policy, memo)


def _graph_tensors(root: Any) -> list[th.Tensor]:
    """The tensors reachable from ``root``'s attributes that are not leaves of an autograd graph."""
    found: list[th.Tensor] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, str, bytes, int, float, bool)) or obj is None:
            continue
        seen.add(id(obj))
        if isinstance(obj, th.Tensor):
            if not obj.is_leaf:
                found.append(obj)
        elif isinstance(obj, Mapping):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return found


def _read_normalizer(stats: Mapping[str, th.Tensor]) -> dict[str, Any]:
    """``normalizer_weights`` without its prefix -> ``{"clip": c, "eps": e, "keys": {key: (mean, var)}}``."""
    keys = {name.rsplit("/", 1)[0] for name in stats if name.endswith("/mean")}
    return {
        "clip": float(stats["clip_obs"]),
        "eps": float(stats["epsilon"]),
        "keys": {key: (stats[f"{key}/mean"].numpy(), stats[f"{key}/var"].numpy()) for key in keys},
    }


def _normalize(obs: Any, normalizer: Mapping[str, Any]) -> Any:
    """SB3's ``VecNormalize.normalize_obs`` with saved statistics (key ``""`` = the whole observation)."""

    def one(value: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
        scaled = (value - mean) / np.sqrt(var + normalizer["eps"])
        return np.clip(scaled, -normalizer["clip"], normalizer["clip"]).astype(np.float32)

    if not isinstance(obs, dict):
        return one(obs, *normalizer["keys"][""])
    out = dict(obs)
    for key, (mean, var) in normalizer["keys"].items():
        out[key] = one(obs[key], mean, var)
    return out


def _check_same_space(policy_space: Any, view_space: Any, what: str) -> None:
    same = type(policy_space) is type(view_space) and getattr(policy_space, "shape", None) == getattr(
        view_space, "shape", None
    )
    if not same:
        raise ValueError(
            f"the policy's {what} space {policy_space} is not the view's {view_space}; a ghost must be a "
            "copy of the policy that learns on this behavior's view"
        )
