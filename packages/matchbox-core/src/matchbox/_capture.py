"""Capture mode: while ``matchbox.compile`` records a graph, no decision is made from values.

Eager Matchbox decides a few things from tensor values: it skips a branch that
no example takes, ends a loop when no example is left in it, and checks that
the examples suit an op (raising, as the loop over examples would, for one
that does not).  A captured graph runs again on other batches, so it must not
depend on such values: it may depend only on what its specialisation fixes
(dims, dtypes, devices, padded sizes).  Every such decision in Matchbox goes
through this module, which answers it two ways:

| question                         | eager                  | while capturing                         |
|----------------------------------|------------------------|-----------------------------------------|
| ``some(flags)``: does any        | ``bool(flags.any())``  | ``True``: the code runs, masked (what it |
| example need this code, or this  |                        | computes for the others is discarded);  |
| layout?                          |                        | a stack of items only some examples     |
|                                  |                        | have is dynamic                         |
| ``fails(failing)``: does a check | ``bool(failing.any())``| ``False``; ``failing.any()`` becomes an  |
| fail for a running example?      |                        | output of the graph                     |
| may a loop take another step?    | while some example is  | up to the capture's step bound, as eager |
| (``Capture.continue_loop``)      | left in it             | but masked; at the bound, whether some   |
|                                  |                        | example was still in it becomes an output |

After every run of a compiled graph its flags are read (one device sync): a
failed check runs the call again eagerly, where the check raises its own
error; a loop that reached the bound with examples still in it is captured
again with a larger bound.  So a compiled call gives the eager result or the
eager error, never a result cut short.

Eager code on an accelerator (``matchbox._masking.host_reads`` off, the default
there) inside a ``@batch`` call defers the checks that say how to raise their
error (``fails(failing, error)``, :func:`check`): matchbox-control opens
:class:`deferred_checks` around each ``@batch`` call, ``fails`` records the
per-example flags (device tensors, no sync) and answers ``False`` (the op goes on
with its indices clamped, its result for a failing example discarded), and the
outermost call reads every flag it recorded at its end, with one sync, raising
the first failed check's own error.  With ``matchbox.set_async_checks(True)`` that
call makes no sync: it queues the flags, and a later call raises the error
(``matchbox._async_checks``).  Elsewhere, and with host reads on (the CPU's
default), a check reads its flags at once.

Anything else that reads a value (``.tolist()``, ``.item()``, an index of
data-dependent size) raises while capturing: the capture runs on fake tensors,
which hold no values, and ``matchbox.compile`` then runs that function eagerly.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from matchbox import _async_checks
from matchbox._host_reads import any_true, reads_values

__all__ = ["Capture", "NotCapturable", "capturing", "check", "deferred_checks", "fails",
           "note_size_bound", "refuse", "size_bound", "some"]


class NotCapturable(RuntimeError):
    """Raised while capturing by code that a graph cannot hold (it would need the
    values); ``matchbox.compile`` then runs the call eagerly, saying why."""


class Capture:
    """The state of one capture: the step bound of its loops and the flags it records."""

    __slots__ = ("bound", "failures", "overflows", "_steps", "scans", "unrolled",
                 "scan_loops", "in_loop_step")

    def __init__(self, bound: int):
        self.bound = bound
        self.failures: list[torch.Tensor] = []
        self.overflows: list[torch.Tensor] = []
        # id(loop token) -> (token, steps taken); the token is kept alive so its id
        # is not reused by another object while the capture lasts.
        self._steps: dict[int, tuple[Any, int]] = {}
        # Loops captured as one ``scan`` node, and why others were unrolled
        # (``matchbox.compiler.loops``).
        self.scans = 0
        self.unrolled: list[str] = []
        # Whether this capture may hold loops as scans (``matchbox.compiler.loops.allowed``):
        # True, False, or why not (a str).
        self.scan_loops: bool | str = False
        # Inside the step of a loop being captured as a scan (its peeled steps, its
        # body's trace): a loop there is unrolled into that step.
        self.in_loop_step = 0

    def start_loop(self, token: Any) -> None:
        """A loop whose first step ``token`` (its mask) stands for has started."""
        self._steps[id(token)] = (token, 1)

    def continue_loop(self, previous: Any, token: Any, running: torch.Tensor) -> bool:
        """Whether the loop whose last step was ``previous`` may take a step ``token``.

        At the bound it may not; whether some example (``running``) wanted to
        is recorded, so that the call is captured again with a larger bound.
        """
        entry = self._steps.get(id(previous))
        taken = 1 if entry is None or entry[0] is not previous else entry[1]
        if taken >= self.bound:
            self.overflows.append(running.any())
            return False
        self._steps[id(token)] = (token, taken + 1)
        return True

    def steps_for(self, count: torch.Tensor, sizes: torch.Tensor | None = None) -> int:
        """The number of steps of a loop over per-example counts (``range(n)`` with ``n``
        a batch): the bound; whether some example needs more is recorded.

        ``sizes``: per-example sizes read from a batch (``x.size_as_tensor(d)``'s data)
        that ``count`` equals: their padded size bounds them, so the loop takes that many
        steps (``x[:, t]`` reads no step past the padding) and cannot overflow."""
        padded = size_bound(sizes) if sizes is not None else None
        if padded is not None and padded <= self.bound:
            return padded
        self.overflows.append((count > self.bound).any())
        return self.bound

    def flags(self) -> torch.Tensor | None:
        """``[any check failed, any loop overflowed]`` as one bool tensor (None: no flags)."""
        if not self.failures and not self.overflows:
            return None
        # The flags' own device: a CPU constant stacked with CUDA flags passes capture
        # (fake tensors let a 0-d CPU tensor join a CUDA one) but not inductor's CUDA compile.
        device = (self.failures or self.overflows)[0].device
        return torch.stack([_any_of(self.failures, device), _any_of(self.overflows, device)])


def _any_of(flags: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    if not flags:
        return torch.zeros((), dtype=torch.bool, device=device)
    return torch.stack(flags).any()


_CAPTURE: contextvars.ContextVar[Capture | None] = contextvars.ContextVar(
    "matchbox_capture", default=None)

#: The capture in progress in this thread or task, or ``None`` (eager).
capturing = _CAPTURE.get


def begin(capture: Capture) -> contextvars.Token:
    return _CAPTURE.set(capture)


def end(token: contextvars.Token) -> None:
    _CAPTURE.reset(token)


def some(flags: torch.Tensor) -> bool:
    """Whether any of ``flags`` holds; ``True`` while capturing (the code runs masked)."""
    if _CAPTURE.get() is not None:
        return True
    return bool(flags.any())


# Per-example sizes read from a batch while capturing (``x.size_as_tensor(d)``'s data)
# -> the padded size that bounds them (``x``'s in ``d``), so that what is built from
# them (``x.new_zeros(1, n, H)``) has a padded size that does not depend on values.
_SIZE_BOUNDS: WeakIdKeyDictionary = WeakIdKeyDictionary()


def note_size_bound(sizes: torch.Tensor, bound: int) -> None:
    """While capturing, record that every value of ``sizes`` is at most ``bound``."""
    if _CAPTURE.get() is not None:
        _SIZE_BOUNDS[sizes] = bound


def size_bound(sizes: torch.Tensor) -> int | None:
    """The bound :func:`note_size_bound` recorded for ``sizes`` (None: none known)."""
    return _SIZE_BOUNDS.get(sizes)


def refuse(what: str) -> None:
    """While capturing, raise :class:`NotCapturable` saying ``what`` needs values."""
    if _CAPTURE.get() is not None:
        raise NotCapturable(what)


def fails(failing: torch.Tensor, error: Callable[[], BaseException] | None = None) -> bool:
    """Whether a check fails for any example (``failing`` per example).

    While capturing, the check is recorded for the compiled call to look at
    after the graph has run, and the capture goes on as if it passed.

    ``error``: builds the exception the check raises (from tensors that nothing
    writes in place: the flags, lengths, indices the op computed).  Given it, inside
    a ``@batch`` call (:class:`deferred_checks`) that does not read values on the
    host (``matchbox._masking.host_reads``), the check is recorded and answered
    ``False``: the caller goes on, safely (no index out of bounds), and the call
    raises ``error()`` when it ends if ``failing`` held for some example.
    """
    capture = _CAPTURE.get()
    if capture is None:
        if error is not None:
            pending = _DEFERRED.get()
            if pending is not None and not reads_values(failing):
                pending.append((failing, error))
                return False
        failed = any_true(failing)
        if failed:  # the caller raises next: what failed_flags(error) answers
            _LAST_FAILED.set(failing)
        return failed
    capture.failures.append(failing.any())
    return False


#: The attribute of an error raised by :func:`check` that holds its per-example flags.
CHECK_FLAGS = "__matchbox_check_flags__"

# The flags of the last check that failed at once in this thread or task (its caller then
# raises): read, and cleared, by failed_flags.
_LAST_FAILED: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar(
    "matchbox_last_failed_check", default=None)


def with_failed_flags(error: BaseException, flags: torch.Tensor) -> BaseException:
    """``error``, marked as raised for the examples where ``flags`` holds (what
    :func:`failed_flags` answers for it): a ``raise`` run under a per-example condition."""
    setattr(error, CHECK_FLAGS, flags)
    return error


def failed_flags(error: BaseException) -> torch.Tensor | None:
    """The per-example flags of the check that raised ``error`` (``(batch,)`` bool, the
    examples it failed for), or ``None`` for an error no check raised.

    Code that catches an error per example (``try``/``except`` in a ``@batch``
    function) asks it whether every example running the ``try`` failed, as the loop
    would then have them all take ``except``.
    """
    flags = getattr(error, CHECK_FLAGS, None)
    last = _LAST_FAILED.get()
    if last is not None:
        _LAST_FAILED.set(None)
    return flags if flags is not None else last


def check(failing: torch.Tensor, error: Callable[[], BaseException]) -> None:
    """Raise ``error()`` if a check fails for some example; deferred as :func:`fails` says.

    The error raised at once carries ``failing`` (:func:`failed_flags`).
    """
    if fails(failing, error):
        raise with_failed_flags(error(), failing)


def version_of(tensor: torch.Tensor) -> int | None:
    """``tensor``'s version counter, for an error built later to tell that the tensor was
    written in place since (:func:`written_since`); ``None`` for an inference tensor."""
    return None if tensor.is_inference() else tensor._version


def written_since(tensor: torch.Tensor, version: int | None) -> bool:
    """Whether ``tensor`` was written in place since :func:`version_of` gave ``version``."""
    return version is not None and tensor._version != version


# The checks deferred in the outermost ``@batch`` call running in this thread or
# task: (per-example flags, what builds the error), oldest first; None outside.
_DEFERRED: contextvars.ContextVar[list[tuple[torch.Tensor, Callable[[], BaseException]]] | None] = (
    contextvars.ContextVar("matchbox_deferred_checks", default=None))


def in_batch_call() -> bool:
    """Whether a ``@batch`` call is running (in this thread or task)."""
    return _DEFERRED.get() is not None


# What the outermost ``@batch`` call running in this thread or task keeps for itself only
# (matchbox-control's record of the batches it copied): made on first use, dropped when
# that call ends, so that nothing recorded outlives the call or reaches another.
_CALL_STATE: contextvars.ContextVar[dict[str, Any] | None] = (
    contextvars.ContextVar("matchbox_call_state", default=None))


def call_state(create: bool = False) -> dict[str, Any] | None:
    """The dict the outermost ``@batch`` call running now keeps for itself (``None``
    outside one, and, unless ``create``, before anything was kept in it)."""
    state = _CALL_STATE.get()
    if state is None and create and _DEFERRED.get() is not None:
        state = {}
        _CALL_STATE.set(state)
    return state


class deferred_checks:  # noqa: N801 (used as ``with deferred_checks():``, like a function)
    """``with deferred_checks(name):`` around a ``@batch`` call (matchbox-control opens it;
    ``name``: the decorated function's, for the note of an error raised later).

    The outermost one collects the checks that :func:`fails` defers while it is
    open and, when it closes, reads all their flags with one host sync (none when
    no check was deferred), raising the error of the first that failed: the error
    the check would have raised at once, only later.  Nested ones (a ``@batch``
    function calling another, or itself) leave the checks to the outermost.

    With async checks on (``matchbox.set_async_checks``) the outermost one queues
    them instead, unread (``matchbox._async_checks``), and, when it opens, raises
    the error of a call queued before whose flags the device has computed.
    """

    __slots__ = ("_token", "_name")

    def __init__(self, name: str | None = None) -> None:
        self._name = name

    def __enter__(self) -> bool:
        """Whether this is the outermost ``@batch`` call (a nested one leaves its checks
        and its ``call_state`` to the outermost)."""
        if _DEFERRED.get() is None:
            # Earlier calls' checks, read where the device is done with them (not while
            # capturing: a graph's capture is no place for an eager call's error).
            if _async_checks.has_pending() and _CAPTURE.get() is None:
                _async_checks.surface()
            self._token = _DEFERRED.set([])
            _LAST_FAILED.set(None)  # a failed check of an earlier call is no answer here
            return True
        self._token = None
        return False

    def __exit__(self, kind: Any, raised: Any, traceback: Any) -> None:
        if self._token is None:
            return
        if _CALL_STATE.get() is not None:
            _CALL_STATE.set(None)  # the call's own records end with it
        pending = _DEFERRED.get()
        _DEFERRED.reset(self._token)  # nothing stays pending for the next call
        # The body raised: its checks are read first all the same. A check that
        # failed came before the error (which may well follow from it: an op run on
        # a clamped index) and is what the check would have raised at once, so it
        # is the more truthful error; the body's error stays attached as its
        # __context__. With no failed check, the body's error goes on. Not for a
        # KeyboardInterrupt or the like: those go on without a sync.
        if pending and (kind is None or issubclass(kind, Exception)):
            if _async_checks.enabled():  # queued, unread (a failure wins if read already)
                _async_checks.defer(pending, kind is not None, self._name)
            else:
                _raise_first_failure(pending)


def _raise_first_failure(
        pending: list[tuple[torch.Tensor, Callable[[], BaseException]]]) -> None:
    """Read the flags of ``pending`` checks (one sync per device) and raise the first
    failed check's error."""
    if any(bool(flag) for flag in _async_checks.any_by_device(pending).values()):
        raise _async_checks.first_failure(pending)
