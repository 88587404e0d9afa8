"""Scans, sorts, topk, flips and moves of dimensions against the per-example loop.

Parametrised over the registry's ``ordering`` family: every registered op needs
a case in ``CASES`` (or ``NO_DIM_CASES``).  ``mb_assert`` rebuilds float
batches with NaN padding, so padding that reaches a real value or gradient
fails the comparison; values and gradients are compared, int results (indices)
exactly.  Dimension numbers are per example: dimension 0 is each example's own
size-one dimension.
"""

from __future__ import annotations

import math
import re

import family_cases
import pytest
import torch
from family_cases import NAN, assert_every_op_has_a_case, batch_of, check, registered
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists

from matchbox import MaskedBatch
from matchbox._masking import EXECUTION_MASK


def k_for(examples, dim):
    """The largest k (up to 2) that topk along ``dim`` accepts in every example."""
    return min(2, *(x.size(dim) for x in examples))


# Layouts: the families' two-dimensional ones, and a dynamic dimension without padding.
LAYOUTS = {**family_cases.LAYOUTS, "dynamic-without-padding": ((True, False), [(3, 2), (3, 2)])}
DIMS = [0, 1, 2, -1, -2]

# op name -> f(x, dim, k): the ops that work along one dimension.
CASES = {
    "torch.cumsum": lambda x, d, k: torch.cumsum(x, d),
    "Tensor.cumsum": lambda x, d, k: x.cumsum(dim=d),
    "torch.cumprod": lambda x, d, k: torch.cumprod(x, d),
    "Tensor.cumprod": lambda x, d, k: x.cumprod(d),
    "torch.logcumsumexp": lambda x, d, k: torch.logcumsumexp(x, d),
    "Tensor.logcumsumexp": lambda x, d, k: x.logcumsumexp(dim=d),
    "torch.cummax": lambda x, d, k: torch.cummax(x, d),
    "Tensor.cummax": lambda x, d, k: x.cummax(dim=d),
    "torch.cummin": lambda x, d, k: torch.cummin(x, d),
    "Tensor.cummin": lambda x, d, k: x.cummin(d),
    "torch.sort": lambda x, d, k: torch.sort(x, d),
    "Tensor.sort": lambda x, d, k: x.sort(dim=d, descending=True, stable=True),
    "torch.argsort": lambda x, d, k: torch.argsort(x, d, descending=True),
    "Tensor.argsort": lambda x, d, k: x.argsort(dim=d, stable=True),
    "torch.topk": lambda x, d, k: torch.topk(x, k, d),
    "Tensor.topk": lambda x, d, k: x.topk(k, dim=d, largest=False),
    "torch.flip": lambda x, d, k: torch.flip(x, (d,)),
    "torch.roll": lambda x, d, k: torch.roll(x, 2, d),
    "Tensor.roll": lambda x, d, k: x.roll((-1, 3), (d, -1)),
    "Tensor.flip": lambda x, d, k: x.flip(d),
}

# op name -> f(x): ops without a dimension argument (examples of rank 3).
NO_DIM_CASES = {
    "torch.msort": lambda x: torch.msort(x),  # (along each example's dimension 0: size one)
    "Tensor.msort": lambda x: x.msort(),
    "torch.fliplr": lambda x: torch.fliplr(x),
    "Tensor.fliplr": lambda x: x.fliplr(),
    "torch.flipud": lambda x: torch.flipud(x),
    "Tensor.flipud": lambda x: x.flipud(),
    "torch.movedim": lambda x: torch.movedim(x, (1, 2), (2, 1)),
    "Tensor.movedim": lambda x: x.movedim(-1, 1),
    "torch.moveaxis": lambda x: torch.moveaxis(x, 2, -2),
    "Tensor.moveaxis": lambda x: x.moveaxis((1,), (2,)),
    "Tensor.mT": lambda x: x.mT,
    # roll without dims: each example's flattened values rolled.
    "torch.roll": lambda x: torch.roll(x, 3),
    "Tensor.roll": lambda x: x.roll(-5),
}

def _first(x, d):
    """``x``'s first position along ``d`` (none for an example of length zero there)."""
    return x[(slice(None),) * (d % x.dim()) + (slice(0, 1),)]


# op name -> f(x, dim): differences and the trapezoidal rule built on them, along every
# dimension but each example's dimension 0 (whose difference has size zero, which no example
# of a batch can have: refused below).
DIFF_CASES = {
    "torch.diff": lambda x, d: torch.diff(x, dim=d),
    "Tensor.diff": lambda x, d: x.diff(2, d, prepend=_first(x, d) * 2, append=_first(x, d)),
    # The spacing from the example itself (a batch x): gradients through y and x both.
    "torch.trapezoid": lambda x, d: torch.trapezoid(x, x.exp().cumsum(d), dim=d),
    "torch.trapz": lambda x, d: torch.trapz(x, dx=0.5, dim=d),
    "torch.cumulative_trapezoid": lambda x, d: torch.cumulative_trapezoid(x, dim=d),
}

REGISTERED = registered("ordering")


def test_every_registered_ordering_op_has_a_case_here():
    assert_every_op_has_a_case("ordering", REGISTERED, CASES, NO_DIM_CASES, DIFF_CASES)


@pytest.mark.parametrize("name", DIFF_CASES)
@pytest.mark.parametrize("dim", [1, 2, -1, -2])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_diff_matches_loop(name, dim, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(lambda x: DIFF_CASES[name](x, dim), examples, batch)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_diff_of_booleans_and_of_any_order_matches_loop(n):
    examples, batch = batch_of([(4, 2), (1, 2), (0, 2), (6, 2)], (True, False))
    check(lambda x: (x > 0).diff(n, 1), examples, batch)
    check(lambda x: x.diff(n, 1), examples, batch)


def test_trapezoid_with_one_spacing_for_every_example_and_of_integers_matches_loop():
    examples, batch = batch_of([(4, 3), (1, 3), (0, 3), (2, 3)], (True, False))
    spacing = torch.tensor([0.0, 0.5, 2.0], dtype=torch.float64)  # along the static dim
    check(lambda x: torch.trapezoid(x, spacing, dim=2), examples, batch)
    check(lambda x: torch.cumulative_trapezoid(x, spacing), examples, batch)
    # Integers give floats (torch's zeros of an empty example keep the integer dtype, which
    # one batch cannot hold for some examples only: those are left out here).
    examples, batch = batch_of([(4, 3), (1, 3), (2, 3)], (True, False))
    check(lambda x: torch.trapezoid((x > 0).long(), dim=1), examples, batch, check_grad=False)


def test_trapezoid_errors_name_the_op_and_argument():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(ValueError, match=r"torch.trapezoid: dim=0 is each example's own "
                                         r"batch dimension \(size one\), which has no interval"):
        torch.trapezoid(batch, dim=0)
    # A plain x of the wrong number of points (torch's loop raises for such an example), or
    # along a dynamic dimension, where each example has its own number of points.
    points = torch.tensor([0.0, 1.0, 3.0], dtype=batch.dtype)
    with pytest.raises(RuntimeError, match=r"torch.trapezoid: x is a plain tensor of 3 points; "
                                           r"there must be one x value for each sample point "
                                           r"along dimension 2, which has 2$"):
        torch.trapezoid(batch, points, dim=2)
    with pytest.raises(RuntimeError, match=r"torch.cumulative_trapezoid: x is a plain tensor of "
                                           r"3 points; .* along dimension 1, which is dynamic "
                                           r"\(each example has its own number\): give x as a "
                                           r"batch"):
        torch.cumulative_trapezoid(batch, points, dim=1)


def test_diff_errors_name_the_op_and_argument():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(ValueError, match=r"torch.diff: dim=0 is each example's own batch "
                                         r"dimension \(size one\): its difference would have "
                                         r"size zero"):
        torch.diff(batch, dim=0)
    with pytest.raises(RuntimeError, match="Tensor.diff: order must be non-negative but got -1"):
        batch.diff(-1, 1)


@pytest.mark.parametrize("name", [n for n in REGISTERED if n in CASES])
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_ordering_op_along_one_dim_matches_loop(name, dim, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    f, k = CASES[name], k_for(examples, dim)
    check(lambda x: f(x, dim, k), examples, batch)


@pytest.mark.parametrize("name", [n for n in REGISTERED if n in NO_DIM_CASES])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_ordering_op_without_dim_matches_loop(name, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(NO_DIM_CASES[name], examples, batch)


@pytest.mark.parametrize("name", ["sort", "topk", "cummax", "cummin"])
def test_pairs_are_named_tuples_of_batches(name):
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    result = getattr(batch, name)(1) if name != "topk" else batch.topk(1, 1)
    values, indices = result
    assert type(result).__name__ == name
    assert result.values is values and result.indices is indices
    assert isinstance(values, MaskedBatch) and isinstance(indices, MaskedBatch)
    assert indices.dtype == torch.int64


# ---------------------------------------------------------------- scans


def test_cumsum_dtype_and_integer_input_match_loop():
    examples, batch = batch_of([(3, 2), (1, 2), (0, 2)], (True, False), torch.float32)
    check(lambda x: x.cumsum(1, dtype=torch.float64), examples, batch)
    check(lambda x: torch.cumprod(x, 1, dtype=torch.float64), examples, batch)
    ints = [torch.tensor([[1, 2, 3]]), torch.tensor([[4]]), torch.zeros(1, 0, dtype=torch.long)]
    int_batch = MaskedBatch.fromlist(ints, (True,), padding_value=7)
    check(lambda x: x.cumsum(1), ints, int_batch)
    check(lambda x: x.cumprod(-1), ints, int_batch)
    check(lambda x: torch.cummax(x, 1), ints, int_batch)


@pytest.mark.parametrize(
    "scan",
    [
        pytest.param(lambda x: torch.cumsum(x, 1), id="cumsum"),
        pytest.param(lambda x: torch.cumprod(x, 1), id="cumprod"),
        pytest.param(lambda x: torch.logcumsumexp(x, 1), id="logcumsumexp"),
        pytest.param(lambda x: torch.cummax(x, 1).values, id="cummax"),
        pytest.param(lambda x: torch.cummin(x, 1).values, id="cummin"),
    ],
)
@pytest.mark.parametrize("padding", [-1e9, 1e9, 1e300])
def test_nan_gradients_arriving_at_padding_do_not_reach_real_inputs(scan, padding, dtype):
    # The scan's padding holds ``padding`` (below or above every real value, so
    # that cummax/cummin carry a real index into it); the product with x.sum(2)
    # (NaN in padding rows) sends 0 * NaN = NaN to the scan's padding outputs.
    # Without the guard, cumsum and cummax/cummin send it back to real inputs.
    examples, batch = batch_of([(3, 3), (0, 3), (1, 3), (5, 3)], (True, False), dtype)
    check(lambda x: scan(x.nan_to_num(nan=padding)) * x.sum(2, keepdim=True), examples, batch)
    check(lambda x: (lambda y: y * y.sum(2, keepdim=True))(scan(x)), examples, batch)


def test_cumprod_with_real_zeros_overflow_and_inf_matches_loop():
    # cumprod's backward reads its outputs: an output that overflowed to inf at
    # the end of an example must not turn the gradient of its real inputs NaN
    # through the padding after it.
    values = [[2.0, 0.0, 3.0, 0.0, 5.0], [1e200, 1e200, 2.0], [0.0], [math.inf, 2.0], [3.0]]
    examples = [torch.tensor(v, dtype=torch.float64).view(1, -1, 1) for v in values]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=NAN)
    check(lambda x: x.cumprod(1), examples, batch)


def test_logcumsumexp_of_minus_inf_and_empty_examples_matches_loop():
    values = [[-math.inf, -math.inf], [1.0, -math.inf, 2.0], [], [-math.inf]]
    examples = [torch.tensor(v, dtype=torch.float64).view(1, -1) for v in values]
    batch = MaskedBatch.fromlist(examples, (True,), padding_value=NAN)
    check(lambda x: x.logcumsumexp(1), examples, batch)


# ---------------------------------------------------------------- sort / argsort / topk


SPECIAL = [[NAN, 1.0, -math.inf, NAN], [-math.inf], [math.inf, NAN, 2.0], [math.inf, -math.inf]]


@pytest.mark.parametrize("descending", [False, True])
def test_real_nan_and_infinities_sort_before_the_padding(descending, dtype):
    # NaN sorts last ascending and -inf last descending, the padding's fills:
    # the stable sort keeps the real ones in each example's prefix.
    examples = [torch.tensor(v, dtype=dtype).view(1, -1) for v in SPECIAL]
    batch = MaskedBatch.fromlist(examples, (True,), padding_value=NAN)
    check(lambda x: torch.sort(x, dim=1, descending=descending, stable=True), examples, batch)
    check(lambda x: x.argsort(dim=1, descending=descending, stable=True), examples, batch)
    check(lambda x: x.topk(1, 1, largest=descending), examples, batch)
    check(lambda x: x.topk(1, 1, largest=not descending), examples, batch)


@pytest.mark.parametrize("dtype_", [torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("padding", ["min", "max"])
def test_sort_and_topk_of_integers_and_bools_match_loop(dtype_, padding):
    # The padding holds the dtype's extreme values, the same as the fills.
    values = [[3, 0, 2, 1], [1], [2, 0]]
    examples = [torch.tensor(v).to(dtype_).view(1, -1) for v in values]
    info = (torch.iinfo(dtype_) if dtype_ != torch.bool else None)
    fill = (info.min if padding == "min" else info.max) if info else int(padding == "max")
    batch = MaskedBatch.fromlist(examples, (True,), padding_value=fill)
    for descending in (False, True):
        check(lambda x, desc=descending: x.sort(dim=1, descending=desc, stable=True),
              examples, batch)
        check(lambda x, desc=descending: torch.argsort(x, dim=1, descending=desc, stable=True),
              examples, batch)
        if dtype_ == torch.bool:  # the loop's topk refuses bool on CPU: so does the batch
            with pytest.raises(RuntimeError) as loop_error:  # torch's words vary by release
                examples[0].topk(1, 1)
            with pytest.raises(RuntimeError, match=re.escape(str(loop_error.value))):
                batch.topk(1, 1, largest=descending)
        else:
            check(lambda x, desc=descending: x.topk(1, 1, largest=desc), examples, batch)


def test_sort_indices_are_each_examples_own_positions():
    examples = [torch.tensor([[3.0, 1.0, 2.0]]), torch.tensor([[5.0]]), torch.zeros(1, 0)]
    batch = MaskedBatch.fromlist(examples, (True,), padding_value=-math.inf)
    # -inf padding ties with nothing real here, but sorts first ascending: the fill moves it.
    assert [i.tolist() for i in batch.argsort(1).examples()] == [[[1, 2, 0]], [[0]], [[]]]
    assert [i.tolist() for i in batch.argsort(1, descending=True).examples()] == \
        [[[0, 2, 1]], [[0]], [[]]]


@given(example_lists(dims=(True, False)), st.sampled_from([0, 1, 2, -1]), st.booleans())
def test_topk_unsorted_gives_the_loops_values_in_some_order(case, dim, largest):
    # torch leaves the order of sorted=False unspecified: compare the sets.
    examples, batch = case
    k = k_for(examples, dim)

    def f(x):
        values, indices = torch.topk(x, k, dim, largest, sorted=False)
        return values.sort(dim).values, indices.sort(dim).values

    check(f, examples, batch)


def test_topk_along_a_dynamic_dim_gives_a_static_dim_of_size_k():
    examples, batch = batch_of([(4, 3), (2, 3)], (True, False))
    values, indices = batch.topk(2, 1)
    assert values.dims == (False, False) and indices.dims == (False, False)
    assert values.size(1) == 2
    examples, batch = batch_of([(4, 3), (2, 1)], (True, True))
    values, _ = torch.topk(batch, 1, dim=2)
    assert values.dims == (True, False)
    check(lambda x: x.topk(1, 2).values.sum(1), examples, batch)


def test_topk_with_k_zero_on_empty_examples_matches_loop():
    examples, batch = batch_of([(0, 3), (2, 3)], (True, False))
    check(lambda x: x.topk(0, 1), examples, batch)


def test_topk_with_k_above_an_examples_length_raises_naming_it():
    _, batch = batch_of([(4, 3), (1, 3), (2, 3)], (True, False))
    with pytest.raises(RuntimeError, match=r"^Tensor.topk: k=2 is out of range for example 1, "
                                           r"which has size 1 in dynamic dimension 1$"):
        batch.topk(2, 1)
    with pytest.raises(RuntimeError, match=r"^torch.topk: k=4 is out of range for static "
                                           r"dimension 2, which has size 3 in every example$"):
        torch.topk(batch, 4)
    with pytest.raises(RuntimeError, match=r"^Tensor.topk: k=-1 must be non-negative$"):
        batch.topk(-1, 1)


def test_topk_along_dimension_zero_takes_k_one_only():
    examples, batch = batch_of([(4, 3), (1, 3)], (True, False))
    check(lambda x: x.topk(1, 0), examples, batch)
    with pytest.raises(RuntimeError, match=r"^Tensor.topk: k=2 is out of range for dimension 0, "
                                           r"the batch dimension of each example, which has "
                                           r"size 1$"):
        batch.topk(2, 0)
    with pytest.raises(ValueError, match=r"^torch.topk: k=0 along dimension 0 would leave each "
                                         r"example an empty dimension 0"):
        torch.topk(batch, 0, 0)


def test_topk_does_not_check_examples_that_are_not_running():
    # Under @batch (an execution mask), a short example that does not run the
    # code at hand is not refused; its result is discarded.
    examples, batch = batch_of([(4, 3), (1, 3), (2, 3)], (True, False))
    token = EXECUTION_MASK.set(torch.tensor([True, False, True]))
    try:
        values, indices = batch.topk(2, 1)
    finally:
        EXECUTION_MASK.reset(token)
    for b in (0, 2):
        expected = examples[b].topk(2, 1)
        torch.testing.assert_close(values.data[b:b + 1], expected.values)
        assert torch.equal(indices.data[b:b + 1], expected.indices)


# ---------------------------------------------------------------- flip


def test_flip_reverses_each_examples_own_real_positions():
    examples = [torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[4.0]]), torch.zeros(1, 0)]
    batch = MaskedBatch.fromlist(examples, (True,), padding_value=NAN)
    got = [x.tolist() for x in batch.flip(1).examples()]
    assert got == [[[3.0, 2.0, 1.0]], [[4.0]], [[]]]


@pytest.mark.parametrize(
    "f",
    [
        pytest.param(lambda x: x.flip(1, 2), id="varargs"),
        pytest.param(lambda x: x.flip([-1, 1]), id="list"),
        pytest.param(lambda x: torch.flip(x, dims=(2, 0, 1)), id="keyword-with-dim-0"),
        pytest.param(lambda x: torch.flip(x, ()), id="none"),
    ],
)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_flip_of_several_dims_matches_loop(f, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(f, examples, batch)


# ---------------------------------------------------------------- moving dimensions


@pytest.mark.parametrize(
    "f",
    [
        pytest.param(lambda x: x.movedim((1, 3), (3, 1)), id="swap"),
        pytest.param(lambda x: x.movedim(1, -1), id="to-last"),
        pytest.param(lambda x: torch.moveaxis(x, (2, 3), (1, 2)), id="two"),
        pytest.param(lambda x: x.movedim(0, 0), id="dim-0-in-place"),
        pytest.param(lambda x: x.mT, id="mT"),
        pytest.param(lambda x: x.movedim(3, 1).mT.sum(3), id="then-reduce"),
    ],
)
@pytest.mark.parametrize("dims", [(True, False, False), (False, True, True),
                                  (True, False, True), (False, False, False)])
def test_movedim_and_mT_of_rank_four_examples_match_loop(f, dims):
    shapes = [[3 if d else s for d, s in zip(dims, (2, 3, 4))],
              [1 if d else s for d, s in zip(dims, (2, 3, 4))],
              [2 if d else s for d, s in zip(dims, (2, 3, 4))]]
    examples, batch = batch_of(shapes, dims)
    check(f, examples, batch)


def test_movedim_keeps_dims_with_their_dimensions():
    _, batch = batch_of([(3, 2, 4), (1, 2, 4)], (True, False, False))
    assert batch.movedim(1, 3).dims == (False, False, True)
    assert batch.mT.dims == (True, False, False)
    assert torch.moveaxis(batch, (1, 2), (2, 1)).dims == (False, True, False)


def test_moving_dimension_zero_raises():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(ValueError, match=r"^Tensor.movedim: dimension 0 is the batch dimension of "
                                         r"each example and cannot be moved on a batch \(moving "
                                         r"\[0\] to \[2\] gives the order \[1, 2, 0\]\)$"):
        batch.movedim(0, 2)
    with pytest.raises(ValueError, match=r"^torch.moveaxis: dimension 0 is the batch dimension"):
        torch.moveaxis(batch, 1, 0)


def test_movedim_with_bad_arguments_raises_naming_op():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(RuntimeError, match=r"^Tensor.movedim: source \[1, 2\] and destination "
                                           r"\[1\] must name the same number of dimensions$"):
        batch.movedim((1, 2), (1,))
    with pytest.raises(RuntimeError, match=r"^torch.movedim: repeated dimension in source "
                                           r"\[1, 1\]$"):
        torch.movedim(batch, (1, -2), (1, 2))
    with pytest.raises(IndexError, match=r"^Tensor.movedim: dimension 3 is out of range for "
                                         r"examples of rank 3"):
        batch.movedim(3, 1)


def test_mT_of_examples_of_rank_below_three_raises():
    _, scalars = batch_of([(), ()], ())
    with pytest.raises(RuntimeError, match=r"^Tensor.mT: examples must have at least 2 "
                                           r"dimensions \(mT transposes the last two\), got 1$"):
        scalars.mT  # noqa: B018
    # (1, n) -> (n, 1) would move each example's batch dimension (matchbox-nn's
    # time-major views, where installed, do not hold rank 2 either).
    _, rows = batch_of([(3,), (1,)], (True,))
    with pytest.raises(ValueError, match=r"^Tensor.mT: dimension 0 is the batch dimension of "
                                         r"each example"):
        rows.mT  # noqa: B018


def test_mT_is_listed_on_the_batch():
    assert "mT" in dir(MaskedBatch)
    assert isinstance(MaskedBatch.__dict__["mT"], property)


# ---------------------------------------------------------------- scalars and errors


@pytest.mark.parametrize(
    "f",
    [
        pytest.param(lambda x: x.cumsum(0), id="cumsum"),
        pytest.param(lambda x: torch.logcumsumexp(x, -1), id="logcumsumexp"),
        pytest.param(lambda x: x.cummax(0), id="cummax"),
        pytest.param(lambda x: x.sort(), id="sort"),
        pytest.param(lambda x: x.topk(1), id="topk"),
        pytest.param(lambda x: x.flip(0), id="flip"),
        pytest.param(lambda x: x.movedim(0, 0), id="movedim"),
    ],
)
def test_per_example_scalars_are_their_own_scan_and_sort(f, dtype):
    examples, batch = batch_of([(), (), ()], (), dtype)
    check(f, examples, batch)


@pytest.mark.parametrize(
    "f, op",
    [
        pytest.param(lambda x: x.cumsum(3), "Tensor.cumsum", id="cumsum"),
        pytest.param(lambda x: torch.sort(x, -4), "torch.sort", id="sort"),
        pytest.param(lambda x: x.topk(1, 5), "Tensor.topk", id="topk"),
        pytest.param(lambda x: x.flip(1, 3), "Tensor.flip", id="flip"),
    ],
)
def test_out_of_range_dims_raise_naming_op(f, op):
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(IndexError, match=rf"^{op}: dimension -?\d is out of range for examples "
                                         r"of rank 3 \(expected to be in \[-3, 2\]\)$"):
        f(batch)


def test_flip_of_a_repeated_dim_and_fliplr_of_vectors_raise():
    _, batch = batch_of([(3,), (1,)], (True,))
    with pytest.raises(RuntimeError, match=r"^Tensor.flip: dim 1 appears multiple times in the "
                                           r"list of dims$"):
        batch.flip(1, -1)
    _, scalars = batch_of([(), ()], ())
    with pytest.raises(RuntimeError, match=r"^torch.fliplr: examples must have at least 2 "
                                           r"dimensions, got 1$"):
        torch.fliplr(scalars)


@pytest.mark.parametrize(
    "f, op",
    [
        pytest.param(lambda x, o: torch.cumsum(x, 1, out=o), "torch.cumsum", id="cumsum"),
        pytest.param(lambda x, o: torch.cummax(x, 1, out=(o, o.long())), "torch.cummax",
                     id="cummax"),
        pytest.param(lambda x, o: torch.sort(x, 1, out=(o, o.long())), "torch.sort", id="sort"),
        pytest.param(lambda x, o: torch.topk(x, 1, 1, out=(o, o.long())), "torch.topk",
                     id="topk"),
        pytest.param(lambda x, o: torch.logcumsumexp(x, 1, out=o), "torch.logcumsumexp",
                     id="logcumsumexp"),
    ],
)
def test_out_is_refused(f, op):
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(NotImplementedError, match=rf"^{op}: out= is not supported for batches$"):
        f(batch, torch.empty(0, dtype=torch.float64))


def test_in_place_scans_are_not_implemented_and_say_so():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(NotImplementedError, match=r"^Tensor.cumsum_ is not implemented for "
                                                  r"MaskedBatch$"):
        batch.cumsum_(1)


# ---------------------------------------------------------------- hypothesis


ALONG = sorted(CASES)


@given(example_lists(dims=(True, False)), st.sampled_from(ALONG), st.sampled_from(DIMS))
def test_ordering_ops_on_random_dynamic_static_batches_match_loop(case, name, dim):
    examples, batch = case
    k = k_for(examples, dim)
    check(lambda x: CASES[name](x, dim, k), examples, batch)


@given(example_lists(dims=(False, True)), st.sampled_from(ALONG), st.sampled_from(DIMS))
def test_ordering_ops_on_random_static_dynamic_batches_match_loop(case, name, dim):
    examples, batch = case
    k = k_for(examples, dim)
    check(lambda x: CASES[name](x, dim, k), examples, batch)


@given(example_lists(dims=(True, True), min_length=1),
       st.sampled_from(ALONG + sorted(NO_DIM_CASES)), st.sampled_from(DIMS))
def test_ordering_ops_on_random_two_dynamic_batches_match_loop(case, name, dim):
    examples, batch = case
    if name in NO_DIM_CASES:
        check(NO_DIM_CASES[name], examples, batch)
        return
    k = k_for(examples, dim)
    check(lambda x: CASES[name](x, dim, k), examples, batch)


@given(example_lists(dims=(True, False), min_length=1), st.sampled_from([1, 2, -1]))
def test_chained_ordering_ops_match_loop(case, dim):
    # Results feed further ops: a flip of a cumsum, a sort of a flip, a reduction.
    examples, batch = case
    check(lambda x: x.cumsum(dim).flip(dim).sort(dim, descending=True).values.sum(dim),
          examples, batch)
    check(lambda x: torch.cummax(x.flip(dim), dim).values.logcumsumexp(dim), examples, batch)


# ---------------------------------------------------------------- roll


@given(example_lists(dims=(True, True), max_size=4), st.integers(-7, 7))
def test_roll_without_dims_on_random_two_dynamic_batches_matches_loop(case, shift):
    check(lambda x: x.roll(shift), *case)


@given(example_lists(dims=(False, True), min_length=0), st.integers(-7, 7),
       st.sampled_from([1, 2, -1]))
def test_roll_on_random_batches_matches_loop(case, shift, dim):
    check(lambda x: torch.roll(x, shift, dim), *case)


def test_roll_with_mismatched_shifts_and_dims_raises():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(RuntimeError, match=r"^Tensor\.roll: shifts and dimensions must align: "
                                           r"2 shifts, 1 dims$"):
        batch.roll((1, 2), 1)
    with pytest.raises(RuntimeError, match=r"^torch\.roll: without dims, shifts must be one int"):
        torch.roll(batch, (1, 2))
