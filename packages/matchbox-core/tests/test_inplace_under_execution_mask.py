"""An op that writes a batch in place while an execution mask is active changes only the
running examples (``matchbox._masked_writes``), whoever calls it.

matchbox-control's ``@batch`` sets the execution mask under a per-example condition; these
tests set it themselves (core's tests run without matchbox-control), and compare with the
loop over examples in which only the running examples run the op: values and gradients
(``mb_assert``), the write seen by aliases and views of the batch, as in PyTorch.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from op_counts import CountOps

from matchbox import MaskedBatch
from matchbox.extending import EXECUTION_MASK, write_running
from matchbox.testing import mb_assert

DTYPES = [torch.float32, torch.float64]


@contextlib.contextmanager
def running(mask: torch.Tensor):
    token = EXECUTION_MASK.set(mask)
    try:
        yield
    finally:
        EXECUTION_MASK.reset(token)


def under(op):
    """``f(x, run)``: ``op`` on a copy of ``x``, run by the examples whose ``run`` holds (the
    batch: under the execution mask ``run``; the loop: ``if run``)."""

    def f(x, run):
        h = x * 1
        if isinstance(run, MaskedBatch):
            with running(run.data):
                out = op(h, x)
            assert out is h  # an in-place op returns the batch it wrote
        elif bool(run):
            op(h, x)
        return h

    return f


def flags(values):
    examples = [torch.tensor([v]) for v in values]
    return examples, MaskedBatch.fromlist(examples, ())


def batch(shapes, dims, dtype, seed=0):
    torch.manual_seed(seed)
    examples = [torch.randn(*s, dtype=dtype) for s in shapes]
    return examples, MaskedBatch.fromlist(examples, dims, padding_value=float("nan"))


def setitem(index, value):
    def op(h, x):
        h[index] = value(x) if callable(value) else value
        return h

    return op


def iadd(h, x):
    h += x
    return h


OPS = {
    "torch.relu_": lambda h, x: torch.relu_(h),
    "Tensor.relu_": lambda h, x: h.relu_(),
    "torch.clamp_": lambda h, x: torch.clamp_(h, min=-0.2, max=0.3),
    "Tensor.add_(batch)": lambda h, x: h.add_(x * x),
    "Tensor.mul_": lambda h, x: h.mul_(3.0),
    "h += x": iadd,
    "Tensor.copy_": lambda h, x: h.copy_(x.tanh()),
    "Tensor.zero_": lambda h, x: h.zero_(),
    "Tensor.fill_": lambda h, x: h.fill_(2.5),
    "h[:, 0] = v": setitem((slice(None), 0), 0.5),
    "h[:, 1:] = x": setitem((slice(None), slice(1, None)),
                            lambda x: x[:, 1:].sigmoid()),
    "Tensor.scatter_": lambda h, x: h.scatter_(1, torch.tensor([[2, 0]]), x[:, :2] * 3),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(OPS))
def test_an_in_place_op_under_a_mask_changes_only_the_running_examples(name, dtype):
    xs, xb = batch([(1, 3)] * 4, (False,), dtype)
    runs = flags([True, False, True, False])
    mb_assert(under(OPS[name]), [xs, runs[0]], [xb, runs[1]], 4)


DYNAMIC_OPS = {
    "torch.relu_": lambda h, x: torch.relu_(h),
    "Tensor.add_(batch)": lambda h, x: h.add_(x.exp()),
    "h += x": iadd,
    "h[:, :, 0] = v": setitem((slice(None), slice(None), 0), 0.0),
    "h[:, 0] = v": setitem((slice(None), 0), -1.0),  # index 0: not in the empty example
    "h[:, :2, 1:] = x": setitem((slice(None), slice(None, 2), slice(1, None)),
                                lambda x: x[:, :2, 1:] * 2),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(DYNAMIC_OPS))
def test_an_in_place_op_under_a_mask_on_a_dynamic_dimension(name, dtype):
    # Padding is NaN: it must reach neither a value nor a gradient; the empty example
    # does not run (an index past its end is no error for it, as in the loop).
    xs, xb = batch([(1, 3, 2), (1, 5, 2), (1, 0, 2), (1, 2, 2)], (True, False), dtype)
    runs = flags([True, False, False, True])
    mb_assert(under(DYNAMIC_OPS[name]), [xs, runs[0]], [xb, runs[1]], 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_triu_in_place_under_a_mask(dtype):
    xs, xb = batch([(1, 3, 3)] * 3, (False, False), dtype)
    runs = flags([False, True, True])
    mb_assert(under(lambda h, x: h.triu_(1)), [xs, runs[0]], [xb, runs[1]], 3)


def aliased(x, run):
    """A view of the batch and an alias of it, taken before the write, see it (PyTorch)."""
    h = x * 1
    first, alias, flat = h[:, 0], h, h.view(1, -1) if not isinstance(h, MaskedBatch) else (
        h.flatten(1))
    if isinstance(run, MaskedBatch):
        with running(run.data):
            h.relu_()
    elif bool(run):
        h.relu_()
    return first, alias, flat


def test_views_and_aliases_of_the_batch_see_the_write():
    xs, xb = batch([(1, 3, 2)] * 3, (False, False), torch.float64, seed=1)
    runs = flags([False, True, True])
    mb_assert(aliased, [xs, runs[0]], [xb, runs[1]], 3)


def test_a_write_into_a_view_reaches_the_batch_for_the_running_examples():
    def f(x, run):
        h = x * 1
        if isinstance(run, MaskedBatch):
            with running(run.data):
                h[:, 1].mul_(-2.0)
        elif bool(run):
            h[:, 1].mul_(-2.0)
        return h

    xs, xb = batch([(1, 3, 2)] * 3, (False, False), torch.float32, seed=2)
    runs = flags([True, False, True])
    mb_assert(f, [xs, runs[0]], [xb, runs[1]], 3)


def _ops(fn):
    """The ops ``fn`` runs, but views (of the execution mask as ``(batch, 1)``, made once)."""
    with CountOps() as counter:
        fn()
    return {op: n for op, n in counter.ops.items() if op != "view"}


def test_the_op_runs_once_on_one_copy_and_not_without_a_mask():
    xb = MaskedBatch.fromlist([torch.randn(1, 4) for _ in range(3)], (False,))
    mask = torch.tensor([True, False, True])
    with running(mask):
        ops = _ops(lambda: torch.relu_(xb))
    # The write back is a where into the data itself (nothing for autograd to record).
    assert ops == {"clone": 1, "relu_": 1, "where": 1}, ops
    hb = xb.detach().requires_grad_() * 1
    with running(mask):
        ops = _ops(lambda: torch.relu_(hb))
    # With a gradient: the where, then a copy_ into the data, which autograd records
    # (relu_ saving its result for backward is a detach).
    assert ops == {"clone": 1, "relu_": 1, "detach": 1, "where": 1, "copy_": 1}, ops
    ops = _ops(lambda: torch.relu_(xb))
    assert ops == {"relu_": 1}, ops  # no mask: the op itself, nothing else


def test_a_write_torch_would_refuse_for_its_dtype_is_refused():
    # In the loop, an integer tensor cannot take a float result in place.
    nb = MaskedBatch.fromlist([torch.tensor([k]) for k in range(3)], ())
    new = MaskedBatch._make(torch.full((3,), 0.5), None, ())
    with running(torch.tensor([True, False, True])), pytest.raises(
            RuntimeError, match=r"result type Float can't be cast to the desired output type "
                                r"Long"):
        write_running(nb, new)


def test_out_is_refused_under_a_mask_too():
    xb = MaskedBatch.fromlist([torch.randn(1, 4) for _ in range(2)], (False,))
    with running(torch.tensor([True, False])), pytest.raises(
            NotImplementedError, match=r"torch.add: out= is not supported for batches"):
        torch.add(xb, 1, out=xb)


def test_a_write_that_changes_the_shape_under_a_mask_is_refused():
    # Only the running examples would take the new shape; a batch has one per dimension.
    xb = MaskedBatch.fromlist([torch.randn(1, 4) for _ in range(2)], (False,))
    wider = MaskedBatch._make(torch.zeros(2, 5), None, (False,))
    with running(torch.tensor([True, False])), pytest.raises(
            ValueError, match=r"would change its shape from \(1, 4\) to \(1, 5\).* out of place"):
        write_running(xb, wider)


def test_write_running_reaches_the_batch_a_guard_stands_for():
    # matchbox-control's region guard is a new batch recording the one it stands for.
    xb = MaskedBatch.fromlist([torch.zeros(1, 2) for _ in range(3)], (False,))
    guard = MaskedBatch._make(xb.data.clone(), None, xb.dims)
    guard._guards = xb
    new = MaskedBatch._make(torch.ones(3, 2), None, xb.dims)
    assert write_running(guard, new, torch.tensor([False, True, True])) is guard
    for b in (guard, xb):
        assert b.data.tolist() == [[0, 0], [1, 1], [1, 1]]
