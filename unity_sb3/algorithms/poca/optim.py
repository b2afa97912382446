"""Adam stepping all of a group's parameters as one flat tensor: torch's ``foreach`` Adam, bit for bit.

On CPU torch's ``foreach`` Adam runs each of its ten multi-tensor operations as one kernel per
parameter tensor, and its Python reads every parameter's step count twice (``.item()``). With a
few thousand weights in two dozen tensors (POCA at ML-Agents' test settings) that dispatch is most
of an optimizer step. :class:`FlatAdam` keeps each group's moments in two flat buffers (the
per-parameter state tensors are views into them, so ``state_dict`` and the ``foreach`` fallback see
the same numbers) and applies the same element-wise operations, with the same scalars, once to the
concatenated gradients and parameters. Element-wise float operations do not depend on where an
element sits, so the result equals ``torch.optim.Adam(foreach=True)``'s exactly (tests compare them
over many steps and tensor sizes).

The flat path takes the plain settings (no AMSGrad, weight decay, maximize, capturable, complex or
sparse tensors, one dtype and device per group): parameters without a gradient are left out as
torch leaves them out, and parameters whose step counts differ (one that missed a gradient once)
get their own bias corrections, spread over their elements. Any other step goes through torch's
own ``foreach`` code on the same state. Unlike torch's Adam, state is created for every parameter
of a group at its first step (zeros, step 0, as Adam would create it later), so a ``state_dict``
also lists parameters that never had a gradient.
"""

from __future__ import annotations

from typing import Any

import torch as th
from torch._utils import _flatten_dense_tensors
from torch.optim import optimizer as _torch_optimizer


class FlatAdam(th.optim.Adam):
    """``torch.optim.Adam(foreach=True)`` with the common step computed on flat buffers.

    Same arguments as ``torch.optim.Adam`` (``foreach`` is forced on for the fallback path);
    ``state_dict`` / ``load_state_dict`` are Adam's, so either optimizer can load the other's state.
    """

    def __init__(self, params: Any, **kwargs: Any) -> None:
        kwargs["foreach"] = True
        super().__init__(params, **kwargs)
        self._flat: dict[int, tuple[list[th.Tensor], th.Tensor, th.Tensor, th.Tensor]] = {}
        self._views: dict[int, tuple[list[int], list[th.Tensor]]] = {}
        self._plans: dict[tuple[int, tuple[int, ...] | None], tuple[Any, ...]] = {}

    def _param_views(self, index: int, params: list[th.Tensor]) -> list[th.Tensor]:
        """Flat views of the group's parameters' data (rebuilt if a parameter's storage changed)."""
        pointers = [p.data_ptr() for p in params]
        cached = self._views.get(index)
        if cached is None or cached[0] != pointers:
            cached = self._views[index] = (pointers, [p.detach().view(-1) for p in params])
            self._plans = {key: plan for key, plan in self._plans.items() if key[0] != index}
        return cached[1]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._flat, self._plans = {}, {}  # the loaded state tensors are new: gather them into fresh buffers

    def _flat_state(
        self, index: int, group: dict[str, Any]
    ) -> tuple[list[th.Tensor], th.Tensor, th.Tensor, th.Tensor] | None:
        """The group's flat ``exp_avg`` and ``exp_avg_sq`` buffers and step counts (the per-parameter
        state tensors become views into them), or None when the group does not qualify."""
        params = group["params"]
        cached = self._flat.get(index)
        if cached is not None and cached[0] == params:
            return cached
        if not params or any(p.is_complex() or p.is_sparse for p in params):
            return None
        first = params[0]
        if any(p.dtype != first.dtype or p.device != first.device for p in params):
            return None
        numel = sum(p.numel() for p in params)
        exp_avg = th.zeros(numel, dtype=first.dtype, device=first.device)
        exp_avg_sq = th.zeros_like(exp_avg)
        steps = th.zeros(len(params), dtype=th.float32)  # torch keeps each step as a float32 CPU scalar
        start = 0
        for k, p in enumerate(params):
            state = self.state[p]
            size = p.numel()
            if len(state) == 0:  # what Adam's _init_group would create
                state["step"] = th.tensor(0.0, dtype=th.float32)
                state["exp_avg"] = th.zeros_like(p, memory_format=th.preserve_format)
                state["exp_avg_sq"] = th.zeros_like(p, memory_format=th.preserve_format)
            if not state["exp_avg"].is_contiguous() or not state["exp_avg_sq"].is_contiguous():
                return None
            exp_avg[start : start + size] = state["exp_avg"].reshape(-1)
            exp_avg_sq[start : start + size] = state["exp_avg_sq"].reshape(-1)
            steps[k] = state["step"]
            state["exp_avg"] = exp_avg[start : start + size].view_as(p)
            state["exp_avg_sq"] = exp_avg_sq[start : start + size].view_as(p)
            state["step"] = steps[k]  # a 0-dim view: the fallback's += reaches the flat copy
            start += size
        self._flat[index] = (list(params), exp_avg, exp_avg_sq, steps)
        return self._flat[index]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Adam's ``zero_grad``; with ``set_to_none`` (the default) without its profiler bookkeeping."""
        if not set_to_none:
            super().zero_grad(set_to_none=False)
            return
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        """Adam's step. torch wraps every optimizer's ``step`` in a profiler range and its hook
        calls (tens of microseconds a step); here that wrapper runs only when a profiler is on or a
        step hook is registered."""
        if (
            self._optimizer_step_pre_hooks
            or self._optimizer_step_post_hooks
            or _torch_optimizer._global_optimizer_pre_hooks
            or _torch_optimizer._global_optimizer_post_hooks
            or th.autograd._profiler_enabled()
        ):
            return self._observed_step(closure)
        return self._step(closure)

    step.hooked = True  # type: ignore[attr-defined]  # torch's Optimizer must not wrap it again

    @th.no_grad()
    def _step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with th.enable_grad():
                loss = closure()
        fallback = []
        for index, group in enumerate(self.param_groups):
            if not self._step_flat(index, group):
                fallback.append(index)
        if fallback:
            groups = self.param_groups
            try:  # torch's own step over the groups the flat path did not take
                self.param_groups = [groups[i] for i in fallback]
                super().step()
            finally:
                self.param_groups = groups
        return loss

    _observed_step = th.optim.Optimizer.profile_hook_step(_step)

    def _step_flat(self, index: int, group: dict[str, Any]) -> bool:
        """One Adam step of ``group`` on its flat buffers; False when it must take torch's path."""
        if (
            group["amsgrad"]
            or group["weight_decay"] != 0
            or group["maximize"]
            or group["capturable"]
            or group["differentiable"]
            or group.get("fused")
            or group.get("decoupled_weight_decay", False)
            or isinstance(group["lr"], th.Tensor)
            or isinstance(group["betas"][0], th.Tensor)
            or isinstance(group["betas"][1], th.Tensor)
        ):
            return False
        params = group["params"]
        all_grads = [p.grad for p in params]
        if any(g is None for g in all_grads):  # not `None in`: that calls Tensor.__eq__(None), slowly
            with_grad = tuple(k for k, g in enumerate(all_grads) if g is not None)
            if not with_grad:
                return True  # torch's Adam steps nothing either
            grad_list = [all_grads[k] for k in with_grad]
        else:
            with_grad, grad_list = None, all_grads
        if any(g.is_sparse for g in grad_list):
            return False
        flat = self._flat_state(index, group)
        if flat is None:
            return False
        _, exp_avg, exp_avg_sq, steps = flat
        plan = self._plan(index, params, with_grad)
        chosen, rows, sizes, views, owners = plan[:5]
        grads = _flatten_dense_tensors(grad_list)
        values = _flatten_dense_tensors([params[k] for k in chosen] if rows is not None else params)
        if rows is None:  # every parameter has a gradient: the buffers themselves
            exp_avgs, exp_avg_sqs = exp_avg, exp_avg_sq
            steps.add_(1.0)
            counts = steps.tolist()
        else:
            exp_avgs, exp_avg_sqs = exp_avg.index_select(0, rows), exp_avg_sq.index_select(0, rows)
            stepped = steps[plan[5]] + 1.0  # the same float32 additions as each step's += 1
            steps[plan[5]] = stepped
            counts = stepped.tolist()
        beta1, beta2 = group["betas"]
        lr, eps = group["lr"], group["eps"]
        # torch.optim.adam._multi_tensor_adam (capturable=False): its operations in its order, with
        # its Python scalars per parameter; the kernels cast them to the tensors' dtype as here
        exp_avgs.lerp_(grads, 1 - beta1)
        exp_avg_sqs.mul_(beta2)
        exp_avg_sqs.addcmul_(grads, grads, value=1 - beta2)
        scalars_of = {n: ((lr / (1 - beta1**n)) * -1, (1 - beta2**n) ** 0.5) for n in set(counts)}
        denom = exp_avg_sqs.sqrt()
        if len(scalars_of) == 1:  # one step count: the scalars as torch passes them
            step_size, bias_correction2_sqrt = scalars_of[counts[0]]
            denom.div_(bias_correction2_sqrt)
            denom.add_(eps)
            values.addcdiv_(exp_avgs, denom, value=step_size)
        else:  # each parameter's scalars spread over its elements; addcdiv's value * t1 / t2 in order
            step_sizes = [scalars_of[n][0] for n in counts]
            bias_correction2_sqrts = [scalars_of[n][1] for n in counts]
            scalars = th.tensor(
                [bias_correction2_sqrts, step_sizes], dtype=values.dtype, device=values.device
            )
            spread = scalars.index_select(1, owners)
            denom.div_(spread[0])
            denom.add_(eps)
            values.add_(spread[1].mul_(exp_avgs).div_(denom))
        if rows is not None:
            exp_avg.index_copy_(0, rows, exp_avgs)
            exp_avg_sq.index_copy_(0, rows, exp_avg_sqs)
        th._foreach_copy_(views, values.split(sizes))
        return True

    def _plan(
        self, index: int, params: list[th.Tensor], with_grad: tuple[int, ...] | None
    ) -> tuple[Any, ...]:
        """Which parameters step (indices; ``with_grad`` None: all), their rows in the flat buffers
        (None: all of them), their sizes, flat views of their data, the stepping parameter of each
        element, and the indices as a tensor."""
        views = self._param_views(index, params)
        key = (index, with_grad)
        plan = self._plans.get(key)
        if plan is None:
            if with_grad is None:
                with_grad = tuple(range(len(params)))
            device = params[0].device
            sizes = [params[k].numel() for k in with_grad]
            rows = None
            if len(with_grad) < len(params):
                offsets = [0]
                for p in params:
                    offsets.append(offsets[-1] + p.numel())
                rows = th.cat([th.arange(offsets[k], offsets[k + 1]) for k in with_grad]).to(device)
            owners = th.arange(len(sizes), device=device).repeat_interleave(th.tensor(sizes, device=device))
            chosen = th.tensor(with_grad, dtype=th.long)
            plan = self._plans[key] = (with_grad, rows, sizes, [views[k] for k in with_grad], owners, chosen)
        return plan
