"""Reductions of ``MaskedBatch`` against the per-example loop (values and gradients).

Dimension numbers are per example: dimension 0 is each example's own size-one
batch dimension.  Padding holds NaN, so any leak into a real value or a
gradient shows up as a mismatch.
"""

from __future__ import annotations

import math

import pytest
import torch
from family_cases import NAN, NONEMPTY_LAYOUTS, batch_of, check
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists

import matchbox
from matchbox import MaskedBatch
from matchbox._registry import entries
from matchbox.testing import mb_assert, mb_rand

# The loop itself warns for var/std of one element (n - correction <= 0).
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning")


# Layouts: (dims, example shapes).  Every length is at least one here; empty
# examples have their own tests below.
LAYOUTS = NONEMPTY_LAYOUTS

# Per-example dim arguments: single static, single dynamic, negative, several, all.
DIM_ARGS = [1, 2, -1, -2, (1, 2), (-1, 1), None]


def _reduce(name, method):
    """``torch.name(x, dim, keepdim)`` or ``x.name(dim, keepdim)``; dim=None leaves dim out."""

    def f(x, dim, keepdim):
        kwargs = {} if dim is None else {"dim": dim}
        if dim is not None or keepdim:
            kwargs["keepdim"] = keepdim
        if dim is None and keepdim and name in ("sum", "nansum", "mean", "nanmean", "logsumexp"):
            kwargs["dim"] = None
        if method:
            return getattr(x, name)(**kwargs)
        return getattr(torch, name)(x, **kwargs)

    return f


def check_function_and_method(name, dim, keepdim, examples, batch):
    """``torch.name(x, dim, keepdim)`` and ``x.name(dim=dim, keepdim=keepdim)`` equal the loop."""
    check(lambda x: getattr(torch, name)(x, dim, keepdim), examples, batch)
    check(lambda x: getattr(x, name)(dim=dim, keepdim=keepdim), examples, batch)


# op name -> which dim arguments torch accepts for it (multi = a tuple of dims).
MULTI_DIM_OPS = ["sum", "nansum", "mean", "nanmean", "amax", "amin", "logsumexp", "var", "std"]
SINGLE_DIM_OPS = ["prod", "argmax", "argmin"]


def _accepts(name, dim, keepdim):
    """Whether torch itself takes these arguments (the loop must not fail)."""
    if isinstance(dim, tuple) and name in SINGLE_DIM_OPS:
        return False
    if dim is None and name == "logsumexp":  # dim is required
        return False
    return not (dim is None and keepdim and name == "prod")  # no keepdim without dim


CASES = [
    pytest.param(name, dim, id=f"{name}-{dim}")
    for name in MULTI_DIM_OPS + SINGLE_DIM_OPS
    for dim in DIM_ARGS
    if _accepts(name, dim, False)
]


@pytest.mark.parametrize("name, dim", CASES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_reduction_matches_loop(name, dim, layout, dtype):
    # Both forms (torch.name(x, ...) and x.name(...)), with and without keepdim.
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    for keepdim in (False, True):
        if not _accepts(name, dim, keepdim):
            continue
        for method in (False, True):
            op = _reduce(name, method)
            check(lambda x, op=op, keepdim=keepdim: op(x, dim, keepdim), examples, batch)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dim", [1, 2, -1, (1, 2), None])
@pytest.mark.parametrize(
    "norm",
    [
        pytest.param(lambda x, d, k: torch.norm(x, dim=d, keepdim=k), id="torch.norm"),
        pytest.param(lambda x, d, k: x.norm(1, d, k), id="x.norm-p1"),
        pytest.param(lambda x, d, k: torch.norm(x, p=math.inf, dim=d, keepdim=k), id="norm-inf"),
        pytest.param(lambda x, d, k: torch.linalg.vector_norm(x, 2, d, k), id="vector_norm-2"),
        pytest.param(lambda x, d, k: torch.linalg.vector_norm(x, ord=1, dim=d, keepdim=k),
                     id="vector_norm-1"),
        pytest.param(lambda x, d, k: torch.linalg.vector_norm(x, math.inf, d, k),
                     id="vector_norm-inf"),
        pytest.param(lambda x, d, k: torch.linalg.vector_norm(x, -math.inf, d, k),
                     id="vector_norm-minus-inf"),
        pytest.param(lambda x, d, k: torch.linalg.vector_norm(x, -1, d, k), id="vector_norm-minus-1"),
        pytest.param(lambda x, d, k: x.norm(0.5, d, k), id="x.norm-p0.5"),
    ],
)
def test_norm_matches_loop(norm, dim, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    for keepdim in (False, True):
        check(lambda x, keepdim=keepdim: norm(x, dim, keepdim), examples, batch)


def test_norm_default_is_the_frobenius_norm_of_each_example():
    examples, batch = batch_of([(3, 4), (1, 4)], (True, False))
    check(lambda x: x.norm(), examples, batch)
    check(lambda x: torch.norm(x, "fro", (1, 2)), examples, batch)


@pytest.mark.parametrize(
    "var",
    [
        pytest.param(lambda x: torch.var(x, 1), id="var-dim"),
        pytest.param(lambda x: x.var(1, unbiased=False), id="var-unbiased-kw"),
        pytest.param(lambda x: torch.var(x, 1, False), id="var-unbiased-positional"),
        pytest.param(lambda x: torch.var(x, 1, True, True), id="var-unbiased-keepdim-positional"),
        pytest.param(lambda x: x.var(dim=(1, 2), correction=0), id="var-correction-0"),
        pytest.param(lambda x: x.var(1, correction=2, keepdim=True), id="var-correction-2"),
        pytest.param(lambda x: torch.var(x, 2, correction=3), id="var-static-correction-3"),
        pytest.param(lambda x: x.var(), id="var-all"),
        pytest.param(lambda x: torch.var(x, False), id="var-all-unbiased-positional"),
        pytest.param(lambda x: torch.std(x, 1), id="std-dim"),
        pytest.param(lambda x: x.std(1, unbiased=False, keepdim=True), id="std-unbiased-kw"),
        pytest.param(lambda x: x.std(-2, correction=0), id="std-correction-0"),
        pytest.param(lambda x: torch.std(x), id="std-all"),
    ],
)
def test_var_and_std_variants_match_loop(var, dtype):
    # Lengths 1 and 2 make the divisor n - correction zero or negative: torch
    # gives NaN or inf there (it divides by max(0, n - correction)).
    examples, batch = batch_of([(4, 3), (1, 3), (2, 3), (6, 3)], (True, False), dtype)
    check(var, examples, batch)


def test_var_with_correction_above_the_length_gives_inf_as_in_the_loop():
    examples, batch = batch_of([(2, 3), (5, 3)], (True, False))
    check(lambda x: x.var(1, correction=3), examples, batch)
    assert torch.isinf(next(torch.var(batch, 1, correction=3).examples())).all()


def test_var_rejects_unexpected_arguments():
    _, batch = batch_of([(2, 3)], (True, False))
    with pytest.raises(TypeError, match=r"Tensor.var: unexpected arguments \['bogus'\]"):
        batch.var(1, bogus=1)


# ---------------------------------------------------------------- max / min


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dim", [1, 2, -1])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_with_dim_give_values_and_indices(name, dim, keepdim, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check_function_and_method(name, dim, keepdim, examples, batch)
    result = getattr(batch, name)(dim)
    values, indices = result
    assert result.values is values and result.indices is indices
    assert indices.dtype == torch.int64


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_without_dim_reduce_each_whole_example(name, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(lambda x: getattr(torch, name)(x), examples, batch)
    check(lambda x: getattr(x, name)(), examples, batch)


@pytest.mark.parametrize("name", ["max", "min"])
def test_binary_max_min_are_elementwise(name, dtype):
    shapes = [(3, 4), (0, 4), (5, 4)]
    xs, xb = batch_of(shapes, (True, False), dtype)
    ys, yb = batch_of(shapes, (True, False), dtype)
    other = torch.randn(4, dtype=dtype, requires_grad=True)
    mb_assert(lambda x, y: getattr(torch, name)(x, y), [xs, ys], [xb, yb], 3)
    mb_assert(lambda x: getattr(x, name)(other), [xs], [xb], 3, params=[other])
    mb_assert(lambda x: getattr(torch, name)(x, other=other), [xs], [xb], 3, params=[other])
    mb_assert(lambda x: getattr(torch, name)(other, x), [xs], [xb], 3, params=[other])


def test_max_ties_with_the_padding_fill_pick_a_real_position():
    # -inf is the fill for max over a dynamic dimension; a real -inf must still
    # be found at a real index.
    examples = [torch.tensor([[[-math.inf], [-math.inf]]]), torch.tensor([[[1.0], [2.0], [0.0]]])]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=NAN)
    values, indices = batch.max(1)
    for (v, i), x in zip(zip(values.examples(), indices.examples()), examples):
        assert torch.equal(v, x.max(1).values)
        assert int(i) < x.size(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("f", [
    pytest.param(lambda x: x.amax(1), id="amax"),
    pytest.param(lambda x: (-x).amin(1), id="amin"),
    pytest.param(lambda x: x.max(), id="max-of-everything"),
    pytest.param(lambda x: torch.amax(x, (1, 2), keepdim=True), id="amax-two-dims"),
])
def test_extreme_ties_with_the_padding_fill_share_the_gradient_among_real_positions(f, dtype):
    # An example whose real values all equal the fill (-inf for a max): torch
    # splits the gradient over every tied position, and the padding must not take
    # a share (found in a user trial: 1/3 each instead of 1/2).
    examples = [torch.full((1, 2, 1), -math.inf, dtype=dtype),
                torch.tensor([[[1.0], [2.0], [2.0]]], dtype=dtype),
                torch.tensor([[[-math.inf]]], dtype=dtype)]
    mb_assert(f, [examples], [MaskedBatch.fromlist(examples, (True, False))], 3)


# ---------------------------------------------------------------- argmax / argmin


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dim", [1, 2, -1, None])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin_match_loop(name, dim, keepdim, layout, dtype):
    # dim=None indexes each example's own flattened shape, not the padded one.
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check_function_and_method(name, dim, keepdim, examples, batch)


def test_argmax_over_everything_indexes_each_examples_flattened_shape():
    a = torch.zeros(1, 2, 3)
    a[0, 1, 2] = 5.0  # flat index 5 in a (2, 3) example
    b = torch.zeros(1, 3, 3)
    b[0, 2, 0] = 5.0  # flat index 6 in a (3, 3) example
    batch = MaskedBatch.fromlist([a, b], (True, False))
    assert [int(i) for i in batch.argmax().examples()] == [5, 6]
    c = torch.zeros(1, 2, 3)
    c[0, 1, 1] = 5.0  # flat index 4 in a (2, 3) example, padded to (2, 4) below
    d = torch.zeros(1, 2, 4)
    batch = MaskedBatch.fromlist([c, d], (False, True))
    assert [int(i) for i in batch.argmax().examples()] == [4, 0]


# ---------------------------------------------------------------- logsumexp, sum, prod


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dim", [1, 2, -1, (1, 2)])
def test_logsumexp_matches_loop(layout, dim, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(lambda x: torch.logsumexp(x, dim), examples, batch)
    check(lambda x: x.logsumexp(dim, keepdim=True), examples, batch)


def test_sum_with_dtype_matches_loop():
    examples, batch = batch_of([(3, 2), (1, 2)], (True, False), torch.float32)
    check(lambda x: x.sum(1, dtype=torch.float64), examples, batch)
    check(lambda x: torch.mean(x, (1, 2), dtype=torch.float64), examples, batch)


def test_mean_over_a_dynamic_dim_with_a_narrower_dtype_keeps_that_dtype():
    # The per-example count had the input's dtype and promoted float32 back to float64.
    examples, batch = batch_of([(3, 2), (1, 2), (0, 2)], (True, False), torch.float64)
    check(lambda x: x.mean(1, dtype=torch.float32), examples, batch)
    check(lambda x: torch.mean(x, (1, 2), keepdim=True, dtype=torch.float32), examples, batch)


def test_nansum_skips_real_nans_and_padding_alike():
    examples = [torch.tensor([[[1.0], [NAN], [2.0]]]), torch.tensor([[[NAN]]]),
                torch.zeros(1, 0, 1)]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=NAN)
    check(lambda x: x.nansum(1), examples, batch)
    check(lambda x: torch.nansum(x), examples, batch)


def test_nanmean_skips_real_nans_and_padding_alike(dtype):
    # Real NaN values count for neither the sum nor the count, and get no gradient;
    # an example of NaN only, or empty, has a nanmean of NaN, as in the loop.
    examples = [torch.tensor([[[1.0], [NAN], [2.0]]], dtype=dtype),
                torch.tensor([[[NAN]]], dtype=dtype), torch.zeros(1, 0, 1, dtype=dtype),
                torch.tensor([[[4.0], [-1.0]]], dtype=dtype)]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=NAN)
    check(lambda x: x.nanmean(1), examples, batch)
    check(lambda x: torch.nanmean(x), examples, batch)
    check(lambda x: torch.nanmean(x, (1, 2), keepdim=True, dtype=torch.float64), examples, batch)


def test_nanmean_of_integers_raises_like_torch():
    batch = MaskedBatch.fromlist([torch.tensor([[1, 2]]), torch.tensor([[3]])], (True,))
    with pytest.raises(RuntimeError, match=r"nanmean\(\): expected input to have floating point"):
        batch.nanmean(1)


def test_prod_of_several_dims_matches_loop():
    # torch.prod takes one dim; composing two prods exercises the dynamic fill of 1.
    examples, batch = batch_of([(3, 2), (1, 2), (2, 2)], (True, False))
    check(lambda x: x.prod(1).prod(1), examples, batch)
    check(lambda x: torch.prod(x), examples, batch)


# ---------------------------------------------------------------- any / all


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dim", [1, 2, -1, None])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("name", ["any", "all"])
def test_any_all_on_comparisons_match_loop(name, dim, keepdim, layout):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims)

    def f(x):
        flags = x > 0
        if dim is None:
            return getattr(flags, name)()
        return getattr(torch, name)(flags, dim, keepdim)

    check(f, examples, batch)


def test_any_all_give_bool_and_use_the_identity_for_padding():
    # Padding of a bool batch is False; `all` must not see it, `any` must not either.
    examples = [torch.tensor([[True, True]]), torch.tensor([[True]]), torch.zeros(1, 0).bool()]
    batch = MaskedBatch.fromlist(examples, (True,))
    assert [bool(v) for v in batch.all(1).examples()] == [True, True, True]
    assert [bool(v) for v in batch.any(1).examples()] == [True, True, False]
    assert batch.all(1).dtype == torch.bool


def test_any_all_of_integer_batches_keep_the_loops_dtype():
    examples = [torch.tensor([[1, 0, 2]], dtype=torch.uint8), torch.tensor([[0]], dtype=torch.uint8)]
    batch = MaskedBatch.fromlist(examples, (True,))
    check(lambda x: x.any(1), examples, batch)
    check(lambda x: torch.all(x), examples, batch)


# ---------------------------------------------------------------- empty examples


ZERO_LENGTHS = [(0, 3), (1, 3), (4, 3)]


@pytest.mark.parametrize(
    "f",
    [
        pytest.param(lambda x: x.sum(1), id="sum"),
        pytest.param(lambda x: torch.sum(x), id="sum-all"),
        pytest.param(lambda x: x.nansum(1), id="nansum"),
        pytest.param(lambda x: x.prod(1), id="prod"),
        pytest.param(lambda x: x.mean(1), id="mean"),
        pytest.param(lambda x: x.nanmean(1), id="nanmean"),
        pytest.param(lambda x: torch.mean(x, (1, 2), keepdim=True), id="mean-all-keepdim"),
        pytest.param(lambda x: x.var(1), id="var"),
        pytest.param(lambda x: x.std(1, correction=0), id="std"),
        pytest.param(lambda x: x.logsumexp(1), id="logsumexp"),
        pytest.param(lambda x: x.norm(dim=1), id="norm"),
        pytest.param(lambda x: (x > 0).any(1), id="any"),
        pytest.param(lambda x: (x > 0).all(1), id="all"),
        pytest.param(lambda x: x.max(2), id="max-over-static"),
        pytest.param(lambda x: x.argmin(2), id="argmin-over-static"),
        pytest.param(lambda x: x.amax(-1), id="amax-over-static"),
    ],
)
def test_reductions_of_zero_length_examples_match_loop(f, dtype):
    # sum -> 0, mean/var -> NaN (compared with equal_nan), and gradients finite.
    examples, batch = batch_of(ZERO_LENGTHS, (True, False), dtype)
    check(f, examples, batch)


def test_mean_of_an_empty_example_is_nan_and_its_gradients_stay_finite():
    weight = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    examples, batch = batch_of(ZERO_LENGTHS, (True, False))
    check(lambda x: (x @ weight).tanh().mean(1), examples, batch, params=[weight])
    leaf = batch.data.detach().requires_grad_()
    means = MaskedBatch(leaf, batch.mask, batch.dims).mean(1)
    assert torch.isnan(next(means.examples())).all()
    matchbox.batch_sum(means.sum(1) * 0 + means.sum(1).nan_to_num()).backward()
    assert torch.isfinite(leaf.grad).all()


@pytest.mark.parametrize(
    "f, op",
    [
        pytest.param(lambda x: x.max(1), "Tensor.max", id="Tensor.max"),
        pytest.param(lambda x: torch.min(x, 1), "torch.min", id="torch.min"),
        pytest.param(lambda x: torch.max(x), "torch.max", id="torch.max-all"),
        pytest.param(lambda x: x.amax(1), "Tensor.amax", id="Tensor.amax"),
        pytest.param(lambda x: torch.amin(x, (1, 2)), "torch.amin", id="torch.amin"),
        pytest.param(lambda x: x.argmax(1), "Tensor.argmax", id="Tensor.argmax"),
        pytest.param(lambda x: torch.argmin(x), "torch.argmin", id="torch.argmin-all"),
        # Norms whose order has no identity (inf, negative) refuse an empty dim too.
        pytest.param(lambda x: x.norm(math.inf, 1), "Tensor.norm", id="Tensor.norm-inf"),
        pytest.param(lambda x: torch.norm(x, -2), "torch.norm", id="torch.norm-minus-2"),
        pytest.param(lambda x: torch.linalg.vector_norm(x, -1, 1), "torch.linalg.vector_norm",
                     id="vector_norm-minus-1"),
    ],
)
def test_max_like_of_an_empty_dynamic_dim_raises_naming_op_and_example(f, op):
    _, batch = batch_of([(2, 3), (0, 3), (1, 3)], (True, False))
    with pytest.raises(IndexError, match=rf"^{op}: example 1 has size 0 in dynamic dimension 1, "
                                         rf"and {op} of an empty dimension is undefined$"):
        f(batch)


def test_max_of_an_empty_example_that_is_not_running_is_not_refused():
    # Under an execution mask (matchbox-control's @batch), only running examples
    # must be non-empty; the others' results are discarded.
    from matchbox._masking import EXECUTION_MASK

    xs, batch = batch_of([(2, 3), (0, 3), (1, 3)], (True, False))
    token = EXECUTION_MASK.set(torch.tensor([True, False, True]))
    try:
        got = batch.amax(1)
    finally:
        EXECUTION_MASK.reset(token)
    for b in (0, 2):
        torch.testing.assert_close(got.data[b:b + 1], xs[b].amax(1))


@pytest.mark.parametrize(
    "f",
    [
        pytest.param(lambda x: x.sum(), id="sum"),
        pytest.param(lambda x: torch.mean(x), id="mean"),
        pytest.param(lambda x: x.prod(), id="prod"),
        pytest.param(lambda x: x.amax(), id="amax"),
        pytest.param(lambda x: torch.max(x), id="max"),
        pytest.param(lambda x: x.argmin(), id="argmin"),
        pytest.param(lambda x: x.norm(), id="norm"),
        pytest.param(lambda x: x.var(correction=0), id="var"),
        pytest.param(lambda x: (x > 0).any(), id="any"),
        pytest.param(lambda x: x.sum(dim=None, keepdim=True), id="sum-keepdim"),
    ],
)
def test_reducing_per_example_scalars_keeps_each_example(f, dtype):
    # Examples of shape (1,): reducing "every dimension" must not reduce the batch.
    examples, batch = batch_of([(), (), ()], (), dtype)
    check(f, examples, batch)
    assert f(batch).data.shape == (3,)


@pytest.mark.parametrize("reduction", [torch.sum, torch.mean, torch.logsumexp, torch.amax,
                                       torch.std, torch.var, torch.linalg.vector_norm])
def test_nan_gradients_at_padding_do_not_reach_real_gradients(reduction, dtype):
    # x.sum(2) is NaN in padding rows, so the gradient arriving at padding
    # positions of the product is 0 * NaN = NaN; the reduction must drop it.
    weight = torch.randn(3, dtype=dtype, requires_grad=True)
    lengths = [3, 1, 2] if reduction is torch.amax else [3, 0, 1]  # amax refuses empties
    examples, batch = batch_of([(n, 3) for n in lengths], (True, False), dtype)
    check(lambda x: reduction(x * x.sum(2, keepdim=True) * weight, dim=1), examples, batch,
          params=[weight])


def test_mean_of_integers_over_a_dynamic_dim_raises_like_torch():
    examples = [torch.tensor([[1, 2]]), torch.tensor([[3]])]
    batch = MaskedBatch.fromlist(examples, (True,))
    with pytest.raises(RuntimeError, match=r"mean\(\): could not infer output dtype"):
        examples[0].mean(1)
    with pytest.raises(RuntimeError, match=r"Tensor.mean: could not infer output dtype. Input "
                                           r"dtype must be either a floating point or complex "
                                           r"dtype. Got: torch.int64"):
        batch.mean(1)
    check(lambda x: x.mean(1, dtype=torch.float64), examples, batch)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "f, op",
    [
        pytest.param(lambda x: x.sum(0), "Tensor.sum", id="sum"),
        pytest.param(lambda x: torch.mean(x, (0, 1)), "torch.mean", id="mean"),
        pytest.param(lambda x: x.var(-3), "Tensor.var", id="var-negative"),
        pytest.param(lambda x: x.max(0), "Tensor.max", id="max"),
        pytest.param(lambda x: torch.argmax(x, 0), "torch.argmax", id="argmax"),
        pytest.param(lambda x: x.logsumexp(0), "Tensor.logsumexp", id="logsumexp"),
        pytest.param(lambda x: x.any(0), "Tensor.any", id="any"),
    ],
)
def test_reducing_over_dimension_zero_raises(f, op):
    _, batch = batch_of([(2, 3), (1, 3)], (True, False))
    with pytest.raises(ValueError, match=rf"^{op}: cannot reduce over dimension 0, the batch "
                                         r"dimension of each example; reduce across examples "
                                         r"with matchbox.batch_sum or matchbox.batch_mean$"):
        f(batch)


def test_reducing_over_an_out_of_range_dim_raises():
    _, batch = batch_of([(2, 3)], (True, False))
    with pytest.raises(IndexError, match=r"Tensor.sum: dimension 3 is out of range for examples "
                                         r"of rank 3 \(expected to be in \[-3, 2\]\)"):
        batch.sum(3)


def test_norm_with_an_unsupported_order_or_out_raises():
    _, batch = batch_of([(2, 3)], (True, False))
    with pytest.raises(NotImplementedError, match=r"^torch.norm: order 'nuc' is not supported$"):
        torch.norm(batch, p="nuc")
    with pytest.raises(NotImplementedError, match=r"^torch.norm: out= is not supported for "
                                                  r"batches$"):
        torch.norm(batch, dim=1, out=torch.empty(1, 3, dtype=torch.float64))


@pytest.mark.parametrize("dim", DIM_ARGS)
@pytest.mark.parametrize("layout", [*LAYOUTS, "with-an-empty-example"])
def test_count_nonzero_matches_loop(layout, dim, dtype):
    # (A user trial found it unsupported.)  NaN padding is not zero: it must not count.
    dims, shapes = LAYOUTS.get(layout, ((True, False), [(3, 4), (0, 4), (1, 4)]))
    examples, batch = batch_of(shapes, dims, dtype,
                               values=lambda shape: torch.randint(-1, 2, (1, *shape)))
    kwargs = {} if dim is None else {"dim": dim}
    check(lambda x: torch.count_nonzero(x, **kwargs), examples, batch)
    check(lambda x: x.count_nonzero(**kwargs), examples, batch)


# ---------------------------------------------------------------- registry coverage


def test_every_registered_reduction_is_covered_here():
    # A newly registered reduction must get a test in this file.
    tested = {"sum", "nansum", "prod", "mean", "nanmean", "var", "std", "max", "min", "amax", "amin",
              "argmax", "argmin", "logsumexp", "norm", "linalg_vector_norm", "any", "all",
              "count_nonzero", "_is_all_true",  # _is_all_true: test_is_all_true.py
              "linalg_norm", "linalg_matrix_norm",  # test_linalg_norms.py
              "var_mean", "std_mean", "aminmax",  # test_reduction_pairs.py
              "renorm",  # test_linalg_norms.py
              "cov", "corrcoef"}  # test_covariance.py
    registered = {getattr(e.func, "__name__", e.name) for e in entries() if e.family == "reduction"}
    assert registered <= tested, sorted(registered - tested)


# ---------------------------------------------------------------- hypothesis


@given(example_lists(dims=(True, False)), st.sampled_from(["sum", "mean", "var", "logsumexp",
                                                          "norm", "nansum", "nanmean"]),
       st.sampled_from([1, 2, -1, (1, 2)]), st.booleans())
def test_reductions_on_random_batches_match_loop(case, name, dim, keepdim):
    examples, batch = case
    check(lambda x: getattr(x, name)(dim=dim, keepdim=keepdim), examples, batch)


@given(example_lists(dims=(True, True), min_length=1),
       st.sampled_from(["amax", "amin", "argmax", "argmin", "max", "min"]),
       st.sampled_from([1, 2, -1, None]))
def test_max_like_on_random_two_dynamic_batches_match_loop(case, name, dim):
    examples, batch = case
    if dim is None:
        check(lambda x: getattr(x, name)(), examples, batch)
    else:
        check(lambda x: getattr(x, name)(dim), examples, batch)


@given(example_lists(dims=(False, True), min_length=0))
def test_mean_and_std_over_the_dynamic_dim_divide_by_own_length(case):
    examples, batch = case
    check(lambda x: torch.mean(x, -1), examples, batch)
    check(lambda x: torch.std(x, -1, keepdim=True), examples, batch)


# ---------------------------------------------------------------- batch-level reduction


def _loop_and_batch_grads(loss_of, examples, weight, batched_backward):
    """Gradients of the loop's losses (backward per example) and of the batched loss."""
    loop_xs = [x.detach().clone().requires_grad_() for x in examples]
    loop_w = weight.detach().clone().requires_grad_()
    losses = []
    for x in loop_xs:
        loss = loss_of(x, loop_w)
        loss.backward()
        losses.append(loss.detach())
    batch_xs = [x.detach().clone().requires_grad_() for x in examples]
    batch_w = weight.detach().clone().requires_grad_()
    xb = MaskedBatch.fromlist(batch_xs, (True, False), padding_value=NAN)
    loss = loss_of(xb, batch_w)
    assert loss.dims == ()
    batched_backward(loss)
    return losses, loss, loop_xs, loop_w, batch_xs, batch_w


def _per_example_loss(x, w):
    # Row-wise work with a shared weight, then reductions to a scalar per example.
    return ((x @ w).tanh() * x.sum(2, keepdim=True)).sum(2).mean(1).mul(2).sum()


@pytest.mark.parametrize(
    "backward, scale",
    [
        pytest.param(lambda loss: loss.backward(), 1.0, id="MaskedBatch.backward"),
        pytest.param(lambda loss: matchbox.batch_sum(loss).backward(), 1.0, id="batch_sum"),
        # The mean over 3 examples, times 3: the loop's summed gradients again.
        pytest.param(lambda loss: (matchbox.batch_mean(loss) * 3).backward(), 1.0,
                     id="batch_mean"),
        pytest.param(lambda loss: matchbox.batch_mean(loss).backward(), 1 / 3,
                     id="batch_mean-scaled"),
    ],
)
def test_batch_level_backward_equals_loop_of_backwards(backward, scale):
    examples = [torch.randn(1, n, 3, dtype=torch.float64) for n in (4, 1, 6)]
    weight = torch.randn(3, 3, dtype=torch.float64)
    losses, loss, loop_xs, loop_w, batch_xs, batch_w = _loop_and_batch_grads(
        _per_example_loss, examples, weight, backward)
    torch.testing.assert_close(batch_w.grad, loop_w.grad * scale)
    for bx, lx in zip(batch_xs, loop_xs):
        torch.testing.assert_close(bx.grad, lx.grad * scale)
    torch.testing.assert_close(matchbox.batch_sum(loss), torch.stack(losses).sum())
    torch.testing.assert_close(matchbox.batch_mean(loss), torch.stack(losses).mean())


def test_backward_with_an_empty_example_keeps_gradients_finite():
    # The empty example's loss is NaN (a mean over nothing); its gradients are
    # zero-sized in the loop and must not poison the shared weight.
    examples = [torch.randn(1, n, 3, dtype=torch.float64) for n in (4, 0, 2)]
    weight = torch.randn(3, 3, dtype=torch.float64)
    losses, loss, loop_xs, loop_w, batch_xs, batch_w = _loop_and_batch_grads(
        _per_example_loss, examples, weight, lambda loss: loss.backward())
    assert torch.isnan(losses[1]) and torch.isfinite(loop_w.grad).all()
    torch.testing.assert_close(batch_w.grad, loop_w.grad)
    for bx, lx in zip(batch_xs, loop_xs):
        torch.testing.assert_close(bx.grad, lx.grad)
    torch.testing.assert_close(matchbox.batch_sum(loss), torch.stack(losses).sum(),
                               equal_nan=True)


def test_batch_sum_of_a_batch_with_dynamic_dims_sums_real_values_only():
    examples, batch = batch_of([(3, 2), (0, 2), (1, 2)], (True, False))
    expected = sum(x.sum() for x in examples)
    torch.testing.assert_close(matchbox.batch_sum(batch), expected)


def test_batch_sum_and_mean_of_plain_tensors_are_sum_and_mean():
    x = torch.randn(1, 5)
    torch.testing.assert_close(matchbox.batch_sum(x), x.sum())
    torch.testing.assert_close(matchbox.batch_mean(x), x.mean())


def test_batch_mean_divides_by_the_batch_size():
    examples, batch = batch_of([(3, 2), (1, 2), (2, 2)], (True, False))
    losses = batch.sum((1, 2))
    expected = torch.stack([x.sum() for x in examples]).mean()
    torch.testing.assert_close(matchbox.batch_mean(losses), expected)


def test_batch_mean_of_a_batch_with_dims_raises():
    _, batch = batch_of([(3, 2)], (True, False))
    with pytest.raises(ValueError, match=r"batch_mean: expected a batch of per-example scalars "
                                         r"\(dims == \(\)\), got dims \(True, False\); reduce "
                                         r"each example first"):
        matchbox.batch_mean(batch)


def test_backward_of_a_batch_with_dims_raises():
    _, batch = batch_of([(3, 2)], (True, False))
    with pytest.raises(RuntimeError, match=r"grad can be implicitly created only for a batch of "
                                           r"per-example scalars"):
        batch.requires_grad_().backward()


NUMPY_SPELLINGS = {
    "x.sum(axis=1)": lambda x: x.sum(axis=1),
    "torch.sum(x, axis=1)": lambda x: torch.sum(x, axis=1),
    "x.mean(axis=-1, keepdims=True)": lambda x: x.mean(axis=-1, keepdims=True),
    "x.amax(axis=1)": lambda x: x.amax(axis=1),
    "x.std(axis=2)": lambda x: x.std(axis=2),
    "x.logsumexp(axis=1)": lambda x: x.logsumexp(axis=1),
    "(x > 0).any(axis=1)": lambda x: (x > 0).any(axis=1),
}


@pytest.mark.parametrize("name", sorted(NUMPY_SPELLINGS))
def test_numpy_keyword_spellings_torch_accepts(name, dtype):
    # torch takes axis= for dim= and keepdims= for keepdim=; so do batches.
    xs, xb = mb_rand(3, (True, 4), (False, 3), dtype=dtype, min_size=2)
    mb_assert(NUMPY_SPELLINGS[name], [xs], [xb], 3)
