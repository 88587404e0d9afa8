"""Generated methods with a fast path go through the registry's one guard.

A handler may give its ``Tensor`` methods a fast path (``fast_path=`` of
``register``): the plainest calls skip the dispatch's frames.  The registry,
not the handler, decides which calls reach it (``matchbox._methods.guarded``):
calls with keywords, without gradients, while a profiler records, or with an
argument the dispatch converts (the mixing rule) go to the dispatch.

Before, each fast method pasted that guard itself, and the registry read a
handler's fast path when it made the methods: ``x @ W``'s, attached to its
handler after the handler was registered, was never used.
"""

from __future__ import annotations

import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from matchbox import MaskedBatch
from matchbox._methods import guarded
from matchbox._op_table import kind_of

MIXING = r"an op between a MaskedBatch and a jagged torch.nested tensor"


def _batch(width=3, requires_grad=False):
    xs = [torch.randn(1, n, width, requires_grad=requires_grad) for n in (2, 4, 1)]
    return xs, MaskedBatch.fromlist(xs, (True, False))


def _enters_the_dispatch(run) -> bool:
    """Whether ``run()`` calls a batch type's dispatch (a Python frame named ``dispatch``
    in a Matchbox file)."""
    entered = []

    def watch(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name == "dispatch" and "matchbox" in code.co_filename:
            entered.append(code)

    sys.setprofile(watch)
    try:
        run()
    finally:
        sys.setprofile(None)
    return bool(entered)


@pytest.mark.parametrize("run", [
    lambda xb, w: xb @ w,
    lambda xb, w: xb.matmul(w),
    lambda xb, w: xb.tanh(),
    lambda xb, w: xb * 2,
], ids=["x @ W", "x.matmul(W)", "x.tanh()", "x * 2"])
def test_the_plainest_method_calls_take_their_fast_path(run):
    _, xb = _batch()
    w = torch.randn(3, 5)
    assert not _enters_the_dispatch(lambda: run(xb, w))


def test_x_at_w_by_its_fast_path_equals_the_loop():
    xs, xb = _batch()
    w = torch.randn(3, 5)
    for x, got in zip(xs, (xb @ w).examples()):
        torch.testing.assert_close(got, x @ w)


def _nested_of_rank_2():
    return MaskedBatch.fromlist([torch.randn(1, n) for n in (3, 2, 3)], (True,)).to_nested()


@pytest.mark.parametrize("run", [lambda xb, n: xb @ n, lambda xb, n: xb.matmul(n)],
                         ids=["x @ nested", "x.matmul(nested)"])
def test_a_fast_method_meeting_a_nested_tensor_refuses_as_the_dispatch_does(run):
    # A 2-D jagged nested tensor looks like a weight to x @ W's fast path; the guard
    # hands it to the dispatch, whose mixing rule refuses it.
    _, xb = _batch()
    with pytest.raises(TypeError, match=MIXING):
        run(xb, _nested_of_rank_2())


def test_a_fast_method_is_labelled_while_a_profiler_records():
    _, xb = _batch()
    w = torch.randn(3, 5)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        xb @ w
    assert [e.name for e in prof.events() if e.name.startswith("matchbox.")] == [
        "matchbox.linalg"]


def test_a_fast_method_inside_an_autograd_function_refuses():
    _, xb = _batch(requires_grad=True)
    w = torch.randn(3, 5)

    class Product(torch.autograd.Function):
        @staticmethod
        def forward(ctx, anchor):
            return xb @ w

        @staticmethod
        def backward(ctx, grad):
            return grad

    with pytest.raises(RuntimeError, match="torch.autograd.Function .*Product"):
        Product.apply(torch.zeros(1, requires_grad=True))


class _Receiver:
    """A stand-in for the batch a method is called on.  It has no deferred guard, as a
    batch outside a region: once any guard was deferred in the process (an earlier test's
    region), the method reads the receiver's ``_deferred_guard``."""

    _deferred_guard = None


class _Calls:
    def __init__(self):
        self.fast, self.dispatched = [], []

    def fast_path(self, func, this, args):
        self.fast.append(args)
        return "fast"

    def dispatch(self, func, types, args, kwargs=None):
        self.dispatched.append((args[1:], kwargs))
        return "dispatched"


class _Kind:
    def __init__(self, calls, foreign):
        self.dispatch, self.foreign = calls.dispatch, foreign


def test_the_guard_hands_every_call_the_dispatch_must_see_to_it():
    # A fast path that checks nothing itself: the registry's guard is all there is.
    calls = _Calls()
    method = guarded(_Kind(calls, {list}), torch.Tensor.mul, calls.fast_path)
    assert method(_Receiver(), 2) == "fast"
    assert method(_Receiver(), 2, out=None) == "dispatched"  # keywords are bound by it
    assert method(_Receiver(), [2]) == "dispatched"  # a class the dispatch converts
    with torch.no_grad():  # how an autograd.Function's forward runs
        assert method(_Receiver(), 2) == "dispatched"
    with profile(activities=[ProfilerActivity.CPU]):
        assert method(_Receiver(), 2) == "dispatched"
    assert calls.fast == [(2,)]
    assert len(calls.dispatched) == 4


def test_a_call_the_fast_path_declines_goes_to_the_dispatch():
    calls = _Calls()
    method = guarded(_Kind(calls, set()), torch.Tensor.mul, lambda func, this, args: None)
    assert method(_Receiver(), 2) == "dispatched"
    assert calls.dispatched == [((2,), {})]


def test_conversions_registered_after_the_methods_are_seen_by_the_guard():
    # The guard reads the batch type's set of foreign classes, which grows in place.
    assert kind_of("MaskedBatch").foreign is kind_of("MaskedBatch").foreign
    nested = type(_nested_of_rank_2())
    assert nested in kind_of("MaskedBatch").foreign
