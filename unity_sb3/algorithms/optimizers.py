"""The Adam that PPO and SAC build for their policies, stepped with torch's ``foreach`` kernels."""

from __future__ import annotations

from typing import Any

import torch as th

__all__ = ["with_foreach_adam"]


def with_foreach_adam(policy_kwargs: dict[str, Any] | None, **sb3_defaults: Any) -> dict[str, Any]:
    """``policy_kwargs`` with SB3's default Adam in torch's ``foreach`` form, unless they name an
    optimizer or its arguments themselves.

    On CPU torch's default Adam loops over the parameter tensors; ``foreach`` updates them together:
    the same updates bit for bit, the step ~1.5x faster with large layers (a goal-conditioning
    hypernetwork's 2M generated weights: 19 -> 13 ms per step here).

    :param policy_kwargs: the algorithm's ``policy_kwargs`` (not changed).
    :param sb3_defaults: the Adam arguments SB3's policy would give when none are given (its
        actor-critic policies: ``eps=1e-5``; SAC's: none).
    :return: a new dict.
    """
    policy_kwargs = dict(policy_kwargs or {})
    if (
        policy_kwargs.get("optimizer_class", th.optim.Adam) is th.optim.Adam
        and "optimizer_kwargs" not in policy_kwargs
    ):
        policy_kwargs["optimizer_kwargs"] = {**sb3_defaults, "foreach": True}
    return policy_kwargs
