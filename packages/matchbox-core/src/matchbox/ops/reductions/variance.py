"""``var`` and ``std`` (and ``var_mean``/``std_mean``, each with ``mean``): over a dynamic dimension (or without ``dim``), the variance of
each example's own real positions, with torch's own gradient formula, so even degenerate
examples (too few elements for the correction) get the loop's values and gradients;
over static dimensions only, torch's op on the data as is.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _capture, _lengths, _masking, _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.reductions._reduce import (
    _keep,
    count,
    reduce,
    reduced_dimensions,
    reduced_layout,
)
from matchbox.ops.reductions.sums import mean
from matchbox.ops.reductions.variance_captured import captured_variance, degenerate_factor


def _correction(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, float, bool]:
    """Parse var/std's two signatures: (dim, unbiased, keepdim) and (dim, *, correction, keepdim)."""
    dim = args[0] if args else kwargs.pop("dim", None)
    rest = list(args[1:])
    if isinstance(dim, bool):  # var(input, unbiased)
        kwargs.setdefault("unbiased", dim)
        dim = None
    if rest and isinstance(rest[0], bool) and "correction" not in kwargs:
        kwargs.setdefault("unbiased", rest.pop(0))
    if rest:
        kwargs.setdefault("keepdim", rest.pop(0))
    unbiased = kwargs.pop("unbiased", None)
    correction = kwargs.pop("correction", None)
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    keepdim = kwargs.pop("keepdim", False)
    if kwargs:
        raise TypeError(f"{op}: unexpected arguments {sorted(kwargs)}")
    return dim, float(correction), bool(keepdim)


class _Variance(torch.autograd.Function):
    """The variance of each example's real positions, with ``torch.var``'s own gradient.

    Forward: the sum of squared deviations over ``max(0, n - correction)``, so
    an example too short for its correction gets NaN (0/0) or inf, as in torch.
    Backward: the formula of torch's ``var_backward``, not the derivative of
    the composed ops: ``2 / (n - correction) * grad * (x - mean)`` (unclamped:
    finite where the value is inf), and, for ``var(x)`` without ``dim``,
    NaN where ``x == mean`` and inf elsewhere when ``n <= correction`` (``x == mean``,
    not ``x - mean == 0``: an example of one ``inf`` gets NaN, as torch gives).  The
    mean is not differentiated through (its term is zero), so one inf does
    not spread NaN over the example.  Padding gets garbage gradient, which
    the caller's ``fill_padding`` drops.
    """

    @staticmethod
    def forward(ctx, data, mask, reduced, n, correction, every_dim):  # noqa: ANN001
        mean = data.sum(reduced, keepdim=True) / n
        centred = torch.where(mask, data - mean, 0)
        ctx.save_for_backward(centred, n, data == mean if every_dim else None)
        ctx.correction, ctx.every_dim = correction, every_dim
        return (centred * centred).sum(reduced, keepdim=True) / (n - correction).clamp(min=0)

    @staticmethod
    @torch.autograd.function.once_differentiable  # centred is saved without its graph
    def backward(ctx, grad):  # noqa: ANN001
        centred, n, at_mean = ctx.saved_tensors
        dof = n - ctx.correction
        result = (2.0 / dof) * grad * centred
        if ctx.every_dim:
            result = torch.where(dof <= 0, grad * degenerate_factor(at_mean, centred.dtype),
                                 result)
        return result, None, None, None, None, None


def _variance(x: MaskedBatch, reduced: tuple[int, ...], correction: float,
              every_dim: bool) -> torch.Tensor:
    if _capture.capturing() is not None:
        return captured_variance(_masking.fill_padding(x, 0), x.mask, reduced,
                                 count(x, reduced), correction, every_dim)
    return _Variance.apply(_masking.fill_padding(x, 0), x.mask, reduced, count(x, reduced),
                           correction, every_dim)


def _sqrt_like_std(variance: torch.Tensor) -> torch.Tensor:
    """``sqrt`` whose gradient is 0 where the result is 0, as ``torch.std``'s own.

    The composed ``sqrt`` would give ``inf * 0 = nan`` there (an example of one
    element with ``correction=0``).
    """
    zero = variance == 0
    root = torch.where(zero, torch.ones_like(variance), variance).sqrt()
    return torch.where(zero, torch.zeros_like(variance), root)


@_lengths.aware
@_registry.implements(torch.var, torch.Tensor.var, torch.std, torch.Tensor.std,
                      family="reduction")
def var_std(func, input, *args, **kwargs):
    op = _registry.op_name(func)
    dim, correction, keepdim = _correction(op, args, kwargs)
    reduced = reduced_dimensions(op, input, dim)
    is_std = func in (torch.std, torch.Tensor.std)
    if not reduced or (dim is not None and not any(input.dims[i - 1] for i in reduced)):
        # Static dims only (or scalar examples): torch's own var, on data as is.
        return reduce(op, input, reduced, keepdim,
                      lambda d, ds, k: func(d, ds, correction=correction, keepdim=k), None)
    # torch.var(x) without dim has its own gradient at n <= correction.
    result = _variance(input, reduced, correction, every_dim=dim is None)
    if is_std:
        result = _sqrt_like_std(result)
    mask, new_dims = reduced_layout(input, reduced, keepdim)
    return MaskedBatch._make(_keep(result, reduced, keepdim), mask, new_dims)


@_lengths.aware
@_registry.implements(torch.var_mean, torch.std_mean, family="reduction")
def var_std_mean(func, input, *args, **kwargs):
    """``(var, mean)`` / ``(std, mean)``: the two reductions above, over the same dims (torch
    computes them together; the loop's values and gradients are those of each alone)."""
    op = _registry.op_name(func)
    dim, correction, keepdim = _correction(op, args, kwargs)
    reduced_dimensions(op, input, dim)  # refused dims named as this op's
    spread = var_std(torch.std if func is torch.std_mean else torch.var, input, dim,
                     correction=correction, keepdim=keepdim)
    return spread, mean(torch.mean, input, dim, keepdim)
