"""Conditional expressions ``a if c else b`` with a per-example condition."""

from __future__ import annotations

from control_cases import assert_batch_equals_loop, assert_oracle, scalars
from hypothesis import given
from hypothesis import strategies as st

import matchbox


@matchbox.batch
def relu_ish(x):
    return x if x > 0 else x * 0.1


def test_oracle_conditional_expression():
    assert_oracle(relu_ish, [-10, 0, 2], [-1, 0, 2])


@matchbox.batch
def safe_sqrt(x):
    return x.sqrt() if x > 0 else -x


@given(values=st.lists(st.floats(-9, 9, allow_nan=False), min_size=1, max_size=6))
def test_conditional_expression_values_and_gradients(values):
    assert_batch_equals_loop(safe_sqrt, scalars(values))


def test_conditional_expression_dtypes(dtype):
    assert_batch_equals_loop(safe_sqrt, scalars([-4.0, 0.0, 9.0, 0.25], dtype))


@matchbox.batch
def sqrt_behind_and(x, gate):
    # The else side's square root sits in a later operand of `and` (a thunk): its read
    # of x must be guarded with the side's mask as the side's own reads are, or the
    # examples that take the other side get NaN gradients from it.
    return x.sqrt() if x > 0 else (gate and (-x).sqrt())


def test_reads_inside_and_within_a_side_are_guarded(dtype):
    values = [4.0, -9.0, 0.25, -1.0]
    assert_batch_equals_loop(sqrt_behind_and, scalars(values, dtype),
                             scalars([1.0, 1.0, 0.0, 2.0], dtype))


def test_plain_condition_evaluates_one_side():
    calls = []

    @matchbox.batch
    def f(flag):
        return calls.append("a") if flag else calls.append("b")

    f(True)
    f(0)
    assert calls == ["a", "b"]


def test_a_side_that_is_not_taken_reads_nothing():
    @matchbox.batch
    def f(x, flag):
        if flag:
            offset = 1
        return x + offset if flag else -x  # `offset` exists only when flag is true

    import torch

    assert f(torch.tensor(2.0), False) == -2.0
    assert f(torch.tensor(2.0), True) == 3.0
