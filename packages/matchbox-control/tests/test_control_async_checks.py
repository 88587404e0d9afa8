"""Deferred checks read asynchronously (``matchbox.set_async_checks``, issue 22).

With host reads off (the accelerator's way, run here on the CPU) the outermost ``@batch``
call reads its deferred checks when it ends, with one sync. With async checks on it makes
none: it queues them, and their error (the one the check raises with async checks off,
with a note) surfaces at the next outermost ``@batch`` call once the device is done, at
``matchbox.raise_pending_checks()``, or on stderr at interpreter exit. The CUDA path
(pinned copy, event) runs where a CUDA device is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from op_counts import CountOps

import matchbox
from matchbox import MaskedBatch, _async_checks
from matchbox._masking import host_reads

MESSAGE = ("Tensor.__getitem__: index -4 is out of range for example 2, which has size 2 in "
           "dimension 1")
OUT_OF_RANGE = re.escape(MESSAGE)
#: The check's own message, raised at the end of the call (async checks off).
AT_ONCE = f"^{OUT_OF_RANGE}$"
#: The same message, raised later, with a note (which pytest 8 matches too, on a line after).
LATER = f"^{OUT_OF_RANGE}(\n|$)"

reached: list[str] = []


def batches(lengths=(3, 5, 2), index=(1, 4, -4), device="cpu"):
    x = MaskedBatch.fromlist([torch.arange(float(n), device=device).reshape(1, n, 1)
                              for n in lengths], (True, False))
    i = MaskedBatch.fromlist([torch.tensor([k], device=device) for k in index], ())
    return x, i


@matchbox.batch
def select_then_double(x, i):
    y = x[:, i]
    reached.append("after the index")
    return y * 2


@matchbox.batch
def nested(x, i):
    y = select_then_double(x, i) + 1
    reached.append("after the inner call")
    return y


@pytest.fixture(autouse=True)
def _clean():
    """Each test starts with async checks off and nothing queued, and leaves it so."""
    reached.clear()
    with matchbox.set_async_checks(False):
        _async_checks._queue().clear()
        yield
        _async_checks._queue().clear()


def _note(error: BaseException) -> str:
    return "\n".join(getattr(error, "__notes__", []))


def test_a_failing_call_returns_and_the_error_surfaces_at_raise_pending_checks():
    x, bad = batches()
    with host_reads(False), matchbox.set_async_checks(True):
        out = select_then_double(x, bad)  # no raise: the checks are queued, unread
        assert reached == ["after the index"] and isinstance(out, MaskedBatch)
        with pytest.raises(IndexError, match=LATER) as info:
            matchbox.raise_pending_checks()
    assert str(info.value) == MESSAGE  # the check's own message; the rest is a note
    assert "earlier call of @batch function 'select_then_double'" in _note(info.value)
    assert "raised by matchbox.raise_pending_checks()" in _note(info.value)
    matchbox.raise_pending_checks()  # the queue is empty afterwards


def test_the_error_surfaces_at_the_start_of_the_next_batch_call():
    x, bad = batches()
    _, good = batches(index=(1, 4, 0))
    with host_reads(False), matchbox.set_async_checks(True):
        select_then_double(x, bad)
        reached.clear()
        with pytest.raises(IndexError, match=LATER) as info:
            select_then_double(x, good)
        assert reached == []  # raised before the next call's body ran
        assert "raised at the start of a later @batch call" in _note(info.value)
        select_then_double(x, good)  # the record raised is gone: this call runs
        assert reached == ["after the index"]
        matchbox.raise_pending_checks()


def test_a_passing_check_never_raises_and_no_call_syncs():
    x, good = batches(index=(1, 4, 0))
    _, bad = batches()
    with host_reads(False), matchbox.set_async_checks(True):
        with CountOps() as counted:
            for _ in range(3):
                select_then_double(x, good)
        matchbox.raise_pending_checks()
        assert counted.syncs == 0
        with CountOps() as counted:
            select_then_double(x, bad)
        assert counted.syncs == 0  # a failing one neither, until its error is raised
        with pytest.raises(IndexError, match=LATER):
            matchbox.raise_pending_checks()


def test_nested_calls_queue_once_when_the_outermost_ends():
    x, bad = batches()
    with host_reads(False), matchbox.set_async_checks(True):
        nested(x, bad)
        assert reached == ["after the index", "after the inner call"]
        assert len(_async_checks._queue()) == 1
        with pytest.raises(IndexError, match=LATER) as info:
            matchbox.raise_pending_checks()
    assert "@batch function 'nested'" in _note(info.value)


def test_the_context_manager_restores_the_setting_it_found():
    x, bad = batches()
    with host_reads(False):
        with matchbox.set_async_checks(True):
            with matchbox.set_async_checks(False):
                with pytest.raises(IndexError, match=AT_ONCE):  # read when the call ends
                    select_then_double(x, bad)
            select_then_double(x, bad)  # on again: queued
            with pytest.raises(IndexError, match=LATER):
                matchbox.raise_pending_checks()
        with pytest.raises(IndexError, match=AT_ONCE):  # off again, as found
            select_then_double(x, bad)


def test_the_plain_call_sets_it():
    x, bad = batches()
    with host_reads(False):
        matchbox.set_async_checks(True)
        assert _async_checks.enabled()
        select_then_double(x, bad)
        with pytest.raises(IndexError, match=LATER):
            matchbox.raise_pending_checks()
        matchbox.set_async_checks(False)
        with pytest.raises(IndexError, match=AT_ONCE):
            select_then_double(x, bad)


def test_a_body_error_loses_to_a_failed_check_already_read():
    # On the CPU a call's record is read at once: as with async checks off, the failed
    # check is the error, the body's as its context, and nothing is left queued.
    @matchbox.batch
    def select_then_fail(x, i):
        x[:, i]
        raise RuntimeError("the body's own error")

    x, bad = batches()
    _, good = batches(index=(1, 4, 0))
    with host_reads(False), matchbox.set_async_checks(True):
        with pytest.raises(IndexError, match=AT_ONCE) as info:
            select_then_fail(x, bad)
        assert isinstance(info.value.__context__, RuntimeError)
        with pytest.raises(RuntimeError, match="the body's own error"):
            select_then_fail(x, good)
        assert not _async_checks.has_pending()


class _Running:
    """A CUDA event stand-in whose work is not done until it is waited for."""

    def __init__(self) -> None:
        self.complete = False

    def query(self) -> bool:
        return self.complete

    def synchronize(self) -> None:
        self.complete = True


def test_a_record_not_done_is_not_waited_for_and_holds_back_later_ones():
    x, bad = batches()
    _, other = batches(index=(1, 7, 0))
    with host_reads(False), matchbox.set_async_checks(True):
        select_then_double(x, bad)
        (record,) = _async_checks._queue()
        record.parts = [(flag, _Running()) for flag, _ in record.parts]  # still running
        select_then_double(x, other)  # starts: the record is not done, and is not waited for
        select_then_double(x, other)  # (this call's and the last one's stay queued behind it)
        assert len(_async_checks._queue()) == 3
        # The first failure is raised, the rest dropped; the note counts them.
        with pytest.raises(IndexError, match=LATER) as info:
            matchbox.raise_pending_checks()
        assert "2 later @batch calls failed their checks too; dropped" in _note(info.value)
        assert not _async_checks.has_pending()


def test_with_host_reads_on_a_check_still_raises_at_the_op():
    x, bad = batches()
    with host_reads(True), matchbox.set_async_checks(True), pytest.raises(IndexError,
                                                                          match=AT_ONCE):
        select_then_double(x, bad)
    assert reached == []


def test_a_compiled_call_whose_check_fails_raises_at_once():
    # The graph's flags are read after every run (that sync is paid): the eager call run
    # again for the error reads its checks when it ends, async checks or not.
    compiled = matchbox.compile(select_then_double, backend="aot_eager", bucket=None)
    x, good = batches(index=(1, 4, 0))
    _, bad = batches()
    with host_reads(False), matchbox.set_async_checks(True):
        compiled(x, good)
        with pytest.raises(IndexError, match=AT_ONCE):
            compiled(x, bad)
        assert not _async_checks.has_pending()


MODULE = '''
import torch
import matchbox
from matchbox import MaskedBatch
from matchbox._masking import host_reads


@matchbox.batch
def select(x, i):
    return x[:, i] * 2


x = MaskedBatch.fromlist([torch.arange(float(n)).reshape(1, n, 1) for n in (3, 5, 2)],
                         (True, False))
i = MaskedBatch.fromlist([torch.tensor([k]) for k in (1, 4, -4)], ())
with host_reads(False), matchbox.set_async_checks(True):
    select(x, i)
print("returned")
'''


def test_a_failure_never_raised_is_reported_on_stderr_at_exit(tmp_path):
    (tmp_path / "never_raised.py").write_text(textwrap.dedent(MODULE))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, sys.path)])}
    done = subprocess.run([sys.executable, "-c", "import never_raised"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "returned\n"
    assert "a failed check of a @batch call was never raised" in done.stderr
    assert re.search(f"IndexError: {OUT_OF_RANGE}\n", done.stderr), done.stderr
    assert "@batch function 'select'" in done.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_flags_are_copied_to_pinned_memory_after_an_event():
    x, bad = batches(device="cuda")
    _, good = batches(index=(1, 4, 0), device="cuda")
    with host_reads(None), matchbox.set_async_checks(True):  # by device: off on CUDA
        with CountOps() as counted:
            select_then_double(x, good)
            select_then_double(x, bad)
        assert counted.syncs == 0
        records = list(_async_checks._queue())
        assert records, "the failing call's record is queued"
        host, event = records[-1].parts[0]
        assert host.is_pinned() and isinstance(event, torch.cuda.Event)
        with pytest.raises(IndexError, match=LATER):
            matchbox.raise_pending_checks()
        select_then_double(x, good)
        matchbox.raise_pending_checks()
