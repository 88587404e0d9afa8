"""Reductions that give two results at once: ``var_mean``/``std_mean`` and ``aminmax``,
against the per-example loop (values and gradients).  Padding holds NaN, so padding that
reached a result or a gradient shows up as a mismatch."""

from __future__ import annotations

import pytest
import torch
from family_cases import NAN, NONEMPTY_LAYOUTS, batch_of, check
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists
from torch_features import AMINMAX_HAS_DERIVATIVE, needs

from matchbox import MaskedBatch
from matchbox._masking import EXECUTION_MASK

# The loop itself warns for var/std of one element (n - correction <= 0).
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning")

LAYOUTS = NONEMPTY_LAYOUTS

SPREAD_MEANS = [
    pytest.param(lambda x: torch.var_mean(x), id="var_mean-all"),
    pytest.param(lambda x: torch.std_mean(x, 1), id="std_mean-1"),
    pytest.param(lambda x: torch.var_mean(x, -1, keepdim=True), id="var_mean-last-keepdim"),
    pytest.param(lambda x: torch.std_mean(x, (1, 2), correction=0), id="std_mean-both-correction-0"),
    pytest.param(lambda x: torch.var_mean(x, 2, unbiased=False), id="var_mean-unbiased-false"),
    pytest.param(lambda x: torch.var_mean(x, 1, True, True), id="var_mean-positional"),
    pytest.param(lambda x: torch.std_mean(x, False), id="std_mean-unbiased-positional"),
    pytest.param(lambda x: torch.std_mean(x, dim=None, keepdim=True, correction=2),
                 id="std_mean-all-keepdim-correction-2"),
]

# The loop's gradients need aminmax's derivative (the batch's does not).
LOOP_DIFFERENTIATES_AMINMAX = needs(AMINMAX_HAS_DERIVATIVE, "differentiates aminmax")

AMINMAXES = [
    pytest.param(lambda x: torch.aminmax(x), id="torch.aminmax-all",
                 marks=LOOP_DIFFERENTIATES_AMINMAX),
    pytest.param(lambda x: x.aminmax(keepdim=True), id="Tensor.aminmax-all-keepdim",
                 marks=LOOP_DIFFERENTIATES_AMINMAX),
    pytest.param(lambda x: torch.aminmax(x, dim=1), id="torch.aminmax-1",
                 marks=LOOP_DIFFERENTIATES_AMINMAX),
    pytest.param(lambda x: x.aminmax(dim=2, keepdim=True), id="Tensor.aminmax-2-keepdim",
                 marks=LOOP_DIFFERENTIATES_AMINMAX),
    pytest.param(lambda x: torch.aminmax(x, dim=-1), id="torch.aminmax-last",
                 marks=LOOP_DIFFERENTIATES_AMINMAX),
]


@pytest.mark.parametrize("f", SPREAD_MEANS + AMINMAXES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_pairs_of_reductions_match_loop(f, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(f, examples, batch)


@pytest.mark.parametrize("f", SPREAD_MEANS)
def test_var_mean_of_zero_length_examples_match_loop(f, dtype):
    # var/std of nothing is NaN, and its mean NaN, as in the loop; gradients stay finite.
    examples, batch = batch_of([(0, 3), (1, 3), (4, 3)], (True, False), dtype)
    check(f, examples, batch)


@pytest.mark.parametrize("f", [
    pytest.param(lambda x: torch.var_mean(x), id="var_mean"),
    pytest.param(lambda x: torch.std_mean(x, correction=0), id="std_mean"),
    pytest.param(lambda x: torch.aminmax(x), id="aminmax",
                 marks=LOOP_DIFFERENTIATES_AMINMAX),
])
def test_pairs_of_per_example_scalars_reduce_each_example_alone(f, dtype):
    examples, batch = batch_of([(), (), ()], (), dtype)
    check(f, examples, batch)


@LOOP_DIFFERENTIATES_AMINMAX
def test_aminmax_ties_and_nan_give_the_loops_gradients(dtype):
    rows = [[1.0, 3.0, 3.0, 0.0], [2.0], [NAN, 1.0], [-1.0, -1.0, 5.0]]
    examples = [torch.tensor(r, dtype=dtype).view(1, -1) for r in rows]
    batch = MaskedBatch.fromlist(examples, (True,), padding_value=NAN)
    check(lambda x: torch.aminmax(x, dim=1), examples, batch)
    check(lambda x: x.aminmax(), examples, batch)


def test_aminmax_of_integers_matches_loop():
    ints = [torch.tensor([[5, 1, 4]]), torch.tensor([[2]]), torch.tensor([[7, 7, 0, 3]])]
    batch = MaskedBatch.fromlist(ints, (True,), padding_value=-3)
    check(lambda x: torch.aminmax(x, dim=1), ints, batch)
    check(lambda x: x.aminmax(), ints, batch)


def test_aminmax_results_are_named_batches():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    result = torch.aminmax(batch, dim=1)
    assert type(result).__name__ == "aminmax"
    assert isinstance(result.min, MaskedBatch) and isinstance(result.max, MaskedBatch)


@pytest.mark.parametrize("f, op", [
    pytest.param(lambda x: torch.aminmax(x, dim=1), "torch.aminmax", id="dim"),
    pytest.param(lambda x: x.aminmax(), "Tensor.aminmax", id="all"),
])
def test_aminmax_of_an_empty_example_raises_as_the_loop_does(f, op):
    examples, batch = batch_of([(2, 3), (0, 3), (1, 3)], (True, False))
    with pytest.raises(IndexError, match=rf"^{op}: example 1 has size 0 in dynamic dimension 1, "
                                         rf"and {op} of an empty dimension is undefined$"):
        f(batch)
    token = EXECUTION_MASK.set(torch.tensor([True, False, True]))
    try:
        got = f(batch)  # example 1 does not run this code: nothing to refuse
    finally:
        EXECUTION_MASK.reset(token)
    for b in (0, 2):
        low, high = f(examples[b])
        torch.testing.assert_close(got.min.data[b:b + 1].reshape(low.shape), low)
        torch.testing.assert_close(got.max.data[b:b + 1].reshape(high.shape), high)


def test_pairs_of_reductions_refuse_dimension_zero_and_out():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(ValueError, match=r"^torch\.aminmax: cannot reduce over dimension 0"):
        torch.aminmax(batch, dim=0)
    with pytest.raises(ValueError, match=r"^torch\.var_mean: cannot reduce over dimension 0"):
        torch.var_mean(batch, 0)
    with pytest.raises(NotImplementedError, match=r"^torch\.aminmax: out= is not supported"):
        torch.aminmax(batch, dim=1, out=(torch.empty(0), torch.empty(0)))


@given(example_lists(dims=(True, False)), st.sampled_from([1, 2, -1, (1, 2), None]),
       st.booleans())
def test_var_mean_on_random_batches_matches_loop(case, dim, keepdim):
    check(lambda x: torch.var_mean(x, dim, keepdim=keepdim), *case)
