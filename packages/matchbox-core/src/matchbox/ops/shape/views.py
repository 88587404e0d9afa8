"""Views of a batch: permutations, size-one dimensions, slices and splits.

The same view applies to data and mask, and the dims follow their dimensions.
"""

from __future__ import annotations

import functools
from itertools import repeat
from typing import Any

import torch

from matchbox import _capture, _lengths, _masking, _registry
from matchbox._layout import zero_padding_along
from matchbox.masked_batch import (
    MaskedBatch,
    has_zero_padding,
    mark_zero_padding,
    normalize_dim,
)
from matchbox.ops.shape._dims import _batch_dim_view, _nonbatch_dim, _sizes

# ------------------------------------------------------------------ permutations


@_lengths.aware
@_registry.implements(torch.transpose, torch.Tensor.transpose, torch.swapaxes,
                      torch.Tensor.swapaxes, torch.swapdims, torch.Tensor.swapdims,
                      family="shape")
def transpose(func, input, dim0, dim1):
    op = _registry.op_name(func)
    swapped = {normalize_dim(op, dim0, input.dim()), normalize_dim(op, dim1, input.dim())}
    view = _registry.batch_dim_view("MaskedBatch") if swapped == {0, 1} else None
    if view is not None:
        # Per example (1, T, F) -> (T, 1, F): a time-major view (see _registry).
        return view(op, input)
    a = _nonbatch_dim(op, dim0, input.dim())
    b = _nonbatch_dim(op, dim1, input.dim())
    dims = list(input.dims)
    dims[a - 1], dims[b - 1] = dims[b - 1], dims[a - 1]
    order = list(range(input.dim()))
    order[a], order[b] = b, a
    mask = _lengths.reordered(input.mask.transpose(a, b), input.mask, input.dims, order)
    return _viewed(input, MaskedBatch._make(input.data.transpose(a, b), mask, tuple(dims)))


@_lengths.aware
@_registry.implements(torch.permute, torch.Tensor.permute, family="shape")
def permute(func, input, *order):
    op = _registry.op_name(func)
    order = [normalize_dim(op, d, input.dim()) for d in _sizes(order)]
    if sorted(order) != list(range(input.dim())):
        raise ValueError(f"{op}: {order} is not a permutation of the {input.dim()} dimensions")
    if order[0] != 0:
        raise ValueError(f"{op}: dimension 0 (the batch dimension) must stay first, got {order}")
    dims = tuple(input.dims[d - 1] for d in order[1:])
    mask = _lengths.reordered(input.mask.permute(order), input.mask, input.dims, order)
    return _viewed(input, MaskedBatch._make(input.data.permute(order), mask, dims))


def _viewed(input: MaskedBatch, view: MaskedBatch) -> MaskedBatch:
    """``view``, a view of ``input``'s data and mask: zero padding if ``input``'s is (so a
    loss over ``logits.transpose(1, 2)`` reads the linear layer's zero-padded output as it
    is, with no ``where``: under inductor a ``where`` there made the transposed logits
    contiguous, and the log-softmax over the classes a strided reduction)."""
    if has_zero_padding(input):
        mark_zero_padding(view)
    return view


# ------------------------------------------------------------------ size-one dimensions


def _unsqueeze_fast(func, input, args):
    """``unsqueeze``'s rule for a method's positional arguments (its fast path, see
    ``matchbox._methods``, and the handler's body): a function of its own, not the
    handler behind ``DIRECT``'s wrapper, whose frame cost as much as the commonest call.
    ``None``: more arguments than the op takes (the dispatch's binding names them)."""
    if len(args) != 1:
        return None if args else unsqueeze(func, input)  # (Python's error, as before)
    dim = args[0]
    if type(dim) is int and input._mask is None and input.dims:
        # The commonest call, a new static dimension after the batch's in a batch without
        # padding, as the general rule would make it.
        rank = input._data.dim() + 1
        d = dim + rank if dim < 0 else dim
        data = input._data  # (a handler: a deferred guard is applied, see _region_guard)
        if 0 < d < rank and data.numel():
            return MaskedBatch._make(data.unsqueeze(d), None,
                                     input.dims[: d - 1] + (False,) + input.dims[d - 1:])
    return _unsqueezed(func, input, dim)


@_registry.implements(torch.unsqueeze, torch.Tensor.unsqueeze, family="shape",
                     fast_path=lambda func: _unsqueeze_fast)
@_lengths.aware  # (first: a fast path skips the dispatch's check)
def unsqueeze(func, input, dim):
    return _unsqueeze_fast(func, input, (dim,))


def _unsqueezed(func: Any, input: MaskedBatch, dim: Any) -> MaskedBatch:
    """``unsqueeze``'s general rule."""
    op = _registry.op_name(func)
    view = _batch_dim_view(dim, input.dim() + 1, input.dims)
    if view is not None:
        # Per example (1, *S) -> (1, 1, *S), whose dimension 1 is the batch's: a
        # time-major view of the batch unsqueezed at 1 (see _registry).
        return view(op, unsqueeze(func, input, 1))
    d = _nonbatch_dim(op, dim, input.dim() + 1, scalars=input.dims == ())
    dims = input.dims[: d - 1] + (False,) + input.dims[d - 1:]
    if input._mask is None and input.data.numel():
        # No padding: none after it either (building the all-true mask would cost two ops).
        return MaskedBatch._make(input.data.unsqueeze(d), None, dims)
    mask = _lengths.kept(input.mask.unsqueeze(d), input.mask)
    return _viewed(input, MaskedBatch._make(input.data.unsqueeze(d), mask, dims))


@_lengths.aware
@_registry.implements(torch.squeeze, torch.Tensor.squeeze, family="shape")
def squeeze(func, input, dim=None):
    op = _registry.op_name(func)
    if dim is None:
        raise ValueError(
            f"{op}: squeeze() without a dimension would remove dimension 0, the batch "
            "dimension of size one; pass the dimensions to squeeze"
        )
    wanted = dim if isinstance(dim, (tuple, list)) else (dim,)
    drop = []
    for w in wanted:
        d = _nonbatch_dim(op, w, input.dim())
        if input.dims[d - 1]:
            raise ValueError(
                f"{op}: dimension {d} is dynamic; its size differs between examples, so "
                "whether it can be squeezed differs too"
            )
        if input.data.size(d) == 1:
            drop.append(d)
    if not drop:
        return input
    dims = tuple(x for i, x in enumerate(input.dims, start=1) if i not in drop)
    mask = _lengths.kept(input.mask.squeeze(drop), input.mask)
    return _viewed(input, MaskedBatch._make(input.data.squeeze(drop), mask, dims))


# ------------------------------------------------------------------ slicing


@_lengths.aware
@_registry.implements(torch.narrow, torch.Tensor.narrow, family="shape")
def narrow(func, input, dim, start, length):
    op = _registry.op_name(func)
    for name, value in (("start", start), ("length", length)):
        if isinstance(value, MaskedBatch):
            raise NotImplementedError(
                f"{op}: the {name} argument is a batch (one value per example, e.g. from "
                "size_as_tensor); per-example starts and lengths are not implemented: "
                "narrow takes one int for every example (a dynamic dimension keeps each "
                "example's own length), or keep the positions and mask them with "
                "torch.where, or take one element per example with x[:, n]")
    # (narrow(1, 0, x.maxsize(1)) of each example in the loop is the example whole, but
    # of another batch's size or another dimension's each one's own length: refused.)
    _registry.refuse_size_number(op, "start", start)
    _registry.refuse_size_number(op, "length", length)
    d = _nonbatch_dim(op, dim, input.dim())
    if input.dims[d - 1] and start < 0:
        raise NotImplementedError(f"{op}: a negative start along dynamic dimension {d}")
    if input.dims[d - 1] and input._mask is not None:
        # Unlike a slice, narrow raises (in the loop) for an example that is too short.
        sizes = _masking.lengths_along(input, d)
        short = _masking.running(sizes < start + length)
        error = functools.partial(_too_short, op, short, sizes, start, length, d)
        if start + length <= input.data.size(d):
            # Within the padded size the op goes on (a short example's positions are
            # padding): on an accelerator, inside @batch, the check is read at the end.
            _capture.check(short, error)
        elif _capture.fails(short):
            raise error()
    if not input.dims[d - 1]:
        return MaskedBatch._make(input.data.narrow(d, start, length), input.mask, input.dims)
    mask = input.mask.narrow(d, start, length)
    if sum(input.dims) > 1 and (length == 0 or _lengths.carried_by(input) is not None):
        # Every example now has ``length`` positions along d; with a length of 0, an
        # example that is not empty in another dynamic dimension is empty in part.
        lengths = input.lengths().clone()
        lengths[:, _lengths.column(input.dims, d)] = length  # (a shorter one raised above)
        mask = (_lengths.rebuilt(mask, lengths, input.dims)
                if _lengths.carried_by(input) is not None else _lengths.settle(mask, lengths))
    return MaskedBatch._make(input.data.narrow(d, start, length), mask, input.dims)


def _static_pieces(op: str, x: MaskedBatch, dim: int) -> int:
    d = _nonbatch_dim(op, dim, x.dim())
    if x.dims[d - 1]:
        raise ValueError(
            f"{op}: dimension {d} is dynamic; splitting it would give each example "
            "different pieces (use unbind, or narrow/indexing)"
        )
    return d


@_lengths.aware
@_registry.implements(torch.split, torch.Tensor.split, family="shape")
def split(func, input, split_size_or_sections, dim=0):
    _registry.refuse_size_number(_registry.op_name(func), "split size",
                                 split_size_or_sections)
    return _pieces(func, input, dim, lambda data, d: data.split(split_size_or_sections, d))


def _chunk_fast(func, input, args):
    """``chunk``'s rule for a method's positional arguments (its fast path and the
    handler's body, as ``_unsqueeze_fast``); ``None``: more than the op takes."""
    if len(args) != 2:
        return chunk(func, input, *args) if len(args) < 2 else None  # (as before)
    chunks, dim = args
    if type(chunks) is int and type(dim) is int:
        # The commonest call (an int count along a static dimension, ``h, c = x.chunk(2,
        # -1)``), as the general rule below makes it, without its checks' calls.
        rank = input._data.dim()
        d = dim + rank if dim < 0 else dim
        if 0 < d < rank and not input.dims[d - 1]:
            # (``_data``: a handler's batch has no deferred guard, see _region_guard.  A
            # map, not a comprehension: no frame of its own, for every chunk of a cell.)
            parts = tuple(map(MaskedBatch._make, input._data.chunk(chunks, d),
                              repeat(input._mask), repeat(input.dims)))
            if input._zero_padding is not None:
                # Pieces of zeros are zeros: a region's guarded batch (a tree's stack
                # item, its (h, c) chunked) keeps its record, and the linear layer its
                # pieces reach (joined again) needs no where of its own.
                zeros = zero_padding_along(input, d)
                if zeros is not None:
                    for part in parts:
                        mark_zero_padding(part, zeros)
            return parts
    chunks = _registry.int_argument(_registry.op_name(func), "number of chunks", chunks)
    return _pieces(func, input, dim, lambda data, d: data.chunk(chunks, d))


@_registry.implements(torch.chunk, torch.Tensor.chunk, family="shape",
                     fast_path=lambda func: _chunk_fast)
@_lengths.aware  # (first: a fast path skips the dispatch's check)
def chunk(func, input, chunks, dim=0):
    return _chunk_fast(func, input, (chunks, dim))


def _pieces(func: Any, input: MaskedBatch, dim: int, cut: Any) -> tuple[MaskedBatch, ...]:
    """The pieces ``cut(data, d)`` gives along static dimension ``d``, each with the mask."""
    d = _static_pieces(_registry.op_name(func), input, dim)
    return tuple(MaskedBatch._make(part, input._mask, input.dims) for part in cut(input.data, d))


@_lengths.aware
@_registry.implements(torch.unbind, torch.Tensor.unbind, family="shape")
def unbind(func, input, dim=0):
    """Per-position slices; along a dynamic dimension an example past its end is not real."""
    op = _registry.op_name(func)
    d = _nonbatch_dim(op, dim, input.dim())
    dims = input.dims[: d - 1] + input.dims[d:]
    data = input.data.unbind(d)
    if input.dims[d - 1]:
        masks = input.mask.unbind(d)
        carried = _lengths.carried_by(input)
        if carried is not None and sum(dims) > 1:
            # Step t of an example holds its other lengths while t is below its length
            # along d; past its end the example is absent (zeros, as its mask).
            c = _lengths.column(input.dims, d)
            others = torch.cat([carried[:, :c], carried[:, c + 1:]], 1)
            masks = tuple(_lengths.carry(m, others * (carried[:, c:c + 1] > t))
                          for t, m in enumerate(masks))
    else:
        masks = (None if input._mask is None
                 else _lengths.kept(input._mask.squeeze(d), input._mask),) * len(data)
    steps = tuple(MaskedBatch._make(x, m, dims) for x, m in zip(data, masks))
    if has_zero_padding(input):
        # Views of zero padding are zero padding (the loop's steps are filled for free).
        for step in steps:
            mark_zero_padding(step)
    return steps


# ------------------------------------------------------------------ windows


@_lengths.aware
@_registry.implements(torch.Tensor.unfold, family="shape")
def unfold(func, input, dimension, size, step):
    """Each example's own windows of ``size`` positions every ``step`` along ``dimension``,
    in a new last dimension (static).  Along a dynamic dimension an example of length ``n``
    has ``(n - size) // step + 1`` windows, each of its real positions only; a window that
    reaches padding is padding, and its gradient is dropped (the backward of ``unfold``
    adds a window's gradient into every position it covers, real ones included)."""
    op = _registry.op_name(func)
    _registry.refuse_per_example(op, "window size or step", (size, step),
                                 "a window of each example's own length is the whole example")
    _registry.refuse_size_number(op, "window size or step", (size, step))
    if size <= 0 or step <= 0:
        raise RuntimeError(f"{op}: size ({size}) and step ({step}) must be positive")
    if normalize_dim(op, dimension, input.dim()) == 0:
        # Each example's dimension 0 has size one: one window of size one, as in the loop.
        if size != 1:
            raise RuntimeError(f"{op}: size ({size}) exceeds the size of dimension 0 of "
                               "each example, 1 (its batch dimension)")
        return unsqueeze(torch.unsqueeze, input, -1)
    d = _nonbatch_dim(op, dimension, input.dim())
    dims = input.dims + (False,)
    if not input.dims[d - 1] or input._mask is None:
        data = input.data.unfold(d, size, step)
        mask = None if input._mask is None else _window_mask(input._mask, d, size, step)
        return _viewed(input, MaskedBatch._make(data, _lengths.kept(mask, input._mask), dims))
    sizes = _masking.lengths_along(input, d)
    short = _masking.running(sizes < size)
    error = functools.partial(_window_too_large, op, short, sizes, size, d)
    if size > input.data.size(d):
        if _capture.fails(short):
            raise error()
        input = _masking.pad_to(input, d, size)  # (no running example has a window)
    else:
        _capture.check(short, error)
    mask = _window_mask(input.mask, d, size, step)
    data = _masking.guard_gradient(input.data.unfold(d, size, step), mask)
    if _lengths.carried_by(input) is not None:
        lengths = input.lengths().clone()
        windows = ((sizes - size).div(step, rounding_mode="floor") + 1).clamp(min=0)
        lengths[:, _lengths.column(input.dims, d)] = windows
        mask = _lengths.rebuilt(mask, lengths, dims)
    return MaskedBatch._make(data, mask, dims)


def _window_mask(mask: torch.Tensor, d: int, size: int, step: int) -> torch.Tensor:
    """Which windows are real: those whose every position is (size one along the window)."""
    if mask.size(d) == 1:  # (a mask broadcast along a static dimension)
        return mask.unsqueeze(-1)
    return mask.unfold(d, size, step).all(-1, keepdim=True)


def _window_too_large(op: str, short: torch.Tensor, sizes: torch.Tensor, size: int,
                      d: int) -> RuntimeError:
    j = int(short.nonzero()[0])
    return RuntimeError(f"{op}: size ({size}) exceeds the size of example {j}, "
                        f"{int(sizes[j])}, in dynamic dimension {d} (each example needs "
                        "one window at least)")


def _too_short(op: str, short: torch.Tensor, sizes: torch.Tensor, start: int, length: int,
               d: int) -> RuntimeError:
    j = int(short.nonzero()[0])
    return RuntimeError(f"{op}: start ({start}) + length ({length}) exceeds the size of "
                        f"example {j}, {int(sizes[j])}, in dynamic dimension {d}")
