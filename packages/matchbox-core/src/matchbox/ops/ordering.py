"""Ordering: scans, differences and sorts along a dimension, flips, rolls, and moves of
dimensions.

Dimension numbers are those of one example.  What happens to padding and mask:

| ops                          | along a static dim    | along a dynamic dim                        |
|------------------------------|-----------------------|--------------------------------------------|
| cumsum, cumprod,             | run on the data as    | real outputs read only their example's     |
| logcumsumexp, cummax, cummin | is, mask kept (a line | real prefix (padding comes after it); the  |
|                              | along a static dim is | result is guarded, so a gradient arriving  |
|                              | all real or all       | at padding never flows back into a real    |
|                              | padding)              | input; cumprod fills padding with 0 and    |
|                              |                       | logcumsumexp with -inf first, so that      |
|                              |                       | their backward formulas, which read the    |
|                              |                       | outputs, never read NaN from padding       |
| sort, argsort                | as above              | padding filled with a value that sorts     |
|                              |                       | last (NaN ascending, -inf descending; the  |
|                              |                       | dtype's max/min for integers) and a stable |
|                              |                       | sort, so real values (ties with the fill   |
|                              |                       | included) fill each example's prefix;      |
|                              |                       | indices are each example's own positions   |
| topk                         | as above              | the first k of that stable sort; the       |
|                              |                       | dimension becomes static (size k); k above |
|                              |                       | a running example's length raises          |
| flip, fliplr, flipud         | as above              | each example's real positions reversed in  |
|                              |                       | place (i -> n - 1 - i), padding left as is |
| diff                         | as above              | each example's real positions' differences |
|                              |                       | (``x[1:] - x[:-1]``, by indexing: one fewer|
|                              |                       | each order; ``prepend``/``append`` joined  |
|                              |                       | to the real positions first); not along    |
|                              |                       | dimension 0 (its size would be zero)       |
| trapezoid, trapz,            | as above              | from diff's slices: each example's own     |
| cumulative_trapezoid         |                       | intervals, summed (0 for a length of zero  |
|                              |                       | or one) or running; not along dimension 0  |
| roll                         | as above              | each example's real positions rotated in   |
|                              |                       | place (i -> (i + shift) mod n); without    |
|                              |                       | dims, each example's flattened values      |
| movedim, moveaxis, Tensor.mT | the same permutation of data, mask and dims; dimension 0  |
|                              | (each example's batch dimension) stays first               |

Along dimension 0 (each example's own size-one batch dimension) the scans,
sorts and flips act on that size-one dimension, as in the loop: they are the
identity (indices 0), and ``topk`` takes ``k=1``.  ``sorted=False`` in ``topk``
leaves the order unspecified in torch; along a dynamic dimension the result is
sorted.  Ties between real values come in the order of their positions (the
stable sort) along a dynamic dimension, which the loop's unstable sort does
not promise either.  ``out=`` is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from matchbox import _capture, _lengths, _masking, _registry
from matchbox.masked_batch import MaskedBatch, normalize_dim
from matchbox.ops.shape import transpose

FAMILY = "ordering"


def _on_batch_dim(fn: Callable[[torch.Tensor, int], Any], data: torch.Tensor) -> Any:
    """``fn(data, d)`` along each example's size-one dimension 0: a dimension of size one
    per example is put in position 1, worked along, and removed again."""
    result = fn(data.unsqueeze(1), 1)
    if isinstance(result, tuple):
        return tuple(r.squeeze(1) for r in result)
    return result.squeeze(1)


def _padded_along(x: MaskedBatch, d: int) -> bool:
    """Whether ``x`` has padding along dimension ``d`` (``d > 0``) that an op there mixes in."""
    return x.dims[d - 1] and x._mask is not None


def _sorts_last(dtype: torch.dtype, descending: bool) -> float | int | bool:
    """A value that a sort in that direction puts after every other (ties aside).

    torch sorts NaN above +inf, so NaN is the float fill of an ascending sort.
    """
    if dtype == torch.bool:
        return not descending
    if dtype.is_floating_point or dtype.is_complex:
        return -math.inf if descending else math.nan
    info = torch.iinfo(dtype)
    return info.min if descending else info.max


# ------------------------------------------------------------------ scans


def _scan(op: str, run: Callable[[torch.Tensor, int], torch.Tensor], x: MaskedBatch, dim: Any,
          fill: float | None) -> tuple[torch.Tensor | tuple[torch.Tensor, ...], bool]:
    """``run(data, d)`` along ``dim``; whether padding along it was mixed in (to guard)."""
    d = normalize_dim(op, dim, x.dim())
    if d == 0:
        return _on_batch_dim(run, x.data), False
    if not _padded_along(x, d):
        return run(x.data, d), False
    data = x.data if fill is None else _masking.fill_padding(x, fill)
    return run(data, d), True


@_lengths.aware
@_registry.implements(torch.cumsum, torch.Tensor.cumsum, torch.cumprod, torch.Tensor.cumprod,
                      family=FAMILY)
def cumsum_cumprod(func, input, dim, *, dtype=None, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    # cumprod's backward reads its outputs (grad * output), and 0 * inf is NaN: a 0 at the
    # first padding position sends torch to its formula for inputs with zeros, which reads
    # nothing from there on (tested with outputs that overflow to inf); cumsum's, nothing.
    fill = 0 if func in (torch.cumprod, torch.Tensor.cumprod) else None
    if dtype is not None and input.dtype != dtype:
        # The cast first: torch 2.3's cumprod backward through ``dtype=`` fails on
        # an input with zeros (its masked_scatter mixes the two dtypes), and the
        # zero fill makes one; values and gradients are those of ``dtype=``.
        input = MaskedBatch._make(input.data.to(dtype), input._mask, input.dims)
    result, mixed = _scan(op, func, input, dim, fill)
    if mixed:
        result = _masking.guard_gradient(result, input._mask)
    return MaskedBatch._make(result, input._mask, input.dims)


@_lengths.aware
@_registry.implements(torch.logcumsumexp, torch.Tensor.logcumsumexp, family=FAMILY)
def logcumsumexp(func, input, dim, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    # -inf (the identity) keeps the outputs at padding finite where the real ones are;
    # integers are refused by torch itself, as in the loop.
    floating = input.dtype.is_floating_point or input.dtype.is_complex
    result, mixed = _scan(op, func, input, dim,
                          -math.inf if floating else None)
    if mixed:
        result = _masking.guard_gradient(result, input._mask)
    return MaskedBatch._make(result, input._mask, input.dims)


@_lengths.aware
@_registry.implements(torch.cummax, torch.Tensor.cummax, torch.cummin, torch.Tensor.cummin,
                      family=FAMILY)
def cummax_cummin(func, input, dim, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    (values, indices), mixed = _scan(op, lambda data, d: tuple(func(data, d)), input, dim, None)
    if mixed:
        # At padding the running extreme may be a real value, whose index there
        # would send the gradient arriving at padding back to it.
        values = _masking.guard_gradient(values, input._mask)
    result_type = torch.return_types.cummax if "max" in func.__name__ else (
        torch.return_types.cummin)
    return result_type((MaskedBatch._make(values, input._mask, input.dims),
                        MaskedBatch._make(indices, input._mask, input.dims)))


# ------------------------------------------------------------------ sorting


def _sort(op: str, x: MaskedBatch, dim: Any, descending: bool,
          stable: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted values and indices of ``x``'s data along ``dim`` (padding sorted last)."""
    d = normalize_dim(op, dim, x.dim())

    def run(data: torch.Tensor, along: int, stable: bool) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.sort(data, dim=along, descending=bool(descending),
                                     stable=stable)
        return values, indices

    if d == 0:
        return _on_batch_dim(lambda data, along: run(data, along, bool(stable)), x.data)
    if not _padded_along(x, d):
        return run(x.data, d, bool(stable))
    # Stable: a real value equal to the fill (a real NaN ascending, a real -inf
    # descending) stays before the padding, inside its example's prefix.
    return run(_masking.fill_padding(x, _sorts_last(x.dtype, descending)), d, True)


@_lengths.aware
@_registry.implements(torch.sort, torch.Tensor.sort, family=FAMILY)
def sort(func, input, dim=-1, descending=False, *, stable=False, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    values, indices = _sort(op, input, dim, descending, stable)
    return torch.return_types.sort((MaskedBatch._make(values, input._mask, input.dims),
                                    MaskedBatch._make(indices, input._mask, input.dims)))


@_lengths.aware
@_registry.implements(torch.argsort, torch.Tensor.argsort, family=FAMILY)
def argsort(func, input, dim=-1, descending=False, *, stable=False):
    op = _registry.op_name(func)
    _, indices = _sort(op, input, dim, descending, stable)
    return MaskedBatch._make(indices, input._mask, input.dims)


@_lengths.aware
@_registry.implements(torch.topk, torch.Tensor.topk, family=FAMILY)
def topk(func, input, k, dim=-1, largest=True, sorted=True, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    k = _registry.int_argument(op, "k", k)
    d = normalize_dim(op, -1 if dim is None else dim, input.dim())
    if k < 0:
        raise RuntimeError(f"{op}: k={k} must be non-negative")
    if d == 0:
        if k != 1:
            raise (RuntimeError(f"{op}: k={k} is out of range for dimension 0, the batch "
                                "dimension of each example, which has size 1")
                   if k > 1 else
                   ValueError(f"{op}: k=0 along dimension 0 would leave each example an "
                              "empty dimension 0 (its batch dimension), which a batch "
                              "cannot hold"))
        values, indices = _on_batch_dim(
            lambda data, along: tuple(torch.topk(data, 1, along, largest, sorted)), input.data)
        return torch.return_types.topk((MaskedBatch._make(values, input._mask, input.dims),
                                        MaskedBatch._make(indices, input._mask, input.dims)))
    if not _padded_along(input, d):
        # Every example has the padded size here: the loop's own topk, line by line.
        size = input.data.size(d)
        if k > size:
            kind = "dynamic" if input.dims[d - 1] else "static"
            raise RuntimeError(f"{op}: k={k} is out of range for {kind} dimension {d}, "
                               f"which has size {size} in every example")
        values, indices = torch.topk(input.data, k, d, largest, sorted)
        # A dynamic dimension without padding becomes static (size k), as below.
        dims = input.dims[:d - 1] + (False,) + input.dims[d:]
        return torch.return_types.topk((MaskedBatch._make(values, input._mask, dims),
                                        MaskedBatch._make(indices, input._mask, dims)))
    refuse_k_past_examples(op, input, d, k, "k")
    if input.dtype == torch.bool:
        # torch's topk refuses bool (on CPU), which a sort would not: let it say so
        # on an empty slice, as the loop's topk would.
        torch.topk(input.data.narrow(d, 0, 0), 0, d)
    values, indices = _sort(op, input, d, largest, True)
    values, indices = values.narrow(d, 0, k), indices.narrow(d, 0, k)
    # Every (running) example has k real values along d: the dimension becomes
    # static; a line that is padding in another dynamic dimension stays padding.
    dims = input.dims[:d - 1] + (False,) + input.dims[d:]
    mask = input._mask.any(d, keepdim=True) if any(dims) else None
    carried = _lengths.carried_by(input)
    if carried is not None and mask is not None:
        c = _lengths.column(input.dims, d)
        mask = _lengths.rebuilt(mask, torch.cat([carried[:, :c], carried[:, c + 1:]], 1), dims)
    return torch.return_types.topk((MaskedBatch._make(values, mask, dims),
                                    MaskedBatch._make(indices, mask, dims)))


# ------------------------------------------------------------------ flips


def _dim_list(value: Any) -> list[Any]:
    """A dimension argument (an int, or a tuple/list/Size of them) as a list."""
    return list(value) if isinstance(value, (tuple, list, torch.Size)) else [value]


def _flip(op: str, x: MaskedBatch, wanted: list[int]) -> MaskedBatch:
    rank = x.dim()
    ds = [normalize_dim(op, w, rank) for w in wanted]
    for i, d in enumerate(ds):
        if d in ds[:i]:
            raise RuntimeError(f"{op}: dim {d} appears multiple times in the list of dims")
    # Dimension 0 has size one in every example: flipping it changes nothing.
    plain = [d for d in ds if d > 0 and not _padded_along(x, d)]
    data = x.data.flip(plain) if plain else x.data
    for d in ds:
        if d > 0 and _padded_along(x, d):
            data = data.gather(d, _reversed_prefix(x._mask, d, data.size(d)).expand_as(data))
    return MaskedBatch._make(data, x._mask, x.dims)


def _reversed_prefix(mask: torch.Tensor, d: int, size: int) -> torch.Tensor:
    """Per line along ``d``: position i -> n - 1 - i for the n real positions, i for padding."""
    n = mask.sum(d, keepdim=True)
    shape = [1] * mask.dim()
    shape[d] = size
    positions = torch.arange(size, device=mask.device).view(shape)
    return torch.where(positions < n, n - 1 - positions, positions)


@_lengths.aware
@_registry.implements(torch.flip, torch.Tensor.flip, family=FAMILY)
def flip(func, input, *args, dims=None):
    op = _registry.op_name(func)
    if dims is None:
        dims = args[0] if len(args) == 1 else args
    return _flip(op, input, _dim_list(dims))


@_lengths.aware
@_registry.implements(torch.fliplr, torch.Tensor.fliplr, torch.flipud, torch.Tensor.flipud,
                      family=FAMILY)
def fliplr_flipud(func, input):
    op = _registry.op_name(func)
    lr = "fliplr" in func.__name__
    if input.dim() < (2 if lr else 1):
        raise RuntimeError(f"{op}: examples must have at least {2 if lr else 1} dimensions, "
                           f"got {input.dim()}")
    return _flip(op, input, [1 if lr else 0])


@_lengths.aware  # (sort's rule, which keeps the lengths)
@_registry.implements(torch.msort, torch.Tensor.msort, family=FAMILY)
def msort(func, input, *, out=None):
    """``sort(input, dim=0).values``: along each example's dimension 0 (of size one)."""
    _registry.refuse_out(_registry.op_name(func), out)
    return torch.sort(input, dim=0).values


# ------------------------------------------------------------------ differences


@_lengths.aware  # (built from indexing, subtraction and cat, which keep the lengths)
@_registry.implements(torch.diff, torch.Tensor.diff, family=FAMILY)
def diff(func, input, n=1, dim=-1, prepend=None, append=None):
    """Each example's own differences: along a dynamic dimension, ``x[1:] - x[:-1]`` of its
    real positions (one fewer each time; a zero-length example stays empty), with
    ``prepend``/``append`` joined to its real positions first, as ``torch.cat`` joins them."""
    op = _registry.op_name(func)
    _registry.refuse_size_number(op, "order n", n)
    d = normalize_dim(op, dim, input.dim())
    if n < 0:
        raise RuntimeError(f"{op}: order must be non-negative but got {n}")
    if d == 0:
        raise ValueError(
            f"{op}: dim=0 is each example's own batch dimension (size one): its difference "
            "would have size zero, which no example of a batch has; take it along another "
            "dimension")
    parts = [p for p in (prepend, input, append) if p is not None]
    x = torch.cat(parts, d) if len(parts) > 1 else input
    before = (slice(None),) * d
    later, earlier = before + (slice(1, None),), before + (slice(None, -1),)
    for _ in range(n):
        if x.dtype == torch.bool:  # (torch's diff of booleans is their exclusive or)
            x = torch.logical_xor(x[later], x[earlier])
        else:
            x = x[later] - x[earlier]
    return x


@_lengths.aware  # (built from indexing, pointwise ops, diff, sum and cumsum)
@_registry.implements(torch.trapezoid, torch.trapz, torch.cumulative_trapezoid, family=FAMILY)
def trapezoid(func, y, x=None, *, dx=None, dim=-1):
    """The trapezoidal rule over each example's real positions along ``dim``: the sum (or
    running sum, ``cumulative_trapezoid``) of ``(y[1:] + y[:-1]) / 2`` times the spacing,
    ``dx`` or ``diff(x)``; an example of length zero or one has no interval (0, or none).
    Integers give floats, for an empty example too (torch's loop gives it integer zeros)."""
    op = _registry.op_name(func)
    d = normalize_dim(op, dim, y.dim())
    if d == 0:
        raise ValueError(
            f"{op}: dim=0 is each example's own batch dimension (size one), which has no "
            "interval; integrate along another dimension")
    before = (slice(None),) * d
    mean = (y[before + (slice(1, None),)] + y[before + (slice(None, -1),)]) / 2
    if x is None:
        area = mean if dx is None else mean * dx
    elif isinstance(x, MaskedBatch) or x.dim() != 1:
        area = mean * torch.diff(x, dim=dim)
    else:  # one spacing for every example, along a static ``dim``, as torch broadcasts it
        if y.dims[d - 1] or x.numel() != y.size(d):
            raise RuntimeError(
                f"{op}: x is a plain tensor of {x.numel()} points; there must be one x value "
                f"for each sample point along dimension {d}, which "
                + ("is dynamic (each example has its own number): give x as a batch"
                   if y.dims[d - 1] else f"has {y.size(d)}"))
        area = mean * x.diff().view(-1, *(1,) * (y.dim() - 1 - d))
    return area.cumsum(d) if func is torch.cumulative_trapezoid else area.sum(d)


# ------------------------------------------------------------------ moving dimensions


@_lengths.aware
@_registry.implements(torch.movedim, torch.Tensor.movedim, torch.moveaxis,
                      torch.Tensor.moveaxis, family=FAMILY)
def movedim(func, input, source, destination):
    op = _registry.op_name(func)
    rank = input.dim()
    src = [normalize_dim(op, s, rank) for s in _dim_list(source)]
    dst = [normalize_dim(op, t, rank) for t in _dim_list(destination)]
    if len(src) != len(dst):
        raise RuntimeError(f"{op}: source {src} and destination {dst} must name the same "
                           "number of dimensions")
    for name, ds in (("source", src), ("destination", dst)):
        if len(set(ds)) != len(ds):
            raise RuntimeError(f"{op}: repeated dimension in {name} {ds}")
    order: list[int | None] = [None] * rank
    for s, t in zip(src, dst):
        order[t] = s
    rest = iter(i for i in range(rank) if i not in src)
    order = [next(rest) if o is None else o for o in order]
    if order[0] != 0:
        raise ValueError(
            f"{op}: dimension 0 is the batch dimension of each example and cannot be moved "
            f"on a batch (moving {src} to {dst} gives the order {order})"
        )
    mask = None if input._mask is None else _lengths.reordered(
        input._mask.permute(order), input._mask, input.dims, order)
    dims = tuple(input.dims[o - 1] for o in order[1:])
    return MaskedBatch._make(input.data.permute(order), mask, dims)


#: ``Tensor.mT`` is a property: its getter is the registry's key (torch hands it
#: to ``__torch_function__`` as ``Tensor.mT.__get__``).
MT = torch.Tensor.mT.__get__


@_lengths.aware
@_registry.implements(MT, family=FAMILY)
def matrix_transpose(func, input):
    op = _registry.op_name(func)
    if input.dim() < 2:
        raise RuntimeError(f"{op}: examples must have at least 2 dimensions (mT transposes "
                           f"the last two), got {input.dim()}")
    return transpose(func, input, -2, -1)


def refuse_k_past_examples(op: str, input: MaskedBatch, d: int, k: int, what: str) -> None:
    """Raise, naming the first example, where a running example is shorter than ``k`` in
    dynamic dimension ``d`` (``topk``'s ``k``, ``kthvalue``'s selected number); a graph
    output under ``matchbox.compile``."""
    lengths = _masking.lengths_along(input, d)
    short = _masking.running(lengths < k)
    if _capture.fails(short):
        e = int(short.nonzero()[0])
        raise RuntimeError(f"{op}: {what}={k} is out of range for example {e}, which has size "
                           f"{int(lengths[e])} in dynamic dimension {d}")
