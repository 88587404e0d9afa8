"""An index, or a slice's bound, that is a batch's size (``x.size(0)``, ``x.maxsize(k)``)
in ``batch[...]`` (``ops/indexing.py``): refused where each example of the loop would
read another position, made plain or read per example where it reads alike."""

from __future__ import annotations

from typing import Any

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


def padded_bound(op: str, x: MaskedBatch, bound: Any) -> Any:
    """A slice's ``bound`` as each example's own (a ``(batch,)`` tensor) where it is
    another batch's padded size (:func:`size_bounds`), else as it is."""
    if type(bound) not in PADDED_SIZES:
        return bound
    return own_sizes(op, "slice bound", bound, x.data.size(0)).to(x.device)
