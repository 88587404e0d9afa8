"""Two messages of ``@batch`` that named the wrong cause (a review):

- ``x.unbind(1)[-1]`` returned by an undecorated helper was refused as the value of "a
  loop that ran past the example's end", where there is no loop: in a function ``@batch``
  did not rewrite, ``x.unbind(1)`` is the batch's padded steps and ``[-1]`` the longest
  example's last, which the shorter examples do not have (the loop gives each its own
  last step).  Still refused, saying so; decorated, or written ``x[:, -1]``, it equals
  the loop.
- ``copy.copy(items)`` of a per-example list was refused saying to decorate ``copy``.
  It is a new list of the same items, as ``list(items)`` is: it keeps each example's
  own items now, and ``copy.deepcopy(items)`` keeps them too (each copy keeps its
  item's record of the examples that have it).
"""

from __future__ import annotations

import copy

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox


def last_step(x):  # undecorated
    return x.unbind(1)[-1]


def own_last_step(x):  # undecorated, each example's own last step
    return x[:, -1]


@matchbox.batch
def doubled_last_step(x):
    return last_step(x) * 2


@matchbox.batch
def doubled_own_last_step(x):
    return own_last_step(x) * 2 + x.unbind(1)[-1]


LAST_STEP = (
    r"@batch: last_step\(\) \(.*\) is not rewritten by @batch, and the value it returns has "
    r"none for example 1 \(examples without one: 1, 2\): it is a step past the example's "
    r"end, or was computed from one \(in a function @batch did not rewrite, x\.unbind\(d\) "
    r"is the batch's padded steps: x\.unbind\(d\)\[-1\] is the longest example's last "
    r"step, and a plain for over x\.unbind\(d\), or map over it, runs every step for every "
    r"example\), where the loop over examples gives the example its own last step or "
    r"state; .* Decorate last_step with @matchbox\.batch, which runs each example for its "
    r"own steps only \(there x\.unbind\(d\)\[-1\] is each example's own last step; "
    r"x\[:, -1\] is, anywhere\)$")


def test_an_undecorated_helpers_last_step_is_refused_naming_the_step():
    with pytest.raises(ValueError, match=LAST_STEP):
        doubled_last_step(sequences([3, 1, 2])[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [[3, 1, 2], [2], [4, 4]])
def test_what_the_refusal_says_to_write_equals_the_loop(lengths, dtype, monkeypatch):
    assert_batch_equals_loop(doubled_own_last_step, sequences(lengths, dtype=dtype))
    monkeypatch.setitem(globals(), "last_step", matchbox.batch(last_step))
    assert_batch_equals_loop(doubled_last_step, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("lengths", [[4], [2, 2]])
def test_an_undecorated_helpers_last_step_where_every_example_has_it(lengths):
    assert_batch_equals_loop(doubled_last_step, sequences(lengths))


# ---------------------------------------------------------------- copies of per-example lists

@matchbox.batch
def a_copy_appended_to(x):
    items = [xt.sin() for xt in x.unbind(1)]
    other = copy.copy(items)
    other.append(x.sum(1))
    return torch.stack(other, 1).sum(1) + len(other) * len(items) + other[-1]


@matchbox.batch
def a_copy_under_a_condition(x):
    items = [xt * 2 for xt in x.unbind(1)]
    y = x.sum(1)
    if len(items) > 1:
        other = copy.copy(items)
        other.append(y)
        y = other[-2] + len(other)
    return y


@matchbox.batch
def a_deep_copy(x):
    items = [(xt * 2, xt.cos()) for xt in x.unbind(1)]
    other = copy.deepcopy(items)
    total = x.sum(1) * 0.0
    for a, b in other:
        total = total + a * b
    return total + len(other)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [[3, 1, 2, 0], [2], [0], [4, 4]])
def test_copies_of_a_per_example_list_equal_the_loop(lengths, dtype):
    assert_batch_equals_loop(a_copy_appended_to, sequences(lengths, dtype=dtype))
    assert_batch_equals_loop(a_copy_under_a_condition, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("lengths", [[3, 1, 2, 0], [2], [4, 4]])
def test_a_deep_copy_of_a_per_example_list_equals_the_loop(lengths):
    # deepcopy copies leaves only (as in the loop): values, no gradients to compare.
    with torch.no_grad():
        assert_batch_equals_loop(a_deep_copy, sequences(lengths), check_grad=False)
