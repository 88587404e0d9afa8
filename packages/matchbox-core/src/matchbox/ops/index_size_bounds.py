"""An index, or a slice's bound, that is a batch's size (``x.size(0)``, ``x.maxsize(k)``)
in ``batch[...]`` (``ops/indexing.py``): refused where each example of the loop would
read another position, made plain or read per example where it reads alike.  A slice
bound that is one int per example (``x[:, start:end]`` with ``start = s.argmax(-1)``, a
``@batch`` counter) is each example's own bound along a dynamic dimension."""

from __future__ import annotations

import functools
from typing import Any

import torch

from matchbox import _capture, _masking
from matchbox._padded_sizes import own_dimension, own_sizes
from matchbox._sizes import BATCH_SIZES, PADDED_SIZES, plain_size, size_as_a_number
from matchbox.masked_batch import MaskedBatch


def size_bounds(op: str, items: list[Any], x: MaskedBatch) -> list[Any]:
    """``items`` (one per dimension of ``x`` from its dimension 0, ``None`` adding one)
    with an index or a slice's bound that is a batch's size refused where the loop over
    examples reads it otherwise, or made plain where it reads it alike.

    ``x.maxsize(k)`` of a dynamic dimension (a ``PaddedSize``) is each example's own size
    there in the loop: as a bound of that same dimension of ``x`` (read from ``x`` or a
    batch of its layout, ``x[:, :x.maxsize(1)]``) it takes each example's own positions up
    to it, as the plain padded size does, so it is made plain (it refuses to compare or
    add as a number).  As a bound of another dynamic dimension (another batch's size) it
    stays, and :func:`getitem` bounds each example by its own size (:func:`padded_bound`).
    As a step, an index, or a bound of a static dimension, each example would take other
    positions (of other sizes): refused, as ``x.size(0)`` (a ``BatchSize``, 1 in the loop)
    is anywhere after the first index.
    """
    out, d = [], 0
    for item in items:
        if isinstance(item, slice) and d > 0:
            _refuse_per_example_bounds(op, item, x, d)
        if d > 0 and type(item) in BATCH_SIZES:  # x[:, T]: each example's own n, past its end
            raise TypeError(f"{op}: the index of dimension {d} is a batch's size, which in "
                            "the loop over examples is each example's own: "
                            + size_as_a_number(item))
        if isinstance(item, slice) and d > 0 and any(
                type(b) in BATCH_SIZES for b in (item.start, item.stop, item.step)):
            own = True
            for b in (item.start, item.stop, item.step):
                if type(b) not in BATCH_SIZES:
                    continue
                if type(b) not in PADDED_SIZES or b is item.step or not x.dims[d - 1]:
                    raise TypeError(
                        f"{op}: a slice {'step' if b is item.step else 'bound'} of "
                        f"{'dynamic' if x.dims[d - 1] else 'static'} dimension {d} is a "
                        "batch's size, which in the loop over examples is each example's "
                        "own (x.size(0): 1; x.maxsize(k): its own size in dimension k, "
                        "taken here only as a bound of a dynamic dimension): "
                        + size_as_a_number(b))
                own = own and own_dimension(b, x, d)
            if own:
                item = slice(plain_size(item.start), plain_size(item.stop), item.step)
        out.append(item)
        if item is not None:
            d += 1
    return out


def _refuse_per_example_bounds(op: str, item: slice, x: MaskedBatch, d: int) -> None:
    """A slice bound that is a batch: one int per example (``dims == ()``, an integer
    dtype) as the start or stop of a dynamic dimension is each example's own (taken by
    :func:`padded_bound`); anything else is refused."""
    for b in (item.start, item.stop, item.step):
        if not isinstance(b, MaskedBatch):
            continue
        if b.dims != () or b.dtype.is_floating_point or b.dtype.is_complex \
                or b.dtype == torch.bool:
            raise TypeError(
                f"{op}: a slice bound of dimension {d} is a batch of dims {b.dims} and "
                f"dtype {b.dtype}; a slice bound must be one int per example (a batch of "
                "dims () holding integers: s.argmax(-1), a @batch counter, int(k))")
        if b is item.step:
            raise NotImplementedError(
                f"{op}: a slice step of dimension {d} that differs between examples (a "
                "batch of one int per example) is not supported; give a plain int step")
        if not x.dims[d - 1]:
            raise NotImplementedError(
                f"{op}: a slice bound of static dimension {d} that differs between "
                "examples (a batch of one int per example) is not supported: each example "
                "would keep its own number of positions in a dimension every example has "
                "alike; slice a dynamic dimension per example, or mask the positions "
                "(torch.where on a comparison of positions with the bound)")


def padded_bound(op: str, x: MaskedBatch, bound: Any, d: int) -> Any:
    """A slice's ``bound`` along dynamic dimension ``d`` as each example's own (a
    ``(batch,)`` tensor, never negative) where it is another batch's padded size
    (:func:`size_bounds`) or a batch of one int per example (a negative one counted from
    each example's own end, as the loop's); else as it is."""
    if isinstance(bound, MaskedBatch):
        return _own_bound(op, x, bound, d)
    if type(bound) not in PADDED_SIZES:
        return bound
    return own_sizes(op, "slice bound", bound, x.data.size(0)).to(x.device)


def _own_bound(op: str, x: MaskedBatch, bound: MaskedBatch, d: int) -> torch.Tensor:
    value = bound._data.reshape(-1).long()
    if value.size(0) != x.data.size(0):
        raise ValueError(f"{op}: a slice bound holds {value.size(0)} examples but the "
                         f"batch has {x.data.size(0)}")
    if bound._mask is not None:  # padding: a value the example never held (the loop raises)
        refused = _masking.running_without(bound._mask.reshape(-1))
        error = functools.partial(_padding_bound, op, d, refused)
        if _capture.fails(refused, error):
            raise _capture.with_failed_flags(error(), refused)
    n = _masking.lengths_along(x, d)
    return torch.where(value < 0, (n + value).clamp(min=0), value)


def _padding_bound(op: str, d: int, refused: torch.Tensor) -> ValueError:
    return ValueError(
        f"{op}: a slice bound of dimension {d} is padding for example "
        f"{int(refused.nonzero()[0])} (a value that example never assigned: in the loop "
        "it would have none)")
