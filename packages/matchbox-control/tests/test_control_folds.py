"""``sum``, ``max``, ``min``, ``any``, ``all`` and ``functools.reduce`` fold each
example's own items, as in the loop over examples; ``max(a, b)`` of batches picks
per example as Python does."""

from __future__ import annotations

import functools
from functools import reduce

import pytest
import torch
from control_cases import assert_batch_equals_loop, assert_oracle, per_example, scalars, sequences
from hypothesis import given
from hypothesis import strategies as st

import matchbox
from matchbox import MaskedBatch


@matchbox.batch
def largest_square_below(n):
    return max((i * i for i in range(n)), default=-1)


def test_oracle_max_with_default():
    assert_oracle(largest_square_below, [0, 1, 3, 5], [-1, 0, 4, 16], dtype=torch.int64)


@matchbox.batch
def builtin_max_of_two(a, b):
    return max(a, b) * 2 + min(a, b)


def test_oracle_builtin_max_and_min_of_two_batches():
    _, a = scalars([1.0, 5.0, -2.0])
    _, b = scalars([3.0, 2.0, -2.0])
    assert per_example(builtin_max_of_two(a, b)) == [7.0, 12.0, -6.0]


def test_builtin_max_of_two_values_and_gradients(dtype):
    assert_batch_equals_loop(builtin_max_of_two, scalars([1.0, 5.0, -2.0, 0.5], dtype),
                             scalars([3.0, 2.0, -2.0, 0.5], dtype))


@matchbox.batch
def max_with_number(a):
    return max(a, 0.0, key=None) + min(1.0, a)


def test_builtin_max_of_a_batch_and_a_number(dtype):
    assert_batch_equals_loop(max_with_number, scalars([-1.0, 0.5, 2.0], dtype))


def test_builtin_max_of_examples_with_several_values_is_refused():
    @matchbox.batch
    def f(x):
        return max(x, x * 2)

    _, xb = sequences([2, 3])
    with pytest.raises(ValueError, match=r"a max\(\) comparison must hold one truth value per "
                                         r"example.*reduce each example first"):
        f(xb)


@matchbox.batch
def step_sums(x):
    return sum(xt.sum(-1) for xt in x.unbind(1))


@matchbox.batch
def best_step(x):
    return max((xt for xt in x.unbind(1)), key=lambda xt: xt.sum())


@matchbox.batch
def worst_step(x):
    return min(x.unbind(1), key=lambda xt: xt.sum(-1))


@matchbox.batch
def folded(x):
    return functools.reduce(lambda a, b: a * 0.5 + b, x.unbind(1))


@matchbox.batch
def folded_with_initial(x):
    return reduce(lambda a, b: (a + b).tanh(), (xt * 2 for xt in x.unbind(1)), x.sum(1) * 0)


@pytest.mark.parametrize("f", [step_sums, best_step, worst_step, folded])
@given(lengths=st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_folds_over_steps(f, lengths):
    assert_batch_equals_loop(f, sequences(lengths))


@pytest.mark.parametrize("f", [step_sums, best_step, worst_step, folded, folded_with_initial])
def test_folds_over_steps_float32_and_one_example(f):
    assert_batch_equals_loop(f, sequences([3, 1, 2], dtype=torch.float32))
    assert_batch_equals_loop(f, sequences([2]))


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_reduce_with_initial_over_empty_examples(lengths):
    assert_batch_equals_loop(folded_with_initial, sequences(lengths))


@matchbox.batch
def positive_steps_max(x):
    # A filter makes each example's items start at different steps.
    return max((xt.sum() for xt in x.unbind(1) if xt.sum() > 0), default=x.sum() * 0)


def test_max_of_filtered_items_with_default(dtype):
    assert_batch_equals_loop(positive_steps_max, sequences([4, 0, 3, 1, 2], dtype=dtype))


@pytest.mark.parametrize("f, message", [
    (best_step, r"max\(\) arg is an empty sequence for examples \[1\]"),
    (folded, r"reduce\(\) of empty iterable with no initial value for examples \[1\]"),
])
def test_an_example_without_items_raises_as_python_does(f, message):
    _, xb = sequences([2, 0, 1])
    with pytest.raises((ValueError, TypeError), match=message):
        f(xb)


@matchbox.batch
def any_large(x):
    return any(xt.abs().max() > 1 for xt in x.unbind(1))


@matchbox.batch
def all_large(x):
    return all(xt.abs().max() > 0.5 for xt in x.unbind(1))


@pytest.mark.parametrize("f", [any_large, all_large])
@pytest.mark.parametrize("lengths", [[3, 0, 1, 4], [1], [0, 0]])
def test_any_and_all_over_each_examples_steps(f, lengths):
    xs, xb = sequences(lengths)
    result = f(xb)
    # With no item at all (every example empty), Python's own answer, a plain bool.
    batched = per_example(result) if isinstance(result, MaskedBatch) else [result] * len(xs)
    assert batched == [f(x) for x in xs]


def test_oracle_any_and_all_of_empty_examples():
    xs, xb = sequences([0, 2])
    xb.data[1] = 5.0  # every step of example 1 is large
    assert per_example(any_large(xb)) == [False, True]
    assert per_example(all_large(xb)) == [True, True]


@matchbox.batch
def any_under_branch(x):
    if x.sum() > 0:
        return any(xt.sum() > 2 for xt in x.unbind(1))
    return x.sum() > 100


def test_any_inside_a_branch():
    xs, xb = sequences([3, 1, 0, 2, 4])
    assert per_example(any_under_branch(xb)) == [bool(any_under_branch(x)) for x in xs]


def test_plain_values_are_pythons_own():
    @matchbox.batch
    def f(values):
        return (sum(values), sum(values, 10), max(values), min(values, key=abs),
                max([], default=None), any(v > 2 for v in values), all(values),
                reduce(lambda a, b: a * b, values))

    values = [3, -1, 2]
    assert f(values) == f.__wrapped__(values)
    with pytest.raises(ValueError):
        f([])


def test_any_short_cuts_on_plain_items():
    seen = []

    @matchbox.batch
    def f(values):
        return any(seen.append(v) or v > 0 for v in values)

    assert f([-1, 3, 5]) is True
    assert seen == [-1, 3]


def test_a_users_own_sum_is_called_as_it_is():
    def sum(values):  # noqa: A001 - shadows the builtin on purpose
        return "mine"

    @matchbox.batch
    def f(x):
        return sum(xt for xt in x.unbind(1))

    _, xb = sequences([2, 1])
    assert f(xb) == "mine"


@matchbox.batch
def folds_of_ranges(n):
    return sum(range(n)) + max(range(n + 1)) * 10 + reduce(lambda a, b: a + b, range(n), 100)


def test_oracle_folds_of_a_per_example_range():
    assert_oracle(folds_of_ranges, [0, 1, 3], [100, 110, 136], dtype=torch.int64)


def test_any_of_examples_with_several_values_is_refused():
    @matchbox.batch
    def f(x):
        return any(xt for xt in x.unbind(1))

    _, xb = sequences([2, 3])
    with pytest.raises(ValueError, match=r"a value tested by any\(\) must hold one truth value "
                                         r"per example"):
        f(xb)
