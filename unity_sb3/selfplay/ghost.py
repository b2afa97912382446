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
"""

from __future__ import annotations

import copy
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch as th
from mlagents_envs.base_env import ActionTuple, DecisionSteps
from stable_baselines3.common.distributions import CategoricalDistribution, MultiCategoricalDistribution
from stable_baselines3.common.policies import BasePolicy
from torch.distributions import Categorical

from unity_sb3.spaces import BehaviorSpaces

__all__ = ["GhostPolicy", "ObsTransform"]

#: observations (as the view gives them to the learner) -> what the policy takes, e.g. VecNormalize
ObsTransform = Callable[[Any], Any]
# a masked logit: low enough that exp() is 0 in float32, as sb3-contrib masks
_MASKED_LOGIT = -1e8


class GhostPolicy:
    """A frozen copy of ``policy`` answering agents with the weights of a snapshot.

    :param policy: the learner's SB3 policy (``model.policy``: PPO's ``ActorCriticPolicy``,
        MaskablePPO's, POCA's ``POCAPolicy``, SAC's ``SACPolicy``, ...); it is deep-copied, never
        changed. Recurrent policies are refused (a ghost would need each agent's memory).
    :param spaces: the learner view's observation and action conversion (``view.spaces``).
    :param deterministic: take the most likely action (ML-Agents' ghosts sample: ``False``).
    :param obs_transform: applied to the converted observations before the policy, e.g. the
        learner's ``VecNormalize.normalize_obs``; ``None`` for none.
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
        self.policy = copy.deepcopy(policy)
        self.policy.set_training_mode(False)
        for parameter in self.policy.parameters():
            parameter.requires_grad_(False)
        self.spaces = spaces
        self.deterministic = deterministic
        self.obs_transform = obs_transform
        self._masks_in_predict = "action_masks" in inspect.signature(self.policy.predict).parameters
        self._lock = threading.Lock()
        #: how many agent decisions this ghost has answered (ML-Agents' ``ghost_step`` counts these)
        self.decisions = 0

    def load_weights(self, weights: Mapping[str, th.Tensor]) -> None:
        """Act with ``weights`` (a ``state_dict`` of the same policy class) from now on."""
        with self._lock:
            self.policy.load_state_dict(weights)

    def state_dict(self) -> dict[str, th.Tensor]:
        """The weights the ghost acts with."""
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
        if self.obs_transform is not None:
            obs = self.obs_transform(obs)
        masks = None
        if self.spaces.mask_size and decision_steps.action_mask is not None:
            masks = self.spaces.action_masks(decision_steps.action_mask, n)
        with self._lock:
            actions = self._predict(obs, masks)
            self.decisions += n
        return self.spaces.to_unity_actions(actions, n)

    def _predict(self, obs: Any, masks: np.ndarray | None) -> Any:
        if masks is None or masks.all():
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


def _check_same_space(policy_space: Any, view_space: Any, what: str) -> None:
    same = type(policy_space) is type(view_space) and getattr(policy_space, "shape", None) == getattr(
        view_space, "shape", None
    )
    if not same:
        raise ValueError(
            f"the policy's {what} space {policy_space} is not the view's {view_space}; a ghost must be a "
            "copy of the policy that learns on this behavior's view"
        )
