"""``itertools.starmap``/``accumulate`` of steps only some examples have run per example (as
``map`` does), and a ``collections.deque`` of such steps is refused (``runtime.iterables``):
the builtins made every example's items, and ``len()`` counted the padded steps."""

from __future__ import annotations

import collections
import itertools

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox


def scaled(a, b):
    return a * b.tanh()


def added(a, b):
    return a + b


def larger(a, b):
    return torch.maximum(a, b * 2)


@matchbox.batch
def scales_by_the_starmapped_count(x):
    return x.sum(1) * len(list(itertools.starmap(scaled, zip(x.unbind(1), x.unbind(1)))))


@matchbox.batch
def appends_the_last_starmapped(x):
    pairs = [(s, s + 1) for s in x.unbind(1)]
    last = list(itertools.starmap(scaled, pairs))[-1]
    return torch.cat([x, last.unsqueeze(1)], 1)


@matchbox.batch
def sums_the_starmapped(x):
    h = x.sum(1) * 0
    for y in itertools.starmap(scaled, [(s, s) for s in x.unbind(1)]):
        h = h + y
    return h


@matchbox.batch
def means_the_running_totals(x):
    totals = list(itertools.accumulate(x.unbind(1)))
    return sum(totals, x.sum(1) * 0) / (len(totals) + 1)


@matchbox.batch
def appends_the_last_running_total(x):
    last = list(itertools.accumulate([s * 2 for s in x.unbind(1)], added))[-1]
    return torch.cat([x, last.unsqueeze(1)], 1)


@matchbox.batch
def counts_the_running_maxima_from_an_initial(x):
    tops = list(itertools.accumulate(x.unbind(1), larger, initial=x.sum(1) * 0))
    return tops[-1] * len(tops)


@matchbox.batch
def accumulates_the_positive_steps(x):
    kept = [s for s in x.unbind(1) if s.sum() > 0]
    totals = list(itertools.accumulate(kept, added, initial=x.sum(1) * 0))
    h = x.sum(1) * 0
    for t in totals:
        h = h + t.tanh()
    return h * len(totals)


@matchbox.batch
def accumulates_under_a_condition(x):
    h = x.sum(1)
    if h.sum() > 0:
        h = h * len(list(itertools.accumulate(x.unbind(1)))) + sum(
            itertools.starmap(scaled, zip(x.unbind(1), x.unbind(1))), h * 0)
    return h


@pytest.mark.parametrize("f", [scales_by_the_starmapped_count, appends_the_last_starmapped,
                               sums_the_starmapped, means_the_running_totals,
                               appends_the_last_running_total,
                               counts_the_running_maxima_from_an_initial,
                               accumulates_the_positive_steps, accumulates_under_a_condition])
@pytest.mark.parametrize("lengths", [(2, 4, 1, 3), (1,), (3,)])
def test_starmap_and_accumulate_over_steps_equal_the_loop(f, lengths, dtype):
    torch.manual_seed(0)
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("f", [scales_by_the_starmapped_count, sums_the_starmapped,
                               means_the_running_totals, accumulates_the_positive_steps,
                               accumulates_under_a_condition])
def test_starmap_and_accumulate_over_steps_with_an_empty_example_equal_the_loop(f, dtype):
    torch.manual_seed(1)
    assert_batch_equals_loop(f, sequences((0, 2, 1, 3), dtype=dtype))


@matchbox.batch
def plain_iterables(x):
    pairs = [(x, x * 2), (x, x - 1)]
    return (sum(itertools.starmap(scaled, pairs)) * len(list(itertools.accumulate([1, 2, 3])))
            + collections.deque([x, x * 2], maxlen=1)[0])


def test_starmap_accumulate_and_deque_of_plain_items_are_the_builtins(dtype):
    torch.manual_seed(2)
    assert_batch_equals_loop(plain_iterables, sequences((2, 4, 1), dtype=dtype))


@matchbox.batch
def a_deque_of_steps(x):
    window = collections.deque(x.unbind(1), maxlen=2)
    return window[0] * len(window)


@matchbox.batch
def a_deque_of_a_generator_of_steps(x):
    window = collections.deque((s * 2 for s in x.unbind(1)), 2)
    return window[0]


@matchbox.batch
def a_deque_extended_by_steps(x):
    window = collections.deque(maxlen=2)
    window.extend(x.unbind(1))
    return window[0]


@matchbox.batch
def a_deque_extended_left_by_steps(x):
    window = collections.deque()
    window.extendleft(s for s in x.unbind(1))
    return window[0]


@matchbox.batch
def a_deque_appended_a_step(x):
    window = collections.deque([x.sum(1)])
    window.append(next(iter(x.unbind(1))))  # (absent for an example without steps)
    return window[0]


@matchbox.batch
def a_deque_appended_in_a_loop_over_steps(x):
    window = collections.deque(maxlen=2)
    for s in x.unbind(1):
        window.append(s)
    return window[0]


@pytest.mark.parametrize("f, what", [
    (a_deque_of_steps, r"collections\.deque\(\)"),
    (a_deque_of_a_generator_of_steps, r"collections\.deque\(\)"),
    (a_deque_extended_by_steps, r"deque\.extend\(\)"),
    (a_deque_extended_left_by_steps, r"deque\.extendleft\(\)"),
    (a_deque_appended_a_step, r"deque\.append\(\)"),
])
def test_a_deque_of_items_only_some_examples_have_is_refused(f, what):
    _, xb = sequences((2, 4, 0) if f is a_deque_appended_a_step else (2, 4, 1))
    with pytest.raises(NotImplementedError, match=what + r" \(.*test_control_iterables\.py, "
                       r"line \d+\) of items only some examples have .* a deque cannot keep "
                       r"which examples have an item, .* Keep them in a list"):
        f(xb)


def test_a_deque_appended_in_a_loop_over_steps_is_refused():
    _, xb = sequences((2, 4, 1))
    with pytest.raises(NotImplementedError, match=r"deque\.append\(\) under a per-example "
                       "condition: a Python deque is shared by every example"):
        a_deque_appended_in_a_loop_over_steps(xb)


@pytest.mark.parametrize("f", [a_deque_of_steps, a_deque_extended_by_steps])
@pytest.mark.parametrize("lengths", [(3, 3), (2,)])
def test_a_deque_of_steps_every_example_has_is_the_builtin(f, lengths, dtype):
    torch.manual_seed(3)
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype))
