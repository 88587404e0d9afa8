"""The execution mask: which examples run the code at hand.

matchbox-control's ``@batch`` sets :data:`EXECUTION_MASK` while it runs code under a
per-example condition.  What an op computes for an example that does not run the
code is discarded, as in the loop over examples, where that example does not run it
at all; so checks look only at the running examples (:func:`running`), and ops that
sum gradients over the examples into a shared tensor treat the others' rows as
padding (:func:`and_running`).  A step's mask is recognised by identity, without
reading values (:func:`same_mask`).
"""

from __future__ import annotations

import contextvars
import itertools
import weakref
from collections import OrderedDict
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from matchbox import _lengths
from matchbox._host_reads import HOST_READS, host_reads, reads_values  # noqa: F401 (re-exported)

#: The examples that run the code at hand: a ``(batch,)`` bool tensor, set by
#: matchbox-control's ``@batch`` while it runs code under a per-example
#: condition; ``None`` means every example.  A check that an example suits an
#: op (an index within its length, a non-empty extent to reduce) looks only at
#: the running examples: what is computed for the others is discarded, as in
#: the loop over examples, where they do not run that code at all.
EXECUTION_MASK: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar(
    "matchbox_execution_mask", default=None)


def running(failing: torch.Tensor) -> torch.Tensor:
    """Per-example ``failing`` (``(batch,)`` bool) restricted to the running examples."""
    mask = _running_like(failing)
    return failing if mask is None else failing & mask


def running_without(present: torch.Tensor) -> torch.Tensor:
    """The running examples where per-example ``present`` (``(batch,)`` bool) is false."""
    mask = _running_like(present)
    # mask & ~present in one op: on bools, a > b only where a is True and b False.
    return ~present if mask is None else mask > present


def _running_like(flags: torch.Tensor) -> torch.Tensor | None:
    """The execution mask with one entry per example of ``flags``; ``None`` outside
    ``@batch`` (or for flags that are not per example)."""
    mask = EXECUTION_MASK.get()
    if mask is None or flags.dim() != 1:
        return None
    if mask.shape != flags.shape:
        return mask_view_for(mask, flags.size(0), 1)
    return mask


# ``(batch,)`` masks viewed as ``(batch, 1, ..., 1)``: (id of the mask, rank) -> (weak
# reference to the mask, view).  Under ``@batch`` the guards and merges of a region and the ops inside
# it view the same few execution masks (a step's, a branch's two) again and again; a
# few entries, oldest dropped first, spare a view op each time and let ``and_running``
# recognise a step's own mask by identity.  The weak reference tells a live entry from
# a recycled id.
_MASK_VIEWS: OrderedDict[tuple[int, int], tuple[Any, Any]] = OrderedDict()
_MASK_VIEWS_KEPT = 16


def mask_view(mask: torch.Tensor, rank: int) -> torch.Tensor:
    """A ``(batch,)`` mask viewed as ``(batch, 1, ..., 1)`` of ``rank`` dimensions."""
    if rank == 1:
        return mask
    key = (id(mask), rank)
    entry = _MASK_VIEWS.get(key)
    if entry is not None and entry[0]() is mask:
        return entry[1]
    view = mask.view(mask.size(0), *(1,) * (rank - 1))
    _remember(key, mask, view)
    return view


def _remember(key: tuple[int, int], mask: torch.Tensor, view: torch.Tensor) -> None:
    _MASK_VIEWS.pop(key, None)
    _MASK_VIEWS[key] = (weakref.ref(mask), view)  # newest last
    if len(_MASK_VIEWS) > _MASK_VIEWS_KEPT:
        try:
            _MASK_VIEWS.popitem(last=False)  # one in, one out
        except KeyError:  # another thread emptied it
            pass


def mask_view_for(mask: torch.Tensor, batch: int, rank: int) -> torch.Tensor | None:
    """A ``(B,)`` per-example mask viewed for a batch of ``batch`` examples.

    ``batch == B``: :func:`mask_view`.  A multiple ``B * k``: a batch whose examples
    are ``k`` slices of each of the ``B`` (``join_dims(0, d)``, the original
    Matchbox's attention heads: example ``b``'s slices are ``b * k .. b * k + k - 1``),
    each slice running where its example runs.  Anything else: ``None``.
    """
    size = mask.size(0)
    if size == batch:
        return mask_view(mask, rank)
    if size == 0 or batch % size:
        return None
    return mask.repeat_interleave(batch // size).view(batch, *(1,) * (rank - 1))


def remember_mask_view(mask: torch.Tensor, view: torch.Tensor) -> None:
    """Make ``mask_view(mask, view.dim())`` return ``view``, a view equal to ``mask``.

    A ``@batch`` step's mask equals its item's own ``(batch, 1)`` mask: handing
    that very tensor back lets an op or a merge see by identity that a step's
    result is real exactly where the step runs.
    """
    _remember((id(mask), view.dim()), mask, view)


def and_running(mask: torch.Tensor | None, batch: int, rank: int) -> torch.Tensor | None:
    """``mask`` and the running examples (:data:`EXECUTION_MASK`, viewed as ``rank`` dims).

    What an op computes for an example that does not run the code at hand is
    discarded, but the backward pass still visits it: a zero gradient times a
    derivative that is not finite there (``y / n`` under ``if n > 0``) is NaN.
    Ops that sum gradients over the examples into a shared tensor (a weight)
    drop such rows as they drop padding.
    """
    running = EXECUTION_MASK.get()
    if running is None or running.dim() != 1:
        return mask
    view = (mask_view(running, rank) if running.size(0) == batch
            else mask_view_for(running, batch, rank))
    if view is None:
        return mask
    if mask is None or mask is view:
        return view
    if same_mask(mask, view):
        return mask
    return mask_and(mask, view)


# The *and* of two masks, remembered: (id a, id b) -> (ref a, ref b, ref a & b).  Under
# ``@batch`` a region's ops combine the same masks again and again (a step's mask with the
# region's, two stack reads' masks): the *and* is computed once, and handed back as the
# same tensor, so that later ops see by identity that their arguments share a mask (no
# merge of masks, no gradient guard).  Weak references tell a live entry from a recycled
# id; entries are few and replaced oldest first.
_ANDS: OrderedDict[tuple[int, int], tuple[Any, Any, Any]] = OrderedDict()
_ANDS_KEPT = 64

#: The attribute of a mask ``mask_and`` made that names the masks it was made from: weak
#: references, level by level (``((a, b), (a's parts, b's parts), ...)``, :data:`_DEPTH`
#: levels), so that ``_within`` reads them without walking the chain (a loop's mask is
#: the *and* of the previous step's with the step's condition) or keying on addresses.
_AND_OF = "_matchbox_and_of"
_DEPTH = 4


def mask_and(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a & b`` for two masks, without an op where the answer is known.

    One is the other, or is known to be the *and* of the other with something
    (so within it, and of its shape): that one.  The same pair met before: the
    same tensor as then.  Masks that carry lengths (``matchbox._lengths``) are
    combined as they are, with ``&``.
    """
    if a is b:
        return a
    if _lengths.LIVE[0] and (_lengths.carried(a) is not None
                             or _lengths.carried(b) is not None):
        return a & b
    if _within(b, a) and b.dim() >= a.dim() and _covers(b, a):
        return b
    if _within(a, b) and a.dim() >= b.dim() and _covers(a, b):
        return a
    key = (id(a), id(b))
    entry = _ANDS.get(key)
    if entry is not None and entry[0]() is a and entry[1]() is b:
        result = entry[2]()
        if result is not None:
            return result
    result = a & b
    _ANDS.pop(key, None)
    ref_a, ref_b = weakref.ref(a), weakref.ref(b)
    _ANDS[key] = (ref_a, ref_b, weakref.ref(result))
    while len(_ANDS) > _ANDS_KEPT:
        try:
            _ANDS.popitem(last=False)
        except KeyError:  # another thread emptied it
            break
    levels_a = getattr(a, _AND_OF, ())
    levels_b = getattr(b, _AND_OF, ())
    if levels_a or levels_b:  # a level of each, a level deeper, the last level dropped
        deeper = tuple(x + y for x, y in itertools.zip_longest(
            levels_a[:_DEPTH - 1], levels_b[:_DEPTH - 1], fillvalue=()))
        setattr(result, _AND_OF, ((ref_a, ref_b), *deeper))
    else:
        setattr(result, _AND_OF, ((ref_a, ref_b),))
    return result


def _covers(inner: torch.Tensor, outer: torch.Tensor) -> bool:
    """Whether ``inner`` has the shape ``inner & outer`` would have."""
    # torch.broadcast_shapes' rule, in plain Python (it was most of mask_and's time).
    a, b = inner.shape, outer.shape
    if len(b) > len(a):
        return False
    return all(y == x or y == 1 for x, y in zip(a[len(a) - len(b):], b))


def _within(inner: torch.Tensor, outer: torch.Tensor) -> bool:
    """Whether ``inner`` was made (by :func:`mask_and`) as the *and* of ``outer`` (or of
    a view of its memory, ``same_mask``) with something, a few levels deep."""
    levels = getattr(inner, _AND_OF, None)
    if levels is None:
        return False
    shape = outer.shape
    # A live part at another address is no view of ``outer``'s memory: only a part of the
    # same shape at its address (or either without one) asks ``same_mask``.
    try:
        address = outer.data_ptr() if type(outer) is torch.Tensor and outer.numel() else 0
    except RuntimeError:  # a tensor without data (functionalized)
        address = 0
    for level in levels:
        for ref in level:
            part = ref()
            if part is None:
                continue
            if part is outer:
                return True
            if part.shape != shape:
                continue
            if address and type(part) is torch.Tensor:
                try:
                    if part.data_ptr() != address:
                        continue
                except RuntimeError:
                    pass
            if same_mask(part, outer):
                return True
    return False


def same_mask(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two masks are one: the same tensor, or views of the same memory
    with the same layout (no device sync, no comparison of values).

    Strides of size-one dimensions do not matter (``m.view(b, 1)`` of a step's
    ``(b,)`` mask is the ``(b, 1)`` mask it was taken from).
    """
    if a is b:
        return True
    if a.shape != b.shape or a.device != b.device or not _same_memory(a, b):
        return False
    if _lengths.carried(a) is not _lengths.carried(b):
        return False  # the same positions, but other sizes of an example empty in part
    for x, y, n in zip(a.stride(), b.stride(), a.shape):  # (a loop: no generator's frames)
        if x != y and n != 1:
            return False
    return True


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    if isinstance(a, FakeTensor) or isinstance(b, FakeTensor):
        # No data (matchbox.compile capturing a graph): torch warns that reading a fake
        # tensor's address will raise, and later versions raise.
        pointers = 0, 0
    else:
        try:
            pointers = a.data_ptr(), b.data_ptr()
        except RuntimeError:  # another tensor without data (functionalized)
            pointers = 0, 0
    if all(pointers):
        return pointers[0] == pointers[1]
    # No address to compare: a fake tensor (torch 2.3's give 0, which every one of
    # them shares: two different masks would look like one) or an empty one.
    return (a.untyped_storage()._cdata == b.untyped_storage()._cdata
            and a.storage_offset() == b.storage_offset())


def record_equal_outside(result: Any, outer: torch.Tensor, base_data: torch.Tensor,
                         base_version: int, base_mask: torch.Tensor | None) -> None:
    """Record on the batch ``result`` that outside ``outer`` (a region's mask) it equals,
    in values and in gradient, the batch whose data was ``base_data`` at ``base_version``
    and whose mask was ``base_mask``.

    matchbox-control's merge at the end of a region reads it (``select._kept``): a value
    so recorded against the variable's value before the region needs no ``where`` to be
    merged.  The record names the data by weak reference and version, and ``result``'s
    own data, version and mask, so that a write to either voids it.
    """
    result._kept_outside = (outer, weakref.ref(base_data), base_version, base_mask,
                            result._data, result._data._version, result._mask)
