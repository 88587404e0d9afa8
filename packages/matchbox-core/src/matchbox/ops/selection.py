"""Selection: ``median``, ``nanmedian``, ``kthvalue``, ``mode``, ``quantile`` and ``nanquantile``.

Each picks values by their order among each example's real positions along a
dimension (or all of them).  Dimension numbers are those of one example;
dimension 0 (each example's own batch dimension) cannot be reduced, as for the
other reductions.

| along                    | how                                                           |
|--------------------------|---------------------------------------------------------------|
| a static dimension (or a | torch's own op on the data, line by line: the loop exactly     |
| batch without padding)   |                                                               |
| a dynamic dimension      | the positions are ordered by a stable sort with padding last  |
|                          | (``ordering.py``: NaN fill); each example's k-th position is  |
|                          | chosen from its own count n, and the value is gathered from    |
|                          | the input at that position, so its gradient reaches exactly   |
|                          | that real position (as torch's does)                          |

- ``median``: the lower median (position ``(n - 1) // 2``); a real NaN makes it NaN, at
  the first NaN's position, as torch.  Without ``dim``: over each example's real values,
  the gradient split among the real values equal to it (torch's rule for it).
- ``nanmedian``: the lower median of the values that are not NaN (NaN where all are); a
  line of NaN only gives its first NaN's position (torch's CPU kernel gives the first for
  lines of up to 3 values, and another for longer ones: it leaves the choice unspecified,
  as for ties).
- ``kthvalue``: position ``k - 1``; NaN counts as the largest value, as in torch; ``k``
  above a (running) example's length raises, naming the example.
- ``mode``: the most frequent real value (the smallest of equally frequent ones) at its
  last position; NaN values have no order in torch's own ``mode``, so examples holding
  NaN have no defined mode (the batch counts each NaN on its own).
- ``quantile`` / ``nanquantile``: torch's algorithm (sort, rank ``q * (n - 1)``,
  interpolation) with each example's own ``n``; ``q`` is a float or a tensor of one
  value (a 1-D ``q`` of several would put them in front of each example's dimension 0).

Ties between equal real values: the batch's index is the first (``median``,
``kthvalue``) or last (``mode``) of them in position order; torch leaves the choice
unspecified (its CPU kernels give the same for short lines).  An example empty along
the dimension raises where the loop raises.  ``out=`` is refused.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from matchbox import _capture, _masking, _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.ordering import _padded_along, _sort, refuse_k_past_examples
from matchbox.ops.reductions import reduced_dimensions, reduced_layout, refuse_empty
from matchbox.ops.reductions._reduce import _keep
from matchbox.ops.reductions.extremes import extreme_of_real

FAMILY = "selection"


def _one_dim(op: str, x: MaskedBatch, dim: Any) -> int:
    reduced = reduced_dimensions(op, x, dim)
    if len(reduced) != 1:
        raise TypeError(f"{op}: dim must be one int, got {dim!r}")
    return reduced[0]


def _pair(result_type: Any, x: MaskedBatch, d: int, keepdim: bool, values: torch.Tensor,
          indices: torch.Tensor) -> Any:
    """The named tuple ``result_type`` of values and indices reduced over ``d`` (kept as size
    one in ``values``/``indices``) as batches."""
    mask, dims = reduced_layout(x, (d,), keepdim)
    return result_type((MaskedBatch._make(_keep(values, (d,), keepdim), mask, dims),
                        MaskedBatch._make(_keep(indices, (d,), keepdim), mask, dims)))


def _counts(x: MaskedBatch, d: int) -> torch.Tensor:
    """Each line's number of real positions along ``d``, kept as size one there."""
    return x._mask.sum(d, keepdim=True)


def _positions_of(op: str, x: MaskedBatch, d: int, rank: torch.Tensor) -> torch.Tensor:
    """The input positions of each line's ``rank``-th real value in sorted order (padding
    sorts last; equal values keep their order)."""
    _, order = _sort(op, x, d, False, True)
    rank = rank.clamp(0, max(x.data.size(d) - 1, 0))
    return order.gather(d, rank.expand(*order.shape[:d], 1, *order.shape[d + 1:]))


# ------------------------------------------------------------------ median


@_registry.implements(torch.median, torch.Tensor.median, torch.nanmedian,
                      torch.Tensor.nanmedian, family=FAMILY)
def median(func, input, dim=None, keepdim=False, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    skip_nan = func in (torch.nanmedian, torch.Tensor.nanmedian)
    result_type = torch.return_types.nanmedian if skip_nan else torch.return_types.median
    if dim is None:
        return _median_of_all(op, input, skip_nan)
    d = _one_dim(op, input, dim)
    refuse_empty(op, input, (d,))
    if not _padded_along(input, d):
        values, indices = func(input.data, d, True)
        return _pair(result_type, input, d, keepdim, values, indices)
    floating = input.dtype.is_floating_point
    nan = input.data.isnan() & input._mask if floating else None
    counted = _counts(input, d) - (nan.sum(d, keepdim=True) if skip_nan and floating else 0)
    # nanmedian: the lower median of the values that are not NaN; NaN (and padding) sort
    # last, so a line of NaN only gets its first NaN.
    index = _positions_of(op, input, d, (counted - 1).clamp(min=0) // 2)
    if floating and not skip_nan:
        # torch's median of a line holding NaN is NaN, at its first NaN.
        index = torch.where(nan.any(d, keepdim=True), nan.to(torch.uint8).argmax(d, True), index)
    values = input.data.gather(d, index)
    return _pair(result_type, input, d, keepdim, values, index)


def _median_of_all(op: str, x: MaskedBatch, skip_nan: bool) -> MaskedBatch:
    """Each example's lower median over all its real values (``skip_nan``: those that are
    not NaN): a per-example scalar."""
    if x.dims == ():
        return x  # a scalar is its own median
    reduced = tuple(range(1, x.dim()))
    floating = x.dtype.is_floating_point
    if not floating:
        refuse_empty(op, x, reduced)
    fill = math.nan if floating else torch.iinfo(x.dtype).max if x.dtype != torch.bool else True
    filled = _masking.fill_padding(x, fill)
    mask = x.mask

    def choose(data: torch.Tensor, ds: Any, keepdim: bool = True) -> torch.Tensor:
        return _lower_median(data, mask, floating, skip_nan)

    if filled.requires_grad and torch.is_grad_enabled():
        value = extreme_of_real(filled, mask, choose, reduced, True)
    else:
        value = choose(filled, reduced)
    layout, new_dims = reduced_layout(x, reduced, False)
    return MaskedBatch._make(value.reshape(-1), layout, new_dims)


def _lower_median(filled: torch.Tensor, mask: torch.Tensor, floating: bool,
                  skip_nan: bool) -> torch.Tensor:
    """The lower median of each example's real values (padding filled to sort last), NaN
    if one is NaN (``skip_nan``: of those that are not NaN, NaN if none is) and for an
    empty example; kept as size one in every dimension."""
    batch = filled.size(0)
    flat = filled.reshape(batch, -1)
    real = mask.expand_as(filled).reshape(batch, -1)
    nan = flat.isnan() & real if floating else None
    if skip_nan and floating:
        real = real & ~nan  # NaN sorts last, with the padding
    count = real.sum(1, keepdim=True)
    ordered = torch.sort(flat, dim=1, stable=True).values
    value = ordered.gather(1, ((count - 1).clamp(min=0) // 2).clamp(max=max(flat.size(1) - 1, 0)))
    if floating:
        value = torch.where((count == 0) if skip_nan else nan.any(1, keepdim=True) | (count == 0),
                            math.nan, value)
    return value.view(batch, *[1] * (filled.dim() - 1))


# ------------------------------------------------------------------ kthvalue


@_registry.implements(torch.kthvalue, torch.Tensor.kthvalue, family=FAMILY)
def kthvalue(func, input, k, dim=-1, keepdim=False, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    k = _registry.int_argument(op, "k", k, "sort each example (x.sort(d)) and take x[:, k - 1]")
    d = _one_dim(op, input, dim)
    if not _padded_along(input, d):
        values, indices = torch.kthvalue(input.data, k, d, True)
        return _pair(torch.return_types.kthvalue, input, d, keepdim, values, indices)
    if k < 1:
        raise RuntimeError(f"{op}: selected number k={k} out of range (k counts from 1)")
    refuse_empty(op, input, (d,))
    refuse_k_past_examples(op, input, d, k, "selected number k")
    rank = torch.full([1] * input.data.dim(), k - 1, dtype=torch.long, device=input.device)
    index = _positions_of(op, input, d, rank)
    return _pair(torch.return_types.kthvalue, input, d, keepdim, input.data.gather(d, index),
                 index)


# ------------------------------------------------------------------ mode


@_registry.implements(torch.mode, torch.Tensor.mode, family=FAMILY)
def mode(func, input, dim=-1, keepdim=False, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    d = _one_dim(op, input, dim)
    refuse_empty(op, input, (d,))
    if not _padded_along(input, d):
        values, indices = torch.mode(input.data, d, True)
        return _pair(torch.return_types.mode, input, d, keepdim, values, indices)
    ordered, order = _sort(op, input, d, False, True)
    size = ordered.size(d)
    line = [1] * ordered.dim()
    line[d] = size
    position = torch.arange(size, device=input.device).view(line)
    count = _counts(input, d)
    real = position < count
    # Runs of equal values in sorted order: where each starts, and its length at its end.
    before = torch.cat([ordered.narrow(d, 0, 1), ordered.narrow(d, 0, size - 1)], d)
    after = torch.cat([ordered.narrow(d, 1, size - 1), ordered.narrow(d, size - 1, 1)], d)
    starts = (position == 0) | (ordered != before)
    ends = real & ((position == count - 1) | (ordered != after))
    start = torch.where(starts, position, 0).cummax(d).values
    frequency = torch.where(ends, position - start + 1, 0)
    # The first longest run (argmax gives the first maximum): the smallest most
    # frequent value; its end is its last position in the input (a stable sort).
    index = order.gather(d, frequency.argmax(d, keepdim=True))
    return _pair(torch.return_types.mode, input, d, keepdim, input.data.gather(d, index), index)


# ------------------------------------------------------------------ quantile

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


@_registry.implements(torch.quantile, torch.Tensor.quantile, torch.nanquantile,
                      torch.Tensor.nanquantile, family=FAMILY)
def quantile(func, input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    ignore_nan = "nan" in func.__name__
    name = "nanquantile" if ignore_nan else "quantile"
    if input.dtype not in (torch.float32, torch.float64):
        raise RuntimeError(f"{op}: {name}() input tensor must be either float or double dtype")
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"{op}: {name}() interpolation must be one of linear, lower, higher, "
                         f"midpoint or nearest, but got {interpolation}")
    if isinstance(q, torch.Tensor) and q.dtype != input.dtype:
        raise RuntimeError(f"{op}: {name}() q tensor must be same dtype as the input tensor")
    value, new_dim = _q_value(op, q)
    if not 0 <= value <= 1:
        raise RuntimeError(f"{op}: {name}() q must be in the range [0, 1] but got {value}")
    reduced = reduced_dimensions(op, input, dim)
    batch = input.data.size(0)
    if not reduced:
        result = input.data  # a scalar is each of its own quantiles
    elif dim is not None and len(reduced) == 1 and not _padded_along(input, reduced[0]):
        result = func(input.data, value, reduced[0], True, interpolation=interpolation)
    elif input._mask is None:  # every example has the padded shape
        result = func(input.data.reshape(batch, -1), value, 1, True,
                      interpolation=interpolation).view(batch, *[1] * (input.dim() - 1))
    else:
        result = _quantile(op, name, input, reduced, value, interpolation, ignore_nan)
    mask, layout_dims = reduced_layout(input, reduced, keepdim)
    result = _keep(result, reduced, keepdim) if reduced else result.reshape(-1)
    if new_dim:
        # A 1-D q of one value: one leading dimension of size one per example (a batch
        # of per-example scalars gets that one dimension; others a new dimension 1).
        if layout_dims:
            result = result.unsqueeze(1)
            mask = None if mask is None else mask.unsqueeze(1)
            layout_dims = (False,) + layout_dims
    return MaskedBatch._make(result, mask, layout_dims)


def _q_value(op: str, q: Any) -> tuple[float, bool]:
    """``q`` as a float, and whether it was a 1-D tensor (a new leading dimension)."""
    if isinstance(q, MaskedBatch):
        raise NotImplementedError(f"{op}: q must be a float or a plain tensor (the same for "
                                  "every example), not a batch")
    if isinstance(q, torch.Tensor):
        if q.dim() > 1 or q.numel() != 1:
            raise ValueError(
                f"{op}: q of shape {tuple(q.shape)} puts its {q.numel()} quantiles in a new "
                "dimension 0, in front of each example's batch dimension, which a batch cannot "
                "hold; call it once per q (a float, or a tensor of one value)")
        return float(q.reshape(())), q.dim() == 1
    return float(q), False


def _quantile(op: str, name: str, x: MaskedBatch, reduced: tuple[int, ...], q: float,
              interpolation: str, ignore_nan: bool) -> torch.Tensor:
    """torch's quantile over ``dims`` of each example's real values, kept as size one."""
    rank = x.data.dim()
    if len(reduced) == 1:
        d = reduced[0]
        data, real = x.data, x.mask
    else:  # every dimension: each example's values in one line
        d = 1
        data = x.data.reshape(x.data.size(0), -1)
        real = x.mask.expand_as(x.data).reshape(data.shape)
    line = MaskedBatch._make(data, real if x._mask is not None else None,
                             (True,) if len(reduced) > 1 else x.dims)
    count = real.sum(d, keepdim=True)
    empty = _masking.running((count == 0).reshape(count.size(0), -1).all(1)
                             if len(reduced) > 1 else _empty_example(x, d))
    # The op goes on (an empty example reads position 0): on an accelerator, inside
    # @batch, the check is read when the call ends.
    _capture.check(empty, functools.partial(_empty_error, op, name, empty, reduced))
    ordered, _ = _sort(op, line, d, False, True)  # NaN (padding and real) sorts last
    nan = data.isnan() & real
    if ignore_nan:
        last = count - nan.sum(d, keepdim=True) - 1
        ranks = (q * last.to(data.dtype)).clamp(min=0)
    else:
        last = count - 1
        ranks = torch.where(nan.any(d, keepdim=True), last.to(data.dtype),
                            q * last.to(data.dtype))
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()
    top = max(data.size(d) - 1, 0)
    below = ranks.long().clamp(0, top)
    values = ordered.gather(d, below)
    if interpolation in ("linear", "midpoint"):
        weights = (torch.full_like(ranks, 0.5) if interpolation == "midpoint"
                   else ranks - ranks.long())
        above = ranks.ceil().long().clamp(0, top)
        values = torch.lerp(values, ordered.gather(d, above), weights)
    if len(reduced) > 1:
        values = values.view(x.data.size(0), *[1] * (rank - 1))
    return values


def _empty_example(x: MaskedBatch, d: int) -> torch.Tensor:
    """Whether each example is empty along ``d`` (a dynamic dimension)."""
    if not x.dims[d - 1] or x._mask is None:
        return torch.zeros(x.data.size(0), dtype=torch.bool, device=x.device) \
            if x.data.size(d) else torch.ones(x.data.size(0), dtype=torch.bool, device=x.device)
    return _masking.lengths_along(x, d) == 0


def _empty_error(op: str, name: str, empty: torch.Tensor, reduced: tuple[int, ...]
                 ) -> RuntimeError:
    return RuntimeError(f"{op}: {name}() input tensor must be non-empty: example "
                        f"{int(empty.nonzero()[0])} has no value along dimension "
                        f"{reduced[0] if len(reduced) == 1 else 'any'}")
