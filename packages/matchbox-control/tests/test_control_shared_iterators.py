"""A shared iterator (held by a variable, an attribute or an item) that a ``for``, a
comprehension or a fold reads under a per-example condition is refused
(``runtime.iterables.shared_iterable``), as ``next(it)`` is: reading it advanced it for the
examples that do not run the code too, silently.  Iterators made where they are read, and
lists, are read per example as before."""

from __future__ import annotations

import types

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox


@matchbox.batch
def reads_a_shared_iterator(x, how):
    shared = iter([1.0, 2.0, 3.0, 4.0])
    holder = types.SimpleNamespace(it=iter([5.0, 6.0]))
    total = x.sum(1) * 0
    for xt in x.unbind(1):
        if xt.sum() > 0:
            if how == "for":
                for v in shared:
                    total = total + xt.sum(1) * v
                    break
            elif how == "comprehension":
                total = total + sum([v * 2 for v in shared])
            elif how == "fold":
                total = total + max(shared)
            elif how == "enumerate":
                for i, v in enumerate(shared):
                    total = total + v * i
            elif how == "zip":
                for a, v in zip([1.0, 2.0], holder.it):
                    total = total + a * v
            elif how == "attribute":
                total = total + sum(v for v in holder.it)
    return total + next(shared)


@pytest.mark.parametrize("how, kind", [
    ("for", "list_iterator"), ("comprehension", "list_iterator"), ("fold", "list_iterator"),
    ("enumerate", "list_iterator"), ("zip", "list_iterator"), ("attribute", "list_iterator"),
])
def test_a_shared_iterator_read_under_a_per_example_condition_is_refused(how, kind):
    torch.manual_seed(0)
    xs, xb = sequences([3, 0, 1, 4])
    with pytest.raises(NotImplementedError, match=(
            rf"@batch: a for statement, comprehension or fold reads a shared {kind} under a "
            r"per-example condition \(.*test_control_shared_iterators\.py, line \d+\): the "
            r"iterator is one object shared by every example, so reading it would advance it "
            r"for the examples that do not run this code too\. Read it where every example "
            r"runs \(items = list\(it\) before the condition\)")):
        reads_a_shared_iterator(xb, how)


@matchbox.batch
def consumes(it, x):
    total = x.sum(1) * 0
    for v in it:
        total = total + v
    return total


@matchbox.batch
def calls_a_consumer_under_a_condition(x):
    shared = iter([1.0, 2.0])
    y = x.sum(1)
    if y.sum() > 0:
        y = y + consumes(shared, x)
    return y


def test_a_decorated_helper_reading_a_shared_iterator_under_a_condition_is_refused():
    _, xb = sequences([3, 0, 1, 4])
    with pytest.raises(NotImplementedError, match=r"reads a shared list_iterator under a "
                                                  r"per-example condition"):
        calls_a_consumer_under_a_condition(xb)


# Iterators made where they are read, lists, and shared iterators read where every example
# runs: per example, as in the loop.

@matchbox.batch
def reads_fresh_iterables(x):
    shared = iter([1.0, 2.0, 3.0])
    values = [1.0, 2.0]
    total = x.sum(1) * 0
    for v in shared:  # every example runs this loop
        total = total + x.sum(1) * v
    for xt in x.unbind(1):
        if xt.sum() > 0:
            for v in values:
                total = total + xt.sum(1) * v
            for i, v in enumerate(values):
                total = total + v * i
            for a, b in zip(values, (s * 2 for s in values)):
                total = total + xt.sum(1) * a * b
            for v in iter(values):
                total = total + v
            total = total + sum(v for v in values) + max(values)
            total = total + sum([v * xt.sum(1) for v in (w + 1 for w in values)])
    return total


@pytest.mark.parametrize("lengths", [(3, 0, 1, 4), (2,), (0,)])
def test_iterators_made_where_they_are_read_equal_the_loop(lengths, dtype):
    torch.manual_seed(1)
    assert_batch_equals_loop(reads_fresh_iterables, sequences(lengths, dtype=dtype))
