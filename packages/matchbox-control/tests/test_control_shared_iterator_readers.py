"""A shared iterator (held by a variable, an attribute or an item) that a call other than a
``for``, a comprehension or a fold reads under a per-example condition is refused
(``runtime.iterables.hand_over``, ``whole``): ``list(it)``, ``tuple(it)``, ``sorted(it)``,
``map(f, it)``, ``itertools.takewhile(p, it)``, ``[*it]``, ``a, b = it``, ``items.extend(it)``
and a helper ``@batch`` did not rewrite advanced it for every example, where the loop
advances it only for the examples that run the code: a later ``next(it, default)`` gave every
example the same answer, silently.  Iterators made in the call, shared iterators read where
every example runs, and calls that do not read them are per example, as in the loop."""

from __future__ import annotations

import collections
import functools
import itertools
import types
from collections.abc import Iterator

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox import MaskedBatch


def first_of(it):  # a helper @batch does not rewrite: it advances the iterator
    return next(it)


@matchbox.batch
def reads_under_a_condition(x, how):
    shared = iter([1.0, 2.0, 3.0])
    holder = types.SimpleNamespace(it=iter([4.0, 5.0]))
    its = [iter([6.0, 7.0])]
    total = x.sum((1, 2)) * 0
    items = []
    if x.sum() > 0:
        if how == "list":
            total = total + len(list(shared))
        if how == "tuple":
            total = total + len(tuple(shared))
        if how == "sorted":
            total = total + sorted(shared)[0]
        if how == "set":
            total = total + len(set(shared))
        if how == "map":
            total = total + sum(list(map(lambda v: v * 2, shared)))
        if how == "filter":
            total = total + len(list(filter(None, shared)))
        if how == "takewhile":
            total = total + len(list(itertools.takewhile(lambda v: v < 3, shared)))
        if how == "chain":
            total = total + len(list(itertools.chain(shared, [0.0])))
        if how == "zip":
            total = total + len(list(zip(shared, [1.0, 2.0])))
        if how == "deque":
            total = total + len(collections.deque(shared))
        if how == "counter":
            total = total + len(collections.Counter(shared))
        if how == "join":
            total = total + len(",".join(map(str, shared)))
        if how == "attribute":
            total = total + len(list(holder.it))
        if how == "item":
            total = total + len(list(its[0]))
        if how == "keyword":
            total = total + len(list(itertools.accumulate(iterable=shared)))
        if how == "partial":
            total = total + functools.partial(max, default=0.0)(shared)
        if how == "star":
            total = total + len([*shared])
        if how == "unpack":
            a, b, c = shared
            total = total + a
        if how == "spread":
            total = total + max(*shared)
        if how == "extend":
            items.extend(shared)
            total = total + len(items)
        if how == "helper":
            total = total + first_of(shared)
    return total + next(shared, 10.0) + next(holder.it, 20.0) + next(its[0], 30.0)


def mixed_signs(lengths, dtype=torch.float64):
    """Sequences every other one of which sums to less than zero (the condition's
    examples), and their batch."""
    xs = [torch.full((1, n, 3), 1.0 if i % 2 else -1.0, dtype=dtype)
          for i, n in enumerate(lengths)]
    return xs, MaskedBatch.fromlist(xs, (True, False))


_READ = (r"reads a shared {kind} under a per-example condition \(.*"
         r"test_control_shared_iterator_readers\.py, line \d+\): the iterator is one object "
         r"shared by every example, so reading it would advance it for the examples that do "
         r"not run this code too\. Read it where every example runs \(items = list\(it\) "
         r"before the condition\), then use the list")


@pytest.mark.parametrize("how, reader", [
    ("list", "list()"), ("tuple", "tuple()"), ("sorted", "sorted()"), ("set", "set()"),
    ("map", "map()"), ("filter", "filter()"), ("takewhile", r"itertools\.takewhile\(\)"),
    ("chain", r"itertools\.chain\(\)"), ("zip", "zip()"),
    ("deque", r"collections\.deque\(\)"), ("counter", r"collections\.Counter\(\)"),
    ("join", r"map\(\)"), ("attribute", "list()"), ("item", "list()"),
    ("partial", "max()"), ("star", r"a starred item \(\[\*it\]\)"),
    ("keyword", r"itertools\.accumulate\(\)"), ("unpack", r"unpacking \(a, b = it\)"),
    ("spread", r"a spread \(f\(\*it\)\)"), ("extend", r"extend\(\)"),
])
def test_a_shared_iterator_read_by_a_call_under_a_condition_is_refused(how, reader):
    xs, xb = mixed_signs([3, 2, 1, 4])
    loop = [reads_under_a_condition(x, how).item() for x in xs]
    # the loop advanced the iterator only for the examples that ran the read
    assert loop[0] != loop[1]
    reader = reader.replace("()", r"\(\)")
    with pytest.raises(NotImplementedError, match=rf"^@batch: {reader} " + _READ.format(
            kind="list_iterator")):
        reads_under_a_condition(xb, how)


def test_an_undecorated_helper_given_a_shared_iterator_under_a_condition_is_refused():
    xs, xb = mixed_signs([3, 2, 1, 4])
    assert [reads_under_a_condition(x, "helper").item() for x in xs] == [
        11.0, 13.0, 11.0, 13.0]
    with pytest.raises(NotImplementedError, match=(
            r"^@batch: first_of\(\) is given a shared list_iterator under a per-example "
            r"condition \(.*test_control_shared_iterator_readers\.py, line \d+\), and @batch "
            r"did not rewrite first_of: the iterator is one object shared by every example, "
            r"so what it reads of it would advance it for the examples that do not run this "
            r"code too\. Read it where every example runs \(items = list\(it\) before the "
            r"condition\), then use the list")):
        reads_under_a_condition(xb, "helper")


# Iterators made in the call, shared iterators read where every example runs, and calls
# handed a shared iterator that they do not read: per example, as in the loop.

@matchbox.batch
def keeps_its_iterator(it, x):  # decorated: handed the iterator, which it does not read
    return x * 2


@matchbox.batch
def reads_per_example(x):
    shared = iter([1.0, 2.0, 3.0])
    values = [1.0, 2.0]
    total = x.sum((1, 2)) * 0
    total = total + len(list(itertools.islice(shared, 1)))  # every example runs this
    for xt in x.unbind(1):
        s = xt.sum(1)
        if s.sum() > 0:
            total = total + s * len(list(map(lambda v: v * 2, values)))
            total = total + len(tuple(iter(values))) + sorted(v for v in values)[0]
            total = total + len(list(itertools.takewhile(lambda v: v < 2, values)))
            total = total + sum([*values]) + max(*values)
            a, b = values
            total = total + a * b + len(list(zip(iter(values), values)))
            total = total + isinstance(shared, Iterator)
            total = total + keeps_its_iterator(shared, s)
    rest = list(shared)
    return total + len(rest) + sum(rest)


@pytest.mark.parametrize("lengths", [(3, 0, 1, 4), (2,), (0,), (1, 1)])
def test_iterators_made_in_the_call_equal_the_loop(lengths, dtype):
    torch.manual_seed(2)
    assert_batch_equals_loop(reads_per_example, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("lengths", [(3, 0, 1, 4), (1,)])
def test_readers_where_every_example_runs_equal_the_loop(lengths, dtype):
    @matchbox.batch
    def reads_everywhere(x):
        shared = iter([1.0, 2.0, 3.0])
        first = list(itertools.takewhile(lambda v: v < 2, shared))
        a, *rest = shared
        return x.sum((1, 2)) * (len(first) + a) + len(rest)

    torch.manual_seed(3)
    assert_batch_equals_loop(reads_everywhere, sequences(lengths, dtype=dtype))
