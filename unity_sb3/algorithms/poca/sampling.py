"""The action distributions' exact fast paths POCA's actor samples and scores with.

Each gives what SB3's / sb3-contrib's distribution classes give (sb3-contrib's maskable
(multi-)categorical, SB3's diagonal Gaussian) for the same inputs, in fewer tensor operations: POCA
runs them for every agent of every group at each step and minibatch (issue 18, "POCA learner
speed", docs/DECISIONS.md). ``tests/test_poca_exact_fast_paths.py`` and ``tests/test_poca.py``
compare them with the classes.
"""

from __future__ import annotations

import math

import numpy as np
import torch as th

from unity_sb3.algorithms.distributions import MASKED_LOGIT

__all__ = [
    "diag_gaussian_log_prob_entropy",
    "masked_categorical_log_prob_entropy",
    "sample_diag_gaussian",
    "sample_masked_categorical",
]

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))  # a normal density's constant (torch's Normal)


def sample_masked_categorical(
    logits: th.Tensor,
    branches: list[int],
    action_masks: np.ndarray | th.Tensor | None = None,
    deterministic: bool = False,
) -> tuple[th.Tensor, th.Tensor]:
    """Actions and log-probabilities of sb3-contrib's maskable (multi-)categorical distribution.

    The same distribution, and the same order of random draws, as building ``MaskableCategorical``
    (one per branch), masking it and calling ``get_actions`` then ``log_prob`` (one ``multinomial``
    draw per branch); log-probabilities equal to float rounding (:func:`_masked_branch_logits`).
    Without the distribution objects, whose construction and argument checks cost several times
    the actor's forward pass at every step.

    :param logits: (batch, sum of branches).
    :param branches: size of each branch (one for ``Discrete``).
    :param action_masks: True = allowed, (batch, sum of branches), or None.
    :param deterministic: the most likely action of each branch instead of a draw.
    :return: actions (batch,) for one branch or (batch, n_branches), and log-probabilities (batch,).
    """
    actions, log_probs = [], []
    for branch, _ in _masked_branch_logits(logits, branches, action_masks):
        probs = th.softmax(branch, dim=-1)
        if deterministic:
            action = th.argmax(probs, dim=1)
        else:
            # torch.multinomial's draw for one sample (argmax of p / q, q ~ Exp(1) from the same
            # generator), without its validity checks, which cost more than the draw
            action = (probs / th.empty_like(probs).exponential_()).argmax(dim=-1)
        actions.append(action)
        log_probs.append(branch.gather(-1, action.unsqueeze(-1)).squeeze(-1))
    if len(branches) == 1:
        return actions[0], log_probs[0]
    return th.stack(actions, dim=1), th.stack(log_probs, dim=1).sum(dim=1)


def sample_diag_gaussian(
    mean: th.Tensor, log_std: th.Tensor, deterministic: bool = False
) -> tuple[th.Tensor, th.Tensor]:
    """Actions and log-probabilities of SB3's ``DiagGaussianDistribution`` without building it (and
    without ``Normal``'s argument validation, which SB3 leaves on, at every step).

    The same draw and the same actions as its ``rsample`` (mean + N(0, 1) noise x std); the
    log-probabilities, to float rounding, from the noise itself: per dimension
    -noise^2 / 2 - log std - log sqrt(2 pi), summed (``Normal.log_prob`` of the action, with
    (action - mean) / std = noise), in a third of the operations.

    :param mean: (batch, action_dim), the action net's output.
    :param log_std: (action_dim,) the policy's log standard deviation.
    :param deterministic: the mean instead of a draw.
    :return: actions (batch, action_dim) and log-probabilities (batch,).
    """
    if deterministic:
        noise, actions = th.zeros_like(mean), mean
    else:
        noise = th.empty(mean.shape, dtype=mean.dtype, device=mean.device).normal_()
        actions = mean + noise * log_std.exp()
    return actions, (-0.5 * noise.square() - log_std - _LOG_SQRT_2PI).sum(dim=1)


def diag_gaussian_log_prob_entropy(
    mean: th.Tensor, log_std: th.Tensor, actions: th.Tensor
) -> tuple[th.Tensor, th.Tensor]:
    """Log-probabilities of ``actions`` and entropies under SB3's ``DiagGaussianDistribution``
    without building it: its values and gradients to float rounding, in fewer operations (the
    update's backward pass runs one node per operation).

    :param mean: (batch, action_dim).
    :param log_std: (action_dim,).
    :param actions: (batch, action_dim).
    :return: log-probabilities and entropies, (batch,) each (every row's entropy is the same:
        torch's ``Normal.entropy``, 1/2 + log sqrt(2 pi) + log std per dimension, summed).
    """
    z = (actions - mean) * th.exp(-log_std)
    log_prob = (-0.5 * z.square() - log_std - _LOG_SQRT_2PI).sum(dim=1)
    entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum().expand(mean.shape[0])
    return log_prob, entropy


def masked_categorical_log_prob_entropy(
    logits: th.Tensor,
    branches: list[int],
    actions: th.Tensor,
    action_masks: np.ndarray | th.Tensor | None = None,
) -> tuple[th.Tensor, th.Tensor]:
    """Log-probabilities of ``actions`` and entropies under sb3-contrib's maskable (multi-)categorical
    distribution, the values and gradients of its ``log_prob`` and ``entropy`` to float rounding
    (:func:`_masked_branch_logits`), without building the distribution objects.

    :param logits: (batch, sum of branches).
    :param branches: size of each branch.
    :param actions: (batch,) for one branch or (batch, n_branches), integer.
    :param action_masks: True = allowed, (batch, sum of branches), or None.
    :return: log-probabilities and entropies, (batch,) each.
    """
    per_branch = actions.reshape(-1, len(branches)).long().unbind(dim=1)
    normalised = _masked_branch_logits(logits, branches, action_masks)
    # log-probabilities of every branch first, then entropies: the distribution's order of
    # operations, so that the gradients add up in the same order too
    log_probs = [
        branch.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        for (branch, _), action in zip(normalised, per_branch)
    ]
    entropies = []
    for branch, mask in normalised:
        probs = th.softmax(branch, dim=-1)
        if mask is None:  # torch's Categorical.entropy
            p_log_p = th.clamp(branch, min=th.finfo(branch.dtype).min) * probs
        else:  # sb3-contrib's: masked-out entries contribute nothing
            p_log_p = th.where(mask, branch * probs, th.zeros((), dtype=branch.dtype, device=branch.device))
        entropies.append(-p_log_p.sum(-1))
    if len(branches) == 1:
        return log_probs[0], entropies[0]
    return th.stack(log_probs, dim=1).sum(dim=1), th.stack(entropies, dim=1).sum(dim=1)


def _masked_branch_logits(
    logits: th.Tensor, branches: list[int], action_masks: np.ndarray | th.Tensor | None
) -> list[tuple[th.Tensor, th.Tensor | None]]:
    """Each branch's normalised log-probabilities and its mask (None: no mask).

    sb3-contrib's ``MaskableCategorical`` normalises the logits, sets masked-out entries to
    ``MASKED_LOGIT`` and normalises again; one ``log_softmax`` of the masked logits is the same
    value (the first normalisation shifts a branch by a constant, which the second removes), to
    float rounding, in one kernel instead of two ``logsumexp`` decompositions (a third of the
    acting time at 12 agents).
    """
    logits = logits.reshape(-1, sum(branches))
    masks = None
    if action_masks is not None:
        masks = th.as_tensor(action_masks, dtype=th.bool, device=logits.device).reshape(logits.shape)
        logits = logits.masked_fill(~masks, MASKED_LOGIT)
    out: list[tuple[th.Tensor, th.Tensor | None]] = []
    start = 0
    for size in branches:
        mask = None if masks is None else masks[:, start : start + size]
        out.append((logits[:, start : start + size].log_softmax(dim=-1), mask))
        start += size
    return out
