"""searchsorted, bucketize and isin against the per-example loop.

Padding holds NaN, which a binary search over the padded length would meet (NaN compares
false, so it moves a search), so padding that took part shows up as a mismatch.  A batch of
sequences is searched with torch's own comparisons over each example's length: sequences
that are not sorted (or hold NaN) give the loop's positions too.
"""

from __future__ import annotations

import pytest
import torch
from family_cases import LAYOUTS, NAN, assert_every_op_has_a_case, batch_of, check, registered

from matchbox import MaskedBatch

BOUNDARIES = torch.tensor([-1.0, -0.5, 0.0, 0.0, 0.3, 1.0, 2.0])

# op name -> f(x): x the batch, its values drawn by torch.randn.
CASES = {
    "torch.searchsorted": lambda x: torch.searchsorted(BOUNDARIES.to(x.dtype), x),
    "torch.bucketize": lambda x: torch.bucketize(x, BOUNDARIES.to(x.dtype), right=True),
    "torch.isin": lambda x: torch.isin(x, BOUNDARIES.to(x.dtype)),
}

REGISTERED = registered("search")


def test_every_registered_search_op_has_a_case_here():
    assert_every_op_has_a_case("search", REGISTERED, CASES)


@pytest.mark.parametrize("f", [
    pytest.param(lambda x: CASES["torch.searchsorted"](x), id="searchsorted"),
    pytest.param(lambda x: CASES["torch.bucketize"](x), id="bucketize-right"),
    pytest.param(lambda x: torch.bucketize(x, BOUNDARIES.to(x.dtype), out_int32=True),
                 id="bucketize-int32"),
    pytest.param(lambda x: torch.searchsorted(BOUNDARIES.to(x.dtype), x, right=True),
                 id="searchsorted-right"),
    pytest.param(lambda x: torch.searchsorted(BOUNDARIES.to(x.dtype), x, side="right",
                                              out_int32=True), id="searchsorted-side"),
    pytest.param(lambda x: torch.searchsorted(BOUNDARIES.flip(0).to(x.dtype), x,
                                              sorter=torch.arange(6, -1, -1)), id="sorter"),
    # a batch of sequences (each example's own, sorted along its last dimension)
    pytest.param(lambda x: torch.searchsorted(x.sort(-1).values, x), id="batch-in-batch"),
    pytest.param(lambda x: torch.searchsorted(x.sort(-1).values, x * 0.5, right=True),
                 id="batch-in-batch-right"),
    pytest.param(lambda x: torch.searchsorted(x, x), id="unsorted-batch-in-batch"),
])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_search_matches_loop(f, layout, dtype):
    # The layouts hold zero- and one-length examples and a batch of one.
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype)
    check(f, examples, batch)


@pytest.mark.parametrize("right", [False, True])
def test_sequences_holding_nan_inf_and_ties_give_the_loops_positions(right):
    values = torch.tensor([0.0, 1.0, 2.0, NAN, float("inf"), -float("inf")])
    generator = torch.Generator().manual_seed(0)
    for sort in (False, True):
        sequences = []
        for n in (0, 1, 2, 3, 5, 8, 11):
            line = values[torch.randint(0, 6, (1, 3, n), generator=generator)]
            sequences.append(line.sort(-1).values if sort else line)
        batch = MaskedBatch.fromlist(sequences, (False, True), padding_value=NAN)
        queries = values[torch.randint(0, 6, (1, 3, 5), generator=generator)]
        check(lambda s, q=queries: torch.searchsorted(s, q, right=right), sequences, batch)


def test_plain_sequences_per_line_and_values_of_per_example_scalars(dtype):
    # Plain sequences of each example's rank: their leading dimensions are the examples'.
    sequences = torch.randn(1, 4, 6, dtype=dtype).sort(-1).values
    examples, batch = batch_of([(4, 3), (4, 0), (4, 1)], (False, True), dtype)
    check(lambda x: torch.searchsorted(sequences, x), examples, batch)
    # One value per example, (1,) or 0-d in the loop: the result stands for the same.
    scalars = [torch.randn(1, dtype=dtype) for _ in range(3)]
    batch = MaskedBatch.fromlist(scalars, ())
    check(lambda x: torch.searchsorted(BOUNDARIES.to(dtype), x), scalars, batch)
    check(lambda x: torch.bucketize(x, BOUNDARIES.to(dtype)), scalars, batch)
    examples, batch = batch_of([(3,), (1,), (4,)], (True,), dtype)
    check(lambda x: torch.searchsorted(BOUNDARIES.to(dtype), x.sum()), examples, batch)
    check(lambda x: torch.bucketize(x.amax(), BOUNDARIES.to(dtype)), examples, batch)


def test_a_batch_of_sequences_with_dynamic_leading_dimensions(dtype):
    sequences, seq_batch = batch_of([(2, 3), (1, 0), (4, 5)], (True, True), dtype)
    sequences = [s.sort(-1).values for s in sequences]
    seq_batch = MaskedBatch.fromlist(sequences, (True, True), padding_value=NAN)
    values, value_batch = batch_of([(2, 4), (1, 4), (4, 4)], (True, False), dtype)
    from matchbox.testing import mb_assert
    mb_assert(lambda s, v: torch.searchsorted(s, v), [sequences, values],
              [seq_batch, value_batch], 3)
    # plain values, the same for every example, beside static leading dimensions
    plain = torch.randn(1, 2, 4, dtype=dtype)
    sequences, seq_batch = batch_of([(2, 3), (2, 0), (2, 5)], (False, True), dtype)
    check(lambda s: torch.searchsorted(s.sort(-1).values, plain), sequences, seq_batch)


@pytest.mark.parametrize("f, error, message", [
    (lambda s, x: torch.searchsorted(s, x, sorter=torch.zeros(1, 3, dtype=torch.long)),
     NotImplementedError, r"^torch\.searchsorted: sorter with a batch of sorted sequences is "
                          r"not supported"),
    (lambda s, x: torch.searchsorted(s, 0.5), RuntimeError,
     r"^torch\.searchsorted: input is a number, which needs 1-D sorted sequences"),
    (lambda s, x: torch.searchsorted(s, torch.zeros(3)), RuntimeError,
     r"^torch\.searchsorted: input \(each example's shape \(3,\)\) and sorted_sequence"),
    (lambda s, x: torch.searchsorted(s, torch.zeros(1, 3, 2)), ValueError,
     r"^torch\.searchsorted: dimension 1 of sorted_sequence is dynamic and input is a plain "
     r"tensor"),
    (lambda s, x: torch.searchsorted(s, x.transpose(1, 2)), ValueError,
     r"^torch\.searchsorted: dimension 1 is dynamic in one of sorted_sequence and input and "
     r"static in the other"),
    (lambda s, x: torch.searchsorted(torch.zeros(1, 2, 3), x), ValueError,
     r"^torch\.searchsorted: dimension 1 of input is dynamic and sorted_sequence is a plain "
     r"tensor"),
    (lambda s, x: torch.searchsorted(torch.zeros(4, 3), x), RuntimeError,
     r"^torch\.searchsorted: sorted_sequence of shape \(4, 3\) and input"),
    (lambda s, x: torch.searchsorted(torch.zeros(3), x, side="left", right=True),
     RuntimeError, r"^torch\.searchsorted: side and right can't be set to opposites"),
    (lambda s, x: torch.searchsorted(torch.zeros(3), x, side="middle"), RuntimeError,
     r"^torch\.searchsorted: side can only be 'left' or 'right' but got middle"),
    (lambda s, x: torch.bucketize(x, s), RuntimeError,
     r"^torch\.bucketize: boundaries is a batch"),
    (lambda s, x: torch.bucketize(x, torch.zeros(3), out=torch.empty(0)), NotImplementedError,
     r"^torch\.bucketize: out= is not supported for batches"),
])
def test_search_refusals_name_the_op(f, error, message):
    _, seq = batch_of([(3, 2), (1, 2)], (True, False), torch.float32)
    _, x = batch_of([(3, 4), (1, 4)], (True, False), torch.float32)
    with pytest.raises(error, match=message):
        f(seq, x)


def test_scalar_sequences_are_refused():
    _, scalars = batch_of([(), ()], (), torch.float32)
    with pytest.raises(ValueError, match=r"^torch\.searchsorted: the sorted sequences are "
                                         r"scalars"):
        torch.searchsorted(scalars, torch.zeros(1))


def test_values_of_another_dtype_are_compared_as_the_loop_compares_them():
    sequences, batch = batch_of([(2, 3), (2, 0), (2, 1)], (False, True), torch.float32)
    sequences = [s.sort(-1).values for s in sequences]
    batch = MaskedBatch.fromlist(sequences, (False, True), padding_value=NAN)
    values = torch.randn(1, 2, 5, dtype=torch.float64)
    check(lambda s: torch.searchsorted(s, values), sequences, batch)
    check(lambda s: torch.searchsorted(s, (values * 4).long()), sequences, batch)


# ---------------------------------------------------------------- isin

TESTS = torch.tensor([0.0, 1.0, 2.0, NAN])


@pytest.mark.parametrize("f", [
    pytest.param(lambda x: torch.isin(x, TESTS.to(x.dtype)), id="plain-tests"),
    pytest.param(lambda x: torch.isin(x, TESTS.to(x.dtype), invert=True), id="invert"),
    pytest.param(lambda x: torch.isin(x, 2.0), id="number-test"),
    pytest.param(lambda x: torch.isin(x, test_element=2.0), id="number-test-keyword"),
    pytest.param(lambda x: torch.isin(x, x[:, :, :1]), id="batch-tests"),
    pytest.param(lambda x: torch.isin(x, x * 2, assume_unique=False), id="batch-in-batch"),
    pytest.param(lambda x: torch.isin(x.flip(-1), x, invert=True), id="batch-invert"),
    pytest.param(lambda x: torch.isin(torch.tensor([[0.0, 1.0, 3.0]], dtype=x.dtype), x),
                 id="plain-in-batch"),
    pytest.param(lambda x: torch.isin(1.0, x), id="number-in-batch"),
])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_isin_matches_loop(f, layout, dtype):
    # Small integers as floats: ties with the test elements; NaN padding is in nothing,
    # and a real NaN neither (as torch compares).
    dims, shapes = LAYOUTS[layout]
    examples, batch = batch_of(shapes, dims, dtype,
                               lambda shape: torch.randint(0, 4, (1, *shape)).float())
    check(f, examples, batch)


def test_isin_of_plain_elements_without_a_dimension_0_is_refused():
    _, batch = batch_of([(3,), (1,)], (True,))
    with pytest.raises(ValueError, match=r"^torch\.isin: elements is a plain tensor of shape "
                                         r"\(3,\) and test_elements a batch"):
        torch.isin(torch.zeros(3, dtype=torch.float64), batch)
    with pytest.raises(NotImplementedError, match=r"^torch\.isin: out= is not supported"):
        torch.isin(batch, torch.zeros(2, dtype=torch.float64), out=torch.empty(0))


def test_leading_dimensions_that_differ_are_refused_naming_the_op():
    _, seq = batch_of([(2, 3), (1, 2)], (True, True))
    # the same lengths, padded further (a batch sliced from a longer one)
    values = MaskedBatch(torch.zeros(2, 3, 4, dtype=torch.float64),
                         (torch.arange(3) < torch.tensor([[2], [1]])).unsqueeze(-1), (True, False))
    with pytest.raises(ValueError, match=r"^torch\.searchsorted: dimension 1 is padded to 2 "
                                         r"in sorted_sequence and 3 in input"):
        torch.searchsorted(seq, values)
    _, seq = batch_of([(2, 3), (2, 1)], (False, True))
    _, values = batch_of([(3, 4), (3, 4)], (False, False))
    with pytest.raises(RuntimeError, match=r"^torch\.searchsorted: sorted_sequence has size 2 "
                                           r"and input 3 in dimension 1"):
        torch.searchsorted(seq, values)
    _, values = batch_of([(3, 4), (3, 1)], (False, True))
    with pytest.raises(RuntimeError, match=r"^torch\.searchsorted: sorted_sequence has size 2 "
                                           r"and input 3 in dimension 1"):
        torch.searchsorted(torch.zeros(1, 2, 5, dtype=torch.float64), values)
    with pytest.raises(NotImplementedError, match=r"^torch\.searchsorted: sorter is a batch and "
                                                  r"sorted_sequence a plain tensor"):
        torch.searchsorted(torch.zeros(4, dtype=torch.float64), values,
                           sorter=values.long())
