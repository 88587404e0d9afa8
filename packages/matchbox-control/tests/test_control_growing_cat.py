"""A sequence grown with ``torch.cat`` in a loop that examples leave at different
steps (a per-example ``break``) has, per example, its own length: its dimension
becomes dynamic when the examples' sizes part, as in the loop over examples."""

from __future__ import annotations

import pytest
import torch
from control_cases import (
    assert_batch_equals_loop,
    assert_shared_weight_model_equals_loop,
    sequences,
)
from hypothesis import given
from hypothesis import strategies as st

import matchbox


def _grow(start: str):
    @matchbox.batch
    def grow(x, w):
        if start == "slice of a dynamic dim":
            out = x[:, :0]
        elif start == "plain empty tensor":
            out = torch.zeros(1, 0, 3, dtype=x.dtype)
        else:  # a batch whose dimension 1 is static
            out = x.new_zeros(1, 0, 3)
        for xt in x.unbind(1):
            y = (xt @ w).tanh()
            out = torch.cat([out, y.unsqueeze(1)], 1)
            if y.sum() > 0.5:
                break
        return out

    return grow


STARTS = ["slice of a dynamic dim", "plain empty tensor", "static batch"]


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("lengths", [[3, 1, 4, 2], [0, 2], [1], [3, 3]])
def test_growing_cat_with_a_per_example_break(start, lengths, dtype):
    assert_shared_weight_model_equals_loop(_grow(start), lengths, dtype)


@pytest.mark.parametrize("start", STARTS)
@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_growing_cat_hypothesis(start, lengths):
    assert_shared_weight_model_equals_loop(_grow(start), lengths)


@matchbox.batch
def grow_while(x):
    out = x.sum(1, keepdim=True)  # static size 1
    n = x.size_as_tensor(1)
    while out.size_as_tensor(1) < n + 1:
        out = torch.cat([out, out[:, -1:] * 0.5], 1)
    return out


def test_growing_in_a_while_loop_each_example_its_own_count(dtype):
    assert_batch_equals_loop(grow_while, sequences([2, 0, 3, 1], dtype=dtype))


def test_a_variable_that_changes_rank_is_refused():
    @matchbox.batch
    def f(x):
        y = x.sum(1)
        if x.sum() > 0:
            y = x
        return y

    _, xb = sequences([2, 1])
    xb.data[0] = 1.0
    xb.data[1] = -1.0
    with pytest.raises(ValueError, match=r"'y' has examples with dims \(True, False\) for the "
                                         r"examples that ran this code and dims \(False,\) for "
                                         r"the others; a variable must keep its rank"):
        f(xb)


@matchbox.batch
def bos_and_steps(x):
    items = []
    for xt in x.unbind(1):
        items.append((xt * 2).tanh().unsqueeze(1))
    return torch.cat([x[:, :1]] + items, dim=1)  # (1, min(n, 1) + n, size)


@pytest.mark.parametrize("lengths", [[3, 1, 4], [0, 2], [1], [2, 2]])
def test_cat_of_a_dynamic_part_and_items_only_some_examples_have(lengths, dtype):
    # Each example joins its own items: the shorter ones came out empty, silently (a user
    # trial), where the loop's cat holds every step they have.
    assert_batch_equals_loop(bos_and_steps, sequences(lengths, dtype=dtype))


@given(lengths=st.lists(st.integers(0, 4), min_size=1, max_size=4))
def test_cat_of_a_dynamic_part_and_items_only_some_examples_have_hypothesis(lengths):
    assert_batch_equals_loop(bos_and_steps, sequences(lengths))
