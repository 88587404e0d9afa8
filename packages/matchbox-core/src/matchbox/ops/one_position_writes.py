"""Writing one position of a dimension per example: ``x[:, j] = v`` with ``j`` a batch of
per-example ints (``ops/indexing.py``'s ``__setitem__``), as a pointer network masks the
candidate it chose (``avail[:, j] = -1e9`` with ``j = scores.argmax(-1)``).

Each example writes its own position ``j`` of the indexed dimension, counted from its own
end when negative (``-1``: its last element, of its own length), as ``x[j] = v`` does in
the loop.  The positions are read as ``x[:, j]`` reads them (``ops/one_position.py``: an
index outside a running example's extent, or one that is padding, raises ``IndexError``
naming the example, at once or when the ``@batch`` call ends); the value is copied into
that row as ``copy_`` would (broadcast as in the loop, and the indices after ``j`` in the
subscript, ``x[:, j, 1:] = v``, applied to it), and the row is put back at each example's
position, in place (``index_put_`` on a view of the data: aliases and views see it,
autograd records it).  Under a per-example condition (``_masking.EXECUTION_MASK``) only the
running examples' rows change: the others put their own row back.

Refused, naming the reason: two per-example ints in one subscript, and indices before
``j`` that select positions differing between examples (counted from each example's end).
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _copies, _masking
from matchbox._example_scalars import SCALAR, VECTOR, ambiguous_index, mark
from matchbox._masked_writes import WRITE_WATCH, _writable
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.one_position import _example_rows, is_per_example_int, select_per_example

OP = "Tensor.__setitem__"


def has_per_example_int(index: Any) -> bool:
    """Whether the subscript ``index`` holds a batch of per-example ints."""
    return any(is_per_example_int(item)
               for item in (index if isinstance(index, tuple) else (index,)))


def from_each_end(input: MaskedBatch, items: list[Any]) -> list[Any] | None:
    """``items`` (an expanded subscript of ``input``) with the first negative int along a
    dynamic dimension (``x[:, -1]``: each example's own last element, at a position that
    differs between examples) as a batch of per-example ints, which
    :func:`write_per_example` writes; ``None`` if there is none."""
    d = 1
    for k, item in enumerate(items[1:], start=1):
        if item is None:
            continue
        if type(item) is int and item < 0 and d - 1 < len(input.dims) and input.dims[d - 1]:
            at = torch.full((input.data.size(0),), item, dtype=torch.long, device=input.device)
            return items[:k] + [mark(MaskedBatch._make(at, None, ()), SCALAR)] + items[k + 1:]
        d += 1
    return None


def write_per_example(input: MaskedBatch, items: list[Any], value: Any, text: str,
                      getitem: Any, copy_: Any, without_leading_ones: Any) -> None:
    """``input[items] = value`` where ``items`` (the expanded subscript, ``x[text]``) holds
    one batch of per-example ints; ``getitem``, ``copy_`` and ``without_leading_ones``:
    ``ops/indexing.py``'s (passed in, as that module imports this one)."""
    at_items = [k for k, item in enumerate(items) if is_per_example_int(item)]
    if len(at_items) > 1:
        raise NotImplementedError(
            f"{OP}: x[{text}] = value with more than one batch of per-example ints in the "
            "subscript is not supported (each example writing the element at its own pair "
            "of positions); write one dimension at a time, e.g. row = x[:, i]; "
            "row[:, j] = value; x[:, i] = row")
    k = at_items[0]
    index = items[k]
    prefix, suffix = tuple(items[:k]), items[k + 1:]
    # The dimension that ``index`` reads in ``input[prefix]``: slices and None keep theirs.
    d = sum(1 for item in prefix if item is None or isinstance(item, slice))
    if index._scalar is None:
        raise ambiguous_index(OP, d)
    kept = index._scalar is VECTOR  # the loop's (1,) index keeps the dimension
    if not isinstance(value, (torch.Tensor, MaskedBatch)):
        value = torch.as_tensor(value, dtype=input.dtype, device=input.device)
    mask = _masking.EXECUTION_MASK.get()
    if WRITE_WATCH[0] is not None:
        WRITE_WATCH[0](input, mask, f"x[{text}] = value")
    written, done, new_row = input, [], None
    while written is not None:  # ``input``, and the batches it stands for in a region
        if not any(written._data is data for data in done):
            done.append(written._data)
            new_row = _write_one(written, prefix, d, index, suffix, kept, value, text,
                                 getitem, copy_, without_leading_ones, mask, new_row)
        written = getattr(written, "_guards", None)


def _write_one(x: MaskedBatch, prefix: tuple[Any, ...], d: int, index: MaskedBatch,
               suffix: list[Any], kept: bool, value: Any, text: str, getitem: Any,
               copy_: Any, without_leading_ones: Any, mask: torch.Tensor | None,
               new_row: tuple[torch.Tensor, torch.Tensor] | None
               ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Write ``x``'s positions.  ``new_row``: ``(at, rows)``, each example's position and
    the rows the running examples put there, computed for the first batch of a region's
    chain (``None``: this is it); the others take them too (each of its examples that does
    not run keeps its own row, whose gradient the region's guard may have cut in the
    batch before it).  Returns ``new_row`` (``None``: nothing to write)."""
    if not _writable(x._data):  # expanded data (one row for every example): a new tensor
        x.data = x._data.clone()
    base = getitem(torch.Tensor.__getitem__, x, prefix) if len(prefix) > 1 else x
    if base is not x and _copies.is_copy(base):
        raise NotImplementedError(
            f"{OP}: x[{text}] = value indexes, before the per-example int, positions that "
            "differ between examples (counted from each example's end), which the batch "
            "cannot write in place; index those from the start, or build the new batch "
            "(torch.where with a condition on positions)")
    if new_row is None:
        row = select_per_example(base, d, index, OP)  # checks the positions, as x[:, j]
        size = base._data.size(d)
        if size == 0:  # no example has a position: nothing to write (or a deferred error)
            return None
        i = index._data.long()
        if base.dims[d - 1] and base._mask is not None:
            at = i.remainder(_masking.lengths_along(base, d).clamp(min=1))
        else:
            at = i.remainder(size)
        new_row = (at, _new_row(row, d, kept, suffix, value, text, getitem, copy_,
                                without_leading_ones))
    at, new = new_row
    rows = _example_rows(at)
    selected = (rows, at) if d == 1 else (rows,) + (slice(None),) * (d - 1) + (at,)
    data = base._data
    if mask is not None:  # the examples that do not run put their own row back
        own = data[selected]
        new = torch.where(mask.reshape(-1, *[1] * (own.dim() - 1)), new, own)
    data[selected] = new
    return new_row


def _new_row(row: MaskedBatch, d: int, kept: bool, suffix: list[Any], value: Any, text: str,
             getitem: Any, copy_: Any, without_leading_ones: Any) -> torch.Tensor:
    """The rows each example puts back: its own row read at ``j``, with ``value`` copied
    into it (at ``suffix``)."""
    fresh = MaskedBatch._make(row._data.clone(), row._mask, row.dims)
    target = fresh
    if kept:
        target = MaskedBatch._make(fresh._data.unsqueeze(d), None if fresh._mask is None
                                   else fresh._mask.unsqueeze(d),
                                   fresh.dims[: d - 1] + (False,) + fresh.dims[d - 1:])
    if suffix:
        at = d + 1 if kept else d
        target = getitem(torch.Tensor.__getitem__, target, (slice(None),) * at + tuple(suffix))
        if _copies.is_copy(target):
            raise NotImplementedError(
                f"{OP}: x[{text}] = value indexes, after the per-example int, positions "
                "that differ between examples (counted from each example's end, or per "
                "example), which the batch cannot write in place; index those from the "
                "start, or build the new batch (torch.where with a condition on positions)")
    copy_(torch.Tensor.copy_, target, without_leading_ones(value, target.dim()))
    return fresh._data
