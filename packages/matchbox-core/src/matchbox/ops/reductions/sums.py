"""Reductions with an identity: ``sum``/``nansum``, ``mean``/``nanmean``, ``prod``,
``logsumexp``, ``any``/``all``, ``count_nonzero`` (a sum of ``x != 0``).

Over a dynamic dimension padding is first filled with the op's identity (0, 1,
``-inf``, ``True`` for ``all``; NaN for ``nanmean``, which skips it), and ``mean``
divides by each example's own count.  The reduction of an empty example is real, as in
the loop.
"""

from __future__ import annotations

import math

import torch

from matchbox import _lengths, _masking, _registry
from matchbox.ops.reductions._reduce import (
    _keep,
    check_mean_dtype,
    count,
    reduce,
    reduced_dimensions,
)


@_lengths.aware
@_registry.implements(torch.sum, torch.Tensor.sum, torch.nansum, torch.Tensor.nansum,
                      family="reduction")
def sum_(func, input, dim=None, keepdim=False, *, dtype=None):
    op = _registry.op_name(func)
    return reduce(op, input, dim, keepdim,
                  lambda d, ds, k: func(d, ds, keepdim=k, dtype=dtype), 0)


@_registry.implements(torch.nanmean, torch.Tensor.nanmean, family="reduction")
def nanmean(func, input, dim=None, keepdim=False, *, dtype=None, out=None):
    """The mean of the values that are not NaN: padding, filled with NaN, is skipped as
    the loop skips a real NaN (and gets no gradient, as a real NaN gets none)."""
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        func(input.data.narrow(0, 0, 0))  # the loop's error: nanmean needs floats
    return reduce(op, input, dim, keepdim,
                  lambda d, ds, k: func(d, ds, keepdim=k, dtype=dtype), math.nan)


@_lengths.aware
@_registry.implements(torch.prod, torch.Tensor.prod, family="reduction")
def prod(func, input, dim=None, keepdim=False, *, dtype=None):
    op = _registry.op_name(func)
    reduced = reduced_dimensions(op, input, dim)

    def reducer(data, ds, k):
        for d in reversed(ds):
            data = torch.prod(data, d, keepdim=True, dtype=dtype)
        return _keep(data, ds, k)

    return reduce(op, input, reduced, keepdim, reducer, 1)


@_lengths.aware
@_registry.implements(torch.mean, torch.Tensor.mean, family="reduction")
def mean(func, input, dim=None, keepdim=False, *, dtype=None):
    op = _registry.op_name(func)
    reduced = reduced_dimensions(op, input, dim)
    if not any(input.dims[i - 1] for i in reduced):
        return reduce(op, input, reduced, keepdim,
                      lambda d, ds, k: func(d, ds, keepdim=k, dtype=dtype), None)
    if dtype is None:
        check_mean_dtype(op, input.dtype)

    def reducer(data, ds, k):
        total = torch.sum(data, ds, keepdim=True, dtype=dtype)
        # The count has the input's dtype; the mean has dtype= when given.
        return _keep(total / count(input, ds).to(total.dtype), ds, k)

    return reduce(op, input, reduced, keepdim, reducer, 0)


@_lengths.aware
@_registry.implements(torch.logsumexp, torch.Tensor.logsumexp, family="reduction")
def logsumexp(func, input, dim, keepdim=False):
    op = _registry.op_name(func)
    return reduce(op, input, dim, keepdim, lambda d, ds, k: func(d, ds, k), -math.inf)


@_lengths.aware
@_registry.implements(torch.any, torch.Tensor.any, torch.all, torch.Tensor.all,
                      family="reduction")
def any_all(func, input, dim=None, keepdim=False):
    op = _registry.op_name(func)
    identity = func in (torch.all, torch.Tensor.all)

    def reducer(data, ds, k):
        flags = data if data.dtype == torch.bool else data != 0
        for d in reversed(ds):
            flags = func(flags, d, keepdim=True)
        # torch.any/all of uint8 give uint8 (every other dtype gives bool).
        flags = flags.to(torch.uint8) if data.dtype == torch.uint8 else flags
        return _keep(flags, ds, k)

    return reduce(op, input, dim, keepdim, reducer, identity)


@_lengths.aware  # (a comparison and a sum, which keep the lengths)
@_registry.implements(torch.count_nonzero, torch.Tensor.count_nonzero, family="reduction")
def count_nonzero(func, input, dim=None):
    """Each example's own count: padding, whatever it holds, is not counted."""
    nonzero = input != 0
    return nonzero.sum() if dim is None else nonzero.sum(dim)


def is_all_true(func, input):
    """Whether every value is true (PyTorch's validation checks: ``torch.distributions``
    raises unless it is): a plain bool tensor, where each running example's own answer is
    the same, which is then every example's answer in the loop.  Examples that disagree
    cannot take one branch each: refused, naming the first that is not all true."""
    op = _registry.op_name(func)
    if input.dtype != torch.bool:
        # (the loop's is an internal assert of torch's: a bool tensor is expected)
        raise RuntimeError(f"{op}: expects a bool tensor, got {input.dtype}")
    flags = _masking.fill_padding(input, True).reshape(input.data.size(0), -1).all(1)
    ran = _masking.running(torch.ones_like(flags))
    true, false = bool((flags & ran).any()), bool((~flags & ran).any())
    if not (true and false):
        return torch.tensor(not false, device=input.device)
    j = int((~flags & ran).nonzero()[0])
    raise ValueError(
        f"{op}: example {j} has a false value and another example has none; each example "
        "of the loop would take its own branch on this answer, which a batch cannot (a "
        f"check failing for example {j} only, such as a torch.distributions argument out "
        "of its support)")


if hasattr(torch, "_is_all_true"):  # (a private helper of torch's validation: not in every torch)
    _registry.implements(torch._is_all_true, family="reduction")(is_all_true)
