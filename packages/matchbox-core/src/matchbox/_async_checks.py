"""Asynchronous deferred checks: a ``@batch`` call that ends without a host sync.

The checks that :func:`matchbox._capture.fails` defers inside a ``@batch`` call
(host reads off, the accelerator's way) are read when the outermost call ends, with
one sync.  With ``matchbox.set_async_checks(True)`` that call does not read them: it
reduces their flags on their device to one bool per device and queues a record of
them (per thread), to be read later without waiting for the device:

- on CUDA the bool is copied into pinned host memory (``non_blocking=True``) and a
  ``torch.cuda.Event`` is recorded after the copy on the device's current stream;
- on the CPU the bool is already computed: it is read at once (no sync there);
- on another device type (mps, xpu, ...) the flags are read when the call ends, as
  with async checks off.

A record already done when the call ends (the CPU's; a CUDA event that has passed) is
read then, and only a failed one is queued.  A queued record surfaces (its first failed
check's own error, with a PEP 678 note saying it came from an earlier call) at the
start of the next outermost ``@batch`` call of the thread if it is done (never waiting;
records are read oldest first, and one not done holds back those after it; the record
raised is dropped, later ones stay queued), at :func:`raise_pending_checks` (which
waits for every record and empties the queue), or, failed and never raised, on stderr
at interpreter exit.  A call whose body raises lets a failed check of its own win
(as with async checks off) only if its record is done when it ends.
This module imports nothing of Matchbox: ``_capture`` asks it.
"""

from __future__ import annotations

import atexit
import contextvars
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["any_by_device", "defer", "enabled", "first_failure", "has_pending",
           "raise_pending_checks", "set_async_checks", "surface"]

#: (per-example flags, what builds the error) of a check deferred in a ``@batch`` call.
Pending = list[tuple[torch.Tensor, Callable[[], BaseException]]]

# Whether the outermost @batch call queues its deferred checks instead of reading them
# (per thread or asyncio task, as ``host_reads`` and torch's grad mode are per thread).
_ASYNC: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "matchbox_async_checks", default=False)


def enabled() -> bool:
    """Whether async checks are on in this thread or task."""
    return _ASYNC.get()


class set_async_checks:  # noqa: N801 (a call, and a context manager, as torch.set_grad_enabled)
    """Turn asynchronous deferred checks on or off, in this thread (or asyncio task).

    ``matchbox.set_async_checks(True)`` as a call sets it; ``with
    matchbox.set_async_checks(True):`` sets it for the block and restores the setting
    it found when the block ends.  Off by default.

    On, the outermost ``@batch`` call that deferred checks (host reads off, the
    default on an accelerator) makes no host sync for them when it ends: a failed
    check's error is raised by a later outermost ``@batch`` call of the same thread
    (once the device has computed the flags), by :func:`raise_pending_checks`, or
    printed to stderr at interpreter exit.  The error is the one the check raises
    with async checks off, with a note saying where it came from.
    """

    __slots__ = ("_previous",)

    def __init__(self, enabled: bool) -> None:
        self._previous = _ASYNC.get()
        _ASYNC.set(bool(enabled))

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, raised: Any, traceback: Any) -> None:
        _ASYNC.set(self._previous)


class _Record:
    """One outermost ``@batch`` call's checks: per device, a host bool (whether a check
    failed) and the CUDA event after which it may be read (None: readable now)."""

    __slots__ = ("parts", "pending", "name")

    def __init__(self, parts: list[tuple[torch.Tensor, Any]], pending: Pending,
                 name: str | None) -> None:
        self.parts = parts
        self.pending = pending
        self.name = name

    def done(self) -> bool:
        return all(event is None or event.query() for _, event in self.parts)

    def wait(self) -> None:
        for _, event in self.parts:
            if event is not None:
                event.synchronize()

    def failed(self) -> bool:
        """Whether a check failed (the record is done): host memory, read without an
        ATen op (no device sync; a counter of ``_local_scalar_dense`` sees none)."""
        return any(_read_bool(flag) for flag, _ in self.parts)

    def error(self, where: str) -> BaseException:
        error = first_failure(self.pending)
        call = f"@batch function {self.name!r}" if self.name else "a @batch function"
        note = (f"matchbox: this check failed in an earlier call of {call}, which returned "
                f"without reading it (async checks are on: matchbox.set_async_checks); "
                f"{where}")
        return _add_note(error, note)


def _add_note(error: BaseException, note: str) -> BaseException:
    """``error.add_note(note)`` (PEP 678); on Python 3.10, ``__notes__`` as it would be."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        error.__notes__ = [*getattr(error, "__notes__", []), note]
    return error


def _read_bool(flag: torch.Tensor) -> bool:
    # A 0-d bool tensor in host memory (the CPU's own, or a pinned copy whose event
    # completed): read through NumPy, which shares its memory, and not with ``bool(flag)``,
    # which the sync counters (``benchmarks.control_costs``) count as a device read.
    return bool(flag.numpy())


def any_by_device(pending: Pending) -> dict[torch.device, torch.Tensor]:
    """Whether a check of ``pending`` failed, as one 0-d bool per device, on it (no sync)."""
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for failing, _ in pending:
        by_device.setdefault(failing.device, []).append(
            failing if failing.dim() == 1 else failing.reshape(-1))
    return {device: torch.cat(flags).any() for device, flags in by_device.items()}


def first_failure(pending: Pending) -> BaseException:
    """The error of the first failed check of ``pending`` (one of them failed): one read
    each, up to it."""
    for failing, error in pending:
        if bool(failing.any()):
            return error()
    raise AssertionError("matchbox: no deferred check failed")  # pragma: no cover


# This thread's queue of records, oldest first; every thread's queue (with its thread)
# for the report at exit.
_LOCAL = threading.local()
_QUEUES: list[tuple[weakref.ref, deque[_Record]]] = []
_QUEUES_LOCK = threading.Lock()


def _queue() -> deque[_Record]:
    queue = getattr(_LOCAL, "queue", None)
    if queue is None:
        queue = _LOCAL.queue = deque()
        with _QUEUES_LOCK:
            # Forget the empty queues of threads that have ended.
            _QUEUES[:] = [(thread, q) for thread, q in _QUEUES if q or thread() is not None]
            _QUEUES.append((weakref.ref(threading.current_thread()), queue))
    return queue


def has_pending() -> bool:
    """Whether this thread has records queued (cheap: asked at every outermost call)."""
    return bool(getattr(_LOCAL, "queue", None))


def defer(pending: Pending, body_raised: bool, name: str | None = None) -> None:
    """At the end of an outermost ``@batch`` call with async checks on: queue its checks
    (``pending``, not empty) without reading them on the device.

    ``body_raised``: the call is raising an error of its own.  A failed check wins over
    it (raised now, the body's error as its context) only if its record is done already
    (the CPU's); else the body's error goes on, and the record stays queued.
    """
    flags = any_by_device(pending)
    if any(device.type not in ("cpu", "cuda") for device in flags):
        # No pinned copy and event here: read when the call ends, as with async off.
        if any(bool(flag) for flag in flags.values()):
            raise first_failure(pending)
        return
    parts: list[tuple[torch.Tensor, Any]] = []
    for device, flag in flags.items():
        if device.type == "cuda":
            host = torch.empty((), dtype=torch.bool, pin_memory=True)
            host.copy_(flag, non_blocking=True)
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(device))
            parts.append((host, event))
        else:
            parts.append((flag, None))
    record = _Record(parts, pending, name)
    if record.done():  # the CPU's, or a CUDA event already passed: read now, at no cost
        if not record.failed():
            return
        if body_raised:
            raise first_failure(pending)
    _queue().append(record)


def surface() -> None:
    """At the start of an outermost ``@batch`` call: read the records of this thread that
    are done, oldest first, up to the first that is not (never waiting), and raise the
    first failed one's error (that record is dropped; later ones stay queued)."""
    queue = _queue()
    while queue and queue[0].done():
        record = queue.popleft()
        if record.failed():
            raise record.error("raised at the start of a later @batch call")


def raise_pending_checks() -> None:
    """Wait for the checks that earlier ``@batch`` calls of this thread left pending
    (``matchbox.set_async_checks(True)``) and raise the first failed one's error.

    The queue is empty afterwards, whether it raises or not: the records after the one
    raised are dropped (a note on the error counts those that failed too).  Call it
    where an error must surface at a known point: at the end of an epoch, before
    saving a checkpoint, in a test.  A no-op when nothing is pending.
    """
    queue = _queue()
    records = list(queue)
    queue.clear()
    for record in records:
        record.wait()
    failed = [record for record in records if record.failed()]
    if not failed:
        return
    error = failed[0].error("raised by matchbox.raise_pending_checks()")
    if len(failed) > 1:
        more = len(failed) - 1
        _add_note(error, f"matchbox: {more} later @batch call{'s' if more > 1 else ''} "
                         f"failed {'their' if more > 1 else 'its'} checks too; dropped")
    raise error


@atexit.register
def _report_at_exit() -> None:
    """Print the error of every failed check never raised (of every thread) to stderr."""
    with _QUEUES_LOCK:
        queues = [queue for _, queue in _QUEUES]
    for queue in queues:
        while queue:
            record = queue.popleft()
            try:
                record.wait()
                if not record.failed():
                    continue
                error = record.error("reported at interpreter exit")
                message = f"{type(error).__name__}: {error}"
                notes = "".join(f"\n{note}" for note in getattr(error, "__notes__", []))
            except Exception as reading:  # noqa: BLE001 (report, and go on with the others)
                message, notes = f"(its flags could not be read: {reading!r})", ""
            sys.stderr.write("matchbox: a failed check of a @batch call was never raised "
                             "(call matchbox.raise_pending_checks() to raise it):\n"
                             f"{message}{notes}\n")
            sys.stderr.flush()
