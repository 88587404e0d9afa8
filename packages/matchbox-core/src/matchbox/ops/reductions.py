"""Reductions over static and dynamic dimensions.

Semantics: dimension numbers are those of one example; dimension 0 (each
example's own batch dimension of size one) cannot be reduced across the batch
(use ``matchbox.batch_sum``).  Over a static dimension the data is reduced as
is: padding only reaches padding.  Over a dynamic dimension padding is first
replaced by the op's identity (0 for ``sum``, ``-inf`` for ``max``, ...), and
``mean``/``var``/``std`` divide by each example's own count.  The reduced
dimension leaves the mask; when no dynamic dimension remains, every example
is real (the reduction of an empty example is real, as in the loop: ``sum``
gives 0, ``mean`` NaN, ``var`` of too few elements NaN or inf).  ``max``/
``min``/``amax``/``amin``/``arg*`` and norms of order ``inf`` or below 0 (no
identity) of an empty example raise, as in the loop.  Examples that are
scalars (``dims == ()``) reduce to themselves, never across the batch.
``var``/``std`` over a dynamic dimension (or without ``dim``) use torch's own
gradient formula, so even degenerate examples get the loop's gradients.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from matchbox import _capture, _lengths, _masking, _registry
from matchbox.masked_batch import MaskedBatch, mask_from_lengths, normalize_dim

Reducer = Callable[[torch.Tensor, tuple[int, ...], bool], torch.Tensor]


def reduced_dimensions(op: str, x: MaskedBatch, dim: Any) -> tuple[int, ...]:
    """Normalised non-batch dimensions to reduce; ``None`` means all of them."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(1, x.dim()))
    asked = dim if isinstance(dim, (tuple, list)) else (dim,)
    out = tuple(sorted({normalize_dim(d, x.dim(), op) for d in asked}))
    if 0 in out:
        raise ValueError(
            f"{op}: cannot reduce over dimension 0, the batch dimension of each example; "
            "reduce across examples with matchbox.batch_sum or matchbox.batch_mean"
        )
    return out


def reduced_layout(
    x: MaskedBatch, reduced: tuple[int, ...], keepdim: bool
) -> tuple[torch.Tensor, tuple[bool, ...]]:
    """The mask and dims of ``x`` reduced over the dimensions ``reduced`` (ints)."""
    remaining = tuple(d for i, d in enumerate(x.dims, start=1) if i not in reduced)
    if keepdim:
        new_dims = tuple(False if i in reduced else d for i, d in enumerate(x.dims, start=1))
    else:
        new_dims = remaining
    dynamic = [i for i in reduced if x.dims[i - 1]]
    if x._mask is None or (dynamic and not any(remaining)):
        # Every example's reduction is real, even over an empty extent (a sum
        # of nothing is 0).  A reduction over static dims only keeps the mask,
        # which may mark whole examples as not real (as after ``unbind``).
        return None, new_dims
    mask = x._mask
    lengths = _lengths.carried(mask)
    if lengths is not None:
        # An example empty in part has an all-false mask, whose ``any`` would lose
        # its sizes in the remaining dimensions: the mask comes from its lengths.
        kept = [k for k, i in enumerate(i for i, d in enumerate(x.dims, 1) if d)
                if i not in reduced]
        lengths = lengths[:, kept]
        shape = [1 if i in reduced else n for i, n in enumerate(x.data.shape)]
        mask = mask_from_lengths(lengths, shape, tuple(False if i in reduced else d
                                                       for i, d in enumerate(x.dims, 1)))
    elif dynamic:
        mask = mask.any(dim=dynamic, keepdim=True)
    if not keepdim:
        mask = mask.squeeze(reduced)
    return _lengths.rebuilt(mask, lengths, new_dims), new_dims


def reduce(
    op: str,
    x: MaskedBatch,
    dim: Any,
    keepdim: bool,
    reducer: Reducer,
    identity: float | bool | None,
) -> MaskedBatch:
    """Reduce ``x`` over ``dim``, filling padding with ``identity`` if it is mixed in."""
    rank = x.data.dim()
    if type(dim) is int and x._mask is None and -rank <= dim < rank:
        single = dim % rank
        if single and not x.dims[single - 1]:
            # The commonest reduction (``h.sum(-1)``): one static dimension of a
            # batch without padding, which has no padding to mix in or keep.
            dims = x.dims[:single - 1] + ((False,) if keepdim else ()) + x.dims[single:]
            return MaskedBatch._make(reducer(x.data, (single,), keepdim), None, dims)
    reduced = reduced_dimensions(op, x, dim)
    mixes_padding = any(x.dims[i - 1] for i in reduced)
    data = x.data
    if mixes_padding:
        if identity is None:
            raise NotImplementedError(f"{op} over a dynamic dimension is not supported")
        data = _masking.fill_padding(x, identity)
    mask, new_dims = reduced_layout(x, reduced, keepdim)
    if not reduced:
        # Examples are scalars of shape (1,): "every dimension" is none, but
        # torch reads an empty dim list as all of them, which would reduce
        # across the batch.  Reduce each example's own one-element view.
        return MaskedBatch._make(reducer(data.unsqueeze(1), (1,), False), mask, new_dims)
    return MaskedBatch._make(reducer(data, reduced, keepdim), mask, new_dims)


def count(x: MaskedBatch, reduced: tuple[int, ...]) -> torch.Tensor:
    """Each example's number of real elements over ``reduced``, kept as size-one dims."""
    dynamic = [i for i in reduced if x.dims[i - 1]]
    static = math.prod(x.data.size(i) for i in reduced if not x.dims[i - 1])
    dtype = x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else torch.float32
    if not dynamic:
        return torch.tensor(float(static), dtype=dtype, device=x.device)
    return x.mask.sum(dim=dynamic, keepdim=True).to(dtype) * static


def refuse_empty(op: str, x: MaskedBatch, reduced: tuple[int, ...]) -> None:
    """Raise, as the loop would, when a running example is empty along the reduced dims.

    An example that is not running (``_masking.EXECUTION_MASK``) gets the
    reduction's identity instead; its result is discarded.
    """
    dynamic = [i for i in reduced if x.dims[i - 1]]
    if not dynamic:
        return
    lengths = x.lengths()
    columns = [sum(x.dims[: i - 1]) for i in dynamic]
    empty = _masking.running((lengths[:, columns] == 0).any(1))
    if _capture.fails(empty):
        raise IndexError(
            f"{op}: example {int(empty.nonzero()[0])} has size 0 in dynamic dimension "
            f"{dynamic[0]}, and {op} of an empty dimension is undefined"
        )


def _keep(result: torch.Tensor, reduced: tuple[int, ...], keepdim: bool) -> torch.Tensor:
    return result if keepdim else result.squeeze(reduced)


# ---------------------------------------------------------------------------- handlers


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


def check_mean_dtype(op: str, dtype: torch.dtype) -> None:
    """Refuse integer (and bool) values as the loop's ``torch.mean`` does, with its
    message: a mean computed as a sum over a count would not."""
    if not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(
            f"{op}: could not infer output dtype. Input dtype must be either a floating "
            f"point or complex dtype. Got: {dtype}"
        )


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
    NaN where ``x == mean`` and inf elsewhere when ``n <= correction``.  The
    mean is not differentiated through (its term is zero), so one inf does
    not spread NaN over the example.  Padding gets garbage gradient, which
    the caller's ``fill_padding`` drops.
    """

    @staticmethod
    def forward(ctx, data, mask, reduced, n, correction, every_dim):  # noqa: ANN001
        centred = torch.where(mask, data - data.sum(reduced, keepdim=True) / n, 0)
        ctx.save_for_backward(centred, n)
        ctx.correction, ctx.every_dim = correction, every_dim
        return (centred * centred).sum(reduced, keepdim=True) / (n - correction).clamp(min=0)

    @staticmethod
    @torch.autograd.function.once_differentiable  # centred is saved without its graph
    def backward(ctx, grad):  # noqa: ANN001
        centred, n = ctx.saved_tensors
        dof = n - ctx.correction
        result = (2.0 / dof) * grad * centred
        if ctx.every_dim:
            special = torch.where(centred == 0, math.nan, math.inf).to(centred.dtype)
            result = torch.where(dof <= 0, grad * special, result)
        return result, None, None, None, None, None


def _variance(x: MaskedBatch, reduced: tuple[int, ...], correction: float,
              every_dim: bool) -> torch.Tensor:
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


def lowest(dtype: torch.dtype) -> float | bool:
    if dtype == torch.bool:
        return False
    if dtype.is_floating_point:
        return -math.inf
    return torch.iinfo(dtype).min


def highest(dtype: torch.dtype) -> float | bool:
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point:
        return math.inf
    return torch.iinfo(dtype).max


class _ExtremeOfReal(torch.autograd.Function):
    """``amax``/``amin`` of each example's real positions, with torch's gradient.

    Padding is filled with the lowest (highest) value, so it never wins; but
    torch splits the gradient evenly over every position equal to the result,
    and where the real values all equal the fill (an example of ``-inf``
    scores) the padding would take a share.  The backward pass splits it over
    the real ties only, as the loop does.

    Any value chosen among the real positions with that gradient rule works the
    same way (``median()`` without ``dim``, ``ops/selection.py``); with
    ``nan_ties`` a NaN result ties with the real NaN values, as in torch's
    ``evenly_distribute_backward``.
    """

    @staticmethod
    def forward(ctx, filled, mask, func, reduced, nan_ties=False):  # noqa: ANN001
        result = func(filled, reduced, keepdim=True)
        ctx.save_for_backward(filled, mask, result)
        ctx.reduced, ctx.nan_ties = reduced, nan_ties
        return result

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # noqa: ANN001
        filled, mask, result = ctx.saved_tensors
        ties = filled == result
        if ctx.nan_ties:
            ties = ties | (filled.isnan() & result.isnan())
        ties = ties & mask
        share = ties / ties.sum(ctx.reduced, keepdim=True)
        return grad * share, None, None, None, None


def _extreme_of_real(func: Any, x: MaskedBatch, reduced: tuple[int, ...], keepdim: bool,
                     fill: float | bool) -> MaskedBatch:
    """``func`` (amax/amin) over ``reduced``, some of them dynamic (see :class:`_ExtremeOfReal`)."""
    filled = _masking.fill_padding(x, fill)
    if not (filled.requires_grad and torch.is_grad_enabled()):
        result = func(filled, reduced, keepdim=keepdim)
    else:
        result = _keep(_ExtremeOfReal.apply(filled, x.mask, func, reduced), reduced, keepdim)
    mask, new_dims = reduced_layout(x, reduced, keepdim)
    return MaskedBatch._make(result, mask, new_dims)


@_lengths.aware
@_registry.implements(torch.amax, torch.Tensor.amax, torch.amin, torch.Tensor.amin,
                      family="reduction")
def amax_amin(func, input, dim=(), keepdim=False):
    return _extreme(_registry.op_name(func), func in (torch.amax, torch.Tensor.amax), input,
                    dim, keepdim)


def _extreme(op: str, is_max: bool, x: MaskedBatch, dim: Any, keepdim: bool) -> MaskedBatch:
    """The largest (smallest) value over ``dim`` (``None``: every dimension)."""
    reduced = reduced_dimensions(op, x, dim)
    refuse_empty(op, x, reduced)
    func = torch.amax if is_max else torch.amin
    fill = (lowest if is_max else highest)(x.dtype)
    if any(x.dims[i - 1] for i in reduced) and x._mask is not None:
        return _extreme_of_real(func, x, reduced, keepdim, fill)
    return reduce(op, x, reduced, keepdim, lambda d, ds, k: func(d, ds, keepdim=k), fill)


@_lengths.aware
@_registry.implements(torch.max, torch.Tensor.max, torch.min, torch.Tensor.min,
                      family="reduction")
def max_min(func, input, *args, **kwargs):
    """``max(x)``, ``max(x, dim, keepdim)`` -> (values, indices), ``max(x, other)``."""
    other = args[0] if args else kwargs.get("other")
    if isinstance(other, (torch.Tensor, MaskedBatch)):
        from matchbox.ops.pointwise import pointwise

        return pointwise(torch.maximum if "max" in func.__name__ else torch.minimum,
                         input, other)
    is_max = "max" in func.__name__
    dim = args[0] if args else kwargs.get("dim")
    keepdim = args[1] if len(args) > 1 else kwargs.get("keepdim", False)
    op = _registry.op_name(func)
    fill = lowest(input.dtype) if is_max else highest(input.dtype)
    if dim is None:
        return _extreme(op, is_max, input, None, False)
    reduced = reduced_dimensions(op, input, dim)
    refuse_empty(op, input, reduced)
    data = _masking.fill_padding(input, fill) if input.dims[reduced[0] - 1] else input.data
    values, indices = func(data, reduced[0], keepdim)
    mask, new_dims = reduced_layout(input, reduced, keepdim)
    result_type = torch.return_types.max if is_max else torch.return_types.min
    return result_type((MaskedBatch._make(values, mask, new_dims),
                        MaskedBatch._make(indices, mask, new_dims)))


@_lengths.aware
@_registry.implements(torch.argmax, torch.Tensor.argmax, torch.argmin, torch.Tensor.argmin,
                      family="reduction")
def argmax_argmin(func, input, dim=None, keepdim=False):
    op = _registry.op_name(func)
    is_max = "max" in func.__name__
    fill = lowest(input.dtype) if is_max else highest(input.dtype)
    if dim is not None:
        reduced = reduced_dimensions(op, input, dim)
        refuse_empty(op, input, reduced)
        return reduce(op, input, reduced, keepdim, lambda d, ds, k: func(d, ds[0], k), fill)
    # Over every element: an index into each example's own flattened shape.
    reduced = reduced_dimensions(op, input, None)
    refuse_empty(op, input, reduced)
    data = _masking.fill_padding(input, fill) if any(input.dims) else input.data
    flat = func(data.reshape(data.size(0), -1), 1)
    index = _reflatten(flat, input)
    mask, new_dims = reduced_layout(input, reduced, False)
    if keepdim:
        index = index.reshape(-1, *[1] * len(input.dims))
        mask, new_dims = reduced_layout(input, reduced, True)
    return MaskedBatch._make(index, mask, new_dims)


def _reflatten(flat: torch.Tensor, x: MaskedBatch) -> torch.Tensor:
    """Turn flat indices into the padded shape into flat indices into each example."""
    if not any(x.dims):
        return flat
    sizes = x.data.shape[1:]
    lengths = x.lengths()
    column = 0
    result = torch.zeros_like(flat)
    remainder = flat
    coords = []
    for size in reversed(sizes):
        coords.append(remainder % size)
        remainder = remainder // size
    coords.reverse()
    stride = torch.ones_like(flat)
    strides = []
    for i in reversed(range(len(sizes))):
        strides.append(stride)
        if x.dims[i]:
            column = sum(x.dims[:i])
            stride = stride * lengths[:, column]
        else:
            stride = stride * sizes[i]
    strides.reverse()
    for coord, s in zip(coords, strides):
        result = result + coord * s
    return result


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


def _norm(op: str, x: MaskedBatch, order: Any, dim: Any, keepdim: bool, dtype: Any):
    if isinstance(order, bool) or not isinstance(order, (int, float)):
        raise NotImplementedError(f"{op}: order {order!r} is not supported")
    # Padding becomes 0, which no norm of order >= 0 counts.  A negative order
    # (-inf included: the smallest magnitude) sums |x|^order, to which 0
    # contributes inf: there padding becomes +inf, which contributes 0.
    fill = math.inf if order < 0 else 0
    if order < 0 or order == math.inf:
        # These orders have no identity: torch refuses an empty dimension.
        refuse_empty(op, x, reduced_dimensions(op, x, dim))
    return reduce(op, x, dim, keepdim,
                  lambda d, ds, k: torch.linalg.vector_norm(d, order, ds, k, dtype=dtype), fill)


@_lengths.aware
@_registry.implements(torch.norm, torch.Tensor.norm, family="reduction")
def norm(func, input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    op = _registry.op_name(func)
    # torch.norm is Python code that forwards out= (usually None) to us.
    _registry.refuse_out(op, out)
    # "fro" is the 2-norm of the flattened reduced; "nuc" (a matrix norm) is not supported.
    return _norm(op, input, 2 if p in ("fro", None) else p, dim, keepdim, dtype)


@_lengths.aware
@_registry.implements(torch.linalg.vector_norm, family="reduction")
def vector_norm(func, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    return _norm(_registry.op_name(func), x, ord, dim, keepdim, dtype)
