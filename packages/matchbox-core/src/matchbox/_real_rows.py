"""Rows: ops that act on each row of static trailing dimensions alone (a linear layer,
a norm, an embedding lookup) run on the real rows only.

:func:`real_rows` finds the real rows of a ``MaskedBatch`` (once per mask, cached),
:func:`pack_rows` gathers them and :func:`unpack_rows` scatters an op's result back
into the padded layout, with zeros at padding: padding is never read, gets no
gradient, and costs no work.  ``MaskedBatch.rows()`` / ``from_rows()`` (the
batch types' protocol, see ``matchbox._batch``) are made of them: this module lies
below ``MaskedBatch`` (a batch here is anything with ``data`` and ``_mask``).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from matchbox._capture import capturing, refuse
from matchbox._execution import EXECUTION_MASK, reads_values
from matchbox._layout import has_zero_padding
from matchbox._padding import _ZERO, guard_gradient, mixing_mask, weight_input_data

if TYPE_CHECKING:
    from matchbox.masked_batch import MaskedBatch

# (id of a mask, leading shape) -> (weak reference to the mask, flat indices of its
# real rows).  The ops of a layer share their input's mask object, so the index
# (a device sync on CUDA) is computed once and reused; the weak reference tells
# a live entry from a recycled id.
_ROWS: OrderedDict[tuple[int, tuple[int, ...]], tuple[Any, torch.Tensor]] = OrderedDict()
_ROWS_KEPT = 32


class RowMask:
    """The real rows as a mask, where their indices would depend on values: while
    ``matchbox.compile`` captures a graph, an op on the real rows runs on every
    row, with padding rows zeroed going in and coming out (same values, and no
    gradient reaches padding), at the cost of the work on padding.

    ``column`` is the mask as a column of ``(rows, 1, ...)``, as ``where`` wants it
    beside the rows: built once (:func:`zero_rows`), as the ops of a layer reuse
    one ``RowMask`` going in and coming out (``_LAST_ROW_MASK``)."""

    __slots__ = ("mask", "column")

    def __init__(self, mask: torch.Tensor):
        self.mask = mask  # (rows,)
        self.column: torch.Tensor | None = None  # (rows, 1, ...), built on first use


def real_rows(batch: MaskedBatch, static: int = 1, *, each_row_alone: bool = True
              ) -> torch.Tensor | RowMask | None:
    """Indices of the real rows of ``batch.data`` flattened to ``(rows, *last static
    dims)``; ``None`` if every row is real.

    A row is one position of every dimension but the last ``static``, which must be
    static (the mask has size one there).  While capturing a graph, a
    :class:`RowMask` (the number of real rows depends on the mask's values):
    right for ops that compute each row alone (a linear layer); an op whose
    rows combine (``each_row_alone=False``: batch statistics) cannot be
    captured, as zeroed padding rows would count.  Eagerly, a :class:`RowMask` too
    where the mask is not read on the host (``host_reads``: on an accelerator,
    where ``nonzero`` is a device sync), for ops on rows of static dimensions
    (``static >= 1``) that compute each row alone.
    """
    global _LAST
    mask = batch._mask
    if mask is None:
        return None
    data = batch.data
    lead = data.shape[:data.dim() - static]
    last = _LAST
    if last[0] is mask and last[1] == lead:  # rows() then from_rows() of one op
        return last[2]
    if capturing() is not None:
        if not each_row_alone:
            refuse("statistics over the real rows of the whole batch (batch_norm in "
                   "training): how many rows are real depends on the mask's values")
        return RowMask(mask.expand(*lead, *(1,) * static).reshape(-1))
    if each_row_alone and static and not reads_values(mask):
        # Eager on an accelerator: the indices of the real rows would cost a device
        # sync (nonzero) per new mask, once per step of a loop; every row runs with
        # padding zeroed instead, as while capturing.  (Not for lookups, static 0:
        # an embedding with max_norm renormalises the rows its ids reference.)
        global _LAST_ROW_MASK
        last = _LAST_ROW_MASK
        if last[0] is mask and last[1] == lead:  # rows() then from_rows() of one op
            return last[2]
        rows = RowMask(mask.expand(*lead, *(1,) * static).reshape(-1))
        _LAST_ROW_MASK = (mask, lead, rows)
        return rows
    key = (id(mask), tuple(lead))
    entry = _ROWS.get(key)
    if entry is not None and entry[0]() is mask:
        _ROWS.move_to_end(key)
        rows = entry[1]
    else:
        rows = mask.expand(*lead, *(1,) * static).reshape(-1).nonzero().squeeze(1)
        _ROWS[key] = (weakref.ref(mask), rows)
        if len(_ROWS) > _ROWS_KEPT:
            _ROWS.popitem(last=False)
    _LAST = (mask, lead, rows)
    return rows


# The last answer of real_rows, checked first (one op asks twice: rows, then
# from_rows); replaced as a whole, so a thread reading it sees a consistent entry.
# It holds the mask alive until the next answer: one mask, not a leak.
_LAST: tuple[Any, Any, Any] = (None, None, None)
# The same for the last answer that is a RowMask (eager, without host reads).
_LAST_ROW_MASK: tuple[Any, Any, Any] = (None, None, None)


def pack_rows(data: torch.Tensor, rows: torch.Tensor | RowMask | None, static: int = 1, *,
              zeroed: bool = False) -> torch.Tensor:
    """The real rows of ``data``, ``(n_real, *last static dims)`` (every row when ``rows``
    is None).

    ``zeroed``: ``data`` is known to hold zeros at padding rows (``has_zero_padding``;
    ``weight_input_data`` under ``@batch``), so a :class:`RowMask`'s padding rows are
    not zeroed again, for an op that computes each row alone and whose output is
    zeroed at padding rows (:func:`batch_rows` says why that is exact).
    """
    flat = flat_rows(data, static)
    if type(rows) is RowMask:
        return flat if zeroed else zero_rows(flat, rows)
    return flat if rows is None else flat.index_select(0, rows)


def flat_rows(data: torch.Tensor, static: int) -> torch.Tensor:
    """``data`` as rows ``(rows, *last static dims)``."""
    if data.dim() == static + 1:  # rows already: no view op (one per layer, per step)
        return data
    return data.reshape(-1, *data.shape[data.dim() - static:])


def reshaped(values: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``values.reshape(shape)``; ``values`` itself where it has that shape (no view op)."""
    return values if values.shape == shape else values.reshape(shape)


def batch_rows(batch: MaskedBatch, static: int = 1) -> torch.Tensor:
    """``batch.rows(static)``: the real rows, ``(n_real, *last static dims)`` (a
    :class:`RowMask`: every row, padding rows zeroed).

    Under ``@batch`` (while gradients are recorded) the rows of examples that do not
    run the code at hand are zeroed (``weight_input_data``). (The hot path of every
    linear layer: ``pack_rows`` inlined.)
    """
    rows = real_rows(batch, static)
    running = EXECUTION_MASK.get() is not None
    data = weight_input_data(batch) if running else batch.data
    flat = flat_rows(data, static)
    if rows is None:
        return flat
    if type(rows) is not RowMask:
        return flat.index_select(0, rows)
    # Under @batch the padding rows are zero already (weight_input_data, which skips
    # its where as this does: by the record, with the region's mixing mask).
    # Padding known to hold zeros (``has_zero_padding``: fromlist's, a linear layer's
    # or a norm's result, a relu of one, a residual sum of two) is not zeroed again,
    # which is exact:
    # - forward: the op reads zeros at padding rows either way (+0 or -0);
    # - backward: the op's output is zeroed at padding rows (``from_rows``), so the
    #   gradient reaching its padding rows is zero, and each row is computed alone
    #   (a RowMask is only for such ops), so what the op sends back to a padding row
    #   of its input is that row's Jacobian times zero: exactly zero for a linear
    #   layer (the weight) and a norm with eps > 0 (its scale is at most eps ** -0.5),
    #   as the where's backward would give. Its weight's gradient sums output gradient
    #   times input over the rows: 0 * 0 at padding, never 0 * nan, the input being
    #   exactly zero there (which is all the where was for);
    # - upstream, that zero goes back to the op that put the zeros there (from_rows'
    #   where or index_copy into zeros, fromlist's pad, a region's guard), whose
    #   backward drops the gradient at padding, through the ops that passed the record
    #   on (ops/pointwise.py's ZERO_KEEPING_*, dropout): each maps padding to padding,
    #   takes no weight and has a finite derivative at 0, so the zero stays zero.
    return flat if running or has_zero_padding(batch) else zero_rows(flat, rows)


def zero_rows(flat: torch.Tensor, rows: RowMask) -> torch.Tensor:
    """``flat`` ``(rows, ...)`` with the padding rows zeroed."""
    column = rows.column
    if column is None or column.dim() != flat.dim():
        # One view for every op of a layer (a linear layer's input and output have
        # the same rank); rebuilt only where the rank differs from the last.
        column = rows.column = rows.mask.view(-1, *(1,) * (flat.dim() - 1))
    return torch.where(column, flat, _ZERO if flat.is_floating_point() else flat.new_zeros(()))


def unpack_rows(values: torch.Tensor, rows: torch.Tensor | RowMask | None,
                lead: Sequence[int]) -> torch.Tensor:
    """Rows ``(n_real, *tail)`` back in the padded layout ``(*lead, *tail)``, zeros at
    padding.

    Padding gets no gradient: ``index_copy`` sends the gradient of real rows only.
    """
    tail = values.shape[1:]
    if type(rows) is RowMask:
        values = zero_rows(values, rows)
    elif rows is not None:
        total = 1
        for size in lead:
            total *= size
        # In place into fresh zeros: the out-of-place form would copy them once more.
        values = values.new_zeros(total, *tail).index_copy_(0, rows, values)
    return reshaped(values, (*lead, *tail))


def unpack_guarded(values: torch.Tensor, rows: torch.Tensor | RowMask | None,
                   lead: Sequence[int], mask: torch.Tensor | None) -> torch.Tensor:
    """:func:`unpack_rows` of a batch with ``mask``, and under ``@batch`` (while gradients
    are recorded) the rows of examples that do not run the region zeroed, their gradient
    dropped: it would reach a weight (padding is zero and gets none already)."""
    if not (values.requires_grad and torch.is_grad_enabled()
            and EXECUTION_MASK.get() is not None):
        return unpack_rows(values, rows, lead)
    if type(rows) is RowMask and (mask is None or mask.dim() == len(lead) + values.dim() - 1):
        # Every row ran: one where, with the mask the input was filled with (``rows``:
        # ``mixing_mask``, met again), zeroes padding and the rows not running.
        out = reshaped(values, (*lead, *values.shape[1:]))
        zero = _ZERO if out.is_floating_point() else out.new_zeros(())
        return torch.where(mixing_mask(mask, out), out, zero)
    return guard_gradient(unpack_rows(values, rows, lead), None)
