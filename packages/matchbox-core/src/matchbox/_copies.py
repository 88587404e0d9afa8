"""Batches that hold a copy where the loop holds a view, and the refusal of writing into them.

``x[:, i]`` with a per-example int index (or one counted from each example's end) is a view
of ``x`` in the loop, but the batch's result is a copy (advanced indexing; with the loop's
``(1,)`` index, ``s.argmax(1)``, the loop's is a copy too, and is not marked).  Where one
position per example is read (``x[:, j]``, ``x[:, -1]``), an in-place op on the result
itself writes back into ``x`` (``ops/one_position_writes.write_through``: the mark is then
a record of where); views of it stay refused: an in-place op on
it would leave ``x`` as it was, silently.  Such a batch is marked (:func:`mark`: its
``_not_a_view`` slot, and its data remembered here), and every in-place op on it, or on a
view of its data (``y.unsqueeze(1).mul_(0)``, ``y.chunk(2, -1)[0].add_(1)``, the batch a
``@batch`` region sees it as), is refused (:func:`refuse_in_place`).
"""

from __future__ import annotations

import weakref
from typing import Any

#: ``[write_through, source_of, write_back]`` of ``ops/one_position_writes`` (set when it
#: is imported, with the ops): the dispatch and ``_masked_writes`` reach them here, below
#: the ops in the import graph.
WRITE_BACK: list = [None, None, None]

# id of a marked batch's data -> a weak reference to it.  Entries of tensors gone are
# swept when the table has doubled since the last sweep (a loop reads a stack per example
# each step: no callback per tensor); a recycled id is told apart by the reference.
_COPIES: dict[int, weakref.ref] = {}
_SWEPT = [64]


def mark(batch: Any) -> Any:
    """Mark ``batch`` as a copy standing for a view; returns it."""
    batch._not_a_view = True
    data = batch._data
    if data._base is None:
        _remember(data)  # (remember's answer for a tensor that is no view)
    else:
        remember(data)
    return batch


def remember(data: Any, source: Any = None) -> None:
    """Remember ``data``, a copy standing for a view, so that its views are refused in-place
    ops too (a view's ``_base`` is the tensor it was taken from, when that is no view).

    ``data`` may itself be a view of the new tensor that holds the copy (an index then a
    squeeze): that tensor is remembered too, unless it is ``source``'s, the indexed
    batch's data (the copy's rows are then positions of ``source``, a view after all)."""
    base = data._base
    if base is not None and (source is None or base is not _root(source)):
        _remember(base)
    _remember(data)


def _root(tensor: Any) -> Any:
    return tensor if tensor._base is None else tensor._base


def _remember(data: Any) -> None:
    _COPIES[id(data)] = weakref.ref(data)
    if len(_COPIES) > _SWEPT[0]:
        for key in [k for k, ref in _COPIES.items() if ref() is None]:
            del _COPIES[key]
        _SWEPT[0] = max(64, 2 * len(_COPIES))


def _remembered(tensor: Any) -> bool:
    ref = _COPIES.get(id(tensor))
    return ref is not None and ref() is tensor


def is_copy(batch: Any) -> bool:
    """Whether ``batch`` is marked, or its data is (a view of) a marked batch's data."""
    if getattr(batch, "_not_a_view", False):
        return True
    data = getattr(batch, "_data", None)
    if data is None or not _COPIES:
        return False
    return _remembered(data) or (data._base is not None and _remembered(data._base))


def refuse_in_place(op: str, batch: Any) -> None:
    """Refuse an in-place op ``op`` on ``batch`` where :func:`is_copy`."""
    if is_copy(batch):
        raise NotImplementedError(
            f"{op}: the batch was indexed along a dynamic dimension at positions that "
            "differ between examples (a negative index or bound, or per-example indices): "
            "each example's result is a view in the loop, but the batch's is not, so an "
            "in-place op (on it or on a view of it) would not reach the indexed batch; use "
            "the out-of-place op")
