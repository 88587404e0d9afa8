"""Python objects every example shares, changed under a per-example condition.

In the loop each example changes them only where it runs; in a batch they are one
object, which keeps no record of which examples changed it.  A user trial found sets,
deques, heaps (``heapq``, ``bisect``) and iterators (``next``) changed for every example,
silently: they are refused, naming the call.  Where every example runs the code there is
no condition, and they are plain Python, as in the loop."""

from __future__ import annotations

import bisect
import collections
import functools
import heapq
import itertools
import operator

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
def keys_written_in_both_sides(x):
    d = {}
    for xt in x.unbind(1):
        step = {}  # a dict made in the step
        if xt.sum() > 0:
            d["last"] = xt
            step["h"] = xt * 2
        else:
            d["last"] = -xt
            step["h"] = xt
        d["h"] = step["h"]
    return x.sum(1) * 0 + len(d)


def test_a_key_every_example_writes_equals_the_loop(dtype):
    # A key written in both sides of an `if`, in a dict made in the step: every example
    # that runs the loop has it (a review found a refusal of new keys refusing these).
    assert_batch_equals_loop(keys_written_in_both_sides, sequences([4, 1, 6], dtype=dtype))


@matchbox.batch
def shared_writes_spelled_otherwise(x, how):
    seen, queue = set(), collections.deque([0, 1])
    for i, xt in enumerate(x.unbind(1)):
        if xt.sum() > 0:
            if how == "|=":
                seen |= {i}
            elif how == "unbound":
                set.add(seen, i)
            elif how == "popleft":
                queue.popleft()
            elif how == "partial subclass":
                Partial(set.add, seen)(i)
    return x.sum(1) * 0 + len(seen) + len(queue)


class Partial(functools.partial):
    pass


@pytest.mark.parametrize("how, refusal", [
    ("|=", r"@batch: set \|= \.\.\. under a per-example condition"),
    ("unbound", r"@batch: set.add\(\) under a per-example condition"),
    ("popleft", r"@batch: deque.popleft\(\) under a per-example condition"),
    ("partial subclass", r"@batch: set.add\(\) under a per-example condition"),
])
def test_shared_writes_spelled_otherwise_are_refused(how, refusal):
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(NotImplementedError, match=refusal):
        shared_writes_spelled_otherwise(xb, how)


class Meter:
    def __init__(self):
        self.count = 0

    def add(self, items):  # a method named as a set's write, of another object
        self.count += len(items)


@matchbox.batch
def gives_a_per_example_list_to_a_method(x, meter):
    kept = []
    for xt in x.unbind(1):
        if xt.sum() > 0:
            kept.append(xt)
    meter.add(kept)
    return x.sum(1) * 0


def test_a_method_named_add_given_a_per_example_list_is_refused():
    # `add` is a set's write; on another object it is a call like any other, whose
    # per-example list is refused as before (a review found it let through).
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(NotImplementedError,
                       match=r"@batch: Meter.add\(\) is given a list whose items only some "
                             r"examples have"):
        gives_a_per_example_list_to_a_method(xb, Meter())


def make_block(weights):
    def run(h):
        for w in weights:  # reads the list it closes over, writes none
            h = torch.tanh(h @ w)
        return h
    return run


@matchbox.batch
def steps_through_a_block(x, block):
    h = x.sum(1) * 0
    for xt in x.unbind(1):
        if xt.sum() > 0:
            h = block(h + xt)
    return h


def test_a_closure_reading_its_list_of_layers_is_not_refused(dtype):
    # A factory's function that only reads what it closes over, its layers' weights (a
    # review found it refused as one appending to it is).
    torch.manual_seed(0)
    block = make_block([torch.randn(3, 3, dtype=dtype), torch.randn(3, 3, dtype=dtype)])
    assert_batch_equals_loop(lambda x: steps_through_a_block(x, block),
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
            total = total + torch.ones(1, device=next(iter(layer.parameters())).device)
            total = total + next(iter([xt.sum(-1)]))
    return total


def test_next_of_an_iterator_made_there_is_not_refused(dtype):
    layer = torch.nn.Linear(3, 3)
    assert_batch_equals_loop(lambda x: first_parameters_device(x, layer),
                             sequences([4, 0, 1, 6], dtype=dtype))


@matchbox.batch
def writes_through_operator(x, how):
    d, items, seen = {"last": x.sum(1) * 0}, [], set()
    for i, xt in enumerate(x.unbind(1)):
        if xt.sum() > 0:
            if how == "setitem":
                operator.setitem(d, "last", xt * 2)
            elif how == "__setitem__":
                d.__setitem__("last", xt * 2)
            elif how == "iconcat":
                operator.iconcat(items, [xt * 2])
            elif how == "iadd":
                operator.iadd(items, [xt * 2])
            elif how == "delitem":
                operator.delitem(d, "last")
            elif how == "ior":
                operator.ior(seen, {i})
            elif how == "imul":
                operator.imul(items, 2)
    return d.get("last", x.sum(1) * 0) + sum(items, x.sum(1) * 0) + len(seen)


@pytest.mark.parametrize("how", ["setitem", "__setitem__", "iconcat", "iadd"])
def test_writes_spelled_through_operator_equal_the_loop(how, dtype):
    # operator.setitem(d, k, v) is d[k] = v, operator.iconcat(items, vs) is items += vs:
    # for the running examples only (a user trial found them written for every example).
    assert_batch_equals_loop(lambda x: writes_through_operator(x, how),
                             sequences([4, 0, 1, 6], dtype=dtype))


@pytest.mark.parametrize("how, refusal", [
    ("delitem", r"@batch: del dict\[\.\.\.\] under a per-example condition: a Python dict is "
                r"shared by every example"),
    ("ior", r"@batch: set \|= \.\.\. under a per-example condition: a Python set is shared"),
    ("imul", r"@batch: list \*= \.\.\. under a per-example condition: a Python list is shared"),
])
def test_shared_writes_through_operator_are_refused(how, refusal):
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(NotImplementedError, match=refusal):
        writes_through_operator(xb, how)


@matchbox.batch
def reorders(x, how):
    order = collections.OrderedDict(a=0, b=0)
    for xt in x.unbind(1):
        if xt.sum() > 0:
            if how == "move_to_end":
                order.move_to_end("a")
            elif how == "del" and "a" in order:
                del order["a"]
    return x.sum(1) * 0 + (1 if next(iter(order)) == "a" else 0)


@pytest.mark.parametrize("how, refusal", [
    ("move_to_end", r"@batch: OrderedDict.move_to_end\(\) under a per-example condition: a "
                    r"Python OrderedDict is shared by every example"),
    ("del", r"@batch: del OrderedDict\[\.\.\.\] under a per-example condition: a Python "
            r"OrderedDict is shared by every example"),
])
def test_an_ordered_dict_changed_under_a_condition_is_refused(how, refusal):
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(NotImplementedError, match=refusal):
        reorders(xb, how)


@matchbox.batch
def reads_a_default_dict(x, how, keys=()):
    counts, lists = collections.defaultdict(int), collections.defaultdict(list)
    for key in keys:
        counts[key], lists[key] = 0, []
    for xt in x.unbind(1):
        if xt.sum() > 0:
            if how == "+=":
                counts["pos"] += 1
            elif how == "read":
                counts["seen"] = counts["pos"] + 1
            elif how == "append":
                lists["pos"].append(xt.sum(-1))
    return x.sum(1) * 0 + len(counts) + len(lists) + sum(lists["pos"], x.sum(1) * 0)


DEFAULT_READS = ["+=", "read", "append"]


@pytest.mark.parametrize("how", DEFAULT_READS)
def test_a_default_dict_read_adding_a_key_under_a_condition_is_refused(how):
    # The loop adds the key only for the examples that run the read; a batch's dict is
    # one, which would have it for every example (len, in, keys).
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(NotImplementedError,
                       match=r"@batch: defaultdict\['pos'\] adds the missing key 'pos' under "
                             r"a per-example condition"):
        reads_a_default_dict(xb, how)


@pytest.mark.parametrize("how", DEFAULT_READS)
def test_a_default_dict_read_of_a_present_key_equals_the_loop(how, dtype):
    assert_batch_equals_loop(lambda x: reads_a_default_dict(x, how, ("pos", "seen")),
                             sequences([4, 0, 1, 6], dtype=dtype))


@matchbox.batch
def advances_a_shared_iterator(x, how):
    total, shared, values = x.sum(1) * 0, iter(range(100)), [1.0, 2.0, 3.0]
    for xt in x.unbind(1):
        if xt.sum() > 0:
            if how == "next(iter(it))":
                total = total + next(iter(shared))
            elif how == "islice":
                total = total + sum(itertools.islice(shared, 2))
            elif how == "fresh":
                total = total + next(iter(values)) + sum(itertools.islice(values, 2))
                total = total + sum(itertools.islice(iter(values), 1))
    return total + next(shared)


@pytest.mark.parametrize("how, name", [("next(iter(it))", "iter"),
                                       ("islice", "itertools.islice")])
def test_a_shared_iterator_read_under_a_condition_is_refused(how, name):
    _, xb = sequences([4, 0, 1, 6])
    with pytest.raises(NotImplementedError,
                       match=rf"@batch: {name}\(\) under a per-example condition \(.*\): the "
                             r"range_iterator it advances is shared by every example"):
        advances_a_shared_iterator(xb, how)


def test_an_iterator_made_of_a_list_under_a_condition_equals_the_loop(dtype):
    assert_batch_equals_loop(lambda x: advances_a_shared_iterator(x, "fresh"),
                             sequences([4, 0, 1, 6], dtype=dtype))


@matchbox.batch
def zips_outside_a_for(x, how):
    kept, doubled = [], []
    for xt in x.unbind(1):
        if xt.sum() > 0:
            kept.append(xt.sum(-1))
            doubled.append(xt.sum(-1) * 2)
    if how == "zip":
        pairs = list(zip(kept, doubled))
    elif how == "enumerate":
        pairs = list(enumerate(kept))
    else:  # plain lists, and zips a for or a comprehension takes
        pairs = list(zip([1.0, 2.0], [3.0, 4.0])) + [(a, b) for a, b in zip(kept, doubled)]
        for a, b in zip(kept, doubled):
            pairs.append((a, b))
    return x.sum(1) * 0 + sum(a * b for a, b in pairs)


@pytest.mark.parametrize("how", ["zip", "enumerate"])
def test_zip_of_per_example_lists_outside_a_for_is_refused(how):
    # Pairs by position across every example's items, where each example's own items
    # are paired in a for or a comprehension (a user trial found it silently wrong): the
    # first example skips the first step, which the others append, so its items are not
    # its first ones.
    _, xb = sequences([4, 0, 1, 6])
    xb.data[:, :, 0] = 1.0
    xb.data[0, 0, 0] = -10.0
    with pytest.raises(NotImplementedError,
                       match=rf"@batch: {how}\(\) \(.*\) of a list some of whose examples' "
                             r"items are not their first ones .*write the "
                             rf"{how} in a for statement or a comprehension"):
        zips_outside_a_for(xb, how)


@matchbox.batch
def takes_the_first_items(x, how):
    items = []
    for xt in x.unbind(1):
        if xt.sum() > 0:
            items.append(xt.sum(-1))
    total = x.sum(1) * 0
    if how == "islice":
        for v in itertools.islice(items, 1):
            total = total + v
    else:
        total = total + next(iter(items))
    return total


@pytest.mark.parametrize("how, name", [("islice", "islice"), ("next(iter)", "iter")])
def test_the_first_items_of_a_list_out_of_place_are_refused(how, name):
    # islice(items, 1) took position 0, which only some examples have, where the loop takes
    # each example's own first item (a review): the first example skips the first step.
    _, xb = sequences([4, 0, 1, 6])
    xb.data[:, :, 0] = 1.0
    xb.data[0, 0, 0] = -10.0
    with pytest.raises(NotImplementedError,
                       match=rf"@batch: {name}\(\) \(.*\) of a list some of whose examples' "
                             r"items are not their first ones .*loop over the list itself"):
        takes_the_first_items(xb, how)


def test_zip_in_a_for_or_of_plain_lists_equals_the_loop(dtype):
    assert_batch_equals_loop(lambda x: zips_outside_a_for(x, "for"),
                             sequences([4, 0, 1, 6], dtype=dtype))


@matchbox.batch
def zips_each_examples_first_items(x):
    ys = [xt.sum(-1) for xt in x.unbind(1)]
    zs = [y * 2 for y in ys]
    pairs = list(zip(ys, zs)) + [(y, y) for _, y in list(enumerate(ys))]
    return x.sum(1) * 0 + sum(a * b for a, b in pairs)


def test_zip_outside_a_for_of_each_examples_first_items_equals_the_loop(dtype):
    # A comprehension over x.unbind(1): each example's items are its first ones, so the
    # zip pairs each example's own (a review found them refused).
    assert_batch_equals_loop(zips_each_examples_first_items,
                             sequences([3, 0, 1, 5], dtype=dtype))


@matchbox.batch
def writes_a_plain_tensor_through_operator(x, how):
    t = torch.zeros(3, dtype=x.dtype)
    if x.sum() > 0:
        if how == "setitem":
            operator.setitem(t, 0, 1.0)
        else:
            operator.iadd(t, 1.0)
    return x.sum(1) + t.sum()


@pytest.mark.parametrize("how, statement", [("setitem", r"t\[i\] = v"), ("iadd", r"t \+= v")])
def test_a_plain_tensor_written_through_operator_under_a_condition_is_refused(how, statement):
    # The statement makes the variable a batch, written for the running examples; the
    # call has no variable to rebind, and wrote the one tensor for every example.
    _, xb = sequences([3, 0, 2])
    xb.data[:, :, 0] = 1.0  # the examples with steps run the branch, the empty one does not
    with pytest.raises(NotImplementedError,
                       match=rf"@batch: {how}\(\) of a plain tensor under a per-example "
                             rf"condition \(.*\) would change it for every example.*"
                             rf"write the statement \({statement}\)"):
        writes_a_plain_tensor_through_operator(xb, how)
