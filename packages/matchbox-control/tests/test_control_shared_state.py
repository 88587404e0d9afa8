"""Python objects every example shares, changed under a per-example condition.

In the loop each example changes them only where it runs; in a batch they are one
object, which keeps no record of which examples changed it.  A user trial found sets,
deques, heaps (``heapq``, ``bisect``) and iterators (``next``) changed for every example,
silently: they are refused, naming the call.  Where every example runs the code there is
no condition, and they are plain Python, as in the loop."""

from __future__ import annotations

import bisect
import collections
import heapq
import itertools

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox


def change(how, state, i):
    seen, queue, heap, counter, counts = state
    if how == "set":
        seen.add(i)
    elif how == "deque":
        queue.append(i)
    elif how == "heappush":
        heapq.heappush(heap, -i)
    elif how == "insort":
        bisect.insort(heap, -i)
    elif how == "next":
        seen.add(next(counter))
    elif how == "Counter":
        counts.update([i])


change = matchbox.batch(change)


@matchbox.batch
def changes_shared_state(x, how, where="if"):
    """Changes state of the kind ``how`` under an ``if`` in a loop over ``x``'s steps, in
    that loop, or ``everywhere`` (a loop over a plain ``range``)."""
    state = set(), collections.deque(), [], itertools.count(), collections.Counter()
    if where == "everywhere":
        for i in range(3):
            change(how, state, i)
    else:
        i = 0
        for xt in x.unbind(1):
            if where == "loop" or xt.sum() > 0:
                change(how, state, i)
            i = i + 1
    seen, queue, heap, _, counts = state
    return x.sum(1) * 0 + len(seen) + len(queue) + len(heap) + sum(counts.values())


REFUSALS = {
    "set": r"@batch: set.add\(\) under a per-example condition: a Python set is shared by "
           r"every example, so it would change for the examples that do not run this code too",
    "deque": r"@batch: deque.append\(\) under a per-example condition: a Python deque is "
             r"shared by every example",
    "heappush": r"@batch: heapq.heappush\(\) under a per-example condition \(.*"
                r"test_control_shared_state.py, line \d+\): the list it changes is shared by "
                r"every example, so it would change for the examples that do not run this code",
    "insort": r"@batch: bisect.insort_right\(\) under a per-example condition \(.*\): the list "
              r"it changes is shared by every example",
    "next": r"@batch: next\(\) under a per-example condition \(.*\): the count it advances is "
            r"shared by every example, so it would advance for the examples that do not run",
    "Counter": r"@batch: Counter.update\(\) under a per-example condition: a Python Counter is "
               r"shared by every example",
}


@pytest.mark.parametrize("how", REFUSALS)
def test_shared_state_changed_under_a_per_example_condition_is_refused(how):
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(NotImplementedError, match=REFUSALS[how]):
        changes_shared_state(xb, how)


@pytest.mark.parametrize("how", ["set", "deque"])
def test_shared_state_changed_in_a_loop_over_a_dynamic_dimension_is_refused(how):
    # No `if`: each step of the loop runs for the examples that have it, a condition too
    # (the loop changes the set four times for the first example, not six).
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(NotImplementedError, match=REFUSALS[how]):
        changes_shared_state(xb, how, "loop")


@pytest.mark.parametrize("how", REFUSALS)
def test_shared_state_changed_where_every_example_runs_is_plain_python(how, dtype):
    assert_batch_equals_loop(lambda x: changes_shared_state(x, how, "everywhere"),
                             sequences([4, 0, 1, 6], dtype=dtype))


def _add_to(seen, i):
    seen.add(i)


@matchbox.batch
def undecorated_set_change(x):
    seen = set()
    for i, xt in enumerate(x.unbind(1)):
        if xt.sum() > 0:
            _add_to(seen, i)
    return x.sum(1) * 0 + len(seen)


def test_a_set_given_to_an_undecorated_helper_under_a_condition_is_refused():
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(NotImplementedError,
                       match=r"@batch: _add_to\(\) is given a Python set under a per-example "
                             r"condition .*Decorate _add_to with @matchbox.batch"):
        undecorated_set_change(xb)


@matchbox.batch
def keys_per_example(x, prefilled):
    d = {"pos": x.sum(1) * 0} if prefilled else {}
    for xt in x.unbind(1):
        if xt.sum() > 0:
            d["pos"] = xt
    return d["pos"] + len(d)


def test_a_key_added_under_a_per_example_condition_is_refused():
    # The dict is shared: `len(d)`, `'pos' in d`, `d.items()` counted the key for every
    # example (a user trial).
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(NotImplementedError,
                       match=r"@batch: dict\['pos'\] = \.\.\. under a per-example condition "
                             r"adds the key 'pos', but a Python dict is shared by every "
                             r"example: len\(\), 'in', keys\(\) and items\(\) would count it "
                             r"also for the examples that do not run this code"):
        keys_per_example(xb, prefilled=False)


def test_a_key_given_a_value_first_is_overwritten_per_example(dtype):
    # What the refusal says to write.
    assert_batch_equals_loop(lambda x: keys_per_example(x, prefilled=True),
                             sequences([4, 0, 1, 6], dtype=dtype))


@matchbox.batch
def filters_with_a_builtin(x):
    kept = list(filter(lambda xt: xt.sum() > 0, x.unbind(1)))
    return len(kept)


def test_a_builtin_asking_a_batch_for_its_truth_says_where_to_write_the_condition():
    # It said to decorate the function, which was decorated (a user trial).
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(ValueError,
                       match=r"the truth value of a MaskedBatch is ambiguous .*write the "
                             r"condition in the decorated function, .* a builtin \(filter, "
                             r"sorted, .*\), or a helper or generator that is not decorated "
                             r"with @matchbox.batch, asked for it here"):
        filters_with_a_builtin(xb)


@matchbox.batch
def first_parameters_device(x, layer):
    total = x.sum(1) * 0
    for xt in x.unbind(1):
        if xt.sum() > 0:
            # A fresh iterator, shared by nothing: not refused.
            total = total + torch.ones(1, device=next(layer.parameters()).device)
            total = total + next(iter([xt.sum(-1)]))
    return total


def test_next_of_an_iterator_made_there_is_not_refused(dtype):
    layer = torch.nn.Linear(3, 3)
    assert_batch_equals_loop(lambda x: first_parameters_device(x, layer),
                             sequences([4, 0, 1, 6], dtype=dtype))
