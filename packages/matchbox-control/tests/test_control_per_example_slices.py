"""Slices whose bound is one int per example in ``@batch`` code: ``x[:, start:end]`` with
``start`` a counter or an argmax (span extraction) is each example's own positions, and
``items[:n]`` of a Python list each example's own items, as the loop over examples slices
with its own int."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, per_example, sequences

import matchbox

LENGTHS = [4, 0, 1, 3, 2]


@matchbox.batch
def from_last_positive(x):
    start = 0
    for t in range(x.size_as_tensor(1)):
        if x[:, t, 0] > 0:
            start = t
    return x[:, start:].sum(1), x[:, :start + 1] * 2


@matchbox.batch
def span(x):
    start = x[:, :, 0].argmax(-1)
    end = x[:, :, 1].argmax(-1)
    if end >= start:
        out = x[:, start:end + 1].sum(1)
    else:
        out = x[:, end:start + 1].sum(1) * -1
    return out


@matchbox.batch
def first_items(x):
    items = [v * 2 for v in x.unbind(1)]  # items only some examples have
    n = int(x.size_as_tensor(1)) // 2
    head, tail = items[:n], items[n:]
    return len(head), len(tail), sum(head, x.sum(1) * 0), sum(tail, x.sum(1) * 0)


@matchbox.batch
def plain_list_items(x):
    items = [x.sum(1), x.sum(1) * 2, x.sum(1) * 3]  # every example has each
    n = int(x.size_as_tensor(1))
    some = items[1:n]
    return len(some), sum(some, x.sum(1) * 0), len(items[-n:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [LENGTHS, [3], [0, 2]])
@pytest.mark.parametrize("f", [from_last_positive, first_items, plain_list_items])
def test_per_example_slice_bounds_equal_the_loop(f, lengths, dtype):
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("lengths", [[4, 1, 3, 5], [2]])
def test_span_extraction_equals_the_loop(lengths):
    assert_batch_equals_loop(span, sequences(lengths))


def test_list_slice_counts_oracle():
    """``items[:n]`` with ``n = len // 2`` over lengths 4, 0, 1, 3, 2."""
    xs, xb = sequences(LENGTHS)
    head, tail, _, _ = first_items(xb)
    assert per_example(head) == [2, 0, 0, 1, 1]
    assert per_example(tail) == [2, 0, 1, 2, 1]


@matchbox.batch
def none_start(x):
    start = None
    for t in range(x.size_as_tensor(1)):
        if x[:, t, 0] > 0:
            start = t
    return x[:, start:].sum(1)


def test_a_none_bound_some_examples_keep_is_refused():
    """``None`` for an example whose loop took no step (or never assigned): a batch of
    ints cannot hold it; refused at the merge, naming the variable (start the variable at
    0 instead, which slices alike)."""
    _, xb = sequences([3, 0, 2])
    with pytest.raises(TypeError, match=r"'start' is int .* for the examples that ran this "
                                        r"code and NoneType None for the others"):
        none_start(xb)


@matchbox.batch
def padding_bound(x):
    if x.sum() > 0:
        n = int(x.size_as_tensor(1))
    items = [x.sum(1), x.sum(1)]
    return len(items[:n])


def test_a_padding_bound_of_a_list_slice_is_refused():
    xs = [torch.ones(1, 2, 3, dtype=torch.float64), -torch.ones(1, 1, 3, dtype=torch.float64)]
    xb = matchbox.MaskedBatch.fromlist(xs, (True, False))
    with pytest.raises(ValueError, match=r"@batch: a list slice's bound is padding for "
                                         r"examples \[1\] \(.*line"):
        padding_bound(xb)
