"""The largest and smallest values and their positions: ``amax``/``amin`` (both at once:
``aminmax``), ``max``/``min`` (values and indices; with ``other``, the elementwise op),
``argmax``/``argmin``.

Padding is filled with the dtype's lowest (highest) value, so it never wins, and the
gradient is split over the real ties only, as in the loop.  These ops have no identity:
over an empty example they raise, as the loop does.  ``argmax``/``argmin`` without
``dim`` index each example's own flattened shape.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from matchbox import _capture, _lengths, _masking, _registry
from matchbox._example_scalars import VECTOR, mark, reduced_over
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.reductions._reduce import (
    _keep,
    highest,
    lowest,
    reduce,
    reduced_dimensions,
    reduced_layout,
    refuse_empty,
)


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
        ties = _real_ties(filled, result, mask, ctx.nan_ties)
        share = ties / ties.sum(ctx.reduced, keepdim=True)
        return grad * share, None, None, None, None


def _real_ties(filled: torch.Tensor, result: torch.Tensor, mask: torch.Tensor,
               nan_ties: bool) -> torch.Tensor:
    """The real positions equal to ``result`` (with ``nan_ties``, a NaN result's NaN
    values too): where :class:`_ExtremeOfReal`'s backward, and the captured form, share
    the gradient."""
    ties = filled == result
    if nan_ties:
        ties = ties | (filled.isnan() & result.isnan())
    return ties & mask


def extreme_of_real(filled: torch.Tensor, mask: torch.Tensor, func: Any,
                    reduced: tuple[int, ...], nan_ties: bool = False) -> torch.Tensor:
    """:class:`_ExtremeOfReal` (keeping the reduced dimensions); while a call is captured,
    :func:`_captured_extreme_of_real`, its forward written so that the graph's own
    derivative is that backward: a graph holds a Function's forward ops, not its
    backward, and the derivative of ``func`` over ``filled`` shares the gradient with
    padding that ties (an example of ``-inf`` scores)."""
    if _capture.capturing() is None:
        return _ExtremeOfReal.apply(filled, mask, func, reduced, nan_ties)
    return _captured_extreme_of_real(filled, mask, func, reduced, nan_ties)


def _captured_extreme_of_real(filled: torch.Tensor, mask: torch.Tensor, func: Any,
                              reduced: tuple[int, ...], nan_ties: bool) -> torch.Tensor:
    """``func(filled, reduced)`` whose derivative is :class:`_ExtremeOfReal`'s backward.

    The value is computed without gradient; the gradient flows through ``S``, the sum of
    the real ties times their share (its value the result itself where that is ±inf or a
    NaN tie, and where it is finite, added as ``S - S.detach()``, exactly zero).  An
    example without a tie (a NaN result of ``amax``) gets a NaN gradient at every
    position, as torch's ``amax`` gives.  No NaN reaches another example's gradient: each
    branch's input is cut by a ``where`` on that branch's own condition."""
    plain = filled.detach()
    result = func(plain, reduced, keepdim=True)
    ties = _real_ties(plain, result, mask, nan_ties)
    count = ties.sum(reduced, keepdim=True)
    share = ties.to(filled.dtype) / count.clamp(min=1).to(filled.dtype)
    shared = (torch.where(ties, filled, 0) * share).sum(reduced, keepdim=True)
    value = torch.where(result.isfinite(), result + (shared - shared.detach()), shared)
    none = count == 0
    untied = (torch.where(none, filled, 0) * math.nan).sum(reduced, keepdim=True)
    return torch.where(none, untied, value)


def _extreme_of_real(func: Any, x: MaskedBatch, reduced: tuple[int, ...], keepdim: bool,
                     fill: float | bool, nan_ties: bool = False) -> MaskedBatch:
    """``func`` (amax/amin) over ``reduced``, some of them dynamic (see :class:`_ExtremeOfReal`)."""
    filled = _masking.fill_padding(x, fill)
    if not (filled.requires_grad and torch.is_grad_enabled()):
        result = func(filled, reduced, keepdim=keepdim)
    else:
        result = _keep(extreme_of_real(filled, x.mask, func, reduced, nan_ties), reduced,
                       keepdim)
    mask, new_dims = reduced_layout(x, reduced, keepdim)
    return MaskedBatch._make(result, mask, new_dims)


@_lengths.aware
@_registry.implements(torch.amax, torch.Tensor.amax, torch.amin, torch.Tensor.amin,
                      family="reduction")
def amax_amin(func, input, dim=(), keepdim=False):
    return reduced_over(_extreme(_registry.op_name(func), func in (torch.amax, torch.Tensor.amax),
                                 input, dim, keepdim), dim, keepdim)


@_lengths.aware
@_registry.implements(torch.aminmax, torch.Tensor.aminmax, family="reduction")
def aminmax(func, input, *, dim=None, keepdim=False, out=None):
    """``(amin, amax)`` over ``dim`` (``None``: every dimension), each as above: the loop's
    values and gradients are those of each alone."""
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    low, high = (reduced_over(_extreme(op, is_max, input, dim, keepdim), dim, keepdim)
                 for is_max in (False, True))
    return torch.return_types.aminmax((low, high))


def _extreme(op: str, is_max: bool, x: MaskedBatch, dim: Any, keepdim: bool,
             nan_ties: bool = False) -> MaskedBatch:
    """The largest (smallest) value over ``dim`` (``None``: every dimension).  With
    ``nan_ties`` (``max()``/``min()``, whose gradient torch splits over the NaN values
    where the result is NaN; ``amax``'s is NaN everywhere) through :class:`_ExtremeOfReal`
    whatever the layout."""
    reduced = reduced_dimensions(op, x, dim)
    refuse_empty(op, x, reduced)
    func = torch.amax if is_max else torch.amin
    fill = (lowest if is_max else highest)(x.dtype)
    if (nan_ties and reduced) or (any(x.dims[i - 1] for i in reduced) and x._mask is not None):
        return _extreme_of_real(func, x, reduced, keepdim, fill, nan_ties)
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
        return reduced_over(_extreme(op, is_max, input, None, False, nan_ties=True), None)
    reduced = reduced_dimensions(op, input, dim)
    refuse_empty(op, input, reduced)
    data = _masking.fill_padding(input, fill) if input.dims[reduced[0] - 1] else input.data
    values, indices = func(data, reduced[0], keepdim)
    mask, new_dims = reduced_layout(input, reduced, keepdim)
    result_type = torch.return_types.max if is_max else torch.return_types.min
    return result_type((mark(MaskedBatch._make(values, mask, new_dims), VECTOR),
                        mark(MaskedBatch._make(indices, mask, new_dims), VECTOR)))


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
        return mark(reduce(op, input, reduced, keepdim, lambda d, ds, k: func(d, ds[0], k),
                           fill), VECTOR)
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
    return reduced_over(MaskedBatch._make(index, mask, new_dims), None, keepdim)


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
