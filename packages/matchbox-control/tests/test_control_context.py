"""The execution mask lives in a ContextVar: threads and async tasks never see each
other's masks, and an exception does not leave a mask behind."""

from __future__ import annotations

import asyncio
import threading

import pytest
from control_cases import scalars

import matchbox
from matchbox.control import current_mask


def test_threads_do_not_see_each_others_masks():
    inside = threading.Event()
    release = threading.Event()
    seen = {}
    record = seen.__setitem__

    @matchbox.batch
    def hold(x):
        if x > 0:
            record("a", current_mask().tolist())
            inside.set()
            release.wait(10)
            record("a after", current_mask().tolist())
        return x

    @matchbox.batch
    def other(x):
        record("b top", current_mask())
        if x < 0:
            record("b", current_mask().tolist())
        return x

    _, xa = scalars([1.0, -1.0, 2.0])
    _, xb = scalars([-5.0, 5.0])
    thread = threading.Thread(target=hold, args=(xa,))
    thread.start()
    assert inside.wait(10)
    other(xb)  # runs while the first thread is inside its masked branch
    release.set()
    thread.join(10)
    assert seen == {"a": [True, False, True], "a after": [True, False, True],
                    "b top": None, "b": [True, False]}


def test_async_tasks_do_not_see_each_others_masks():
    seen = {}
    record = seen.__setitem__

    @matchbox.batch
    def masked_branch(x, name):
        if x > 0:
            record(name, current_mask().tolist())
        return x

    async def task(values, name, ready, go):
        _, xb = scalars(values)
        masked_branch(xb, name)
        ready.set()
        await go.wait()  # the other task runs its own masked code meanwhile
        masked_branch(xb, name + " again")
        record(name + " after", current_mask())

    async def main():
        ready_a, ready_b, go = asyncio.Event(), asyncio.Event(), asyncio.Event()
        a = asyncio.create_task(task([1.0, -1.0], "a", ready_a, go))
        b = asyncio.create_task(task([-1.0, 1.0, 1.0], "b", ready_b, go))
        await ready_a.wait()
        await ready_b.wait()
        go.set()
        await asyncio.gather(a, b)

    asyncio.run(main())
    assert seen == {"a": [True, False], "b": [False, True, True],
                    "a again": [True, False], "b again": [False, True, True],
                    "a after": None, "b after": None}


def test_an_exception_in_a_masked_region_leaves_no_mask_behind():
    @matchbox.batch
    def f(x):
        if x > 0:
            raise ValueError("stop")
        return x

    _, xb = scalars([1.0, -1.0])
    with pytest.raises(ValueError, match="stop"):
        f(xb)
    assert current_mask() is None
