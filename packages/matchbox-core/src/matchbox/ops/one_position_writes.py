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

An int counted from each example's end along a dynamic dimension (``x[:, -1] = v``) is
written the same way (:func:`from_each_end`: one per-example int, the same in each).

``t = x[:, j]`` (an int ``j`` of the loop, or ``x[:, -1]``) is a view of ``x`` in the loop,
a copy here: an in-place op on ``t`` itself (``x[:, j] += v``) is written back into ``x``
(:func:`write_through`, called by the dispatch for a read that :func:`remember_source`
recorded); views of ``t`` stay refused (``matchbox._copies``).

Refused, naming the reason: two per-example ints in one subscript, indices before or
after ``j`` that select positions differing between examples (counted from each
example's end), and an in-place op on ``t`` after ``x`` was written.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _copies, _masking
from matchbox._example_scalars import SCALAR, VECTOR, ambiguous_index, mark
from matchbox._masked_writes import WRITE_WATCH, _writable, write_running
from matchbox._op_table import op_name
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.one_position import (
    _example_rows,
    is_per_example_int,
    remember_source,
    select_per_example,
)

OP = "Tensor.__setitem__"
#: ``[setitem]``: ``ops/indexing.py``'s handler of ``x[index] = value`` (set there, as that
#: module imports this one).
SETITEM: list = [None]


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
        raise _differing_positions(text, "before", "counted from each example's end")
    if new_row is None:
        positions: list[torch.Tensor] = []  # (each example's, as the read found them)
        row = select_per_example(base, d, index, OP, positions)  # checks them, as x[:, j]
        if base._data.size(d) == 0:  # no example has a position: nothing to write (or a
            return None              # deferred error)
        new_row = (positions[0], _new_row(row, d, kept, suffix, value, text, getitem, copy_,
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
            raise _differing_positions(
                text, "after", "counted from each example's end, or per example")
    copy_(torch.Tensor.copy_, target, without_leading_ones(value, target.dim()))
    return fresh._data


def _differing_positions(text: str, where: str, how: str) -> NotImplementedError:
    """The refusal of a subscript whose indices ``where`` ("before"/"after") the
    per-example int select positions that differ between examples."""
    return NotImplementedError(
        f"{OP}: x[{text}] = value indexes, {where} the per-example int, positions that "
        f"differ between examples ({how}), which the batch cannot write in place; index "
        "those from the start, or build the new batch (torch.where with a condition on "
        "positions)")


def writes_back(input: MaskedBatch, items: list[Any]) -> bool:
    """Whether ``input[items]``, a copy standing for a view, can take an in-place op by
    writing it back (:func:`write_through`): one position per example (a per-example int,
    or an int counted from the end), other indices that are views, of a batch that is no
    copy itself."""
    if _copies.is_copy(input):
        return False
    own = 0
    for item in items:
        if is_per_example_int(item) or (type(item) is int and item < 0):
            own += 1
        elif isinstance(item, slice) and any(
                b is not None and (type(b) is not int or b < 0)
                for b in (item.start, item.stop)):
            return False  # counted from each end, or a size (each example's own bound)
        elif not (item is None or item is Ellipsis or isinstance(item, (int, slice))):
            return False
    return own == 1


def source_of(batch: MaskedBatch, op: str) -> MaskedBatch:
    """The batch that ``batch`` (``x[:, j]``, its ``_not_a_view`` a record of
    :func:`remember_source`) was read from, about to be written in place by ``op``:
    refused if it is gone, a copy itself, or written since the read (the loop's view would
    show that write, the batch's copy does not)."""
    source, _, data, version = batch._not_a_view
    source, data = source(), data()
    if source is None:
        raise NotImplementedError(
            f"{op}: the batch was indexed at positions that differ between examples (per "
            "example, or counted from each example's end), and the batch indexed is gone: "
            "in the loop the result is a view of its data, which the op would reach (through "
            "any other view of it); the batch's result is a copy; keep the batch indexed in "
            "a variable, or use the out-of-place op")
    _copies.refuse_in_place(op, source)  # a copy itself: the write would not reach further
    if source._data is not data or data._version != version:
        raise NotImplementedError(
            f"{op}: the batch was indexed at positions that differ between examples (per "
            "example, or counted from each example's end), and written after that read: "
            "in the loop the result is a view, which shows that write; the batch's is a "
            "copy, which does not; index the batch again after writing it (x[:, j] += v "
            "reads and writes at once), or use the out-of-place op")
    return source


def write_back(batch: MaskedBatch, source: MaskedBatch) -> None:
    """``batch`` (``x[:, j]``, of ``source`` = :func:`source_of`), just written in place:
    its values go back into ``source`` as ``x[:, j] = batch`` (the running examples'
    under a per-example condition), and the record is renewed."""
    index = batch._not_a_view[1]
    SETITEM[0](torch.Tensor.__setitem__, source, index, batch)
    remember_source(batch, source, index)


def write_through(run: Any, func: Any, types: Any, args: tuple[Any, ...],
                  kwargs: dict[str, Any] | None) -> MaskedBatch:
    """An in-place op on ``t = x[:, j]`` (``j`` per example, a view of ``x`` in the loop,
    a copy here), from the dispatch: run on a fresh copy of ``t``'s data (under a
    per-example condition, for the running examples, as any in-place op), which ``t`` takes
    (``matchbox._masked_writes.write_running``, which writes it back into ``x`` as
    ``x[:, j] = t``: :func:`source_of`, :func:`write_back`).  So ``x[:, j] += v`` is the
    loop's."""
    target = args[0]
    op = op_name(func)
    source_of(target, op)  # (before the op runs: refused as the op)
    fresh = MaskedBatch._make(target.data.clone(), target._mask, target.dims)
    run(func, types, (fresh, *args[1:]), kwargs)
    write_running(target, fresh, name=op)
    return target


_copies.WRITE_BACK[:] = [write_through, source_of, write_back]
