"""Reductions and softmax on a ``PackedBatch``: over the packed dimension, segment ops.

Dimension numbers are those of one example ``(1, T_e, *S)``.

| op over ...               | how                                          | result                  |
|---------------------------|----------------------------------------------|-------------------------|
| static dimensions only    | the op on ``data`` (rows are independent)    | ``PackedBatch``         |
| the packed dimension 1    | a segment op: rows summed / maxed into their | ``MaskedBatch`` of static |
| (alone or with static     | example's slot (``index_add`` /              | examples, caller order, |
| dims, or every dim)       | ``scatter_reduce``, one call for the batch)  | no padding              |
| ``softmax``/``log_softmax`` over dim 1 | segment max, ``exp``, segment sum | ``PackedBatch``         |

An empty example sums to 0, its ``mean`` is NaN and its ``logsumexp`` is
``-inf``, as in the loop; ``max``/``min``/``amax``/``amin`` of an empty example
raise ``IndexError`` (the loop raises too).  ``max``/``min`` over dimension 1
return the index of the first maximal step and send the gradient to it alone,
as ``torch.max(x, dim)`` does; ``amax``/``amin`` share it among ties, as
``torch.amax`` does.  Dimension 0 is each example's own batch dimension and
cannot be reduced (use ``matchbox.batch_sum`` after reducing each example).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    MaskedBatch,
    check_mean_dtype,
    highest,
    implements,
    lowest,
    normalize_dim,
    op_name,
    reduced_dimensions,
)
from matchbox.packed.packed_batch import PackedBatch

# Dimension rules (which dims, dimension 0 refused) are core's reduced_dimensions, which
# reads only x.dim(): the same for both batch types.
# data (rows, *S), the layout -> per example (B, *S)
Segment = Callable[[torch.Tensor, Any], torch.Tensor]
# data, data dims, keepdim -> data reduced over those dims
Static = Callable[[torch.Tensor, tuple[int, ...], bool], torch.Tensor]


def reduce(op: str, x: PackedBatch, reduced: tuple[int, ...], keepdim: bool, static: Static,
           segment: Segment) -> Any:
    """Reduce ``x`` over ``dims``: static ones on ``data``, dimension 1 by ``segment``."""
    data_dims = tuple(d - 1 for d in reduced if d > 1)
    if 1 not in reduced:
        return PackedBatch._make(static(x.data, data_dims, keepdim), x.layout)
    data = static(x.data, data_dims, True) if data_dims else x.data
    per_example = segment(data, x.layout)  # (B, *S) with reduced static dims of size 1
    if keepdim:
        per_example = per_example.unsqueeze(1)
    elif data_dims:
        per_example = per_example.squeeze(data_dims)
    return MaskedBatch._make(per_example, None, (False,) * (per_example.dim() - 1))


def refuse_empty(op: str, x: PackedBatch, reduced: tuple[int, ...]) -> None:
    """Raise, as the loop would, when an example is empty and dimension 1 is reduced."""
    if 1 not in reduced:
        return
    empty = (x.layout.lengths == 0).nonzero()
    if empty.numel():
        raise IndexError(
            f"{op}: example {int(empty[0])} has size 0 in dynamic dimension 1, and {op} of "
            "an empty dimension is undefined"
        )


# ---------------------------------------------------------------------------- segment ops


def _index(layout: Any, like: torch.Tensor) -> torch.Tensor:
    """Each row's example, shaped to scatter ``like`` (rows, *S) along dimension 0."""
    index = layout.row_examples
    return index.view(-1, *[1] * (like.dim() - 1)).expand_as(like)


def segment_sum(data: torch.Tensor, layout: Any) -> torch.Tensor:
    out = data.new_zeros(layout.batch_size, *data.shape[1:])
    return out.index_add(0, layout.row_examples, data)


def segment_extreme(data: torch.Tensor, layout: Any, largest: bool) -> torch.Tensor:
    """Per-example max (or min); an empty example gets the dtype's lowest (highest) value."""
    fill = lowest(data.dtype) if largest else highest(data.dtype)
    out = data.new_full((layout.batch_size, *data.shape[1:]), fill)
    return out.scatter_reduce(0, _index(layout, data), data, "amax" if largest else "amin")


def per_row(per_example: torch.Tensor, layout: Any) -> torch.Tensor:
    """Each example's value repeated on its rows."""
    return per_example.index_select(0, layout.row_examples)


def _shift(data: torch.Tensor, layout: Any, *, keep_inf: bool = False) -> torch.Tensor:
    """A per-example shift that keeps ``exp`` finite (no gradient: results do not depend on it).

    ``keep_inf``: an example holding ``+inf`` is shifted by it, as torch's
    softmax does (its result is then NaN, as the loop's); logsumexp is ``inf``
    there, which a shift of zero gives.
    """
    top = segment_extreme(data.detach(), layout, largest=True)
    finite = torch.isfinite(top) | (top == float("inf")) if keep_inf else torch.isfinite(top)
    return torch.where(finite, top, torch.zeros_like(top))


def segment_logsumexp(data: torch.Tensor, layout: Any) -> torch.Tensor:
    shift = _shift(data, layout)
    total = segment_sum((data - per_row(shift, layout)).exp(), layout)
    return total.log() + shift


def _arg_extreme(data: torch.Tensor, layout: Any, largest: bool) -> tuple[torch.Tensor, ...]:
    """Per example: the first step holding the max (min) and its value, with the gradient
    going to that row alone (as ``torch.max(x, dim)``)."""
    best = per_row(segment_extreme(data.detach(), layout, largest), layout)
    hit = (data == best) | (torch.isnan(data) & torch.isnan(best))
    never = layout.max_length
    steps = layout.row_steps.view(-1, *[1] * (data.dim() - 1)).expand_as(data)
    first = torch.full((layout.batch_size, *data.shape[1:]), never, dtype=torch.int64,
                       device=data.device)
    indices = first.scatter_reduce(0, _index(layout, data),
                                   torch.where(hit, steps, torch.full_like(steps, never)), "amin")
    slots = layout.unsorted_indices.view(-1, *[1] * (data.dim() - 1))
    rows = layout.device_offsets().index_select(0, indices.flatten()).view_as(indices) + slots
    return data.gather(0, rows), indices


# ---------------------------------------------------------------------------- handlers


def _as_dtype(x: PackedBatch, dtype: Any) -> PackedBatch:
    """``x`` with its rows cast to ``dtype`` (``None``: as it is), as ``dtype=`` asks."""
    return x if dtype is None else PackedBatch._make(x.data.to(dtype), x.layout)


@implements(torch.sum, torch.Tensor.sum, family="reduction", batch_type="PackedBatch")
def sum_(func, input, dim=None, keepdim=False, *, dtype=None):
    op = op_name(func)
    reduced = reduced_dimensions(op, input, dim)
    x = _as_dtype(input, dtype)
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        x = _as_dtype(x, torch.int64)  # torch.sum promotes integers
    return reduce(op, x, reduced, keepdim, lambda d, ds, k: torch.sum(d, ds, keepdim=k),
                  segment_sum)


@implements(torch.mean, torch.Tensor.mean, family="reduction", batch_type="PackedBatch")
def mean(func, input, dim=None, keepdim=False, *, dtype=None):
    op = op_name(func)
    reduced = reduced_dimensions(op, input, dim)
    x = _as_dtype(input, dtype)
    check_mean_dtype(op, x.dtype)

    def segment_mean(data, layout):
        # The static dims were averaged first: every row counts once.
        count = layout.device_lengths().to(data.dtype)
        return segment_sum(data, layout) / count.view(-1, *[1] * (data.dim() - 1))

    return reduce(op, x, reduced, keepdim, lambda d, ds, k: torch.mean(d, ds, keepdim=k),
                  segment_mean)


@implements(torch.amax, torch.Tensor.amax, torch.amin, torch.Tensor.amin,
            family="reduction", batch_type="PackedBatch")
def amax_amin(func, input, dim=(), keepdim=False):
    op = op_name(func)
    reduced = reduced_dimensions(op, input, dim)
    refuse_empty(op, input, reduced)
    largest = func in (torch.amax, torch.Tensor.amax)
    static = torch.amax if largest else torch.amin
    return reduce(op, input, reduced, keepdim, lambda d, ds, k: static(d, ds, keepdim=k),
                  lambda d, layout: segment_extreme(d, layout, largest))


@implements(torch.max, torch.Tensor.max, torch.min, torch.Tensor.min,
            family="reduction", batch_type="PackedBatch")
def max_min(func, input, *args, **kwargs):
    """``max(x)``, ``max(x, dim, keepdim)`` -> (values, indices), ``max(x, other)``."""
    largest = "max" in func.__name__
    other = args[0] if args else kwargs.get("other")
    if isinstance(other, (torch.Tensor, PackedBatch)):
        from matchbox.packed.ops.pointwise import pointwise

        return pointwise(torch.maximum if largest else torch.minimum, input, other)
    op = op_name(func)
    dim = args[0] if args else kwargs.get("dim")
    keepdim = args[1] if len(args) > 1 else kwargs.get("keepdim", False)
    if dim is None:  # every dimension: values only, ties share the gradient
        return amax_amin(torch.amax if largest else torch.amin, input)
    reduced = reduced_dimensions(op, input, dim)
    refuse_empty(op, input, reduced)
    result_type = torch.return_types.max if largest else torch.return_types.min
    if reduced != (1,):
        values, indices = func(input.data, reduced[0] - 1, keepdim)
        return result_type((PackedBatch._make(values, input.layout),
                            PackedBatch._make(indices, input.layout)))
    values, indices = _arg_extreme(input.data, input.layout, largest)
    if keepdim:
        values, indices = values.unsqueeze(1), indices.unsqueeze(1)
    dims_out = (False,) * (values.dim() - 1)
    return result_type((MaskedBatch._make(values, None, dims_out),
                        MaskedBatch._make(indices, None, dims_out)))


@implements(torch.logsumexp, torch.Tensor.logsumexp, family="reduction", batch_type="PackedBatch")
def logsumexp(func, input, dim, keepdim=False):
    op = op_name(func)
    reduced = reduced_dimensions(op, input, dim)
    return reduce(op, input, reduced, keepdim, lambda d, ds, k: torch.logsumexp(d, ds, k),
                  segment_logsumexp)


@implements(F.softmax, torch.softmax, torch.Tensor.softmax, F.log_softmax,
            torch.log_softmax, torch.Tensor.log_softmax, F.softmin, family="softmax", batch_type="PackedBatch")
def softmax(func, input, dim=None, _stacklevel=3, dtype=None):
    op = op_name(func)
    if func is F.softmin:  # softmin(x) is softmax(-x), as torch computes it
        input = PackedBatch._make(-input.data, input.layout)
    if dim is None:
        raise ValueError(f"{op}: dim must be given for a batch (implicit dim choice is "
                         "deprecated in PyTorch and ambiguous for examples)")
    d = normalize_dim(op, dim, input.dim())
    if d == 0:
        raise ValueError(f"{op}: dimension 0 is the batch dimension of each example (size "
                         "one); softmax over it is not defined for batches")
    log = "log_softmax" in func.__name__
    data = _as_dtype(input, dtype).data
    if d > 1:  # within each row
        result = torch.log_softmax(data, d - 1) if log else torch.softmax(data, d - 1)
        return PackedBatch._make(result, input.layout)
    layout = input.layout
    shifted = data - per_row(_shift(data, layout, keep_inf=True), layout)
    if log:
        result = shifted - per_row(segment_sum(shifted.exp(), layout).log(), layout)
    else:
        exp = shifted.exp()
        result = exp / per_row(segment_sum(exp, layout), layout)
    return PackedBatch._make(result, layout)

