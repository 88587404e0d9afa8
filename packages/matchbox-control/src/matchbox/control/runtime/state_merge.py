"""``mb__.merge``: :func:`matchbox.control.runtime.select.merge` with its commonest case, a
loop's state (two batches of one dtype, static in every dimension, of the region's batch
size), run in one frame.

A shift-reduce TreeLSTM merges eight variables a step (a counter, a pointer, the stack,
after each side of its ``if`` and after the step): through ``select.merge`` each merge
was a dozen calls (``_merge_states``, ``_kept``, ``deferred_region_guard`` twice,
``_as_kept``, ``_select_per_example``, ``mask_view``, ...), each re-reading the same
slots (issue 22: Python per step).  Here every fact is read once, in the same order and
with the same answers; anything else (a deferred guard of another region, shapes that
differ, a number, a profiler, ``no_grad``) goes to ``select.merge`` untouched.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd import profiler as autograd_profiler

from matchbox.control.runtime import number_merges
from matchbox.control.runtime.select import _keep, _without_guard
from matchbox.control.runtime.select import merge as _general
from matchbox.extending import mask_and, mask_view, same_mask
from matchbox.masked_batch import MaskedBatch

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_make = MaskedBatch._make


def merge(mask: Any, outer: Any, new: Any, old: Any, name: str) -> Any:
    """The value of ``name`` after a region run under ``mask`` inside ``outer``
    (``select.merge``, whose answers these are)."""
    if mask is outer or new is old:
        return new
    if (type(new) is not MaskedBatch or type(old) is not MaskedBatch
            or type(mask) is not _Tensor or not _grad_enabled()
            or autograd_profiler._is_profiler_enabled):
        return _general(mask, outer, new, old, name)
    data_new, data_old, dims = new._data, old._data, new.dims
    if (data_new.dtype is not data_old.dtype or dims != old.dims or any(dims)
            or old._deferred_guard is not None):
        return _general(mask, outer, new, old, name)
    guard = new._deferred_guard
    if guard is not None and guard[0] is not mask:
        return _general(mask, outer, new, old, name)  # (another region's: applied there)
    kept = new._kept_outside
    if kept is not None and kept[0] is mask:
        # Known to equal ``old`` outside ``mask`` (``select._kept``): merged as it is.
        base = kept[1]()
        if (base is data_old and kept[3] is old._mask and base._version == kept[2]
                and kept[4] is data_new and data_new._version == kept[5]
                and new._mask is kept[6]):
            if guard is not None:
                new = _without_guard(new)
            if (isinstance(outer, _Tensor) and not data_new.is_inference()
                    and not data_old.is_inference()):
                _keep(new, old, outer)
            return new
    if guard is not None:
        if data_new is data_old and new._mask is old._mask:
            return old
        new = _without_guard(new)  # the where guards it
    if data_new.shape != data_old.shape or data_new.size(0) != mask.size(0):
        return _general(mask, outer, new, old, name)
    # ``select._select_per_example``: an example whose new value is padding keeps its old.
    view = mask_view(mask, data_new.dim())
    real = new._mask
    chosen = view if real is None or real is view or same_mask(view, real) else (
        mask_and(view, real))
    merged = _make(torch.where(chosen, data_new, data_old),
                   None if old._mask is None else chosen | old._mask, dims)
    merged._scalar = new._scalar if new._scalar is old._scalar else None
    merged = number_merges.merged(mask, new, old, merged, name)
    # (Not for inference tensors: they have no version counter to tell a write.)
    if (isinstance(outer, _Tensor) and not merged._data.is_inference()
            and not data_old.is_inference()):
        _keep(merged, old, outer)  # equal to ``old`` outside ``outer``, or to what old equals
    return merged
