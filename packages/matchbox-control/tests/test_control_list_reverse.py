"""``items.reverse()`` of a list whose items only some examples have (a Viterbi
backtrace's path, per-step outputs of a loop over a dynamic dimension): each example's
own items, reversed in place, as ``items[::-1]`` gives them; refused under a per-example
condition (the list is every example's), as the other positional writes are."""

from __future__ import annotations

import pytest
from control_cases import assert_batch_equals_loop, sequences

import matchbox


@matchbox.batch
def reversed_in_place(x):
    path = []
    for xt in x.unbind(1):
        path.append(xt.sum(1) * 2)
    path.reverse()
    acc = x.sum(1).sum(1) * 0
    for p in path:
        acc = acc * 0.5 + p  # order matters: the first item weighs least
    return acc + len(path)


@matchbox.batch
def first_and_last_after_reversing(x):
    path = [xt.tanh() for xt in x.unbind(1)]
    path.reverse()
    return path[0] * 3 + path[-1]


@matchbox.batch
def reversed_under_a_condition(x):
    path = [xt for xt in x.unbind(1)]
    if x.sum() > 0:
        path.reverse()
    return path[0]


@pytest.mark.parametrize("lengths", [[3, 1, 0, 5], [1], [2, 2]])
def test_a_reversed_list_of_steps_equals_the_loop(lengths, dtype):
    assert_batch_equals_loop(reversed_in_place, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("lengths", [[3, 1, 4], [1], [2, 5]])
def test_its_first_and_last_items_are_each_examples_own(lengths, dtype):
    assert_batch_equals_loop(first_and_last_after_reversing, sequences(lengths, dtype=dtype))


def test_reversing_under_a_per_example_condition_is_refused():
    _, xb = sequences([3, 1, 4])
    with pytest.raises(NotImplementedError, match=r"\.reverse\(\)"):
        reversed_under_a_condition(xb)
