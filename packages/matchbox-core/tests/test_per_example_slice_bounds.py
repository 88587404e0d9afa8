"""``x[:, start:stop]`` with a bound that is one int per example (a batch of ``dims ==
()`` holding integers: ``s.argmax(-1)``, a ``@batch`` counter): along a dynamic dimension
each example takes its own positions, as the loop over examples does with its own int;
the result is dynamic there, each example of its own length.  Padding is NaN, so a
padding value that reaches a real output or a gradient fails the comparison."""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

LENGTHS = (4, 0, 1, 3, 2)


def batch_of(lengths, dtype=torch.float64):
    xs = [torch.randn(1, n, 2, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


def ints(values):
    """One int per example: the loop's ``(1,)`` tensors and their batch."""
    each = [torch.tensor([v]) for v in values]
    return each, MaskedBatch.fromlist(each, ())


SLICES = {
    "x[:, a:b]": lambda x, a, b: x[:, a:b],
    "x[:, a:]": lambda x, a, b: x[:, a:],
    "x[:, :b]": lambda x, a, b: x[:, :b],
    "x[:, a:b:2]": lambda x, a, b: x[:, a:b:2],
    "x[:, 1:b]": lambda x, a, b: x[:, 1:b],
    "x[:, a:-1]": lambda x, a, b: x[:, a:-1],
    "x[:, a:b, 1]": lambda x, a, b: x[:, a:b, 1],
    "x[:, a:b].sum(1)": lambda x, a, b: x[:, a:b].sum(1),
    "x[:, a:b + 1] * 2": lambda x, a, b: x[:, a:b + 1] * 2,
}

# Per example: within the length, past it, negative (from its own end), start past stop.
BOUNDS = [((1, 0, 0, 0, 1), (3, 0, 1, 2, 2)),
          ((0, 2, 5, -2, -1), (9, -1, 1, -1, 2)),
          ((3, 0, 0, 2, 1), (1, 0, 1, 1, 0))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bounds", BOUNDS)
@pytest.mark.parametrize("name", SLICES)
def test_per_example_bounds_equal_the_loop(name, bounds, dtype):
    xs, xb = batch_of(LENGTHS, dtype)
    a, b = ints(bounds[0]), ints(bounds[1])
    mb_assert(SLICES[name], [xs, a[0], b[0]], [xb, a[1], b[1]], len(xs))


def test_a_batch_of_one_example():
    xs, xb = batch_of((3,))
    a, b = ints((1,)), ints((3,))
    mb_assert(SLICES["x[:, a:b]"], [xs, a[0], b[0]], [xb, a[1], b[1]], 1)


def test_span_extraction_from_argmax():
    """A reader's span: start and end each example's own argmax."""
    def span(x):
        start = x[:, :, 0].argmax(-1)
        end = x[:, :, 1].argmax(-1)
        return x[:, start:end + 1].sum(1)

    xs, xb = batch_of((4, 1, 3, 5))
    mb_assert(span, [xs], [xb], len(xs))


def test_per_example_start_with_a_padded_size_stop():
    def tail(x, a):
        return x[:, a:x.maxsize(1)]

    xs, xb = batch_of(LENGTHS)
    a = ints((1, 0, 1, 2, 0))
    mb_assert(tail, [xs, a[0]], [xb, a[1]], len(xs))


def test_a_sliced_dimension_after_another_dynamic_one():
    xs = [torch.randn(1, n, m, dtype=torch.float64) for n, m in ((2, 3), (1, 0), (3, 2))]
    xb = MaskedBatch.fromlist(xs, (True, True), padding_value=float("nan"))
    a, b = ints((1, 0, -1)), ints((3, 2, 2))
    mb_assert(lambda x, a, b: x[:, :, a:b], [xs, a[0], b[0]], [xb, a[1], b[1]], len(xs))


def test_refusals_name_the_op_and_the_bound():
    _, xb = batch_of((3, 1, 2))
    n = ints((2, 1, 1))[1]
    with pytest.raises(NotImplementedError, match=r"Tensor\.__getitem__: a slice step of "
                                                  r"dimension 1 that differs between examples"):
        xb[:, ::n]
    with pytest.raises(NotImplementedError, match=r"Tensor\.__getitem__: a slice bound of "
                                                  r"static dimension 2 that differs between "
                                                  r"examples"):
        xb[:, :, :n]
    with pytest.raises(TypeError, match=r"Tensor\.__getitem__: a slice bound of dimension 1 "
                                        r"is a batch of dims \(\) and dtype torch\.float64"):
        xb[:, :n.double()]
    with pytest.raises(IndexError, match=r"Tensor\.__getitem__: the first index must be ':'"):
        xb[n:]
    padded = MaskedBatch._make(torch.tensor([1, 2, 0]), torch.tensor([True, False, True]), ())
    with pytest.raises(ValueError, match=r"Tensor\.__getitem__: a slice bound of dimension 1 "
                                         r"is padding for example 1"):
        xb[:, padded:]


def test_writes_through_per_example_bounds_are_refused():
    """In the loop ``x[:, a:]`` is a view that a write reaches ``x`` through; the batch's
    is a copy, so a write is refused (not silently lost)."""
    _, xb = batch_of((3, 1, 2))
    n = ints((1, 0, 1))[1]
    with pytest.raises(NotImplementedError, match=r"Tensor\.__setitem__: .* selects positions "
                                                  r"that differ between examples"):
        xb[:, n:] = 0
    with pytest.raises(NotImplementedError, match=r"Tensor\.mul_: the batch was indexed along "
                                                  r"a dynamic dimension at positions that "
                                                  r"differ between examples"):
        xb[:, :n].mul_(2)
