"""``return`` anywhere (in branches, in loops): each example returns its own value."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, assert_oracle, scalars, sequences
from hypothesis import given
from hypothesis import strategies as st

import matchbox
from matchbox import MaskedBatch


@matchbox.batch
def sign(x):
    if x > 0:
        return x * 0 + 1
    if x < 0:
        return x * 0 - 1
    return x * 0


def test_oracle_return_in_branches():
    assert_oracle(sign, [-2, 0, 3], [-1, 0, 1])


@matchbox.batch
def collatz_steps(x):
    steps = 0
    while True:
        if x == 1:
            return steps
        if x % 2 == 0:
            x = x // 2
        else:
            x = 3 * x + 1
        steps = steps + 1


def test_oracle_return_inside_a_while_true():
    assert_oracle(collatz_steps, [1, 2, 3, 6, 7], [0, 1, 7, 8, 16], dtype=torch.int64)


@matchbox.batch
def first_large_step(x):
    for xt in x.unbind(1):
        if xt.sum(-1) > 1:
            return xt * 2
    return x.batch_zeros(x.size(-1))


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_return_inside_a_for_loop(lengths):
    assert_batch_equals_loop(first_large_step, sequences(lengths))


def test_return_inside_a_for_loop_values_and_gradients(dtype):
    assert_batch_equals_loop(first_large_step, sequences([3, 0, 1, 4, 2], dtype=dtype))


@matchbox.batch
def several_values(x):
    if x.sum() > 0:
        return x * 2, x.sum()
    return -x, x.sum() * 3


def test_return_tuples_per_example(dtype):
    xs = [torch.randn(1, 3, dtype=dtype) for _ in range(5)]
    assert_batch_equals_loop(several_values, (xs, MaskedBatch.fromlist(xs, (False,))))


@matchbox.batch
def early_exit_in_nested_loops(x):
    total = 0
    for _i in range(5):
        for _j in range(5):
            total = total + 1
            if total > x:
                return total * 10
    return total


def test_oracle_return_from_nested_loops():
    assert_oracle(early_exit_in_nested_loops, [0, 7, 100], [10, 80, 25], dtype=torch.int64)


def test_return_with_plain_values_is_python():
    @matchbox.batch
    def f(n):
        for i in range(n):
            if i == 2:
                return "two"
        return None

    assert f(5) == "two"
    assert f(1) is None


def test_a_function_that_falls_off_its_end_returns_none():
    @matchbox.batch
    def f(x):
        if x > 0:
            return x

    assert f(torch.tensor(-1.0)) is None
    assert f(torch.tensor(2.0)) == torch.tensor(2.0)


def test_return_of_none_for_some_examples_is_refused():
    @matchbox.batch
    def f(x):
        if x > 0:
            return x
        return None

    _, xb = scalars([1.0, -1.0])
    with pytest.raises(TypeError, match=r"'the return value' is a batch for the examples on "
                                        r"one path and NoneType None for the others"):
        f(xb)


@matchbox.batch
def return_last_in_for(x):
    for i in range(6):
        if i * i > x:
            return x * 0 + i  # nothing after it in the body reads the flag
    return x * 0 - 1


def test_oracle_return_as_the_last_statement_of_a_for_body():
    assert_oracle(return_last_in_for, [0, 3, 10, 100], [1, 2, 4, -1])


@matchbox.batch
def returns_only_for_positive(x):
    if x > 0:
        return x * 2
    # the others reach the end: Python returns None


def test_falling_off_the_end_for_some_examples_is_an_error_as_return_none_is():
    _, xb = scalars([1.0, -1.0, 2.0, -3.0])
    with pytest.raises(TypeError, match=r"^@batch: the function returns a value for some "
                                        r"examples but reaches its end without a return for "
                                        r"examples \[1, 3\], where Python returns None"):
        returns_only_for_positive(xb)
    # Every example returns: the batch of their values; none does: None, as Python.
    _, positive = scalars([1.0, 2.0])
    assert [e.item() for e in returns_only_for_positive(positive).examples()] == [2.0, 4.0]
    assert returns_only_for_positive(torch.tensor([-1.0])) is None
