"""A list appended under a per-example condition holds, for each example, its own
items: ``len``, ``items[i]``, ``items[-1]``, slices, ``for`` and ``torch.stack`` see
each example's own list, as in the loop over examples; writes by position refuse."""

from __future__ import annotations

import pytest
import torch
from control_cases import (
    assert_batch_equals_loop,
    assert_oracle,
    assert_shared_weight_model_equals_loop,
    per_example,
    scalars,
    sequences,
)
from hypothesis import given
from hypothesis import strategies as st

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch


@matchbox.batch
def count_kept(n):
    kept = []
    for i in range(5):
        if i < n:
            kept.append(i * 10)
    return len(kept) * 100 + kept[-1]


def test_oracle_len_and_last_item_per_example():
    assert_oracle(count_kept, [1, 3, 5], [100, 320, 540], dtype=torch.int64)


@matchbox.batch
def last_positive_and_count(x):
    items = [x.sum(1)]
    for xt in x.unbind(1):
        if xt.sum() > 0:
            items.append(xt)
    return items[-1] * len(items), items[0] + items[len(items) - 1]


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_len_and_negative_index_after_masked_appends(lengths):
    assert_batch_equals_loop(last_positive_and_count, sequences(lengths))


def test_len_and_negative_index_float32_and_one_example():
    assert_batch_equals_loop(last_positive_and_count, sequences([3, 0, 2], dtype=torch.float32))
    assert_batch_equals_loop(last_positive_and_count, sequences([4]))


@matchbox.batch
def second_and_slices(x):
    items = [x.sum(1) * 0]
    for xt in x.unbind(1):
        if xt.sum() > -1:
            items.append(xt)
    head = F.stack(items[:2], 1, dynamic=True).sum(1)
    tail = sum(items[-2:], x.sum(1) * 0)
    every_other = sum(items[::2], x.sum(1) * 0)
    backwards = F.stack(items[::-1], 1, dynamic=True)
    return items[1], head, tail, every_other, backwards


def test_index_and_slices_per_example(dtype):
    torch.manual_seed(3)
    xs, xb = sequences([4, 1, 3, 2], dtype=dtype)
    # Every example keeps at least one step (the first is made positive).
    for x in xs:
        x[:, 0] = 1.0
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    assert_batch_equals_loop(second_and_slices, (xs, xb))


def test_index_past_an_examples_list_raises_naming_it():
    xs, xb = sequences([3, 0, 2])

    @matchbox.batch
    def f(x):
        items = []
        for xt in x.unbind(1):
            items.append(xt)
        return items[1]

    with pytest.raises(IndexError, match=r"list index out of range for examples \[1\]"):
        f(xb)
    with pytest.raises(IndexError):
        f(xs[1])  # the loop fails there too


@matchbox.batch
def by_counter(x):
    items = []
    count = 0
    for xt in x.unbind(1):
        items.append(xt * 2)
        count = count + 1
    return items[count - 1]  # each example's own last item, by a per-example index


def test_a_per_example_index(dtype):
    assert_batch_equals_loop(by_counter, sequences([3, 1, 2], dtype=dtype))


@matchbox.batch
def stacked_appends(x, w):
    outs = []
    for xt in x.unbind(1):
        outs.append((xt @ w).tanh())
    return torch.stack(outs, 1)


@pytest.mark.parametrize("lengths", [[3, 1, 2], [2, 2], [1]])
def test_torch_stack_of_appended_steps_gives_each_example_its_own(lengths, dtype):
    # The first steps are real for every example: the stack must not take their
    # missing mask for "a state" and keep the later padding as real values.
    assert_shared_weight_model_equals_loop(stacked_appends, lengths, dtype)


def test_concatenating_items_only_some_examples_have_is_refused():
    @matchbox.batch
    def f(x):
        outs = []
        for xt in x.unbind(1):
            outs.append(xt.unsqueeze(1))
        return torch.cat(outs, 1)

    _, xb = sequences([3, 1])
    with pytest.raises(ValueError, match=r"torch.cat: example 1 is real in some of the 3 "
                                         r"tensors concatenated and padding in others.*"
                                         r"dynamic=True"):
        f(xb)


@pytest.mark.parametrize("write, message", [
    ("pop", r"list.pop\(\) on a list whose items only some examples have"),
    ("setitem", r"item assignment on a list whose items only some examples have"),
])
def test_writes_by_position_are_refused(write, message):
    @matchbox.batch
    def f(x):
        items = []
        for xt in x.unbind(1):
            items.append(xt)
        if write == "pop":
            items.pop()
        else:
            items[0] = x.sum(1)
        return items

    _, xb = sequences([3, 1])
    with pytest.raises(NotImplementedError, match=message + r".*dynamic=True"):
        f(xb)


def test_del_of_an_item_by_position_is_refused():
    # `del items[-1]` deleted the last position: each example's own last item is
    # elsewhere (the loop gives lengths [2, 0, 1], the batch gave [2, 1, 2]).
    @matchbox.batch
    def f(x):
        items = []
        for xt in x.unbind(1):
            items.append(xt)
        del items[-1]
        return len(items)

    _, xb = sequences([3, 1, 2])
    with pytest.raises(NotImplementedError, match=r"del items\[i\] on a list whose items "
                                                  r"only some examples have.*dynamic=True"):
        f(xb)


def test_del_under_a_per_example_condition_is_refused_and_plain_del_works():
    @matchbox.batch
    def f(x, parts):
        if x.sum() > 0:
            del parts[0]
        return x

    @matchbox.batch
    def g(x):
        parts = [x, x * 2, x * 3]
        del parts[0], parts[-1]
        return parts

    _, xb = sequences([2, 1])
    with pytest.raises(NotImplementedError, match=r"del list\[\.\.\.\] under a per-example "
                                                  r"condition.*items = items\[:-1\]"):
        f(scalars([1.0, -1.0])[1], [1, 2])
    (only,) = g(xb)
    assert all(torch.equal(a, b) for a, b in zip(only.examples(), (xb * 2).examples()))


def test_an_ordinary_list_is_a_python_list():
    @matchbox.batch
    def f(x):
        parts = [x, x * 2]
        parts.append(x * 3)
        first = parts.pop(0)
        return len(parts), parts[-1], first, parts[::-1]

    _, xb = sequences([2, 0, 1])
    n, last, first, backwards = f(xb)
    assert n == 2 and last is backwards[0] and first is not None


def test_len_of_per_example_items_is_a_batch_of_counts():
    _, nb = scalars([0, 2, 4], dtype=torch.int64)

    @matchbox.batch
    def f(n):
        kept = []
        for i in range(4):
            if i < n:
                kept.append(i)
        return len(kept)

    assert per_example(f(nb)) == [0, 2, 4]


@matchbox.batch
def stack_in_each_step(x):
    items = []
    for xt in x.unbind(1):
        if xt.sum() > 0:
            items.append(xt)
    pairs = x.sum(1, keepdim=True).expand(-1, 2, -1) * 0
    for v in items:
        pairs = pairs + torch.stack([v, v * 2], 1)  # every running example has both
    return pairs


def test_stacking_items_every_running_example_has_stays_static(dtype):
    xs, xb = sequences([3, 0, 2, 4], dtype=dtype)
    assert stack_in_each_step(xb).dims == (False, False)
    assert_batch_equals_loop(stack_in_each_step, (xs, xb))


@matchbox.batch
def steps_per_example(x):
    steps = x.unbind(1)
    last = steps[-1]
    middle = torch.stack(steps[1:], 1)  # each example's own steps after its first
    return last * len(steps), middle, torch.stack(torch.unbind(x, 1), 1)


@pytest.mark.parametrize("lengths", [[3, 2, 4], [2], [2, 2]])
def test_the_steps_of_unbind_are_each_examples_own(lengths, dtype):
    assert_batch_equals_loop(steps_per_example, sequences(lengths, dtype=dtype))


def test_the_last_step_of_an_empty_example_raises_as_in_the_loop():
    @matchbox.batch
    def f(x):
        return x.unbind(1)[-1]

    xs, xb = sequences([2, 0])
    with pytest.raises(IndexError, match=r"list index out of range for examples \[1\]"):
        f(xb)
    with pytest.raises(IndexError):
        f(xs[1])
