"""``matchbox.set_async_checks`` in core alone: ``deferred_checks`` (what matchbox-control
opens around each ``@batch`` call) with checks deferred by ``fails``, queued per thread.
matchbox-control's ``test_control_async_checks.py`` runs real ``@batch`` calls."""

from __future__ import annotations

import threading

import pytest
import torch

import matchbox
from matchbox import _async_checks
from matchbox._masking import host_reads
from matchbox.extending import deferred_checks, fails


@pytest.fixture(autouse=True)
def _clean():
    with matchbox.set_async_checks(False):
        _async_checks._queue().clear()
        yield
        _async_checks._queue().clear()


def _call(failing: list[bool], message: str = "bad", name: str | None = "f") -> bool:
    with deferred_checks(name):
        return fails(torch.tensor(failing), lambda: IndexError(message))


def test_both_names_are_public():
    assert {"set_async_checks", "raise_pending_checks"} <= set(matchbox.__all__)


def test_a_deferred_check_is_queued_and_raised_by_the_flush():
    with host_reads(False), matchbox.set_async_checks(True):
        assert _call([False, True]) is False  # deferred, answered "passes"
        assert _async_checks.has_pending()
        with pytest.raises(IndexError, match="^bad") as info:
            matchbox.raise_pending_checks()
    assert str(info.value) == "bad"
    assert info.value.__notes__ == [
        "matchbox: this check failed in an earlier call of @batch function 'f', which "
        "returned without reading it (async checks are on: matchbox.set_async_checks); "
        "raised by matchbox.raise_pending_checks()"]
    assert not _async_checks.has_pending()


def test_a_passing_check_leaves_nothing_queued():
    with host_reads(False), matchbox.set_async_checks(True):
        _call([False, False])
        assert not _async_checks.has_pending()
        matchbox.raise_pending_checks()


def test_off_the_call_raises_when_it_ends():
    with host_reads(False), pytest.raises(IndexError, match="^bad$"):
        _call([True, False])


def test_the_setting_and_the_queue_are_per_thread():
    seen = {}

    def other() -> None:
        seen["enabled"] = _async_checks.enabled()
        with host_reads(False), matchbox.set_async_checks(True):
            _call([True], "in the other thread")
        try:
            matchbox.raise_pending_checks()
        except IndexError as error:
            seen["raised"] = str(error)

    with matchbox.set_async_checks(True):
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
    assert seen == {"enabled": False, "raised": "in the other thread"}
    matchbox.raise_pending_checks()  # nothing of the other thread's queue here
