"""``x.shape == y.shape`` (``BatchShape``) and ``x.expand(y.shape)`` against the loop.

In the loop each example's ``shape`` is a ``torch.Size``, and ``==`` a Python bool per
example.  On a batch: a plain bool where static sizes decide it for every example, else a
batch of one bool per example (``if x.shape == y.shape:`` under ``@matchbox.batch``
branches per example).  It compared the two objects, ``False``, silently.
"""

from __future__ import annotations

import pytest
import torch
from family_cases import batch_of

from matchbox import MaskedBatch
from matchbox._example_scalars import SCALAR
from matchbox.testing import mb_assert


def per_example(result, n):
    """``result`` (a bool, or a batch of one bool per example) as ``n`` bools."""
    if isinstance(result, MaskedBatch):
        assert result.dims == () and result.dtype == torch.bool and result._scalar is SCALAR
        return result.data.tolist()
    assert type(result) is bool, f"{result!r} is neither a bool nor a batch of them"
    return [result] * n


def assert_loop(f, xs, ys, xb, yb, *, decided):
    """``f(x, y)`` per example equals ``f(xb, yb)``; ``decided``: a plain bool is expected
    (the static sizes decide it for every example)."""
    got = f(xb, yb)
    assert isinstance(got, bool) == decided, got
    assert per_example(got, len(xs)) == [f(x, y) for x, y in zip(xs, ys)]


def eq(x, y):
    return x.shape == y.shape


def ne(x, y):
    return x.shape != y.shape


PAIRS = {
    # name: (x's dims, its example shapes, y's dims, its example shapes, decided)
    "dynamic, some equal (a zero length)": ((True, False), [(3, 4), (0, 4), (2, 4), (0, 4)],
                                           (True, False), [(3, 4), (1, 4), (2, 4), (0, 4)],
                                           False),
    "dynamic, all equal": ((True, False), [(3, 4), (0, 4)], (True, False), [(3, 4), (0, 4)],
                           False),
    "dynamic against static": ((True, False), [(3, 4), (2, 4), (0, 4)],
                               (False, False), [(2, 4)] * 3, False),
    "two dynamic": ((True, True), [(2, 3), (1, 1), (0, 2)], (True, True),
                    [(2, 3), (1, 2), (0, 2)], False),
    "a static size differs": ((True, False), [(3, 4), (2, 4)], (True, False),
                              [(3, 5), (2, 5)], True),
    "ranks differ": ((True, False), [(3, 4), (2, 4)], (True,), [(3,), (2,)], True),
    "all static, equal": ((False, False), [(3, 4)] * 2, (False, False), [(3, 4)] * 2, True),
    "all static, not equal": ((False, False), [(3, 4)] * 2, (False, False), [(4, 3)] * 2,
                              True),
    "batch of one": ((True, False), [(0, 4)], (True, False), [(0, 4)], False),
    "batch of one, static": ((False,), [(5,)], (False,), [(5,)], True),
}


@pytest.mark.parametrize("f", [eq, ne])
@pytest.mark.parametrize("case", PAIRS)
def test_shapes_of_two_batches_compare_per_example_as_the_loop(case, f):
    xdims, xshapes, ydims, yshapes, decided = PAIRS[case]
    xs, xb = batch_of(xshapes, xdims)
    ys, yb = batch_of(yshapes, ydims)
    assert_loop(f, xs, ys, xb, yb, decided=decided)
    assert_loop(f, ys, xs, yb, xb, decided=decided)
    assert_loop(f, xs, xs, xb, xb, decided=not any(xdims))  # x.shape == x.shape


def test_shape_against_a_tuple_or_a_torch_size_compares_each_example_as_the_loop():
    xs, xb = batch_of([(3, 4), (0, 4), (2, 4)], (True, False))
    batch = xb.size(0)  # 3, where each example's x.size(0) is 1: both name dimension 0
    n = xb.size_as_tensor(1)  # each example's own length
    for other, decided in [((1, 3, 4), False), (torch.Size([1, 0, 4]), False),
                           ((batch, 2, 4), False), ((1, 3, 5), True), ((1, 3), True),
                           ((2, 3, 4), True), (torch.randn(1, 2, 4).shape, False)]:
        got = xb.shape == other
        assert isinstance(got, bool) == decided, other
        loop = [x.shape == (1, *other[1:]) if other[0] == batch else x.shape == other
                for x in xs]
        assert per_example(got, 3) == loop, other
        assert per_example(other == xb.shape, 3) == loop, other  # reflected, as tuple's
        assert per_example(xb.shape != other, 3) == [not e for e in loop], other
    # A size given per example (the loop's number) compares with each example's own.
    assert per_example(xb.shape == (1, n, 4), 3) == [True] * 3
    assert per_example(xb.shape == (1, n - 1, 4), 3) == [False] * 3


def test_a_static_shape_is_a_plain_bool():
    xs, xb = batch_of([(3, 4)] * 2, (False, False))
    assert (xb.shape == (1, 3, 4)) is True and (xb.shape == torch.Size([1, 3, 4])) is True
    assert (xb.shape == (2, 3, 4)) is True  # x.size(0), the batch size
    assert (xb.shape == (1, 4, 3)) is False and (xb.shape != (1, 4, 3)) is True
    assert (xb.shape == xs[0].shape) is True
    if xb.shape != (1, 3, 4):  # a plain if runs as the loop's, outside @matchbox.batch
        raise AssertionError


def test_a_shape_equals_only_a_shape_of_the_same_examples():
    _, xb = batch_of([(3, 4), (0, 4)], (True, False))
    _, sb = batch_of([(3, 4)] * 2, (False, False))
    assert (sb.shape == batch_of([(3, 4)] * 2, (False, False))[1].shape) is True
    # Not a shape: torch.Size == list is False (a tuple is no list); so is a number.
    for shape in (xb.shape, sb.shape):
        for other in ([1, 3, 4], 3, None, "shape"):
            assert (shape == other) is False and (shape != other) is True
        assert shape.__eq__([1, 3, 4]) is NotImplemented
    # A batch of other examples (another batch size): as torch's shapes, in dimension 0.
    _, yb = batch_of([(3, 4)] * 3, (True, False))
    assert (xb.shape == yb.shape) is False and (xb.shape != yb.shape) is True
    assert (sb.shape == batch_of([(3, 4)] * 3, (False, False))[1].shape) is False


def test_batch_shape_is_unhashable():
    # It equals both (1, ...) and (batch size, ...), which hash differently.
    _, xb = batch_of([(3, 4)] * 2, (False, False))
    with pytest.raises(TypeError, match="unhashable type: 'BatchShape'"):
        hash(xb.shape)


def test_the_shape_of_one_value_per_example_is_the_loops():
    xs, xb = batch_of([(3, 4), (0, 4)], (True, False))
    total = xb.sum()  # a 0-d tensor in the loop
    assert [x.sum().shape == () for x in xs] == [True] * 2
    assert (total.shape == ()) is True and (total.shape == (1,)) is False
    rows = xb.sum(1).sum(1)  # of shape (1,) in the loop
    assert [x.sum(1).sum(1).shape == (1,) for x in xs] == [True] * 2
    assert (rows.shape == (1,)) is True and (rows.shape == ()) is False
    assert (total.shape == rows.shape) is False and (total.shape == total.shape) is True
    unknown = MaskedBatch._make(torch.zeros(2), None, ())  # from an op that records neither
    with pytest.raises(TypeError, match=r"BatchShape ==: the batch holds one value per "
                                        r"example.*shape \(\).*shape \(1,\).*does not record "
                                        r"which; compare the shapes of the batches"):
        unknown.shape == ()  # noqa: B015


def test_an_absent_example_leaves_a_static_comparison_a_bool():
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in (4, 2)]
    xb = MaskedBatch.fromlist(xs, (True, False))
    last = xb.unbind(1)[-1]  # example 1 has no step 4: absent
    assert (last.shape == (1, 3)) is True and (last.shape == (1, 4)) is False


def test_a_per_example_answer_scales_as_the_loops_bool():
    # x * (x.shape == y.shape): the loop's x * True or x * False, values and gradients.
    xs, xb = batch_of([(3, 4), (0, 4), (2, 4), (1, 4)], (True, False))
    ys, yb = batch_of([(3, 4), (0, 4), (1, 4), (2, 4)], (True, False))
    mb_assert(lambda x, y: x * (x.shape == y.shape), [xs, ys], [xb, yb], len(xs))
    mb_assert(lambda x, y: x * (x.shape != y.shape), [xs, ys], [xb, yb], len(xs))
    mb_assert(lambda x: x * (x.shape == (1, 2, 4)), [xs], [xb], len(xs))


@pytest.mark.parametrize("lengths", [(3, 0, 2), (0,), (2,)])
def test_expand_to_a_batchs_shape_gives_each_example_its_own_shape(lengths):
    # x.expand(y.shape) is torch's x.expand_as(y): each example to its own y's shape.
    xs, xb = batch_of([(n, 4) for n in lengths], (True, False))
    mb_assert(lambda x: x.sum(1, keepdim=True).expand(x.shape), [xs], [xb], len(xs))
    mb_assert(lambda x: x.sum(1, keepdim=True).broadcast_to(x.shape), [xs], [xb], len(xs))
    mb_assert(lambda x: x.expand(x.shape), [xs], [xb], len(xs))
    ss, sb = batch_of([(1, 4)] * len(lengths), (False, False))
    mb_assert(lambda s, x: s.expand(x.shape) * x, [ss, xs], [sb, xb], len(xs))


def test_expand_to_a_shape_it_cannot_take_is_refused_as_in_the_loop():
    xs, xb = batch_of([(3, 4), (2, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor.expand: dimension 2 has size 4, and the "
                                         r"batch it is expanded as is of size 5 there"):
        xb.expand(batch_of([(3, 5), (2, 5)], (True, False))[1].shape)
    with pytest.raises(RuntimeError):
        xs[0].expand(torch.randn(1, 3, 5).shape)
