"""Assignments under a per-example condition: augmented, tuple and starred unpacking,
attributes, subscripts, in-place updates and appends change only the examples that run them."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, assert_oracle, per_example, scalars, sequences
from hypothesis import given
from hypothesis import strategies as st

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


@matchbox.batch
def augmented(x):
    y = x * 1
    if x > 1:
        y += 10
        y *= 2
    return y


def test_oracle_augmented_assignment():
    assert_oracle(augmented, [0, 1, 2, 3], [0, 1, 24, 26])


def test_augmented_assignment_gradients(dtype):
    assert_batch_equals_loop(augmented, scalars([0.5, 2.0, -1.0, 3.5], dtype))


def test_augmented_assignment_updates_a_batch_in_place_for_running_examples():
    @matchbox.batch
    def f(x):
        alias = x
        if x > 1:
            x += 100
        return alias

    _, xb = scalars([0.0, 5.0])
    result = f(xb)
    # as in Python, the alias sees the in-place update, only where it ran
    assert [e.item() for e in result.examples()] == [0.0, 105.0]


def lstm_like(x, state):
    h, c = state
    c = (c + x).tanh()
    return h * 0.5 + c, c


@matchbox.batch
def tuple_unpacking(x):
    h = x.batch_zeros(x.size(-1))
    c = x.batch_zeros(x.size(-1))
    for xt in x.unbind(1):
        h, c = lstm_like(xt, (h, c))
    return h, c


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_tuple_unpacking_of_a_cell(lengths):
    assert_batch_equals_loop(tuple_unpacking, sequences(lengths))


@matchbox.batch
def starred(x):
    first, *rest = x.unbind(-1)
    total = first * 0
    for part in rest:
        if part > 0:
            total, *_ = (total + part, None)
    return total


def test_starred_unpacking(dtype):
    xs = [torch.randn(1, 4, dtype=dtype) for _ in range(5)]
    assert_batch_equals_loop(starred, (xs, MaskedBatch.fromlist(xs, (False,))))


class Accumulator(torch.nn.Module):
    """Keeps state in attributes: `self.h = ...` under a mask changes only running examples."""

    def __init__(self, size):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(size, size) / size)

    @matchbox.batch
    def forward(self, x):
        self.h = x.batch_zeros(x.size(-1))
        self.count = 0
        for xt in x.unbind(1):
            if xt.sum(-1) > 0:
                self.h = (xt @ self.w + self.h).tanh()
                self.count += 1
        return self.h, self.count


def test_attribute_assignment_under_a_mask(dtype):
    model = Accumulator(3).to(dtype)
    assert_batch_equals_loop(model, sequences([4, 0, 2, 5], dtype=dtype))


@matchbox.batch
def subscripts(x, s):
    # `state[i] = ...` and `table[key] += ...` on containers made before the loop
    state = [s * 0, s * 0]
    table = {"hits": s * 0}
    for xt in x.unbind(1):
        i = 0
        if xt.sum(-1) > 0:
            state[i] = state[i] + xt
            table["hits"] += 1
        else:
            state[1] = state[1] - xt
    return state[0], state[1], table["hits"]


def test_subscript_assignment_under_a_mask(dtype):
    xs, xb = sequences([3, 1, 0, 4], dtype=dtype)
    summed = [x.sum(1) for x in xs]  # (1, 3) rows: the state's shape
    assert_batch_equals_loop(subscripts, (xs, xb),
                             (summed, MaskedBatch.fromlist(summed, (False,))))


@matchbox.batch
def appended(x):
    outputs = []
    for xt in x.unbind(1):
        if xt.sum(-1) > -10:
            outputs.append(xt * 2)
    return F.stack(outputs, 1, dynamic=True)


def test_list_append_in_a_loop_then_stack(dtype):
    assert_batch_equals_loop(appended, sequences([3, 1, 2], dtype=dtype))


@matchbox.batch
def in_place_method(x):
    y = x * 1
    if x > 1:
        y.mul_(3)
        y.add_(1)
    return y


def test_oracle_in_place_methods():
    assert_oracle(in_place_method, [0, 1, 2, 3], [0, 1, 7, 10])


def test_subscript_slices_under_a_mask():
    @matchbox.batch
    def f(x, values):
        if x > 0:
            values[1:3] = [x, x * 2]
        return values[0] + values[1] + values[2]

    _, xb = scalars([-1.0, 2.0])
    out = f(xb, [xb * 0, xb * 0, xb * 0])
    assert [e.item() for e in out.examples()] == [0.0, 6.0]


def test_plain_attribute_and_item_writes_are_python():
    class Box:
        pass

    @matchbox.batch
    def f(box, items):
        box.value = 3
        items[0] = "x"
        box.value += 1
        items[1] += 2
        items.append(5)
        return box.value

    box, items = Box(), ["a", 1]
    assert f(box, items) == 4
    assert items == ["x", 3, 5]


STATS = {"n": 0}


@matchbox.batch
def writes_a_global_dict(x):
    STATS["n"] = 1
    STATS["n"] += 1
    return x * STATS["n"]


@matchbox.batch
def writes_a_dict_it_closes_over(x):
    counts = {"n": 0}

    def bump():
        counts["n"] += 1
        counts["m"] = counts["n"] * 3

    bump()
    return x + counts["m"]


@pytest.mark.parametrize("f", [writes_a_global_dict, writes_a_dict_it_closes_over])
def test_an_item_write_to_a_global_or_closed_over_dict_leaves_the_name_as_it_is(f, dtype):
    # The rewriting once rebound the name to the written object (``STATS = set_item(...)``,
    # as for a local variable whose tensor may become a batch), which made it local:
    # UnboundLocalError even on a plain tensor (a user trial).
    assert torch.equal(f(torch.ones(2, dtype=dtype)), f.__wrapped__(torch.ones(2, dtype=dtype)))
    assert_batch_equals_loop(f, sequences([3, 0, 1], dtype=dtype))


def test_a_value_that_cannot_be_batched_is_refused():
    @matchbox.batch
    def f(x):
        name = "low"
        if x > 1:
            name = "high"
        return name

    _, xb = scalars([0.0, 2.0])
    with pytest.raises(TypeError, match=r"'name' is str 'high' for the examples that ran this "
                                        r"code and str 'low' for the others"):
        f(xb)


def test_lists_of_different_lengths_hold_each_examples_own_items():
    # Once refused ("'items' is a list of 3 items for the examples that ran this code
    # and a list of 1 item for the others"): each example's list has its own length.
    @matchbox.batch
    def f(x):
        items = [x]
        if x > 1:
            items = [x, x * 2, x * 3]
        return len(items), items[-1], sum(items)

    _, xb = scalars([0.0, 2.0])
    count, last, total = f(xb)
    assert per_example(count) == [1, 3]
    assert per_example(last) == [0.0, 6.0]
    assert per_example(total) == [0.0, 12.0]


@matchbox.batch
def scale_first_where_positive(x):
    out = x * 1
    if out.sum(-1) > 0:
        out[:, 0] = out[:, 0] * 3.0
    else:
        out[:, 1] += 1.0
    return out


def test_subscript_assignment_into_a_batch_under_a_mask_equals_the_loop(dtype):
    # `out[:, 0] = ...` writes into the batch for the examples that take the branch,
    # `out[:, 1] += ...` for the others.
    xs = [torch.tensor([[1.0, 2.0]], dtype=dtype), torch.tensor([[-1.0, -2.0]], dtype=dtype),
          torch.tensor([[0.5, -0.1]], dtype=dtype)]
    xb = MaskedBatch.fromlist(xs, (False,))
    mb_assert(scale_first_where_positive, [xs], [xb], 3)
