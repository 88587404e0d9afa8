"""A variable that holds a Python number for some examples and a tensor for others
(``runtime.number_merges``): ``v = 0``, then ``v = x.sum(1)`` under a per-example condition.
In the loop ``isinstance(v, int)`` answers per example; under ``@batch`` it answered
``False`` for every example, silently.  A type test whose answer for the number differs
from the batch's is refused where a running example holds the number; one every running
example answers alike is Python's."""

from __future__ import annotations

import numbers

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox import MaskedBatch


@matchbox.batch
def types_a_mixed_variable(x, how):
    v = 0.0 if how == "float" else 0
    if x.sum() > 0:
        v = x.sum(1)
    if how == "loop":  # assigned in some steps of a loop over a dynamic dimension
        v = 0
        for xt in x.unbind(1):
            if xt.sum() > 2:
                v = xt
    if how in ("int", "loop"):
        test = isinstance(v, int)
    if how == "type":
        test = type(v) is int
    if how == "number":
        test = isinstance(v, numbers.Number)
    if how == "float":
        test = isinstance(v, float)
    if how == "advised":
        test = isinstance(v, (torch.Tensor, MaskedBatch))
    if how == "is not":
        test = type(v) is not int
    return x.sum((1, 2)) * 0 + (1.0 if test else 2.0)


def signed(lengths, dtype=torch.float64):
    """Sequences of ones (sum > 0) and of minus ones (sum < 0), alternately."""
    xs = [torch.full((1, n, 3), 1.0 if i % 2 else -1.0, dtype=dtype)
          for i, n in enumerate(lengths)]
    return xs, MaskedBatch.fromlist(xs, (True, False))


@pytest.mark.parametrize("how, what, kind", [
    ("int", r"isinstance\(x, \.\.\.\)", "int"), ("type", r"type\(x\) is \.\.\.", "int"),
    ("number", r"isinstance\(x, \.\.\.\)", "int"), ("float", r"isinstance\(x, \.\.\.\)", "float"),
    ("advised", r"isinstance\(x, \.\.\.\)", "int"), ("is not", r"type\(x\) is not \.\.\.", "int"),
    ("loop", r"isinstance\(x, \.\.\.\)", "int"),
])
def test_a_type_test_of_a_number_for_some_examples_is_refused(how, what, kind):
    xs, xb = signed([3, 2, 1, 4])
    loop = [types_a_mixed_variable(x, how).item() for x in xs]
    assert len(set(loop)) == 2  # the loop's answer differs between examples
    with pytest.raises(NotImplementedError, match=(
            rf"^@batch: {what} \(.*test_control_number_merges\.py, line \d+\) of a variable "
            rf"that is a Python number \({kind}\) for some examples and a tensor for others "
            r"\(a number assigned where a per-example condition assigned a tensor\): under "
            r"@batch it is one MaskedBatch for every example, so the test would give every "
            r"example the batch's answer, where the loop's differs between them\. Give the "
            r"variable one type on every path \(v = torch\.zeros\(\.\.\.\) where it is 0\), or "
            r"keep a flag of which path was taken$")):
        types_a_mixed_variable(xb, how)


@matchbox.batch
def picks(x):
    if x.sum() > 0:
        return x.sum(1)
    return 0


@matchbox.batch
def types_a_returned_value(x):
    return x.sum((1, 2)) * 0 + (1.0 if isinstance(picks(x), int) else 2.0)


def test_a_type_test_of_a_returned_number_for_some_examples_is_refused():
    xs, xb = signed([2, 2, 0, 3])
    assert [types_a_returned_value(x).item() for x in xs] == [1.0, 2.0, 1.0, 2.0]
    with pytest.raises(NotImplementedError, match=r"^@batch: isinstance\(x, \.\.\.\) .* of a "
                                                  r"variable that is a Python number \(int\)"):
        types_a_returned_value(xb)


# Where every running example holds the tensor, or the number answers as the batch does,
# the test is Python's, as in the loop.

@matchbox.batch
def types_where_it_is_one_type(x):
    v = 0
    if x.sum() > 0:
        v = x.sum(1)
    total = x.sum((1, 2)) * 0
    if isinstance(v, list):  # a number and a batch answer alike
        total = total + 100
    if x.sum() > 0:  # only the examples that hold the tensor run this
        if isinstance(v, int):
            total = total + 10
        else:
            total = total + v.sum(1)
    w = 0
    if x.sum() > -1e9:  # every example (an empty one's sum is 0)
        w = x.sum((1, 2))
    if type(w) is int:
        total = total + 1000
    return total + w


@pytest.mark.parametrize("lengths", [(3, 2, 1, 4), (2,), (0,), (0, 1)])
def test_a_type_test_every_running_example_answers_alike_equals_the_loop(lengths, dtype):
    assert_batch_equals_loop(types_where_it_is_one_type, signed(lengths, dtype=dtype))


@pytest.mark.parametrize("lengths", [(3, 0, 1, 4), (1,)])
def test_merges_of_numbers_and_batches_still_equal_the_loop(lengths, dtype):
    @matchbox.batch
    def counts(x):
        total = 0
        for xt in x.unbind(1):
            if xt.sum() > 0:
                total = total + xt.sum(1)
        return x.sum((1, 2)) * 0 + total

    torch.manual_seed(6)
    assert_batch_equals_loop(counts, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_a_record_carried_through_a_long_loop_is_read_without_recursion(reads):
    # The "loop" case over 1,500 steps: the record is carried at every step's merge (a chain
    # as long as the loop, computed only when the type test asks, without recursing).
    from matchbox._masking import host_reads

    xs, xb = signed([1500, 2, 3])
    with host_reads(reads), pytest.raises(NotImplementedError, match=r"isinstance\(x, \.\.\.\)"):
        types_a_mixed_variable(xb, "loop")
