"""``zip(*rows)`` and ``f(*items)`` of a list whose items only some examples have.

In the loop over examples each example zips its own rows: it gets one column per
element of a row (none if it has no rows), and column ``j`` holds its own rows'
``j``-th elements, as many as it has rows.  The batch zipped every example's rows
by position, and a column counted only for the examples that have every row, so
the shorter examples lost every column (silently, in a ``for``; ``IndexError``
from ``list(zip(*rows))[j]``).  Spreading such a list into another call
(``max(*items)``, an undecorated ``f(*items)``) would give the callee a number of
arguments that is not any example's own: refused, naming the call.
"""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences
from hypothesis import given
from hypothesis import strategies as st

import matchbox

LENGTHS = st.lists(st.integers(0, 4), min_size=1, max_size=4)
SOME = st.lists(st.integers(1, 4), min_size=1, max_size=4)  # every example has a row


def zero(x):
    return x.sum(1) * 0.0  # (1, 3) for every length, 0 included


@matchbox.batch
def second_column(x):
    rows = [(xt, xt * 2) for xt in x.unbind(1)]
    cols = list(zip(*rows))
    return torch.stack(list(cols[1]), 1) + cols[0][-1].unsqueeze(1)


@given(lengths=SOME)
def test_a_column_of_a_list_of_zipped_rows(lengths):
    assert_batch_equals_loop(second_column, sequences(lengths))


def test_a_column_of_a_list_of_zipped_rows_dtypes(dtype):
    for lengths in ([2, 4, 1], [1], [3]):  # a batch of one too
        assert_batch_equals_loop(second_column, sequences(lengths, dtype=dtype))
        assert_batch_equals_loop(counted_columns, sequences(lengths, dtype=dtype))


@matchbox.batch
def summed_columns(x):
    rows = [(xt, xt.sin() * 2) for xt in x.unbind(1)]
    total = zero(x)
    for col in zip(*rows):
        total = total * 0.5 + torch.stack(list(col), 1).sum(1) + len(col)
    return total


@given(lengths=LENGTHS)
def test_a_for_over_zipped_rows(lengths):
    assert_batch_equals_loop(summed_columns, sequences(lengths))


def test_a_for_over_zipped_rows_dtypes(dtype):
    for lengths in ([2, 4, 1], [3, 0, 2], [0], [1], [4]):  # a batch of one too
        assert_batch_equals_loop(summed_columns, sequences(lengths, dtype=dtype))


@matchbox.batch
def counted_columns(x):
    rows = [(xt, xt * 2, xt.exp()) for xt in x.unbind(1)]
    n = x.sum((1, 2)) * 0.0 + len(list(zip(*rows)))
    for i, col in enumerate(zip(*rows)):
        n = n + i * len(col) + col[-1].sum(1)
    return n


@given(lengths=LENGTHS)
def test_how_many_columns_and_an_enumerate_of_them(lengths):
    assert_batch_equals_loop(counted_columns, sequences(lengths))


@matchbox.batch
def comprehension_of_columns(x):
    rows = [(xt, xt.cos()) for xt in x.unbind(1)]
    sums = [torch.stack(col, 1).sum(1) * (j + 1) for j, col in enumerate(zip(*rows))]
    acc = zero(x)
    for s in sums:
        acc = acc * 2 + s
    return acc + len(sums)


@given(lengths=LENGTHS)
def test_a_comprehension_over_zipped_rows(lengths):
    assert_batch_equals_loop(comprehension_of_columns, sequences(lengths))


@matchbox.batch
def appended_rows(x):
    rows = []
    for xt in x.unbind(1):
        if xt.sum() > 0:  # an example may have rows 0 and 2, not 1
            rows.append((xt, xt.sin()))
        rows.append((xt * 3, xt))
    acc = zero(x)
    for col in zip(*rows):
        acc = acc * 2 + torch.stack(list(col), 1).sum(1) + len(col)
    return acc


@given(lengths=LENGTHS)
def test_zipped_rows_appended_in_a_loop(lengths):
    assert_batch_equals_loop(appended_rows, sequences(lengths))


@matchbox.batch
def unzipped(x):
    rows = [(xt, 1) for xt in x.unbind(1)]
    steps, ones = zip(*rows)
    return torch.stack(steps, 1).sum(1) + sum(ones) + len(steps)


@given(lengths=SOME)
def test_unzipped_into_two_names(lengths):
    assert_batch_equals_loop(unzipped, sequences(lengths))
    # The loop raises ValueError for an example of length 0 (zip() gives no column).
    with pytest.raises(ValueError, match=r"examples \[1\] have \[0\] items, 2 expected"):
        unzipped(sequences([lengths[0], 0])[1])


@matchbox.batch
def columns_kept_and_carried(x):
    rows = [(xt, xt * 2, xt.exp()) for xt in x.unbind(1)]
    kept, last = [], ()
    for col in zip(*rows):
        last = col  # a column merged after each step
        if col[0].sum() > 0:
            kept.append(col)  # a column stored under a per-example condition
    acc = zero(x) + len(kept) + len(last)
    for col in kept:
        acc = acc + torch.stack(col, 1).sum(1)
    if x.sum() > 0:
        acc = acc + torch.stack(list(zip(*rows))[1], 1).sum(1)
    return acc


@given(lengths=LENGTHS)
def test_columns_stored_and_merged(lengths):
    assert_batch_equals_loop(columns_kept_and_carried, sequences(lengths))


@matchbox.batch
def spread_into_a_rewritten_function(x):
    rows = [(xt, xt * 2) for xt in x.unbind(1)]

    def total(*items):
        acc = zero(x)
        for item in items:
            acc = acc + item
        return acc + len(items)

    acc = total(*x.unbind(1))
    for col in zip(*rows):
        acc = acc + total(*col)
    return acc


@given(lengths=LENGTHS)
def test_a_spread_into_a_function_batch_rewrote_taking_args(lengths):
    assert_batch_equals_loop(spread_into_a_rewritten_function, sequences(lengths))


# Refused: what a batch cannot give each example.

def count(*items):  # not decorated: it would see every example's items
    return len(items)


@matchbox.batch
def spread_into_a_helper(x):
    return zero(x) + count(*x.unbind(1))


@matchbox.batch
def spread_into_max(x):
    items = [xt.sum(1) for xt in x.unbind(1)]
    return max(*items)


def test_a_spread_of_a_per_example_list_into_other_calls_is_refused():
    _, xb = sequences([2, 4, 1])
    with pytest.raises(NotImplementedError, match=r"count\(\*items\) .* spreads a list"):
        spread_into_a_helper(xb)
    with pytest.raises(NotImplementedError, match=r"max\(\*items\) .* pass the list itself"
                                                  r"|max\(\*items\) .* spreads a list"):
        spread_into_max(xb)
    # Not refused where every example has every item.
    assert_batch_equals_loop(spread_into_max, sequences([3, 3]))
    assert_batch_equals_loop(spread_into_a_helper, sequences([2, 2]))


@matchbox.batch
def zipped_with_others(x):
    rows = [(xt, xt * 2) for xt in x.unbind(1)]
    acc = zero(x)
    for first, *rest in zip([1, 2], *rows):
        acc = acc + first * len(rest)
    return acc


@matchbox.batch
def mapped_rows(x):
    rows = [(xt, xt * 2) for xt in x.unbind(1)]

    def total(*items):
        return sum(items)

    return torch.stack(list(map(total, *rows)), 1).sum(1)


@matchbox.batch
def rows_of_two_widths(x):
    rows = [(xt, xt * 2) if i == 0 else (xt,) for i, xt in enumerate(x.unbind(1))]
    acc = zero(x)
    for col in zip(*rows):
        acc = acc + len(col)
    return acc


@matchbox.batch
def zipped_steps(x):
    acc = zero(x)
    for col in zip(*x.unbind(1)):
        acc = acc + len(col)
    return acc


def undecorated_length(items):
    return len(items)


@matchbox.batch
def column_to_a_helper(x):
    rows = [(xt, xt * 2) for xt in x.unbind(1)]
    acc = zero(x)
    for col in zip(*rows):
        acc = acc + undecorated_length(col)
    return acc


@pytest.mark.parametrize("f, message", [
    (zipped_with_others, r"zip\(\.\.\., \*rows\) .*zip\(\*\[a, \*rows\]\)"),
    (mapped_rows, r"map\(f, \*rows\) .* for column in zip\(\*rows\)"),
    (rows_of_two_widths, r"zip\(\*rows\) .* rows differ in length \(\[1, 2\]\)"),
    (zipped_steps, r"zip\(\*rows\) .* not tuples \(a MaskedBatch\)"),
    (column_to_a_helper, r"undecorated_length\(\) is given a column of zip\(\*rows\)"),
])
def test_what_cannot_give_each_example_its_own_is_refused(f, message):
    with pytest.raises(NotImplementedError, match=message):
        f(sequences([2, 4, 1])[1])
