"""Masked assignment: ``where(mask, new, old)`` for every kind of value.

At the end of a masked region (a branch, one iteration of a loop) each
variable the region assigned and the code after it reads is *merged*: the
examples that ran the region take the new value, the others keep the old one.

| new / old                      | result                                            |
|--------------------------------|---------------------------------------------------|
| the same object                | that object (nothing changed, or changed in place) |
| two batches, static dims       | per position ``where(mask & new real, new, old)`` |
|                                | (an example whose new value is padding keeps its  |
|                                | old one, as ``matchbox.functional.update``)        |
| two batches, dynamic dims      | per example; padded sizes are aligned first       |
| two batches of two dtypes      | ``TypeError`` (``merge_dtypes``)                  |
| a batch and a plain tensor or  | the plain value is the same for every example:    |
| number                         | broadcast, then as two batches (a plain tensor    |
|                                | expanded from size one to the batch size, stride  |
|                                | 0, is that one row, as core takes it)             |
| two plain tensors / numbers    | a new batch (one value per example)               |
| two equal plain values         | the new one                                       |
| tuples, lists, dicts           | element by element                                |
| lists (tuples) whose items     | position by position, each item recording the     |
| only some examples have, or of | examples that have it (``sequences.select_items``):|
| two lengths                    | each example keeps exactly its own items          |
| two views of batches (a        | the batches they hold, viewed again; a view and a |
| ``TimeMajorBatch``), or one and| plain ``h0`` ``(L, 1, H)``: its ``held_example``  |
| a plain example of it (``h0``) | beside the batch                                  |
| ``Undefined`` old              | the new value, padding for the other examples     |
| anything else                  | ``TypeError`` naming the variable                 |
"""

from __future__ import annotations

import numbers
import os
import sys
from typing import Any

import torch
from torch.autograd import profiler as autograd_profiler

from matchbox.control.runtime import grad_kept, number_merges
from matchbox.control.runtime.columns import Column
from matchbox.control.runtime.masks import example_mask, mask_view, one_side
from matchbox.control.runtime.merge_dtypes import refuse_mixed_dtypes
from matchbox.control.runtime.undefined import Undefined
from matchbox.extending import (
    BATCH_VIEWS,
    deferred_region_guard,
    expanded_row,
    fit_mask,
    mask_and,
    pad_to,
    record_equal_outside,
    same_mask,
)
from matchbox.extending import EXAMPLE_SCALAR as SCALAR
from matchbox.extending import EXAMPLE_VECTOR as VECTOR
from matchbox.extending import mark_example_scalar as mark
from matchbox.extending import mask_lengths as _lengths
from matchbox.masked_batch import MaskedBatch


def merge(mask: Any, outer: Any, new: Any, old: Any, name: str) -> Any:
    """The value of ``name`` after a region run under ``mask`` inside ``outer`` (a region run
    under its enclosing mask, a plain condition's, needs none: plain Python's)."""
    if mask is outer or new is old:
        return new
    if not torch.is_grad_enabled() and grad_kept.wanted(new, old, name):  # the user's no_grad
        return grad_kept.run(merge, mask, outer, new, old, name)
    if type(new) is MaskedBatch and type(old) is MaskedBatch:
        if new._data.dtype is not old._data.dtype:  # (first: a value kept is merged as is)
            refuse_mixed_dtypes(new, old, name)
        if new.dims == old.dims and not any(new.dims) and not (
                autograd_profiler._is_profiler_enabled):
            return _merge_states(mask, outer, new, old, name)  # the commonest: a state
    if _kept(new, old, mask):
        return _as_kept(new, old, mask, outer)
    if autograd_profiler._is_profiler_enabled:
        with torch.profiler.record_function("matchbox.batch.merge"):
            return _merge(mask, outer, new, old, name)
    return _merge(mask, outer, new, old, name)


def _merge_states(mask: torch.Tensor, outer: Any, new: MaskedBatch, old: MaskedBatch,
                  name: str) -> Any:
    """``merge`` of two batches of one dtype, static in every dimension (a loop's state)."""
    if _kept(new, old, mask):
        return _as_kept(new, old, mask, outer)
    if deferred_region_guard(new) is mask:  # (``_settled``)
        if new._data is old._data and new._mask is old._mask:
            return old
        new = _without_guard(new)  # the where guards it
    data_new, data_old = new.data, old.data  # (each read once: a read is a call)
    if data_new.shape != data_old.shape or data_new.size(0) != mask.size(0):
        return _selected(mask, outer, new, old, name)
    merged = _select_per_example(mask, new, old, data_new, data_old)
    merged = number_merges.merged(mask, new, old, merged, name)
    # (Not for inference tensors: they have no version counter to tell a write.)
    if (isinstance(outer, torch.Tensor) and not merged._data.is_inference()
            and not data_old.is_inference()):
        _keep(merged, old, outer)
    return merged


def _merge(mask: torch.Tensor, outer: Any, new: Any, old: Any, name: str) -> Any:
    new, old = _settled(mask, new, old)
    if new is old:
        return new
    if (type(new) is MaskedBatch and type(old) is MaskedBatch and new.dims == old.dims
            and not any(new.dims)):
        return _merge_states(mask, outer, new, old, name)
    return _selected(mask, outer, new, old, name)


def _selected(mask: torch.Tensor, outer: Any, new: Any, old: Any, name: str) -> Any:
    try:
        return select(mask, new, old, name)
    except TypeError:  # values no batch can hold for both (a batch and None)
        side = one_side(mask, outer)
        if side is None:
            raise
        return new if side else old


def _settled(mask: torch.Tensor, new: Any, old: Any) -> tuple[Any, Any]:
    """``new`` and ``old`` of a selection under ``mask``: ``new`` without its deferred
    region guard (core's ``_region_guard``) when deferred under ``mask`` itself and
    selected against a batch, with a ``where`` that already gives ``new`` no gradient
    outside ``mask`` (a batch the region only read is ``old``).  Any other deferred guard
    applies when the selection reads the batch's data (``MaskedBatch.data``)."""
    if deferred_region_guard(new) is mask and type(old) is MaskedBatch:
        if new._data is old._data and new._mask is old._mask:
            return old, old
        new = _without_guard(new)  # the where guards it
    return new, old


def _without_guard(batch: MaskedBatch) -> MaskedBatch:
    """``batch`` as a new batch of the same data and mask, with no deferred region guard."""
    return mark(MaskedBatch._make(batch._data, batch._mask, batch.dims), batch._scalar)


# A merge under ``mask`` inside ``outer`` gives a batch equal to ``old`` outside ``mask``,
# so outside ``outer`` (a region's mask lies within its outer one), in values and in
# gradient (a where passes it through).  Recorded on the result, that spares the merge
# of the enclosing region a where of its own: a counter (``top = top + 1``) assigned in
# the two sides of an ``if`` in a loop step is merged after each side, not again after
# the step.  (A value read in the region is seen there through a gradient guard, a new
# batch: its merges record the guard, and the enclosing merge still runs.)
def _keep(merged: MaskedBatch, old: MaskedBatch, outer: torch.Tensor) -> None:
    kept = getattr(old, "_kept_outside", None)
    if kept is not None and kept[0] is outer and _still(kept, old):
        # old equals a batch outside outer: so does merged
        record_equal_outside(merged, outer, kept[1](), kept[2], kept[3])
    else:
        record_equal_outside(merged, outer, old.data, old.data._version, old._mask)


def _still(kept: tuple, batch: MaskedBatch) -> bool:
    """Whether the batch a record is on, and the one it names, are unchanged since."""
    base = kept[1]()
    return (base is not None and base._version == kept[2] and kept[4] is batch._data
            and batch._data._version == kept[5] and batch._mask is kept[6])


def _kept(new: Any, old: Any, mask: Any) -> bool:
    """Whether ``new`` is known to equal ``old`` outside ``mask`` (see ``_keep``, and
    core's ``torch.where`` in a region), with no region guard deferred but ``mask``'s."""
    kept = getattr(new, "_kept_outside", None) if type(new) is MaskedBatch else None
    if kept is None or kept[0] is not mask or type(old) is not MaskedBatch:
        return False
    base, data = kept[1](), new._data
    # (``_still``'s, inline, for a base that is old's data)
    return (base is old._data and kept[3] is old._mask and base._version == kept[2]
            and kept[4] is data and data._version == kept[5] and new._mask is kept[6]
            and _guard_at_most(new, mask))


def _guard_at_most(batch: MaskedBatch, mask: Any) -> bool:
    guard = deferred_region_guard(batch)
    return guard is None or guard is mask


def _as_kept(new: MaskedBatch, old: MaskedBatch, mask: torch.Tensor, outer: Any) -> MaskedBatch:
    """``new``, known to equal ``old`` outside ``mask``, as the merged value: without the
    region's guard (for the examples outside ``mask`` it holds ``old``'s values, whose
    gradient must reach ``old``), and recorded as equal outside ``outer`` too."""
    if deferred_region_guard(new) is mask:
        new = _without_guard(new)
    if (isinstance(outer, torch.Tensor) and not new._data.is_inference()
            and not old._data.is_inference()):
        _keep(new, old, outer)
    return new


def merge_written(mask: Any, outer: Any, new: Any, old: Any, name: str) -> Any:
    """``merge`` of a variable the region did not assign but whose items it wrote
    (``x[i] = v``): a plain tensor written per example became a batch (merged);
    a batch seen through the region's gradient guard was written through to the
    old value, which is the variable, updated (and keeps its aliases)."""
    if type(new) is MaskedBatch and getattr(new, "_guards", None) is old:
        return old
    return merge(mask, outer, new, old, name)


def select(mask: torch.Tensor, new: Any, old: Any, name: str) -> Any:
    """``new`` for the examples in ``mask``, ``old`` for the others."""
    if not torch.is_grad_enabled() and grad_kept.wanted(new, old, name):  # the user's no_grad
        return grad_kept.run(select, mask, new, old, name)
    return number_merges.merged(mask, new, old, _select(mask, new, old, name), name)


def _select(mask: torch.Tensor, new: Any, old: Any, name: str) -> Any:
    new, old = _settled(mask, new, old)
    if new is old:
        return new
    if type(new) is MaskedBatch and type(old) is MaskedBatch:
        refuse_mixed_dtypes(new, old, name)
        return _select_batches(mask, new, old, name)
    if (type(new) is Column or type(old) is Column) and _column_like(new) and _column_like(old):
        return _select_columns(mask, new, old, name)
    if isinstance(old, Undefined):
        if type(new) is list or type(new) is tuple:
            from matchbox.control.runtime import sequences  # it imports this module
            if sequences.has_records(new):
                return sequences.select_items(mask, new, type(new)(), name)
        return only_active(mask, new, name, strict=False)
    if isinstance(new, Undefined):
        return only_active(~mask, old, name, strict=False)
    if isinstance(new, MaskedBatch):
        return _select_batches(mask, new, _lift(old, new, name), name)
    if isinstance(old, MaskedBatch):
        return _select_batches(mask, _lift(new, old, name), old, name)
    if isinstance(new, torch.Tensor) and isinstance(old, torch.Tensor):
        return _select_batches(mask, _broadcast(new, mask, name), _broadcast(old, mask, name),
                               name)
    if isinstance(new, bool) and isinstance(old, bool):
        # A flag (break, continue, return) set in the region: the mask itself.
        return MaskedBatch._make(mask if new else ~mask, None, ())
    if _is_number(new) and _is_number(old):
        if type(new) is type(old) and new == old:
            return new
        return _select_batches(mask, _broadcast(_scalar(new, mask), mask, name),
                               _broadcast(_scalar(old, mask), mask, name), name)
    if type(new) is type(old) and type(new) in BATCH_VIEWS:
        return type(new)(select(mask, new.batch, old.batch, name))
    view = type(new) if type(new) in BATCH_VIEWS else type(old)
    if view in BATCH_VIEWS and (held := _held(view, new, old)) is not None:
        return view(select(mask, *held, name))  # a view and a plain example of it (h0)
    if (type(new) is list or type(new) is tuple) and type(new) is type(old):
        from matchbox.control.runtime import sequences  # it imports this module
        if (len(new) != len(old) and type(new) is list) or sequences.has_records(new) or (
                sequences.has_records(old)):
            # Each example keeps its own items (a list's length may differ between
            # examples, and an item records the examples that have it).
            return sequences.select_items(mask, new, old, name)
    if isinstance(new, tuple) and type(new) is type(old) and len(new) == len(old):
        items = [select(mask, n, o, f"{name}[{i}]") for i, (n, o) in enumerate(zip(new, old))]
        return type(new)(*items) if hasattr(new, "_fields") else type(new)(items)
    if isinstance(new, list) and type(new) is type(old) and len(new) == len(old):
        return [select(mask, n, o, f"{name}[{i}]") for i, (n, o) in enumerate(zip(new, old))]
    if isinstance(new, dict) and type(new) is type(old) and new.keys() == old.keys():
        return type(new)((k, select(mask, new[k], old[k], f"{name}[{k!r}]")) for k in new)
    if type(new) is type(old) and (new is None or isinstance(new, (str, bytes, type))) and (
            new == old):
        return new
    raise TypeError(
        f"@batch: '{name}' is {_describe(new)} for the examples that ran this code and "
        f"{_describe(old)} for the others; a value that differs between examples must "
        "be a tensor, a number, or a tuple/list/dict of them (of the same length)"
    )


def _held(view: type, *values: Any) -> Any:
    """``values`` as the batches ``view`` holds (a plain tensor: its ``held_example``), or None."""
    example = getattr(view, "held_example", None) or (lambda v: None)
    held = [v.batch if type(v) is view else example(v) if isinstance(v, torch.Tensor) else None
            for v in values]
    return None if any(h is None for h in held) else held


def _column_like(value: Any) -> bool:
    return type(value) in (Column, tuple, list) or isinstance(value, Undefined)


def _select_columns(mask: torch.Tensor, new: Any, old: Any, name: str) -> Column:
    """Columns of ``zip(*rows)`` (``runtime.columns``) merged: item by item, each example
    keeping its own items, and the column recording the examples that have it."""
    from matchbox.control.runtime import sequences  # it imports this module

    def record(value: Any) -> Any:
        if isinstance(value, Undefined):
            return torch.zeros_like(mask)
        return torch.ones_like(mask) if value.present is None else value.present

    new, old = (v if isinstance(v, (Column, Undefined)) else Column(v) for v in (new, old))
    items = sequences.select_items(mask, () if isinstance(new, Undefined) else new,
                                   () if isinstance(old, Undefined) else old, name)
    return Column(items, torch.where(mask, record(new), record(old)))


def user_line() -> str:
    """Where the user's code runs now (``file, line N``): the innermost frame outside
    this package's runtime (rewritten code keeps the user's file and lines)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == _RUNTIME:
        frame = frame.f_back
    return "line unknown" if frame is None else f"{frame.f_code.co_filename}, line {frame.f_lineno}"


_RUNTIME = os.path.dirname(os.path.abspath(__file__))


def only_active(mask: torch.Tensor, value: Any, name: str, strict: bool = True) -> Any:
    """``value`` for the examples in ``mask``, padding for the others.

    ``strict``: a value that cannot hold padding (not a tensor or number) is an
    error; otherwise it is returned as it is.
    """
    if isinstance(value, MaskedBatch):
        view = mask_view(example_mask(mask, value, name), value.data.dim())
        real = view if value._mask is None else value._mask & view
        real = _lengths.restricted(fit_mask(real, value.data, value.dims), value, mask)
        return mark(MaskedBatch._make(value.data, real, value.dims), value._scalar)
    if type(value) in BATCH_VIEWS:
        return type(value)(only_active(mask, value.batch, name, strict))
    if isinstance(value, torch.Tensor):
        return only_active(mask, _broadcast(value, mask, name), name)
    if _is_number(value):
        return only_active(mask, _broadcast(_scalar(value, mask), mask, name), name)
    if isinstance(value, tuple):
        items = [only_active(mask, v, f"{name}[{i}]", strict) for i, v in enumerate(value)]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if strict:
        raise TypeError(
            f"@batch: '{name}' is {_describe(value)}, which cannot be given to only some "
            "examples; under a per-example condition use a tensor or a number"
        )
    return value


def _select_batches(mask: torch.Tensor, new: MaskedBatch, old: MaskedBatch,
                    name: str) -> MaskedBatch:
    if new.dims != old.dims or new.data.shape != old.data.shape:
        new, old = _align_layouts(new, old, name)
    data_new = new.data
    if mask.size(0) != data_new.size(0):
        mask = example_mask(mask, new, name)  # slices of the examples: heads
    if not any(new.dims):
        return _select_per_example(mask, new, old, data_new, old.data)
    view = mask_view(mask, data_new.dim())
    data = torch.where(view, data_new, old.data)
    if new._mask is None and old._mask is None:
        return MaskedBatch._make(data, None, new.dims)
    merged = _lengths.selected(torch.where(view, new.mask, old.mask), mask, new, old)
    return MaskedBatch._make(data, merged, new.dims)


def _select_per_example(mask: torch.Tensor, new: MaskedBatch, old: MaskedBatch,
                        data_new: torch.Tensor, data_old: torch.Tensor) -> MaskedBatch:
    """Select two batches of one static layout (``data_new``, ``data_old``: their data,
    read once by the caller), one mask entry per example.  An example whose new value is
    padding keeps its old value (``matchbox.functional.update``'s rule).  A new value
    real exactly where the region ran (a step's result) needs no ``and`` of the two
    masks."""
    view = mask_view(mask, data_new.dim())
    real = new._mask
    chosen = view if real is None or real is view or same_mask(view, real) else (
        mask_and(view, real))
    merged = MaskedBatch._make(torch.where(chosen, data_new, data_old),
                               None if old._mask is None else chosen | old._mask, new.dims)
    # One value per example: a number in the loop if both are, a (1,) tensor if both are.
    merged._scalar = new._scalar if new._scalar is old._scalar else None  # (mark's)
    return merged


def _align_layouts(new: MaskedBatch, old: MaskedBatch, name: str):
    """Give two values of one variable one layout: the same dims and padded sizes.

    A dimension whose size differs between the examples (dynamic in either, or
    static of two sizes: a sequence grown with ``torch.cat`` in a loop that
    examples leave at different steps) becomes dynamic in both.
    """
    if len(new.dims) != len(old.dims):
        raise ValueError(
            f"@batch: '{name}' has examples with dims {new.dims} for the examples that ran "
            f"this code and dims {old.dims} for the others; a variable must keep its rank"
        )
    for i, (a, b) in enumerate(zip(new.dims, old.dims), start=1):
        if a or b or new.data.size(i) != old.data.size(i):
            size = max(new.data.size(i), old.data.size(i))
            new, old = _dynamic(new, i, size), _dynamic(old, i, size)
    return new, old


def _dynamic(batch: MaskedBatch, dim: int, size: int) -> MaskedBatch:
    """``batch`` with ``dim`` dynamic and padded to ``size`` (a static dim is real along
    its whole extent)."""
    if batch.dims[dim - 1] or batch.data.size(dim) < size:
        return pad_to(batch, dim, size)  # a static dim becomes dynamic there
    mask = batch.mask
    mask = mask.expand(*mask.shape[:dim], size, *mask.shape[dim + 1:])
    dims = batch.dims[:dim - 1] + (True,) + batch.dims[dim:]
    return MaskedBatch._make(batch.data, mask, dims)


def _lift(value: Any, like: MaskedBatch, name: str) -> MaskedBatch:
    """A plain value (the same for every example) as a batch laid out like ``like``."""
    lifted = _lifted(value, like, name)
    # One value per example: a number (or 0-d tensor) in the loop, or a (1,) tensor.
    return mark(lifted, not isinstance(value, torch.Tensor) or value.dim() == 0)


def _lifted(value: Any, like: MaskedBatch, name: str) -> MaskedBatch:
    if _is_number(value):
        dtype = torch.result_type(like.data, value)
        data = torch.full(like.data.shape, value, dtype=dtype, device=like.device)
        return MaskedBatch._make(data, None, like.dims)
    if isinstance(value, torch.Tensor):
        shape = like.data.shape
        if value.dim() == len(shape):  # h0.expand(x.size(0), -1): its one row, as core's
            value = expanded_row(value, shape[0])
        if value.dim() > len(shape) or (value.dim() == len(shape) and value.size(0) != 1):
            raise ValueError(
                f"@batch: '{name}' is a plain tensor of shape {tuple(value.shape)} on one "
                f"path and a batch of examples of rank {len(shape)} on another; "
                + _ONE_ROW_HINT
            )
        try:
            data = value.expand(shape)
        except RuntimeError:
            if value.dim() == len(shape) and value.size(0) == 1:
                # Sizes that differ from the batch's: the same value for every
                # example, whose sizes the merge aligns (``_align_layouts``).
                return MaskedBatch._make(value.expand(shape[0], *value.shape[1:]), None,
                                         like.dims)
            raise ValueError(
                f"@batch: '{name}' is a plain tensor of shape {tuple(value.shape)} on one "
                f"path and a batch with padded example shape (1, *{tuple(shape[1:])}) on "
                "another; the shapes must agree"
            ) from None
        return MaskedBatch._make(data, None, like.dims)
    raise TypeError(
        f"@batch: '{name}' is a batch for the examples on one path and {_describe(value)} "
        "for the others"
    )


def _broadcast(value: torch.Tensor, mask: torch.Tensor, name: str) -> MaskedBatch:
    """A plain tensor of one example (leading size one, or 0-d) as a batch."""
    batch = mask.size(0)
    if value.dim() == 0:
        return mark(MaskedBatch._make(value.to(mask.device).expand(batch), None, ()), SCALAR)
    value = expanded_row(value, batch)  # h0.expand(x.size(0), -1): its one row, as core's
    if value.size(0) != 1:
        raise ValueError(
            f"@batch: '{name}' is a plain tensor of shape {tuple(value.shape)} that differs "
            "between examples, so it becomes a batch, whose examples need a leading "
            "dimension of size one; " + _ONE_ROW_HINT
        )
    return mark(MaskedBatch._make(value.expand(batch, *value.shape[1:]), None,
                                  (False,) * (value.dim() - 1)), VECTOR)


_ONE_ROW_HINT = (
    "a plain tensor is the same for every example, so it needs size 1 in dimension 0 "
    "(each example's batch dimension), or is one expanded to the batch size "
    "(h0.expand(x.size(0), -1)) and not yet copied by an op (as core takes it beside a "
    "batch): keep it of shape (1, d) (h = h0 + 0.0), or expand after the op "
    "((h0 * 2).expand(x.size(0), -1))"
)


def _scalar(value: Any, mask: torch.Tensor) -> torch.Tensor:
    if isinstance(value, bool):
        return torch.tensor(value, device=mask.device)
    if isinstance(value, numbers.Integral):
        return torch.tensor(int(value), dtype=torch.int64, device=mask.device)
    return torch.tensor(value, dtype=torch.get_default_dtype(), device=mask.device)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, torch.Tensor)


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list, dict)) and not hasattr(value, "_fields"):
        n = len(value)
        return f"a {type(value).__name__} of {n} item{'' if n == 1 else 's'}"
    if isinstance(value, MaskedBatch):
        return f"a batch with dims {value.dims}"
    if isinstance(value, torch.Tensor):
        return f"a plain tensor of shape {tuple(value.shape)}"
    if isinstance(value, Undefined):
        return "not defined"
    return f"{type(value).__name__} {value!r}"[:80]
