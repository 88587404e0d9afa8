"""Examples empty in one dynamic dimension and not in another ("empty in part").

The mask of such an example, ``(1, 3, 0)`` say, is all false, as that of
``(1, 0, 0)``: it carries the example's lengths (``matchbox._lengths``).  Every
op below must give the loop's shapes, values and gradients (NaN padding), and an
op that is not written for such masks must refuse them, not drop the sizes.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import matchbox.functional as F
from matchbox import MaskedBatch, _lengths
from matchbox.testing import mb_assert, mb_rand

NAN = float("nan")
SHAPES = [(3, 0), (0, 2), (0, 0), (2, 3), (1, 1)]


def batch(shapes, dtype=torch.float64, static=()):
    xs = [torch.randn(1, *shape, *static, dtype=dtype) for shape in shapes]
    dims = (True,) * len(shapes[0]) + (False,) * len(static)
    return xs, MaskedBatch.fromlist(xs, dims, padding_value=NAN)


def shapes_of(xb):
    return [tuple(e.shape) for e in xb.examples()]


# ------------------------------------------------------------------ holding them


def test_fromlist_holds_every_examples_shape():
    xs, xb = batch(SHAPES)
    assert shapes_of(xb) == [(1, *s) for s in SHAPES]
    assert xb.lengths().tolist() == [list(s) for s in SHAPES]
    assert xb.size_as_tensor(1).data.tolist() == [3, 0, 0, 2, 1]
    assert xb.size_as_tensor(2).data.tolist() == [0, 2, 0, 3, 1]
    assert "examples=[(1, 3, 0), (1, 0, 2), (1, 0, 0), (1, 2, 3), (1, 1, 1)]" in repr(xb)
    for e, x in zip(xb.examples(), xs):
        torch.testing.assert_close(e, x)


def test_a_batch_without_padding_of_examples_empty_in_part():
    # Every example (1, 3, 0): no padding, no mask; the sizes come from the data.
    xs, xb = batch([(3, 0), (3, 0)])
    assert xb._mask is None
    assert shapes_of(xb) == [(1, 3, 0)] * 2
    mb_assert(lambda x: x.sum(2) + 1, [xs], [xb], 2)
    mb_assert(lambda x: x.transpose(1, 2).unsqueeze(1), [xs], [xb], 2)


def test_only_masks_that_cannot_tell_carry_lengths():
    assert _lengths.carried(batch([(3, 1), (0, 0)])[1]._mask) is None
    assert _lengths.carried(batch([(3, 1), (0, 2)])[1]._mask) is not None
    assert _lengths.carried(batch([(3,), (0,)])[1]._mask) is None


def test_the_constructor_takes_lengths():
    data = torch.randn(2, 3, 2)
    lengths = torch.tensor([[3, 0], [1, 2]])
    xb = MaskedBatch(data, None, (True, True), lengths=lengths)
    assert shapes_of(xb) == [(1, 3, 0), (1, 1, 2)]
    mask = torch.zeros(2, 3, 2, dtype=torch.bool)
    mask[1, :1, :2] = True
    assert shapes_of(MaskedBatch(data, mask, (True, True), lengths=lengths)) == shapes_of(xb)
    # Without lengths an all-false mask reads as empty in every dimension.
    assert shapes_of(MaskedBatch(data, mask, (True, True))) == [(1, 0, 0), (1, 1, 2)]


@pytest.mark.parametrize(("lengths", "message"), [
    (torch.tensor([[3.0, 0.0], [1.0, 2.0]]), r"lengths must be an integer tensor"),
    (torch.tensor([[3, 0]]), r"lengths must have shape \(batch, number of dynamic dimensions\) "
                             r"= \(2, 2\), got \(1, 2\)"),
    (torch.tensor([[4, 0], [1, 2]]), r"lengths must lie between 0 and the padded size"),
    (torch.tensor([[3, 0], [2, 2]]), r"the mask is not the one the lengths describe"),
])
def test_the_constructor_checks_lengths(lengths, message):
    mask = torch.zeros(2, 3, 2, dtype=torch.bool)
    mask[1, :1, :2] = True
    with pytest.raises(ValueError, match=message):
        MaskedBatch(torch.randn(2, 3, 2), mask if "mask is not" in message else None,
                    (True, True), lengths=lengths)


def test_moving_the_batch_keeps_the_lengths():
    xs, xb = batch(SHAPES)
    assert shapes_of(xb.to(torch.float32)) == shapes_of(xb)
    assert shapes_of(xb.detach()) == shapes_of(xb)
    assert shapes_of(xb[:, :]) == shapes_of(xb)


# ------------------------------------------------------------------ ops equal the loop

OPS = {
    "tanh": lambda x: x.tanh(),
    "add": lambda x: x + x * 2,
    "scalar": lambda x: 1 - x,
    "where": lambda x: torch.where(x > 0, x, -x),
    "sum(2)": lambda x: x.sum(2),
    "sum(1)": lambda x: x.sum(1, keepdim=True),
    "sum()": lambda x: x.sum(),
    "mean(2)": lambda x: x.mean(2),
    "logsumexp(1)": lambda x: x.logsumexp(1),
    "transpose": lambda x: x.transpose(1, 2) * 3,
    "permute": lambda x: x.unsqueeze(3).permute(0, 2, 3, 1),
    "unsqueeze-squeeze": lambda x: x.unsqueeze(2).squeeze(2),
    "flatten": lambda x: x.unsqueeze(3).expand(-1, -1, -1, 2).flatten(2),
    "narrow(1, 0, 0)": lambda x: x.narrow(1, 0, 0),
    "slice": lambda x: x[:, :1],
    "slice from the end": lambda x: x[:, :, -1:],
    "cat(1)": lambda x: torch.cat([x, x * 2], 1),
    "cat(2)": lambda x: torch.cat([x, x.exp()], 2),
    "stack": lambda x: torch.stack([x, x + 1], 1),
    "cumsum(2)": lambda x: x.cumsum(2),
    "flip(1)": lambda x: x.flip(1),
    "sort(2)": lambda x: x.sort(2).values,
    "zeros_like": lambda x: torch.zeros_like(x) + x,
    "self-product": lambda x: x @ x.transpose(1, 2),
    "product": lambda x: x.transpose(1, 2) @ x,
    "einsum": lambda x: torch.einsum("bij,bik->bjk", x, x),
    "update": lambda x: F.update(x * 0, x + 1),
}


@pytest.mark.parametrize("op", list(OPS), ids=list(OPS))
def test_ops_equal_the_loop(op, dtype):
    xs, xb = batch(SHAPES, dtype)
    mb_assert(OPS[op], [xs], [xb], len(xs))


@pytest.mark.parametrize("op", ["tanh", "sum(2)", "mean(2)", "transpose", "cat(2)",
                                "self-product", "product", "einsum"])
def test_batch_size_one(op, dtype):
    for shape in [(3, 0), (0, 2)]:
        xs, xb = batch([shape], dtype)
        mb_assert(OPS[op], [xs], [xb], 1)


@pytest.mark.parametrize("op", ["tanh", "add", "sum(2)", "sum(1)", "transpose", "cat(1)",
                                "cat(2)", "stack", "cumsum(2)", "slice"])
@given(shapes=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1,
                       max_size=4), static=st.integers(1, 2))
def test_ops_on_random_shapes_equal_the_loop(op, shapes, static):
    xs, xb = batch(shapes, static=(static,))
    mb_assert(OPS[op], [xs], [xb], len(xs))


@pytest.mark.parametrize("op", ["self-product", "product", "einsum", "permute"])
@given(shapes=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1,
                       max_size=4))
def test_products_on_random_shapes_equal_the_loop(op, shapes):
    xs, xb = batch(shapes)
    mb_assert(OPS[op], [xs], [xb], len(xs))


def test_two_batches_with_different_masks(dtype):
    xs, xb = batch(SHAPES, dtype)
    ys = [torch.randn_like(x) for x in xs]
    yb = MaskedBatch.fromlist(ys, (True, True), padding_value=1.0)  # another mask object
    mb_assert(lambda x, y: x * y + y, [xs, ys], [xb, yb], len(xs))


def test_an_outer_broadcast_can_leave_an_example_empty_in_part(dtype):
    # a (1, n, 1) + b (1, 1, m): example 1 has m = 0, so its result is (1, 2, 0).
    a = [torch.randn(1, n, 1, dtype=dtype) for n in (3, 2, 0)]
    b = [torch.randn(1, 1, m, dtype=dtype) for m in (1, 0, 4)]
    ab, bb = (MaskedBatch.fromlist(xs, dims, padding_value=NAN)
              for xs, dims in ((a, (True, False)), (b, (False, True))))
    assert shapes_of(ab + bb) == [(1, 3, 1), (1, 2, 0), (1, 0, 4)]
    mb_assert(lambda x, y: (x + y).sum(1), [a, b], [ab, bb], 3)


def test_cross_attention_onto_an_empty_source(dtype):
    # Example 1 has no keys: scores (1, 2, 0), and zeros (1, 2, 5) after @ v; the gradients
    # of q, k and v stay free of NaN (the loop gives none there either).
    qs = [torch.randn(1, n, 4, dtype=dtype) for n in (3, 2, 0)]
    ks = [torch.randn(1, n, 4, dtype=dtype) for n in (2, 0, 3)]
    vs = [torch.randn(1, n, 5, dtype=dtype) for n in (2, 0, 3)]
    q, k, v = (MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
               for xs in (qs, ks, vs))
    out = (q @ k.transpose(1, 2)).tanh() @ v
    assert shapes_of(out) == [(1, 3, 5), (1, 2, 5), (1, 0, 5)]
    assert out.data[1, :2].eq(0).all()
    mb_assert(lambda q, k, v: (q @ k.transpose(1, 2)).tanh() @ v, [qs, ks, vs], [q, k, v], 3)


def test_narrow_to_nothing_keeps_the_other_sizes(dtype):
    xs, xb = batch([(3, 2), (1, 4)], dtype)
    assert shapes_of(xb.narrow(1, 0, 0)) == [(1, 0, 2), (1, 0, 4)]
    assert shapes_of(xb.narrow(2, 1, 0)) == [(1, 3, 0), (1, 1, 0)]
    mb_assert(lambda x: x.narrow(2, 1, 0).sum(2), [xs], [xb], 2)


def test_unbind_and_dynamic_stack(dtype):
    xs, xb = batch([(3, 0), (2, 2), (0, 3)], dtype, static=(2,))
    steps = xb.unbind(3)  # a static dim: every step present, (1, n, m) each
    assert shapes_of(steps[0]) == [(1, 3, 0), (1, 2, 2), (1, 0, 3)]
    # Steps empty in part are present: stacked along a new dynamic dim, each example
    # has both.
    stacked = F.stack([xb, xb * 2], 1)
    assert shapes_of(stacked) == [(1, 2, 3, 0, 2), (1, 2, 2, 2, 2), (1, 2, 0, 3, 2)]
    mb_assert(lambda x: F.stack([x, x * 2], 1) if isinstance(x, MaskedBatch)
              else torch.stack([x, x * 2], 1), [xs], [xb], 3)
    # Along dim 2 of a (1, 0, 3) example there are 3 steps (1, 0, 2) of a (4-d) batch
    # with three dynamic dims, each empty in part: present, and restacked as the loop.
    ys, yb = batch([(2, 0, 1), (1, 3, 2)], dtype)
    mb_assert(lambda y: F.stack(list(y.unbind(1)), 1) if isinstance(y, MaskedBatch)
              else torch.stack(list(y.unbind(1)), 1), [ys], [yb], 2)


def test_new_zeros_with_per_example_sizes(dtype):
    xs, xb = batch([(3, 1), (2, 2)], dtype)
    n = xb.size_as_tensor(1)
    zero = n * 0
    assert shapes_of(xb.new_zeros(1, n, zero)) == [(1, 3, 0), (1, 2, 0)]
    assert shapes_of(xb.new_zeros(1, zero, n, 4)) == [(1, 0, 3, 4), (1, 0, 2, 4)]


def test_mb_rand_draws_them_and_every_op_above_agrees():
    rng = random.Random(3)
    for _ in range(5):
        xs, xb = mb_rand(5, (True, 3), (True, 3), (False, 2), min_size=0, generator=rng)
        for op in ("tanh", "sum(2)", "transpose", "cat(2)", "stack", "slice"):
            mb_assert(OPS[op], [xs], [xb], 5)
