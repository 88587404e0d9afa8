"""A ``@batch`` region's gradient guard, applied only where an op needs it.

Inside a region (a branch, a loop step) every example computes, also those that do not
run it; their results are discarded by the region's merge.  matchbox-control sees each
batch the region reads through a *gradient guard*, ``where(running, x, x.detach())``, so
that the discarded computation sends no gradient (``0 * inf = nan``) into ``x``.

Applied at once, that guard copies the whole batch: a tree's stack, read in both sides of
an ``if`` in every step, was copied twice a step for the guard alone (issue 22).  A guard
only matters going in to an op whose backward could turn a zero gradient into a non-finite
one; the ops below are linear in each example's values and copy them (their backward
only moves or sums gradients, example by example), so the guard commutes with them:
guarding their result is guarding their inputs.  So the guard is *deferred*
(:func:`defer`): the batch keeps its data and records the region's mask, the dispatch
runs a pass-through op on it as it is and records the mask on the result
(:func:`passes`, :func:`carry`), any other op first applies the guard, in place on the
batch object (:func:`resolve`), and the region's merge, whose ``where`` already drops the
gradient of the examples outside its mask, takes a batch deferred under that mask as
it is (matchbox-control's ``select``).  The guard is applied at most once per batch, on
what is actually read: a stack's two items, not the stack.

Values are the same either way; only the rows of the examples not running the region
differ (zeros once a batch without padding is guarded, as before), and those the merge
discards.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from matchbox._copies import is_copy
from matchbox._copies import remember as remember_copy
from matchbox._execution import mask_view
from matchbox._layout import mark_zero_padding
from matchbox._padding import _ZERO

#: ``[True]`` once a guard has been deferred in this process: until then the dispatch
#: skips looking for one.
LIVE = [False]
#: Above zero while an op the guard passes through runs: ``MaskedBatch.data`` then gives
#: a batch's data as it is.  Any other read of a batch whose guard is deferred applies it
#: first (``MaskedBatch.data``), so code that reads a batch's data itself, not through
#: the dispatch (a method, a helper, a conversion), always sees it guarded.
RAW_READS = [0]

# The batch type whose guards are deferred: ``matchbox.masked_batch`` names it when it is
# defined (it imports the dispatch, which imports this module).
MaskedBatch: Any = None


def bind_batch_type(cls: type) -> None:
    global MaskedBatch
    MaskedBatch = cls


# The ops through which a guard is carried: per example linear in their batch arguments
# and returning new tensors (a view would share data with a batch whose guard is applied
# later, in a new tensor, and miss the in-place writes made after).  ``Tensor.__getitem__``
# only with a tensor or a batch among its indices (advanced indexing copies); a result
# that is a view all the same is refused by :func:`carry`, and the op runs again on
# guarded inputs.
PASS_THROUGH = frozenset({torch.where, torch.Tensor.where, torch.cat, torch.concat,
                           torch.stack})
GETITEM = torch.Tensor.__getitem__


def defer(value: Any, mask: torch.Tensor, rows: torch.Tensor) -> Any:
    """``value`` guarded for the region running ``mask`` (``(batch,)``), as a new batch
    whose guard is deferred; ``rows``: ``mask`` with one entry per example of ``value``
    (the same tensor, unless the batch holds several slices of each example)."""
    LIVE[0] = True
    guarded = MaskedBatch._make(value._data, value._mask, value.dims)
    guarded._zero_padding = value._zero_padding  # the same data, mask and version
    guarded._not_a_view = value._not_a_view  # a copy standing for a view stays one
    guarded._deferred_guard = (mask, rows)
    return guarded


def deferred_mask(batch: Any) -> torch.Tensor | None:
    """The mask of the region whose guard ``batch`` defers (``None``: none)."""
    if type(batch) is not MaskedBatch or batch._deferred_guard is None:
        return None
    return batch._deferred_guard[0]


def resolve(batch: Any) -> Any:
    """Apply ``batch``'s deferred guard (if any) in place: the object every holder of the
    batch sees becomes the guarded batch.  Returns ``batch``."""
    if type(batch) is not MaskedBatch:
        return batch
    deferred = batch._deferred_guard
    if deferred is None:
        return batch
    data = batch._data
    if not torch.is_grad_enabled():
        return batch  # read without gradient (torch.no_grad): the guard stays deferred
    batch._deferred_guard = None
    if not data.requires_grad:
        return batch
    view = mask_view(deferred[1], data.dim())
    if batch._mask is None and data.is_floating_point():
        # The region's values for the examples that do not run it are discarded: zeros
        # serve, and recorded as such they spare ops with a weight, which must not read
        # those rows (``_masking.mixing_mask``), a fill of their own.
        batch._data = torch.where(view, data, _ZERO)  # (the slot: no property's frame)
        mark_zero_padding(batch, view)
    else:
        batch._data = torch.where(view, data, data.detach())
        batch._zero_padding = None
    if batch._not_a_view:  # a copy standing for a view (``matchbox._copies``): so is the
        remember_copy(batch._data)  # guarded one, and its views are refused in-place ops
    if getattr(batch, "_guards", None) is not None:  # (a region's guard of a variable)
        key = id(batch._data)
        _GUARD_DATA[key] = weakref.ref(batch._data, lambda _: _GUARD_DATA.pop(key, None))
    return batch


#: The data of the region guards applied (:func:`resolve`) of batches that stand for a
#: variable's batch (``_guards``), by ``id``: an in-place op on a *view* of such data
#: would miss the variable's batch (:func:`refuse_a_view_of_a_guard`).
_GUARD_DATA: dict[int, Any] = {}


def refuse_a_view_of_a_guard(op: str, target: Any) -> None:
    """Refuse an in-place op under a per-example condition on ``target``, a batch whose data
    is a view of a region guard's data (``x[:, 0].mul_(s)``, ``x.view(...).add_(v)`` with
    ``x`` requiring grad): the guard is a new tensor standing for ``x`` in the region, so
    the write would reach it and not ``x``, where the loop's view writes into ``x``."""
    base = target._data._base
    if base is None or not _GUARD_DATA or is_copy(target):
        return  # (a copy standing for a view: refused, or written back, as one)
    ref = _GUARD_DATA.get(id(base))
    if ref is not None and ref() is base:
        raise NotImplementedError(
            f"{op}: an in-place op on a view of a batch (x[:, 0].mul_(v), x.view(...).add_(v)) "
            "under a per-example condition, where the batch requires grad, is not supported: "
            "in the region the batch is read through its gradient guard, a new tensor, so the "
            "write would not reach it (the loop's view writes into x); write the update as an "
            "assignment to the batch's items, x[:, 0] *= v (or x[:, 0] = new_value), which "
            "reaches it")


_SEQUENCES = frozenset({list, tuple})


def deferred_arguments(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> list[Any]:
    """The batches among the arguments (one level into lists and tuples) whose guard is
    deferred.  (Plain loops, no generator: the dispatch asks this of every op while a
    guard is live.)"""
    found: list[Any] = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        kind = type(value)
        if kind is MaskedBatch:
            if value._deferred_guard is not None:
                found.append(value)
        elif kind in _SEQUENCES:
            for item in value:
                if type(item) is MaskedBatch and item._deferred_guard is not None:
                    found.append(item)
    return found


def _advanced(index: Any) -> bool:
    """Whether an index holds a tensor or a batch (per-example ints): indexing copies."""
    for item in index if type(index) is tuple else (index,):
        if isinstance(item, torch.Tensor) or type(item) is MaskedBatch:
            return True
    return False


def passes(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
    """Before ``func`` runs on batches: the guard its result carries (the deferred guard
    of its batch arguments, when ``func`` lets it through and they share one region), or
    ``None`` after applying every deferred guard among the arguments."""
    deferred = deferred_arguments(args, kwargs)
    return _passing(func, args, deferred) if deferred else None


def _passing(func: Any, args: tuple[Any, ...], deferred: list[Any]) -> Any:
    """:func:`passes`, given the batches among the arguments that defer a guard."""
    first = deferred[0]._deferred_guard
    if func in PASS_THROUGH or (func is GETITEM and len(args) > 1 and _advanced(args[1])):
        region = first[0]
        for batch in deferred:
            if batch._deferred_guard[0] is not region:
                break
        else:
            return first
    for batch in deferred:
        resolve(batch)
    return None


def carry(result: Any, guard: tuple[torch.Tensor, torch.Tensor]) -> bool:
    """Record ``guard`` (what :func:`passes` answered) on the batches of ``result``, the
    op's result; ``False`` if one of them is a view, which must not be, or of another
    batch size: the op is then run again on guarded inputs."""
    if type(result) is MaskedBatch:  # (the commonest result, without the loops below)
        data = result._data
        if data._is_view() or (data.requires_grad and data.size(0) != guard[1].size(0)):
            return False
        if data.requires_grad:
            result._deferred_guard = guard
        return True
    parts = result if type(result) is tuple or type(result) is list else (result,)
    for part in parts:
        if type(part) is MaskedBatch and part._data._is_view():
            return False
    for part in parts:
        if type(part) is MaskedBatch and part._data.requires_grad:
            if part._data.size(0) != guard[1].size(0):
                return False
            part._deferred_guard = guard
    return True


def run_passing(func: Any, types: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any] | None, run: Any) -> Any:
    """``run(func, types, args, kwargs)``, an op whose batch arguments may defer a guard: through
    it when ``func`` lets the guard pass (the result then carries it), else after applying
    it.  The dispatch calls this for every op while a guard is live, and so does a fast
    method (``matchbox._methods``) given a batch that defers one: ``stack[:, top - 1]``
    of a guarded stack, each step (a ``run`` answering ``None`` declines the call, for the
    dispatch to take)."""
    deferred = deferred_arguments(args, kwargs)
    if deferred:
        return run_deferred(func, types, args, kwargs, run, deferred)
    return run(func, types, args, kwargs)


def run_deferred(func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None,
                 run: Any, deferred: list[Any]) -> Any:
    """:func:`run_passing`, given ``deferred``: the batches among the arguments that defer
    a guard (``deferred_arguments``, not empty), which the dispatch looks for itself."""
    guard = deferred[0]._deferred_guard  # (_passing, inline)
    if func in PASS_THROUGH or (func is GETITEM and len(args) > 1 and _advanced(args[1])):
        region = guard[0]
        for batch in deferred:
            if batch._deferred_guard[0] is not region:
                guard = None
                break
    else:
        guard = None
    if guard is None:
        for batch in deferred:
            resolve(batch)
        return run(func, types, args, kwargs)
    RAW_READS[0] += 1  # the op reads its batches' data as it is
    try:
        result = run(func, types, args, kwargs)
    finally:
        RAW_READS[0] -= 1
    if result is None or carry(result, guard):
        return result
    resolve_all(args, kwargs)
    return run(func, types, args, kwargs)


def resolve_all(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> None:
    """Apply the deferred guards among an op's arguments."""
    for batch in deferred_arguments(args, kwargs):
        resolve(batch)
