"""Max, average, power-average and adaptive pooling (1D and 2D) on batches equal the loop.

Values, input gradients and ``return_indices`` (each example's own flat positions), with
NaN padding, zero-length examples and examples shorter than the window (an empty output,
see conv_oracle.py), batch size one, float32 and float64.

PyTorch itself is wrong for one max-pooling geometry: with dilation > 1 and padding, a
window may hold only padding, and the example's index then points outside its input
(its backward writes out of bounds).  The loop is undefined there, so these tests draw
dilation > 1 with padding 0 only.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conv_oracle import CountOps, batch, examples, loop_or_empty
from hypothesis import given
from hypothesis import strategies as st

from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_assert

DTYPES = [torch.float32, torch.float64]
LENGTHS = st.lists(st.one_of(st.integers(0, 8), st.integers(20, 40)), min_size=1, max_size=5)
SIDES = st.lists(st.tuples(st.integers(1, 7), st.integers(1, 7)), min_size=1, max_size=4)


def check(f, xs, dims, dynamic=(2,)):
    mb_assert(loop_or_empty(f, dynamic), [xs], [batch(xs, dims)], len(xs))


# ---------------------------------------------------------------- every registered op


ONE_D, TWO_D = (False, True), (False, True, True)
LENGTHS_1D = [5, 0, 2, 9, 1]
LENGTHS_1D_NONEMPTY = [5, 3, 2, 9, 1]
SIDES_2D = [(3, 4), (1, 1), (6, 2), (5, 5)]
OP_CASES = {
    # name: (example sizes, dims, f)
    "torch.max_pool1d": (LENGTHS_1D, ONE_D, lambda x: torch.max_pool1d(x, 2)),
    "torch.max_pool2d": (SIDES_2D, TWO_D, lambda x: torch.max_pool2d(x, 2, 1, 1)),
    "torch.nn.functional.max_pool1d": (LENGTHS_1D, ONE_D,
                                       lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True)),
    "torch.nn.functional.max_pool1d_with_indices": (
        LENGTHS_1D, ONE_D, lambda x: F.max_pool1d_with_indices(x, 3, 2, 1)),
    "torch.nn.functional.max_pool2d": (SIDES_2D, TWO_D, lambda x: F.max_pool2d(x, (2, 3))),
    "torch.nn.functional.max_pool2d_with_indices": (
        SIDES_2D, TWO_D, lambda x: F.max_pool2d_with_indices(x, 2, 1, 1, ceil_mode=True)),
    "torch.avg_pool1d": (LENGTHS_1D, ONE_D, lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True)),
    "torch.nn.functional.avg_pool2d": (SIDES_2D, TWO_D, lambda x: F.avg_pool2d(
        x, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
    "torch.nn.functional.lp_pool1d": (LENGTHS_1D, ONE_D, lambda x: F.lp_pool1d(x, 2, 2)),
    "torch.nn.functional.lp_pool2d": (SIDES_2D, TWO_D, lambda x: F.lp_pool2d(x, 3, 2, 1)),
    "torch.adaptive_avg_pool1d": (LENGTHS_1D_NONEMPTY, ONE_D,
                                  lambda x: F.adaptive_avg_pool1d(x, 3)),
    "torch.nn.functional.adaptive_avg_pool2d": (SIDES_2D, TWO_D,
                                                lambda x: F.adaptive_avg_pool2d(x, (2, 3))),
    "torch.nn.functional.adaptive_max_pool1d": (LENGTHS_1D_NONEMPTY, ONE_D,
                                                lambda x: F.adaptive_max_pool1d(x, 4)),
    "torch.nn.functional.adaptive_max_pool1d_with_indices": (
        LENGTHS_1D_NONEMPTY, ONE_D, lambda x: F.adaptive_max_pool1d_with_indices(x, 2)),
    "torch.nn.functional.adaptive_max_pool2d": (SIDES_2D, TWO_D,
                                                lambda x: F.adaptive_max_pool2d(x, 2)),
    "torch.nn.functional.adaptive_max_pool2d_with_indices": (
        SIDES_2D, TWO_D, lambda x: F.adaptive_max_pool2d_with_indices(x, (3, 2))),
}


@pytest.mark.parametrize("name", sorted(e.name for e in _registry.entries()
                                        if e.family == "pooling"))
def test_every_registered_pooling_op_equals_the_loop(name, dtype):
    assert name in OP_CASES, f"{name} is registered as a pooling op but has no case here"
    sizes, dims, f = OP_CASES[name]
    check(f, examples(sizes, 3, dtype), dims, dynamic=tuple(range(2, len(dims) + 1)))


# ---------------------------------------------------------------- max


@st.composite
def max_geometry(draw, n):
    """(kernel, stride, padding, dilation) per dimension, within PyTorch's rules
    (padding at most half the kernel) and outside its all-padding-window bug."""
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(n))
    stride = draw(st.one_of(st.none(), st.tuples(*[st.integers(1, 3)] * n)))
    dilation = tuple(draw(st.integers(1, 3)) for _ in range(n))
    padding = tuple(0 if d > 1 else draw(st.integers(0, k // 2))
                    for k, d in zip(kernel, dilation))
    return kernel, stride, padding, dilation


@given(lengths=LENGTHS, geometry=max_geometry(1), ceil_mode=st.booleans(),
       return_indices=st.booleans(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_max_pool1d_equals_the_loop(lengths, geometry, ceil_mode, return_indices, dtype,
                                    seed):
    kernel, stride, padding, dilation = geometry
    check(lambda x: F.max_pool1d(x, kernel, stride, padding, dilation, ceil_mode,
                                 return_indices),
          examples(lengths, 3, dtype, seed), ONE_D)


@given(sides=SIDES, geometry=max_geometry(2), ceil_mode=st.booleans(),
       return_indices=st.booleans(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_max_pool2d_equals_the_loop(sides, geometry, ceil_mode, return_indices, dtype, seed):
    # The indices are h * W_i + w in each example's own width W_i.
    kernel, stride, padding, dilation = geometry
    check(lambda x: F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode,
                                 return_indices),
          examples(sides, 2, dtype, seed), TWO_D, dynamic=(2, 3))


def test_max_pool2d_indices_with_static_height_and_dynamic_width(dtype):
    xs = examples([(4, 5), (4, 1), (4, 0), (4, 8)], 2, dtype)
    check(lambda x: F.max_pool2d(x, 2, 1, 1, return_indices=True), xs, (False, False, True),
          dynamic=(3,))


def test_max_pool_modules_and_batch_of_one(dtype):
    pool = torch.nn.MaxPool1d(3, stride=2, padding=1, return_indices=True)
    for lengths in ([6], [0], [1], [4, 4], [7, 2, 0, 11]):
        check(pool, examples(lengths, 3, dtype), ONE_D)
    check(torch.nn.MaxPool2d((2, 3), ceil_mode=True), examples([(5, 4), (2, 3)], 3, dtype),
          TWO_D, dynamic=(2, 3))


# ---------------------------------------------------------------- average


@st.composite
def avg_geometry(draw, n):
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(n))
    stride = draw(st.one_of(st.none(), st.tuples(*[st.integers(1, 3)] * n)))
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    return kernel, stride, padding


@given(lengths=LENGTHS, geometry=avg_geometry(1), ceil_mode=st.booleans(),
       count_include_pad=st.booleans(), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_avg_pool1d_equals_the_loop(lengths, geometry, ceil_mode, count_include_pad, dtype,
                                    seed):
    kernel, stride, padding = geometry
    check(lambda x: F.avg_pool1d(x, kernel, stride, padding, ceil_mode, count_include_pad),
          examples(lengths, 3, dtype, seed), ONE_D)


@given(sides=SIDES, geometry=avg_geometry(2), ceil_mode=st.booleans(),
       count_include_pad=st.booleans(), divisor_override=st.sampled_from([None, 1, 3]),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_avg_pool2d_equals_the_loop(sides, geometry, ceil_mode, count_include_pad,
                                    divisor_override, dtype, seed):
    kernel, stride, padding = geometry
    check(lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad,
                                 divisor_override),
          examples(sides, 2, dtype, seed), TWO_D, dynamic=(2, 3))


def test_avg_pool_modules_and_batch_of_one(dtype):
    pool = torch.nn.AvgPool1d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
    for lengths in ([6], [0], [1], [4, 4], [7, 2, 0, 11]):
        check(pool, examples(lengths, 3, dtype), ONE_D)
    check(torch.nn.AvgPool2d(2, padding=1), examples([(5, 4), (2, 3)], 3, dtype), TWO_D,
          dynamic=(2, 3))


def test_avg_pool_window_counts_are_each_examples_own():
    # A window that overhangs an example's end divides by the example's count, not
    # by the padded batch's: example 0 (length 2) with kernel 3 and ceil_mode.
    xb = MaskedBatch.fromlist([torch.ones(1, 1, 2), torch.ones(1, 1, 7)], (False, True))
    out = F.avg_pool1d(xb, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    first = next(out.examples())
    assert first.tolist() == F.avg_pool1d(torch.ones(1, 1, 2), 3, 2, 1, ceil_mode=True,
                                          count_include_pad=False).tolist()


# ---------------------------------------------------------------- power-average


@pytest.mark.parametrize("norm_type", [1, 2, 3.5, float("inf")])
def test_lp_pool_equals_the_loop(norm_type, dtype):
    xs = [x.abs() + 0.1 for x in examples([6, 0, 1, 3, 9], 3, dtype)]  # p-th roots of > 0
    check(lambda x: F.lp_pool1d(x, norm_type, 2, ceil_mode=True), xs, ONE_D)
    check(torch.nn.LPPool1d(norm_type, 3, stride=1), xs, ONE_D)
    sides = [x.abs() + 0.1 for x in examples([(3, 4), (1, 2), (5, 5)], 3, dtype)]
    check(lambda x: F.lp_pool2d(x, norm_type, 2), sides, TWO_D, dynamic=(2, 3))


def test_lp_pool_gives_no_gradient_to_an_example_without_output(dtype):
    # Examples shorter than the window have no output in the loop, so a zero gradient;
    # in the batch their values still go through pow(norm_type), whose backward must
    # not turn that zero into NaN (negative values to a fractional power).
    xs = examples([6, 2, 1, 4], 3, dtype)
    xs = [x.abs() + 0.1 if x.size(2) >= 3 else -x.abs() - 0.1 for x in xs]
    check(lambda x: F.lp_pool1d(x, 3.5, 3, stride=1), xs, ONE_D)
    sides = examples([(3, 4), (1, 2), (2, 5)], 3, dtype)
    sides = [x.abs() + 0.1 if min(x.shape[2:]) >= 2 else -x.abs() - 0.1 for x in sides]
    check(lambda x: F.lp_pool2d(x, 1.5, 2), sides, TWO_D, dynamic=(2, 3))


# ---------------------------------------------------------------- adaptive


def adaptive(kind, n, output_size, return_indices):
    """Adaptive ``kind`` ('avg' or 'max') pooling over ``n`` dimensions, per example."""
    if kind == "avg":
        pool = F.adaptive_avg_pool1d if n == 1 else F.adaptive_avg_pool2d
        return lambda x: pool(x, output_size)
    pool = F.adaptive_max_pool1d if n == 1 else F.adaptive_max_pool2d
    return lambda x: pool(x, output_size, return_indices)


NONEMPTY = st.lists(st.one_of(st.integers(1, 8), st.integers(20, 40)), min_size=1, max_size=5)


@given(lengths=NONEMPTY, output_size=st.integers(1, 6), kind=st.sampled_from(["avg", "max"]),
       return_indices=st.booleans(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_adaptive_pool1d_equals_the_loop(lengths, output_size, kind, return_indices, dtype,
                                         seed):
    # Windows come from each example's own length; output sizes are static.
    check(adaptive(kind, 1, output_size, return_indices), examples(lengths, 3, dtype, seed),
          ONE_D)


@given(sides=SIDES, output_size=st.tuples(st.one_of(st.none(), st.integers(1, 4)),
                                          st.one_of(st.none(), st.integers(1, 4))),
       kind=st.sampled_from(["avg", "max"]), return_indices=st.booleans(),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_adaptive_pool2d_equals_the_loop(sides, output_size, kind, return_indices, dtype, seed):
    # None keeps a dimension (and its dynamic sizes); an int makes it static.
    dynamic = tuple(d for d, s in zip((2, 3), output_size) if s is None)
    check(adaptive(kind, 2, output_size, return_indices), examples(sides, 2, dtype, seed),
          TWO_D, dynamic=dynamic)


def test_adaptive_pool_output_dims(dtype):
    xb = batch(examples([(3, 4), (1, 2)], 2, dtype), TWO_D)
    assert F.adaptive_avg_pool2d(xb, (2, 3)).dims == (False, False, False)
    assert F.adaptive_avg_pool2d(xb, (None, 3)).dims == (False, True, False)
    assert F.adaptive_avg_pool2d(xb, (None, 3)).lengths()[:, 0].tolist() == [3, 1]


def test_adaptive_pool_modules(dtype):
    xs = examples([6, 1, 3, 9], 3, dtype)
    check(torch.nn.AdaptiveAvgPool1d(4), xs, ONE_D)
    check(torch.nn.AdaptiveMaxPool1d(2, return_indices=True), xs, ONE_D)


# ---------------------------------------------------------------- a conv stack


def test_conv_relu_max_pool_stack_equals_the_loop(dtype):
    # The benchmark's model (benchmarks/nn_conv.py), on a small scale.
    model = torch.nn.Sequential(torch.nn.Conv1d(4, 8, 5, padding=2), torch.nn.ReLU(),
                                torch.nn.MaxPool1d(2), torch.nn.Conv1d(8, 4, 3, padding=1),
                                torch.nn.ReLU(), torch.nn.AvgPool1d(2)).to(dtype)
    xs = examples([9, 1, 0, 17, 4, 6], 4, dtype)
    mb_assert(loop_or_empty(model), [xs], [batch(xs, ONE_D)], len(xs),
              params=list(model.parameters()))


# ---------------------------------------------------------------- padding never leaks


@pytest.mark.parametrize("padding_value", [float("inf"), float("-inf"), 1e30])
@pytest.mark.parametrize("pool", [
    lambda x: F.max_pool1d(x, 3, 2, 1, ceil_mode=True),
    lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    lambda x: F.adaptive_max_pool1d(x, 3),
], ids=["max", "avg", "adaptive_max"])
def test_padding_values_reach_neither_outputs_nor_gradients(pool, padding_value):
    xs = [x.requires_grad_() for x in examples([4, 1, 6], 2)]
    xb = MaskedBatch.fromlist(xs, ONE_D, padding_value=padding_value)
    out = pool(xb)
    for y, x in zip(out.examples(), xs):
        torch.testing.assert_close(y, pool(x))
    # NaN gradients arriving at the output's padding are dropped.
    grad = torch.full_like(out.data, float("nan")).where(~out.mask, torch.ones(()))
    batch_grads = torch.autograd.grad(out.data, xs, grad)
    loop_grads = torch.autograd.grad(sum(pool(x).sum() for x in xs), xs)
    for got, expected in zip(batch_grads, loop_grads):
        torch.testing.assert_close(got, expected)


# ---------------------------------------------------------------- one batched call


@pytest.mark.parametrize("pool, sizes, dims", [
    (lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True), [3, 9, 1, 0, 5], ONE_D),
    (lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False), [3, 9, 1, 0, 5], ONE_D),
    (lambda x: F.max_pool2d(x, 2), [(3, 4), (5, 2), (1, 6)], TWO_D),
    (lambda x: F.avg_pool2d(x, 2, ceil_mode=True), [(3, 4), (5, 2), (1, 6)], TWO_D),
], ids=["max_pool1d", "avg_pool1d", "max_pool2d", "avg_pool2d"])
def test_the_batch_runs_one_pooling_call(pool, sizes, dims):
    with CountOps() as ops:
        pool(batch(examples(sizes, 2), dims))
    assert sum("pool" in name for name in ops.names) == 1, ops.names


# ---------------------------------------------------------------- errors


def test_adaptive_pooling_of_an_empty_example_raises_naming_it():
    xb = batch(examples([3, 0, 2], 2), ONE_D)
    with pytest.raises(ValueError, match=r"adaptive_max_pool1d: example 1 has size 0 in dynamic "
                                         r"dimension 2; adaptive pooling of an empty input is "
                                         r"undefined"):
        F.adaptive_max_pool1d(xb, 2)
    with pytest.raises(ValueError, match=r"torch.adaptive_avg_pool1d: example 1 has size 0"):
        F.adaptive_avg_pool1d(xb, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("pool", "sizes", "dims"), [
    (F.adaptive_avg_pool1d, [3, 0, 1], ONE_D),
    (F.adaptive_avg_pool2d, [(2, 3), (0, 2), (1, 1)], TWO_D),
])
def test_adaptive_average_to_size_one_of_an_empty_example_is_nan_as_alone(pool, sizes, dims,
                                                                          dtype):
    # PyTorch's op is then a mean over the spatial dimensions, NaN for an empty input
    # (any other output size raises): the batch gives each example what it gets alone.
    xs = examples(sizes, 2, dtype=dtype)
    mb_assert(lambda x: pool(x, 1) * 2, [xs], [batch(xs, dims)], len(xs))
    assert list(pool(batch(xs, dims), 1).examples())[1].isnan().all()


def test_pooling_refuses_dynamic_channels_and_wrong_ranks():
    xb = MaskedBatch.fromlist([torch.rand(1, c, 5) for c in (2, 3)], (True, False))
    with pytest.raises(ValueError, match=r"max_pool1d: dimension 1 of the input \(the channels\) "
                                         r"is dynamic"):
        F.max_pool1d(xb, 2)
    with pytest.raises(ValueError, match=r"avg_pool1d: dimension 1 of the input \(the channels\) "
                                         r"is dynamic"):
        F.avg_pool1d(xb, 2)
    xb = batch(examples([4, 2], 2), ONE_D)
    with pytest.raises(ValueError, match=r"max_pool2d: each example must be \(1, channels, "
                                         r"height, width\) \(rank 4\), got rank 3"):
        F.max_pool2d(xb, 2)


def test_pytorch_argument_errors_are_pytorchs():
    # Checks on the arguments alone are the loop's: the one batched call raises them.
    xb = batch(examples([4, 2], 2), ONE_D)
    with pytest.raises(RuntimeError, match="at most half of"):
        F.max_pool1d(xb, 2, padding=2)
    with pytest.raises(ValueError, match=r"adaptive_avg_pool2d: output_size must be an int or "
                                         r"2 values, got \(1, 2, 3\)"):
        F.adaptive_avg_pool2d(batch(examples([(2, 2), (3, 1)], 2), TWO_D), (1, 2, 3))


def test_unimplemented_pooling_ops_name_the_op():
    xb = batch(examples([4, 2], 2), ONE_D)
    with pytest.raises(NotImplementedError, match="max_unpool1d is not implemented for "
                                                  "MaskedBatch"):
        F.max_unpool1d(xb, torch.zeros(2, 2, 2, dtype=torch.long), 2)


# ---------------------------------------------------------------- CUDA


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pooling_on_cuda_equals_the_loop():
    xs = [x.cuda() for x in examples([7, 0, 1, 3, 12], 4)]
    check(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True), xs, ONE_D)
    check(lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), xs,
          ONE_D)
    check(lambda x: F.adaptive_max_pool1d(x, 2), [x for x in xs if x.size(2)], ONE_D)
