"""The pointwise family, tested op by op over the registry itself.

Every op the pointwise rule registered is called on random examples with NaN
padding and compared with the per-example loop (values and gradients), so a
newly registered op is tested by default.  How to call an op is found by
trying argument patterns on one plain example.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from family_cases import assert_refused_beside_static
from hypothesis import given
from pointwise_patterns import check_op_against_loop
from strategies import example_lists
from torch_features import INPLACE_LDEXP_HAS_DERIVATIVE, lacks

import matchbox
from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_assert, mb_rand

POINTWISE = [e.func for e in _registry.entries() if e.family == "pointwise"]


def _name(func) -> str:
    return _registry.op_name(func)


def _masked_random(batched, first):
    assert isinstance(batched, MaskedBatch)
    assert batched.data.shape == first.data.shape
    assert torch.equal(batched.mask, first.mask)


@pytest.mark.parametrize("func", POINTWISE, ids=[_name(f) for f in POINTWISE])
@pytest.mark.parametrize("dims", [((True, 5), (False, 3)), ((False, 2),)],
                         ids=["dynamic", "static"])
def test_pointwise_op_equals_loop(func, dims):
    shapes, base = mb_rand(4, *dims, dtype=torch.float64, min_size=0)

    def make_batch(xs):
        padding = float("nan") if xs[0].is_floating_point() else 0
        return MaskedBatch.fromlist(xs, base.dims, padding_value=padding)

    check_op_against_loop(func, shapes, make_batch, _masked_random)


@pytest.mark.parametrize("name", ["add_", "mul_", "clamp_", "relu_", "__iadd__"])
def test_inplace_returns_the_same_batch(name):
    _, xb = mb_rand(3, (True, 4), (False, 2), min_size=0)
    target = xb * 1
    args = {"add_": (1.0,), "mul_": (1.0,), "__iadd__": (1.0,), "clamp_": (0.0,)}.get(name, ())
    assert getattr(target, name)(*args) is target


def test_functional_inplace_flag_returns_the_same_batch():
    _, xb = mb_rand(3, (True, 4), (False, 2), min_size=0)
    target = xb * 1
    assert F.relu(target, inplace=True) is target
    assert torch.equal(target.data[target.mask.expand_as(target.data)].clamp(max=0),
                       torch.zeros_like(target.data[target.mask.expand_as(target.data)]))


@given(example_lists(dims=(True, False)))
def test_binary_op_broadcasts_like_examples(pair):
    xs, xb = pair
    bias = torch.randn(xs[0].size(-1), dtype=xs[0].dtype)
    mb_assert(lambda x, b: (x * 2 - b).tanh() / (1 + x.abs()), [xs, [bias] * len(xs)],
              [xb, bias], len(xs))


@given(example_lists(dims=(True, False)))
def test_batch_broadcasts_against_lower_rank_batch(pair):
    xs, xb = pair
    ys = [x.sum(1) for x in xs]  # (1, d) per example: broadcast over the dynamic dim
    yb = xb.sum(1)
    mb_assert(lambda x, y: x * y.unsqueeze(1), [xs, ys], [xb, yb], len(xs))


def test_two_batches_with_different_padded_lengths_combine():
    xs = [torch.randn(1, n, 2) for n in (1, 3)]
    ys = [x * 2 for x in xs]
    xb = MaskedBatch.fromlist(xs, (True, False))
    yb = matchbox.MaskedBatch.fromlist(ys, (True, False))
    yb_padded = MaskedBatch(torch.cat([yb.data, torch.full((2, 2, 2), float("nan"))], 1),
                            torch.cat([yb.mask, torch.zeros(2, 2, 1, dtype=torch.bool)], 1),
                            yb.dims)
    mb_assert(lambda x, y: x + y, [xs, ys], [xb, yb_padded], 2)


def test_where_and_comparisons_equal_loop(dtype):
    xs, xb = mb_rand(5, (True, 4), (False, 3), dtype=dtype, min_size=0)
    ys, yb = mb_rand(5, (False, 3), dtype=dtype, min_size=0)
    ys = [y.unsqueeze(1) for y in ys]
    yb = yb.unsqueeze(1)
    mb_assert(lambda x, y: torch.where(x > y, x, y * 2), [xs, ys], [xb, yb], 5)
    mb_assert(lambda x: (x >= 0) & (x < 1), [xs], [xb], 5)


def test_clamp_and_pow_with_tensor_bounds(dtype):
    xs, xb = mb_rand(4, (True, 4), (False, 3), dtype=dtype, min_size=0)
    low = torch.full((3,), -0.2, dtype=dtype)
    high = torch.full((3,), 0.7, dtype=dtype)
    mb_assert(lambda x: x.clamp(min=low, max=high).pow(2), [xs], [xb], 4)
    mb_assert(lambda x: torch.pow(2.0, x), [xs], [xb], 4)


def test_plain_tensor_with_full_rank_must_have_size_one_in_dim_zero():
    _, xb = mb_rand(2, (True, 3), (False, 2), min_size=0)
    with pytest.raises(ValueError, match=r"torch.add: a plain tensor argument has size 5 in "
                                         r"dimension 0"):
        torch.add(xb, torch.zeros(5, 1, 2))


def test_a_length_against_plain_positions_says_why_the_shapes_differ(dtype):
    # Per example the length is a scalar and ``arange(T) < n`` a vector (T,), which a
    # batch cannot hold; with a leading one, (1, T), the loop and the batch agree.
    xs, xb = mb_rand(4, (True, 3), (False, 2), dtype=dtype, min_size=0)
    with pytest.raises(ValueError, match=r"Tensor\.lt: a plain tensor of shape \(3,\) meets a "
                                         r"batch of per-example scalars"):
        _ = torch.arange(xb.maxsize(1)) < xb.size_as_tensor(1)
    with pytest.raises(ValueError, match=r"Tensor\.__gt__: a plain tensor of shape \(5,\)"):
        _ = xb.size_as_tensor(1) > torch.arange(5)
    mb_assert(lambda x: (torch.arange(3).unsqueeze(0) < x.size_as_tensor(1)).to(dtype) + x.sum(),
              [xs], [xb], 4)


def test_plain_tensor_cannot_have_a_size_along_a_dynamic_dim():
    xb = MaskedBatch.fromlist([torch.rand(1, n, 2) for n in (1, 3)], (True, False))
    with pytest.raises(ValueError, match=r"size 2 in dimension 1, which is dynamic in the "
                                         r"batch; a tensor shared by all examples can broadcast"):
        xb + torch.zeros(1, 2, 2)


def test_batches_of_different_sizes_do_not_combine():
    _, xb = mb_rand(2, (True, 3), min_size=0)
    _, yb = mb_rand(3, (True, 3), min_size=0)
    with pytest.raises(ValueError, match=r"different batch sizes \(2 and 3\)"):
        xb + yb


def test_static_dims_of_different_sizes_do_not_combine():
    _, xb = mb_rand(2, (False, 3), min_size=0)
    _, yb = mb_rand(2, (False, 4), min_size=0)
    with pytest.raises(ValueError, match=r"static dimension 1 has different sizes"):
        xb * yb


def test_inplace_op_on_plain_tensor_with_batch_argument_is_refused():
    _, xb = mb_rand(2, (False, 3), min_size=0)
    with pytest.raises(ValueError, match=r"in-place op on a plain tensor"):
        torch.zeros(1, 3).add_(xb)


@lacks(INPLACE_LDEXP_HAS_DERIVATIVE, "differentiates the in-place ldexp_")
def test_inplace_op_torch_cannot_differentiate_is_refused_by_name():
    # The loop meets torch's own error (about mul(out=...)); the batch names the op.
    xs, xb = mb_rand(2, (True, 3), (False, 2), dtype=torch.float64, min_size=0)
    exponent = torch.ones(2, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"out=\.\.\. arguments don't support automatic"):
        (xs[0].requires_grad_() * 1).ldexp_(exponent)
    target = xb.requires_grad_() * 1
    with pytest.raises(NotImplementedError, match=r"Tensor\.ldexp_: this torch \(.+\) cannot "
                       r"differentiate the in-place ldexp_ .*use the out-of-place torch\.ldexp"):
        target.ldexp_(exponent)
    with pytest.raises(NotImplementedError, match=r"torch\.ldexp_: this torch"):
        torch.ldexp_(target, exponent)


def test_out_argument_is_refused():
    _, xb = mb_rand(2, (False, 3), min_size=0)
    with pytest.raises(NotImplementedError, match=r"torch.add: out= is not supported"):
        torch.add(xb, 1, out=torch.empty(2, 3))


def test_out_none_is_torchs_default_and_accepted():
    xs, xb = mb_rand(3, (True, 4), (False, 2), min_size=0)
    mb_assert(lambda x: torch.tanh(x, out=None) + torch.add(x, 1, out=None), [xs], [xb], 3)


def test_padding_never_reaches_real_values_even_inf():
    examples = [torch.ones(1, n, 2) for n in (1, 3)]
    xb = MaskedBatch.fromlist(examples, (True, False), padding_value=float("inf"))
    yb = (xb * 0).exp()
    for y, x in zip(yb.examples(), examples):
        assert torch.equal(y, torch.ones_like(x))


def test_python_operators_equal_loop(dtype):
    xs, xb = mb_rand(4, (True, 5), (False, 3), dtype=dtype, min_size=0)
    mb_assert(lambda x: -x + (+x) * abs(x) - x ** 2 + 2 ** x + 1 / (x * x + 1), [xs], [xb], 4)
    mb_assert(lambda x: ~(x > 0) | (x < -1) & (x != 0) ^ (x >= 1), [xs], [xb], 4)


def test_examples_of_different_lengths_do_not_combine_silently():
    xb = MaskedBatch.fromlist([torch.randn(1, 3, 4), torch.randn(1, 2, 4)], (True, False))
    yb = MaskedBatch.fromlist([torch.randn(1, 2, 4), torch.randn(1, 3, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor.__add__: example 0 has size 3 in one argument "
                                         r"and 2 in another along dynamic dimension 1; the "
                                         r"examples would not combine in a loop either"):
        xb + yb
    with pytest.raises(ValueError, match=r"example 0 has size 3 in one argument and 2"):
        torch.where(xb > 0, xb, yb)
    ones = MaskedBatch.fromlist([torch.randn(1, 1, 4), torch.randn(1, 2, 4)], (True, False))
    with pytest.raises(ValueError, match=r"broadcasting one example's size-one extent against "
                                         r"another's longer one"):
        xb * ones


def test_a_batch_without_padding_is_checked_against_the_others_lengths():
    # Equal lengths give a batch without a mask; its examples still have a size,
    # the padded one, which another argument's examples must match.
    full = MaskedBatch.fromlist([torch.randn(1, 3, 4), torch.randn(1, 3, 4)], (True, False))
    shorter = MaskedBatch.fromlist([torch.randn(1, 2, 4), torch.randn(1, 2, 4)], (True, False))
    ragged = MaskedBatch.fromlist([torch.randn(1, 3, 4), torch.randn(1, 2, 4)], (True, False))
    with pytest.raises(ValueError, match=r"Tensor.__add__: example 0 has size 3 in one argument "
                                         r"and 2 in another along dynamic dimension 1"):
        full + shorter
    with pytest.raises(ValueError, match=r"Tensor.__mul__: example 1 has size 3 in one argument "
                                         r"and 2 in another along dynamic dimension 1"):
        full * ragged


def test_plain_tensor_spanning_the_padded_size_lines_up_with_positions(dtype):
    positions = torch.randn(1, 10, 3, dtype=dtype, requires_grad=True)
    xs, xb = mb_rand(4, (True, 6), (False, 3), dtype=dtype, min_size=0)
    loop = [x + positions[:, : x.size(1)] for x in xs]
    batched = xb + positions[:, : xb.maxsize(1)]
    for y, expected in zip(batched.examples(), loop):
        torch.testing.assert_close(y, expected)
    (grad_loop,) = torch.autograd.grad(sum(y.sum() for y in loop), positions)
    (grad_batch,) = torch.autograd.grad(sum(y.sum() for y in batched.examples()), positions)
    torch.testing.assert_close(grad_batch, grad_loop)


# ------------------------------------------------------------------ dynamic beside static


def _lengths_beside_static(lengths, static=3, dtype=torch.float64):
    """Examples of the given lengths (dynamic dim 1) and examples of a static size there."""
    xs = [torch.randn(1, n, 4, dtype=dtype, requires_grad=True) for n in lengths]
    ss = [torch.randn(1, static, 4, dtype=dtype, requires_grad=True) for _ in lengths]
    return (xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan")),
            ss, MaskedBatch.fromlist(ss, (False, False)))


BINARY_BESIDE_STATIC = [
    pytest.param(lambda x, s: x + s, id="+"),
    pytest.param(lambda x, s: s * x, id="static*dynamic"),
    pytest.param(lambda x, s: torch.where(x > 0, x, s), id="where"),
    pytest.param(lambda x, s: torch.maximum(x, s), id="maximum"),
    pytest.param(lambda x, s: (x * 1).add_(s), id="add_"),
    pytest.param(lambda x, s: (s * 1).add_(x), id="static.add_"),
]


@pytest.mark.parametrize("f", BINARY_BESIDE_STATIC)
@pytest.mark.parametrize("lengths, example, size", [
    ([3, 2], 1, 2), ([2, 2], 0, 2), ([5, 3], 0, 5), ([3, 0], 1, 0)])
def test_a_static_batch_beside_a_dynamic_one_needs_each_examples_length(f, lengths, example,
                                                                        size):
    # The loop raises for the example whose length is not the static size; the
    # batch used to return that example's own length silently.
    _, xb, _, sb = _lengths_beside_static(lengths)
    assert_refused_beside_static(f, xb, sb, example, size, dim=1)


@pytest.mark.parametrize("f", BINARY_BESIDE_STATIC)
def test_a_length_one_example_beside_a_static_size_is_refused_not_kept(f):
    # The loop broadcasts example 1 to (1, 3, 4); the batch would keep (1, 1, 4).
    _, xb, _, sb = _lengths_beside_static([3, 1])
    with pytest.raises(ValueError, match=r"Tensor.__add__: example 1 has size 1 in one argument"
                                         r" and 3 in another along dimension 1, dynamic in the "
                                         r"first and static in the second; broadcasting one "
                                         r"example's size-one extent against a static size "
                                         r"along a dynamic dimension is not supported"):
        xb + sb
    with pytest.raises(ValueError, match=r"example 1 has size 1 in one argument and 3"):
        f(xb, sb)


@pytest.mark.parametrize("f", BINARY_BESIDE_STATIC)
def test_a_static_batch_with_each_examples_length_matches_loop(f):
    xs, xb, ss, sb = _lengths_beside_static([3, 3, 3])
    mb_assert(f, [xs, ss], [xb, sb], 3)
    # Padded past its longest example: x[:, :-1] keeps the padded size 4, lengths 3.
    ys = [torch.randn(1, 4, 4, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    yb = MaskedBatch.fromlist(ys, (True, False))
    mb_assert(lambda y, s: f(y[:, :-1], s), [ys, ss], [yb, sb], 3)


def test_a_static_size_one_broadcasts_against_a_dynamic_dimension():
    xs, xb, ss, sb = _lengths_beside_static([3, 1, 0, 2], static=1)
    mb_assert(lambda x, s: x * s, [xs, ss], [xb, sb], 4)
    mb_assert(lambda x, s: torch.where(x > 0, s, x), [xs, ss], [xb, sb], 4)


def test_static_batches_of_different_sizes_beside_a_dynamic_one_are_refused():
    _, xb, _, sb = _lengths_beside_static([3, 3])
    other = MaskedBatch.fromlist([torch.randn(1, 2, 4)] * 2, (False, False))
    with pytest.raises(ValueError, match=r"torch.where: example 0 has size 3 in one argument "
                                         r"and 2 in another along dimension 1"):
        torch.where(xb > 0, sb, other)


def test_only_the_running_examples_are_checked_beside_a_static_batch():
    # Under @batch, code runs only for some examples (``if x.size(1) == 3: x + s``);
    # the others do not run it in the loop, so their lengths cannot make it fail.
    from matchbox._masking import EXECUTION_MASK

    _, xb, _, sb = _lengths_beside_static([3, 2, 3])
    ragged = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in (3, 1, 3)], (True, False))
    token = EXECUTION_MASK.set(torch.tensor([True, False, True]))
    try:
        out = xb + sb
        assert [tuple(e.shape) for e in out.examples()][0::2] == [(1, 3, 4), (1, 3, 4)]
        xb * ragged  # dynamic beside dynamic: the same rule
        EXECUTION_MASK.set(torch.tensor([True, True, False]))
        with pytest.raises(ValueError, match=r"example 1 has size 2 in one argument and 3"):
            xb + sb
    finally:
        EXECUTION_MASK.reset(token)

