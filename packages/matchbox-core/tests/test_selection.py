"""median, nanmedian, kthvalue, mode, quantile and nanquantile against the per-example loop.

Parametrised over the registry's ``selection`` family: every registered op needs a case
in ``CASES``.  Padding holds NaN (which these ops would count as a value), so padding
that took part in a choice changes the result or its gradient.
"""

from __future__ import annotations

import re

import pytest
import torch
from family_cases import NAN, assert_every_op_has_a_case, batch_of, check, registered
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists

from matchbox import MaskedBatch
from matchbox._masking import EXECUTION_MASK

# Every example has at least one value along every dimension here (the loop raises for
# an empty one: tested below).
LAYOUTS = {
    "dynamic-static": ((True, False), [(3, 4), (1, 4), (6, 4), (2, 4)]),
    "static-dynamic": ((False, True), [(2, 3), (2, 1), (2, 5)]),
    "two-dynamic": ((True, True), [(2, 3), (1, 1), (4, 2)]),
    "all-static": ((False, False), [(3, 2), (3, 2)]),
    "batch-of-one": ((True, False), [(5, 2)]),
}
DIMS = [1, 2, -1]

# op name -> f(x, dim): dim=None means over all of each example's values.
CASES = {
    "torch.median": lambda x, d: torch.median(x, d),
    "Tensor.median": lambda x, d: x.median(dim=d, keepdim=True),
    "torch.nanmedian": lambda x, d: torch.nanmedian(x, d),
    "Tensor.nanmedian": lambda x, d: x.nanmedian(dim=d, keepdim=True),
    "torch.kthvalue": lambda x, d: torch.kthvalue(x, 1, d),
    "Tensor.kthvalue": lambda x, d: x.kthvalue(1, d, keepdim=True),
    "torch.mode": lambda x, d: torch.mode(x, d),
    "Tensor.mode": lambda x, d: x.mode(d, True),
    "torch.quantile": lambda x, d: torch.quantile(x, 0.3, d),
    "Tensor.quantile": lambda x, d: x.quantile(torch.tensor(0.75, dtype=x.dtype), dim=d, keepdim=True),
    "torch.nanquantile": lambda x, d: torch.nanquantile(x, 0.5, d, interpolation="nearest"),
    "Tensor.nanquantile": lambda x, d: x.nanquantile(1.0, d, interpolation="lower"),
}
# Small integers: ties (what mode is about), rows of at most 16 (where torch's own
# mode gives the last position of its value).
TIES = {"torch.mode", "Tensor.mode"}

REGISTERED = registered("selection")


def test_every_registered_selection_op_has_a_case_here():
    assert_every_op_has_a_case("selection", REGISTERED, CASES)


def _values(name):
    return (lambda shape: torch.randint(0, 3, (1, *shape))) if name in TIES else None


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_selection_along_one_dim_matches_loop(name, dim, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype, _values(name))
    check(lambda x: CASES[name](x, dim), examples, batch)


@pytest.mark.parametrize("f", [
    pytest.param(lambda x: x.median(), id="median"),
    pytest.param(lambda x: x.nanmedian(), id="nanmedian"),
    pytest.param(lambda x: torch.quantile(x, 0.4), id="quantile"),
    pytest.param(lambda x: x.nanquantile(0.9, interpolation="higher"), id="nanquantile"),
    pytest.param(lambda x: torch.quantile(x, torch.tensor([0.5], dtype=x.dtype)), id="quantile-1d-q"),
    pytest.param(lambda x: torch.quantile(x, 0.5, keepdim=True), id="quantile-keepdim"),
])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_selection_over_every_value_matches_loop(f, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(f, examples, batch)


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("q", [0.0, 0.25, 0.5, 0.6, 1.0])
def test_quantile_interpolations_match_loop(interpolation, q, dtype):
    examples, batch = batch_of([(3, 2), (1, 2), (4, 2), (7, 2)], (True, False), dtype)
    check(lambda x: torch.quantile(x, q, 1, interpolation=interpolation), examples, batch)
    check(lambda x: torch.quantile(x, q, interpolation=interpolation), examples, batch)
    # A 1-D q of one value gives the result a leading dimension of size one.
    check(lambda x: torch.quantile(x, torch.tensor([q], dtype=x.dtype), 1, interpolation=interpolation),
          examples, batch)


def test_real_nan_values_are_treated_as_the_loop_treats_them(dtype):
    rows = [[1.0, NAN, 3.0, NAN], [2.0], [NAN], [4.0, 1.0, 0.5], [NAN, 2.0]]
    examples = [torch.tensor(r, dtype=dtype).view(1, -1) for r in rows]
    batch = MaskedBatch.fromlist(examples, (True,), padding_value=NAN)
    check(lambda x: x.median(1), examples, batch)  # NaN at the first NaN
    check(lambda x: x.median(), examples, batch)   # gradient shared among the NaNs
    check(lambda x: x.kthvalue(1, 1), examples, batch)  # NaN is the largest
    check(lambda x: torch.quantile(x, 0.5, 1), examples, batch)
    check(lambda x: torch.nanquantile(x, 0.5, 1), examples, batch)
    check(lambda x: torch.nanquantile(x, 0.3), examples, batch)


def test_nanmedian_skips_real_nan_values_as_the_loop_does(dtype):
    # Lines of NaN only (torch gives the first position for up to 3 values: its choice
    # for longer ones is unspecified, as for ties), NaN before and after the values.
    rows = [[1.0, NAN, 3.0, NAN], [2.0], [NAN], [4.0, 1.0, 0.5], [NAN, 2.0], [NAN, NAN, NAN],
            [NAN, 1.0, NAN, 1.0, 1.0, NAN], [NAN, NAN]]
    examples = [torch.tensor(r, dtype=dtype).view(1, -1) for r in rows]
    batch = MaskedBatch.fromlist(examples, (True,), padding_value=NAN)
    check(lambda x: x.nanmedian(1), examples, batch)
    check(lambda x: torch.nanmedian(x, -1, keepdim=True), examples, batch)
    check(lambda x: x.nanmedian(), examples, batch)  # gradient shared among the NaNs
    # Along a static dimension (torch's own op on the data), a dynamic one beside it.
    columns = [x.view(1, 1, -1).expand(1, 3, -1).clone() for x in examples]
    column_batch = MaskedBatch.fromlist(columns, (False, True), padding_value=NAN)
    check(lambda x: x.nanmedian(1), columns, column_batch)
    check(lambda x: x.nanmedian(2), columns, column_batch)
    check(lambda x: torch.nanmedian(x), columns, column_batch)


def test_nanmedian_of_integers_is_the_median():
    ints = [torch.tensor([[5, 1, 4]]), torch.tensor([[2]]), torch.tensor([[7, 7, 0, 3]])]
    int_batch = MaskedBatch.fromlist(ints, (True,), padding_value=-3)
    check(lambda x: x.nanmedian(1), ints, int_batch)
    check(lambda x: torch.nanmedian(x), ints, int_batch)


def test_ties_share_the_gradient_of_the_median_of_all_values(dtype):
    rows = [[1.0, 2.0, 2.0, 3.0], [5.0, 5.0, 5.0], [0.0]]
    examples = [torch.tensor(r, dtype=dtype).view(1, -1, 1) for r in rows]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=NAN)
    check(lambda x: x.median(), examples, batch)
    check(lambda x: torch.median(x, 1), examples, batch)
    check(lambda x: x.nanmedian(), examples, batch)
    check(lambda x: torch.nanmedian(x, 1), examples, batch)


def test_kthvalue_with_larger_k_and_integer_inputs_match_loop():
    examples, batch = batch_of([(3, 2), (5, 2), (4, 2)], (True, False))
    check(lambda x: x.kthvalue(3, 1), examples, batch)
    ints = [torch.tensor([[5, 1, 4]]), torch.tensor([[2]]), torch.tensor([[7, 7, 0, 3]])]
    int_batch = MaskedBatch.fromlist(ints, (True,), padding_value=-3)
    check(lambda x: x.kthvalue(1, 1), ints, int_batch)
    check(lambda x: x.median(1), ints, int_batch)
    check(lambda x: x.median(), ints, int_batch)
    check(lambda x: x.mode(1), ints, int_batch)


def test_selection_of_per_example_scalars_is_the_scalar(dtype):
    examples = [torch.randn(1, dtype=dtype) for _ in range(3)]
    batch = MaskedBatch.fromlist(examples, ())
    check(lambda x: x.median(), examples, batch)
    check(lambda x: x.nanmedian(), examples, batch)
    check(lambda x: torch.quantile(x, 0.3), examples, batch)


@given(example_lists(dims=(True, False), min_length=1), st.sampled_from(sorted(CASES)),
       st.sampled_from([1, 2]))
def test_selection_on_random_batches_matches_loop(case, name, dim):
    examples, batch = case
    if name in TIES:
        examples = [(x * 2).round() for x in examples]
        batch = MaskedBatch.fromlist(examples, batch.dims, padding_value=NAN)
    check(lambda x: CASES[name](x, dim), examples, batch)


# quantile and median are not written for examples empty in one of two dynamic dimensions
# and not the other (they refuse them, as every such op does): sizes start at one here.
@given(example_lists(dims=(True, True), max_size=4, min_length=1), st.floats(0, 1))
def test_quantile_over_two_dynamic_dims_matches_loop(case, q):
    check(lambda x: torch.quantile(x, q), *case)
    check(lambda x: x.median(), *case)


# ---------------------------------------------------------------- empty examples, errors


@pytest.mark.parametrize("f, error, message", [
    (lambda x: x.median(1), IndexError,
     r"^Tensor\.median: example 1 has size 0 in dynamic dimension 1"),
    (lambda x: torch.nanmedian(x, 1), IndexError,
     r"^torch\.nanmedian: example 1 has size 0 in dynamic dimension 1"),
    (lambda x: x.long().nanmedian(), IndexError,
     r"^Tensor\.nanmedian: example 1 has size 0 in dynamic dimension 1"),
    (lambda x: torch.mode(x, 1), IndexError,
     r"^torch\.mode: example 1 has size 0 in dynamic dimension 1"),
    (lambda x: x.kthvalue(1, 1), IndexError,
     r"^Tensor\.kthvalue: example 1 has size 0 in dynamic dimension 1"),
    (lambda x: torch.quantile(x, 0.5, 1), RuntimeError,
     r"^torch\.quantile: quantile\(\) input tensor must be non-empty: example 1"),
])
def test_an_empty_example_raises_where_the_loop_raises(f, error, message):
    examples, batch = batch_of([(3, 2), (0, 2)], (True, False))
    with pytest.raises(error, match=message):
        f(batch)
    token = EXECUTION_MASK.set(torch.tensor([True, False]))
    try:
        f(batch)  # example 1 does not run this code: nothing to refuse
    finally:
        EXECUTION_MASK.reset(token)


def test_median_of_all_values_of_an_empty_example_is_nan_as_in_the_loop():
    examples, batch = batch_of([(3, 2), (0, 2), (1, 2)], (True, False))
    check(lambda x: x.median(), examples, batch)
    check(lambda x: x.nanmedian(), examples, batch)


def test_selection_errors_name_the_op():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    with pytest.raises(RuntimeError, match=r"^torch\.kthvalue: selected number k=3 is out of "
                                           r"range for example 1, which has size 1"):
        torch.kthvalue(batch, 3, 1)
    with pytest.raises(RuntimeError, match=r"^Tensor\.quantile: quantile\(\) q must be in the "
                                           r"range \[0, 1\] but got 1.5"):
        batch.quantile(1.5, 1)
    with pytest.raises(ValueError, match=re.escape(
            "torch.quantile: q of shape (2,) puts its 2 quantiles in a new dimension 0")):
        torch.quantile(batch, torch.tensor([0.1, 0.9], dtype=batch.dtype), 1)
    with pytest.raises(RuntimeError, match=r"^torch\.quantile: quantile\(\) q tensor must be "
                                           r"same dtype as the input tensor"):
        torch.quantile(batch, torch.tensor(0.5, dtype=torch.float32), 1)
    with pytest.raises(ValueError, match=r"^torch\.nanquantile: nanquantile\(\) interpolation "
                                         r"must be one of"):
        torch.nanquantile(batch, 0.5, 1, interpolation="cubic")
    with pytest.raises(RuntimeError, match=r"^torch\.quantile: quantile\(\) input tensor must "
                                           r"be either float or double dtype"):
        torch.quantile(batch.long(), 0.5, 1)
    with pytest.raises(ValueError, match=r"^Tensor\.median: cannot reduce over dimension 0"):
        batch.median(0)
    with pytest.raises(TypeError, match=r"^Tensor\.mode: dim must be one int"):
        batch.mode((1, 2))
    with pytest.raises(NotImplementedError, match=r"^torch\.median: out= is not supported"):
        torch.median(batch, 1, out=(torch.empty(0), torch.empty(0, dtype=torch.long)))
    with pytest.raises(NotImplementedError, match=r"^torch\.nanmedian: out= is not supported"):
        torch.nanmedian(batch, 1, out=(torch.empty(0), torch.empty(0, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"^Tensor\.nanmedian: cannot reduce over dimension 0"):
        batch.nanmedian(0)


def test_pairs_are_named_tuples_of_batches():
    _, batch = batch_of([(3, 2), (1, 2)], (True, False))
    for name, result in (("median", batch.median(1)), ("nanmedian", batch.nanmedian(1)),
                         ("kthvalue", batch.kthvalue(1, 1)),
                         ("mode", batch.mode(1))):
        assert type(result).__name__ == name
        assert isinstance(result.values, MaskedBatch)
        assert result.indices.dtype == torch.int64
