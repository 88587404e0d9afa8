"""``continue`` in ``while`` and ``for``: each example skips the rest of its own iteration."""

from __future__ import annotations

from control_cases import assert_batch_equals_loop, assert_oracle, scalars, sequences
from hypothesis import given
from hypothesis import strategies as st

import matchbox


@matchbox.batch
def sum_of_odd_below(n):
    total = 0
    i = 0
    while i < n:
        i = i + 1
        if i % 2 == 0:
            continue
        total = total + i
    return total


def test_oracle_continue_in_while():
    import torch

    assert_oracle(sum_of_odd_below, [0, 1, 4, 5], [0, 1, 4, 9], dtype=torch.int64)


@matchbox.batch
def skip_negative_steps(x):
    h = x.batch_zeros(x.size(-1))
    for xt in x.unbind(1):
        if xt.sum(-1) < 0:
            continue
        h = h * 0.5 + xt
    return h


@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5))
def test_continue_in_for_over_unbind(lengths):
    assert_batch_equals_loop(skip_negative_steps, sequences(lengths))


def test_continue_values_and_gradients(dtype):
    assert_batch_equals_loop(skip_negative_steps, sequences([4, 0, 1, 6], dtype=dtype))


@matchbox.batch
def continue_and_break(x):
    total = x * 0
    for i in range(8):
        if i % 3 == 0:
            continue
        if total > x:
            break
        total = total + i
    return total


def test_continue_and_break_in_one_loop(dtype):
    assert_batch_equals_loop(continue_and_break, scalars([0.0, 2.5, 7.0, 40.0], dtype))
