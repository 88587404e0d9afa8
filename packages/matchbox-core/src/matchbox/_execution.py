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
from typing import Any

import torch

from matchbox import _lengths

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
    mask = EXECUTION_MASK.get()
    if mask is None or failing.dim() != 1:
        return failing
    if mask.shape != failing.shape:
        mask = rows_for(mask, failing.size(0), 1)
        if mask is None:
            return failing
    return failing & mask


# The last ``(batch,)`` mask viewed as rows: ``(mask, rank, view)``.  Under
# ``@batch`` the guards and merges of a region and the ops inside it view the
# same execution mask again and again; one entry, replaced as a whole (a thread
# reading it sees a consistent entry), spares a view op each time and lets
# ``and_running`` recognise a step's own mask by identity.
_LAST_ROWS: tuple[Any, int, Any] = (None, 0, None)


def mask_rows(mask: torch.Tensor, rank: int) -> torch.Tensor:
    """A ``(batch,)`` mask viewed as ``(batch, 1, ..., 1)`` of ``rank`` dimensions."""
    global _LAST_ROWS
    last = _LAST_ROWS
    if last[0] is mask and last[1] == rank:
        return last[2]
    if rank == 1:
        return mask
    view = mask.view(mask.size(0), *(1,) * (rank - 1))
    _LAST_ROWS = (mask, rank, view)
    return view


def rows_for(mask: torch.Tensor, batch: int, rank: int) -> torch.Tensor | None:
    """A ``(B,)`` per-example mask as the rows of a batch of ``batch`` examples.

    ``batch == B``: :func:`mask_rows`.  A multiple ``B * k``: a batch whose examples
    are ``k`` slices of each of the ``B`` (``join_dims(0, d)``, the original
    Matchbox's attention heads: example ``b``'s slices are ``b * k .. b * k + k - 1``),
    each slice running where its example runs.  Anything else: ``None``.
    """
    size = mask.size(0)
    if size == batch:
        return mask_rows(mask, rank)
    if size == 0 or batch % size:
        return None
    return mask.repeat_interleave(batch // size).view(batch, *(1,) * (rank - 1))


def remember_rows(mask: torch.Tensor, view: torch.Tensor) -> None:
    """Make ``mask_rows(mask, view.dim())`` return ``view``, a row mask equal to ``mask``.

    A ``@batch`` step's mask equals its item's own ``(batch, 1)`` mask: handing
    that very tensor back lets an op or a merge see by identity that a step's
    result is real exactly where the step runs.
    """
    global _LAST_ROWS
    _LAST_ROWS = (mask, view.dim(), view)


def and_running(mask: torch.Tensor | None, rank: int, batch: int) -> torch.Tensor | None:
    """``mask`` and the running examples (:data:`EXECUTION_MASK`) as rows of ``rank`` dims.

    What an op computes for an example that does not run the code at hand is
    discarded, but the backward pass still visits it: a zero gradient times a
    derivative that is not finite there (``y / n`` under ``if n > 0``) is NaN.
    Ops that sum gradients over the examples into a shared tensor (a weight)
    drop such rows as they drop padding.
    """
    running = EXECUTION_MASK.get()
    if running is None or running.dim() != 1:
        return mask
    rows = mask_rows(running, rank) if running.size(0) == batch else rows_for(running, batch,
                                                                               rank)
    if rows is None:
        return mask
    if mask is None or mask is rows:
        return rows
    if same_mask(mask, rows):
        return mask
    return mask & rows


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
    return all(x == y or n == 1 for x, y, n in zip(a.stride(), b.stride(), a.shape))


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.data_ptr() == b.data_ptr()
    except RuntimeError:  # fake tensors (matchbox.compile capturing a graph) have no data
        return (a.untyped_storage()._cdata == b.untyped_storage()._cdata
                and a.storage_offset() == b.storage_offset())
