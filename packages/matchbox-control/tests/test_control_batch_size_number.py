"""``x.size(0)`` as a number under ``@matchbox.batch``: 1, as in each example of the loop.

On a batch ``x.size(0)`` is the batch size as a size (``x.new_zeros(x.size(0), H)``), and 1
as a number: an ``if`` on it, a scale by it and ``range`` of it follow the loop, where it
was the batch size (a user trial: ``if x.size(0) == 1:`` took the other branch).
"""

from __future__ import annotations

import math

import pytest
from control_cases import assert_batch_equals_loop, sequences

import matchbox


@matchbox.batch
def branch_on_one(x):
    h = x.sum(1)
    if x.size(0) == 1:  # always, in the loop
        h = h * 2
    else:
        h = h - 100
    return h


@matchbox.batch
def branch_on_more(x):
    h = x.sum(1)
    if x.size(0) > 1:  # never, in the loop
        h = h - 100
    elif x.shape[0] != 1:
        h = h + 100
    return h


@matchbox.batch
def scaled_by_it(x):
    n = x.size(0)
    h = x.sum(1) / n + float(n)
    while n < 3:  # twice, in the loop
        h = h * 0.5
        n = n + 1
    return h / math.sqrt(x.size(0))


@matchbox.batch
def over_its_range(x):
    h = x.new_zeros(x.size(0), x.size(-1))  # the original idiom: a size, the batch size
    for i in range(x.size(0)):  # one step, in the loop
        h = h + x.sum(1) * (i + 1)
    return h


@matchbox.batch
def over_its_range_from_one(x):
    h = x.sum(1)
    for _ in range(1, x.size(0) + 1):  # one step, in the loop
        h = h * 3
    return h


@pytest.mark.parametrize("lengths", [[3], [3, 1, 2], [2, 4]])
@pytest.mark.parametrize("f", [branch_on_one, branch_on_more, scaled_by_it, over_its_range,
                               over_its_range_from_one], ids=lambda f: f.__name__)
def test_x_size_0_is_1_as_a_number_under_batch(f, lengths, dtype):
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype))
