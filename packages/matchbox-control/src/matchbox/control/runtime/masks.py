"""Execution masks: which examples run the code at hand.

An execution mask is one of

- ``None``: every example runs (plain Python, or no batch condition met yet);
- a bool tensor of shape ``(batch,)``: the examples that run;
- ``False``: no example runs; the region is skipped.

The generated code keeps the mask of each region in a local variable, and the
mask of the code running now in a :class:`contextvars.ContextVar` (core's
``matchbox._masking.EXECUTION_MASK``), so that a
decorated function called from a masked region starts from its caller's mask,
and threads and async tasks never see each other's masks.

A condition is a *batch condition* when it is a ``MaskedBatch`` holding one
value per example (``dims == ()``, or static dimensions of size one); its
truth per example is ``value != 0`` where the example is real, ``False`` where
it is padding.  Any other condition is plain Python: ``bool(test)``, once, as
Python's own ``if`` would call it.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.autograd import profiler as autograd_profiler

from matchbox.control.runtime import grad_kept
from matchbox.extending import (
    BATCH_VIEWS,
    EXECUTION_MASK,
    any_true,
    apply_region_guard,
    capturing,
    defer_region_guard,
    mask_and,
    mask_view,  # noqa: F401 (the runtime's modules import it from here)
    mask_view_for,
    reads_values,
    some,
)
from matchbox.masked_batch import MaskedBatch

Mask = Any  # None | torch.Tensor | False

# The context variable is core's: core's per-example checks (an index past an
# example's end, a reduction over an empty extent) look only at running examples.
_MASK = EXECUTION_MASK

# The mask a decorated function starts from: its caller's (None at top level).
entry_mask = _MASK.get


def current_mask() -> torch.Tensor | None:
    """The execution mask of the code running now (``None``: every example)."""
    return _MASK.get()


class _Masked:
    __slots__ = ("_mask", "_token")

    def __init__(self, mask: Mask):
        self._mask = mask

    def __enter__(self) -> None:
        self._token = _MASK.set(self._mask)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        _MASK.reset(self._token)
        return exc_type is not None and ran_for_nobody(self._mask, exc_type)


def ran_for_nobody(mask: Mask, exc_type: Any) -> bool:
    """Whether an exception raised in a region run under ``mask`` is to be dropped: no
    example runs the region, so the loop over examples would never have raised it.

    Where reading a mask is a device sync (``nobody``), a region runs without
    asking whether some example takes it; code there may then fail on values
    that no example has (``x.amax(1)`` with every example empty).  Only then is
    the mask read, once, on the way out of the error.
    """
    if (not isinstance(mask, torch.Tensor) or not issubclass(exc_type, Exception)
            or capturing() is not None):
        return False
    return not any_true(mask)


def one_side(mask: Mask, outer: Mask) -> bool | None:
    """Whether every example running ``outer`` ran the region run under ``mask`` (True),
    none did (False), or some of each (None, also while capturing).

    Read from the masks (a device sync) only where a merge cannot hold its two values
    (a batch and ``None``: ``h = None`` before a loop whose first step assigns it): the
    loop over examples needs no merge where every example took one path, and a region
    runs under a mask of its own on an accelerator (every step of a ``for``), or where
    every example takes an ``if``, without asking which.
    """
    if (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool
            or capturing() is not None):
        return None
    if outer is None:
        outside = ~mask
    elif isinstance(outer, torch.Tensor) and outer.shape == mask.shape:
        outside = outer & ~mask
    else:
        return None
    if not bool(outside.any()):
        return True
    if not bool(mask.any()):
        return False
    return None


class _LabelledMasked(_Masked):
    """A masked region while a profiler records: also a ``matchbox.batch.step`` range."""

    __slots__ = ("_range",)

    def __enter__(self) -> None:
        self._range = torch.profiler.record_function("matchbox.batch.step")
        self._range.__enter__()
        super().__enter__()

    def __exit__(self, *exc: Any) -> bool:
        dropped = super().__exit__(*exc)
        self._range.__exit__(*exc)
        return dropped


class _Unchanged:
    __slots__ = ()

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> bool:
        return False


_UNCHANGED = _Unchanged()


def masked(mask: Mask, outer: Mask = False) -> Any:
    """``with masked(mask, outer):`` makes ``mask`` the current execution mask.

    A region running under its outer mask (a plain condition) leaves the
    context variable as it is: it already holds that mask.  While a profiler
    records, a region run under a mask of its own (a branch taken by some
    examples, a loop iteration) is labelled ``matchbox.batch.step``.
    """
    if mask is outer:
        return _UNCHANGED
    return _LabelledMasked(mask) if autograd_profiler._is_profiler_enabled else _Masked(mask)


def per_example_truth(value: MaskedBatch, what: str = "condition") -> torch.Tensor:
    """A batch of per-example truth values as a ``(batch,)`` bool tensor."""
    data = value.data
    batch = data.size(0)
    if value.dims:
        if any(value.dims) or data.numel() != batch:
            shape = (1, *("*" if d else s for d, s in zip(value.dims, data.shape[1:])))
            raise ValueError(
                f"@batch: a {what} must hold one truth value per example, but its "
                f"examples have shape {shape} (dims {value.dims}); reduce each example "
                "first, e.g. with .any() or .all()"
            )
        data = data.reshape(batch)
    truth = data if data.dtype == torch.bool else data != 0
    mask = value._mask
    if mask is not None:
        # ``mask_and``: an outer mask that is this one (a loop step's condition on the
        # step's item) is then seen to hold already, and costs no second *and*.
        truth = mask_and(truth, mask if mask.dim() == 1 else mask.reshape(batch))
    return truth


def condition(test: Any) -> Any:
    """``test`` as a plain bool, or per example as a ``(batch,)`` bool tensor."""
    if isinstance(test, MaskedBatch):
        return per_example_truth(test)
    return bool(test)


def _and(outer: Mask, truth: torch.Tensor) -> torch.Tensor:
    if outer is None:
        return truth
    if outer.size(0) != truth.size(0):
        raise ValueError(
            f"@batch: a condition holds {truth.size(0)} examples but the code runs on a "
            f"batch of {outer.size(0)}"
        )
    return mask_and(outer, truth)


def branch(outer: Mask, test: Any) -> tuple[Mask, Mask]:
    """The masks of the two sides of ``if test:`` run under ``outer``.

    A plain condition picks one side with the outer mask; a batch condition
    splits the examples.  A side no example takes is ``False`` (skipped).
    """
    truth = condition(test)
    if truth is True:
        return outer, False
    if truth is False:
        return False, outer
    then = _and(outer, truth)
    # ``then`` lies within ``outer``: its complement there is one exclusive or.
    orelse = ~truth if outer is None else outer ^ then
    none_then, none_else = nobody(then), nobody(orelse)
    if none_then is not none_else and type(outer) is torch.Tensor:
        # Every example running here takes one side (read on the host): that side's region
        # is the enclosing one, as under a plain condition, and its guards, context and
        # merges return at once (``mask is outer``); the enclosing region's merge selects.
        # (A long tree's last steps, run by one example, take one side every step.)
        return (False, outer) if none_then else (outer, False)
    return (False if none_then else then), (False if none_else else orelse)


def nobody(mask: torch.Tensor) -> bool:
    """Whether no example runs under ``mask``, where reading that is worth a host read.

    Skipping code that no example runs spares its ops, but reading ``mask.any()``
    is a device-to-host sync on an accelerator: there (and while capturing a
    graph) the code runs masked instead, as hand-written padded code would, and
    this answers ``False``; on the CPU it reads (``matchbox._masking.HOST_READS``).
    """
    if capturing() is not None or not (reads_values(mask) or _recursing()):
        return False
    return not any_true(mask)


def _recursing(limit: int = 200) -> bool:
    """Whether a function rewritten by ``@batch`` is on the call stack twice (recursion).

    A recursive function ends where its base case holds; run masked for no
    example, its recursive branch would never end.  Recursion reads the masks.
    (Rewritten code, and only it, names the runtime ``mb__``: a variable of the
    factory that made it, ``loader.py``.)
    """
    seen = set()
    frame = sys._getframe(1)
    while frame is not None and limit:
        code = frame.f_code
        if "mb__" in code.co_freevars or "mb__" in code.co_names:
            if code in seen:
                return True
            seen.add(code)
        frame = frame.f_back
        limit -= 1
    return False


def narrow(mask: Mask, test: Any) -> Mask:
    """``mask`` restricted to the examples where ``test`` holds (may be all false)."""
    if mask is False:
        return False
    truth = condition(test)
    if truth is True:
        return mask
    if truth is False:
        return False
    return _and(mask, truth)


def loop_start(outer: Mask, test: Any) -> Mask:
    """The examples that run the first iteration of ``while test:`` under ``outer``.

    ``False`` when no example enters the loop.  While ``matchbox.compile``
    captures a graph, the loop's steps are counted from here (see
    ``matchbox._capture``).
    """
    running = narrow(outer, test)
    if isinstance(running, torch.Tensor):
        capture = capturing()
        if capture is None:
            return running if running.any() else False
        capture.start_loop(running)
    return running


def loop_mask(active: Mask, test: Any) -> Mask:
    """The examples that run the next iteration of ``while test:``.

    ``active`` is the mask of the previous iteration; an example that has
    left the loop never comes back.  ``False`` when no example runs another
    iteration (while capturing: when the capture's step bound is reached).
    """
    if active is False:
        return False
    if type(test) is MaskedBatch and isinstance(active, torch.Tensor):
        running = _and(active, per_example_truth(test))  # (narrow's, without its calls)
    else:
        running = narrow(active, test)
    if isinstance(running, torch.Tensor):
        capture = capturing()
        if capture is None:
            return running if running.any() else False
        if not capture.continue_loop(active, running, running):
            return False
    return running


def still_running(outer: Mask, test: Any) -> bool:
    """Whether some example of ``outer`` still satisfies ``test`` (a loop's exit test)."""
    truth = condition(test)
    if truth is True or truth is False:
        return truth
    return some(_and(outer, truth))


def guard(mask: Mask, outer: Mask, value: Any) -> Any:
    """``value`` whose gradient is dropped for the examples outside ``mask``.

    A branch computes on every example, also on those that do not take it,
    where the values may be outside the branch's domain (``x.log()`` under
    ``if x > 0``): the result is discarded, but its backward pass could send
    ``0 * inf = nan`` into the inputs.  Seen through ``where(mask, v, 0)``
    (``where(mask, v, v.detach())`` for a batch with padding) an input gets
    gradient only from the examples that take the branch, as in the loop over
    examples.
    """
    if mask is outer:
        return value
    if type(value) is not MaskedBatch:
        if type(value) in BATCH_VIEWS:  # a time-major view: guard the batch it holds
            # at once, as before the guard of a batch could be deferred (not carried
            # through a view's own ops)
            return type(value)(apply_region_guard(guard(mask, outer, value.batch)))
        return value
    deferred = value._deferred_guard  # (``deferred_region_guard``'s, from the slot)
    if deferred is not None and deferred[0] is mask:
        return value  # guarded for this region already
    # Reading the data applies an enclosing region's guard, if deferred, first.
    data = value._data if deferred is None else value.data
    if not data.requires_grad or (not torch.is_grad_enabled() and not grad_kept.wanted()):
        return value  # (under no_grad the region may turn gradients on again: guarded)
    # Deferred (core's _region_guard): the first op that needs the guard applies it, on
    # what the region reads (a stack's two items, not the stack); the ops that commute
    # with it (where, cat, indexing) carry it; this region's merge needs none.
    rows = (mask if data.size(0) == mask.size(0)  # (example_mask's commonest answer)
            else example_mask(mask, value, "a value read in the region"))
    guarded = defer_region_guard(value, mask, rows)
    guarded._guards = value  # an in-place update in the region reaches ``value``
    return guarded


def example_mask(mask: torch.Tensor, value: MaskedBatch, name: str) -> torch.Tensor:
    """``mask`` (one entry per example) with one entry per example of ``value``.

    A batch of ``k`` times as many examples holds ``k`` slices of each
    (``join_dims(0, d)``: attention heads as examples); each runs where its example
    runs.
    """
    batch = value.data.size(0)
    if batch == mask.size(0):
        return mask
    expanded = mask_view_for(mask, batch, 1)
    if expanded is None:
        raise ValueError(f"@batch: '{name}' holds {batch} examples but the code runs "
                         f"on a batch of {mask.size(0)}")
    return expanded
