"""Whether eager code reads a mask's values on the host to spare work (a module of its
own, importing nothing of Matchbox: the execution mask and the compile-safe checks of
``_capture`` both ask it)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

#: Whether eager code may read a mask's values on the host to spare work: skip a
#: branch that no example takes, run a loop step that every example has without
#: masks, run a linear layer on the real rows only.  ``None`` (the default) decides
#: by the mask's device: yes on the CPU, where such a read costs one small op; no
#: on an accelerator, where it is a device-to-host sync that stalls the launch
#: queue, so the work runs masked instead, as hand-written padded code does.
#: Set with :func:`host_reads`.
HOST_READS: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "matchbox_host_reads", default=None)


def reads_values(mask: torch.Tensor) -> bool:
    """Whether eager code reads ``mask``'s values on the host to spare work
    (see :data:`HOST_READS`)."""
    allowed = HOST_READS.get()
    if allowed is None:
        return mask.device.type == "cpu"
    return allowed


#: The most elements :func:`any_true` reads as a list (past it, ``any`` and a read of its
#: one value cost less than the list's Python bools).
_LISTED = 64


def any_true(flags: torch.Tensor) -> bool:
    """``bool(flags.any())``, for eager code that reads values on the host: a small
    ``(batch,)`` bool tensor on the CPU is read as a list, with no op to dispatch (an
    ``any`` and its ``item`` cost about four times a ``tolist`` there: a TreeLSTM's
    ``if`` asks twice a step, issue 22); any other tensor as ``bool(flags.any())``."""
    if (flags.dtype is torch.bool and flags.dim() == 1 and flags.size(0) <= _LISTED
            and flags.device.type == "cpu" and type(flags) is torch.Tensor):
        return True in flags.tolist()
    return bool(flags.any())


@contextlib.contextmanager
def host_reads(allowed: bool | None) -> Iterator[None]:
    """``with host_reads(False):`` runs masked what a mask's values would let eager code
    skip, on every device (``True``: reads them on every device; ``None``: by device).

    Values and gradients are the same either way; only the ops run, and the
    device syncs, differ.
    """
    token = HOST_READS.set(allowed)
    try:
        yield
    finally:
        HOST_READS.reset(token)
