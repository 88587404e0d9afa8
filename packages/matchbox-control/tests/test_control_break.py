"""``break`` in ``while`` and ``for``: each example leaves the loop at its own step."""

from __future__ import annotations

import torch
from control_cases import assert_batch_equals_loop, assert_oracle, scalars, sequences
from hypothesis import given
from hypothesis import strategies as st

import matchbox


@matchbox.batch
def first_power_above(x):
    p = 1
    while True:
        p = p * 2
        if p > x:
            break
    return p


def test_oracle_break_in_while():
    assert_oracle(first_power_above, [0, 3, 8, 20], [2, 4, 16, 32])


@matchbox.batch
def accumulate_until(x, limit):
    h = x.batch_zeros(x.size(-1))
    for xt in x.unbind(1):
        if h.sum(-1) > limit:
            break
        h = h + xt.abs()
    return h


@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5),
       limit=st.floats(0, 4))
def test_break_in_for_over_unbind(lengths, limit):
    xs, xb = sequences(lengths)
    assert_batch_equals_loop(accumulate_until, (xs, xb), ([limit] * len(xs), limit))


def test_break_in_for_values_and_gradients(dtype):
    xs, xb = sequences([5, 0, 1, 3], dtype=dtype)
    assert_batch_equals_loop(accumulate_until, (xs, xb), ([1.0] * 4, 1.0))


@matchbox.batch
def search(x):
    found = x * 0 - 1
    for i in range(10):
        if i * i >= x:
            found = found * 0 + i
            break
    else:
        found = found * 0 + 100
    return found


def test_oracle_for_else_runs_for_the_examples_that_did_not_break():
    assert_oracle(search, [0, 5, 81, 82, 200], [0, 3, 9, 100, 100])


@matchbox.batch
def while_else(x):
    while x < 10:
        x = x + 3
        if x == 7:
            break
    else:
        x = x * 100
    return x


def test_oracle_while_else_with_break():
    assert_oracle(while_else, [1, 4, 2], [7, 7, 1100])


@matchbox.batch
def nested_break(x):
    total = 0
    for i in range(4):
        for j in range(4):
            if j > i:
                break  # leaves the inner loop only
            total = total + x * j
    return total


def test_break_leaves_only_the_innermost_loop(dtype):
    assert_batch_equals_loop(nested_break, scalars([1.0, -2.0, 0.5], dtype))


def test_break_in_a_plain_loop_stops_python_iteration():
    @matchbox.batch
    def f(x):
        for i in range(1000000):
            if i == 3:
                break
            x = x + 1
        return x, i

    assert f(torch.tensor(0.0)) == (torch.tensor(3.0), 3)


@matchbox.batch
def break_last_in_for(x):
    total = x * 0
    for i in range(6):
        total = total + i
        if total > x:
            break  # nothing after it in the body reads the flag
    return total


def test_oracle_break_as_the_last_statement_of_a_for_body():
    assert_oracle(break_last_in_for, [0, 2, 5, 100], [1, 3, 6, 15])
