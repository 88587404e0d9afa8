"""A per-example list handed over to code that is not ``items.append(v)`` in the decorated
function itself (issue 24 §1, found by a user trial after the merged lists were fixed).

An append reached as a value (``add = items.append``, ``list.append(items, v)``,
``items.__iadd__``, ``operator.iadd``, ``getattr(items, "append")``, and later a lambda
or ``functools.partial`` around it) appended for every example under a per-example ``if``; a helper that ``@batch`` did not rewrite appended for
every example, and read padding items and the padded count (``lst[-1]``, ``len(lst)``),
whether it was given the list or closed over it.  The first now appends for the running examples only; the second is refused, saying to
decorate the helper, which then equals the loop."""

from __future__ import annotations

import functools
import operator

import pytest
from control_cases import assert_batch_equals_loop, sequences

import matchbox


def keep_positive(x, spelling):
    """The steps of ``x`` whose sum is positive, appended with ``spelling``; their count
    and their sum (the loop's answer whatever the spelling)."""
    kept = []
    add = kept.append
    add_lambda = lambda u: kept.append(u)  # noqa: E731
    add_partial = functools.partial(list.append, kept)
    count = lambda: len(kept)  # noqa: E731
    for v in x.unbind(1):
        if v.sum() > 0:
            if spelling == "bound":
                add(v)
            elif spelling == "lambda":
                add_lambda(v)
            elif spelling == "partial":
                add_partial(v)
            elif spelling == "unbound":
                list.append(kept, v)
            elif spelling == "dunder":
                kept.__iadd__([v])
            elif spelling == "operator":
                operator.iadd(kept, [v])
            else:
                kept.append(v)
    return x.sum(1) * 0 + count(), sum(kept, x.sum(1) * 0)


@pytest.mark.parametrize("spelling", ["bound", "unbound", "dunder", "operator", "getattr",
                                      "lambda", "partial"])
def test_an_append_reached_as_a_value_appends_for_the_running_examples(spelling, dtype):
    f = matchbox.batch(keep_positive)
    xs, xb = sequences([3, 1, 2, 0, 4], dtype=dtype)
    assert_batch_equals_loop(lambda x: f(x, spelling), (xs, xb))


def last(items):
    return items[-1]


def push(items, v):
    items.append(v)


@matchbox.batch
def reads_in_a_helper(x):
    kept = []
    for v in x.unbind(1):
        if v.sum() > 0:
            kept.append(v)
    return last(kept)


@matchbox.batch
def appends_in_a_helper(x):
    kept = []
    for v in x.unbind(1):
        if v.sum() > 0:
            push(kept, v)
    return sum(kept, x.sum(1) * 0)


@matchbox.batch
def maps_an_append(x):
    kept = []
    for v in x.unbind(1):
        if v.sum() > 0:
            list(map(kept.append, [v]))
    return sum(kept, x.sum(1) * 0)


def test_a_helper_reading_a_per_example_list_is_refused_saying_to_decorate_it():
    _, xb = sequences([3, 1, 2])
    with pytest.raises(NotImplementedError,
                       match=r"@batch: last\(\) is given a list whose items only some examples "
                             r"have \(.*test_control_list_handovers.py, line \d+\), but @batch "
                             r"did not rewrite last.*Decorate last with @matchbox.batch"):
        reads_in_a_helper(xb)


def test_a_helper_appending_under_a_condition_is_refused_saying_to_decorate_it():
    _, xb = sequences([3, 1, 2])
    with pytest.raises(NotImplementedError,
                       match=r"@batch: push\(\) is given a Python list under a per-example "
                             r"condition .*Decorate push with @matchbox.batch"):
        appends_in_a_helper(xb)


def appender(items):
    def append(v):
        items.append(v)
    return append


@matchbox.batch
def appends_in_a_closure(x):
    kept = []
    add = appender(kept)
    for v in x.unbind(1):
        if v.sum() > 0:
            add(v)
    return sum(kept, x.sum(1) * 0)


def test_a_closure_over_a_list_appending_under_a_condition_is_refused():
    _, xb = sequences([3, 1, 2])
    with pytest.raises(NotImplementedError,
                       match=r"@batch: appender.<locals>.append\(\) closes over a Python list "
                             r"under a per-example condition .*Decorate "
                             r"appender.<locals>.append with @matchbox.batch"):
        appends_in_a_closure(xb)


def test_the_closure_decorated_equals_the_loop(dtype, monkeypatch):
    # What the refusal says to write: the closure appends for the running examples.
    plain = appender
    monkeypatch.setitem(globals(), "appender", lambda items: matchbox.batch(plain(items)))
    assert_batch_equals_loop(appends_in_a_closure, sequences([3, 1, 2, 0, 4], dtype=dtype))


def test_an_append_given_to_a_builtin_under_a_condition_is_refused():
    _, xb = sequences([3, 1, 2])
    with pytest.raises(NotImplementedError,
                       match=r"a list's or dict's write method is given to map\(\) under a "
                             r"per-example condition"):
        maps_an_append(xb)


def test_the_decorated_helpers_equal_the_loop(dtype, monkeypatch):
    # What the refusals say to write.  Every example's first step is kept (its sum made
    # positive), so that each example's list has a last item, as the loop needs.
    monkeypatch.setitem(globals(), "last", matchbox.batch(last))
    monkeypatch.setitem(globals(), "push", matchbox.batch(push))
    xs, _ = sequences([3, 1, 2, 4], dtype=dtype)
    for x in xs:
        x[:, 0] = x[:, 0].abs()
    xb = matchbox.MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    for f in (reads_in_a_helper, appends_in_a_helper):
        assert_batch_equals_loop(f, (xs, xb))
