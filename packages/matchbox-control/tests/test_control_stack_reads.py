"""``stack[:, top - 1]`` with a per-example counter ``top`` (core's fast per-example index
read, its range check inline) on a stack read through a region's gradient guard: each
example reads its own slot, and an index past the stack raises for a running example
only."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox

W = torch.randn(2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0),
                requires_grad=True)


@matchbox.batch
def length(x):
    n = 0
    for _ in x.unbind(1):
        n = n + 1
    return n


@matchbox.batch
def reads_the_top_where_short(x):
    stack = (x.sum(1) @ W).unsqueeze(1).expand(-1, 3, -1) * torch.arange(1.0, 4.0).view(3, 1)
    top = length(x)
    y = x.sum(1)
    if top < 4:  # only the examples whose top - 1 is a slot of the stack read it
        y = stack[:, top - 1] * 2 + y  # (top - 1 == -1, an empty example's: the last)
    return y


@pytest.mark.parametrize("lengths", [(2, 4, 1, 0, 3), (1,), (5, 0)])
def test_a_stack_read_by_a_counter_equals_the_loop(lengths):
    xs, xb = sequences(lengths, size=2)
    assert_batch_equals_loop(reads_the_top_where_short, (xs, xb), params=[W])


@matchbox.batch
def reads_the_top_where_long(x):
    stack = (x.sum(1) @ W).unsqueeze(1).expand(-1, 3, -1) * 1
    top = length(x)
    y = x.sum(1)
    if top > 1:
        y = stack[:, top - 1]
    return y


@pytest.mark.parametrize("lengths, example", [((2, 4, 1), 1), ((5,), 0)])
def test_a_stack_read_past_its_end_raises_for_a_running_example(lengths, example):
    _, xb = sequences(lengths, size=2)
    # (One example, every one running: the plain read's own message, on the host.)
    with pytest.raises(IndexError, match=rf"Tensor.__getitem__: index {lengths[example] - 1} "
                       rf"is out of range for (example {example}, which has size 3|dimension 1)"):
        reads_the_top_where_long(xb).data.sum().backward()
