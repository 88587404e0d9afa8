"""``x.size(0)`` as a number under ``@matchbox.batch``: refused, loudly.

On a batch ``x.size(0)`` is the batch size as a size (``x.new_zeros(x.size(0), H)``); in
each example of the loop it is 1.  Used as a number (an ordering test on it, a scale by
it, ``range`` of it) the batch and the loop would differ (a user trial: ``if x.size(0) ==
1:`` took the other branch), so it raises ``TypeError``.  ``==`` holds with 1 and with
the batch size, so ``if x.size(0) == 1:`` takes the loop's branch.
"""

from __future__ import annotations

import math

import pytest
from control_cases import assert_batch_equals_loop, sequences

import matchbox

REFUSED = r"x\.size\(0\) of a MaskedBatch .* used as a number .* Use x\.batch_size .* or 1"


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
    return h


@matchbox.batch
def scaled_by_it(x):
    n = x.size(0)
    return x.sum(1) / n


@matchbox.batch
def scaled_by_its_float(x):
    return x.sum(1) / math.sqrt(x.size(0))


@matchbox.batch
def counting_up_to_it(x):
    n = x.size(0)
    h = x.sum(1)
    while n < 3:  # twice, in the loop
        h = h * 0.5
        n = n + 1
    return h


@matchbox.batch
def over_its_range(x):
    h = x.new_zeros(x.size(0), x.size(-1))  # the original idiom: a size, the batch size
    for i in range(x.size(0)):  # one step, in the loop
        h = h + x.sum(1) * (i + 1)
    return h


@matchbox.batch
def over_its_range_from_one(x):
    h = x.sum(1)
    for _ in range(1, x.shape[0]):  # no step, in the loop
        h = h * 3
    return h


@pytest.mark.parametrize("lengths", [[3], [3, 1, 2], [2, 4]])
def test_x_size_0_equal_to_1_takes_the_loops_branch_under_batch(lengths, dtype):
    assert_batch_equals_loop(branch_on_one, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("lengths", [[3], [3, 1, 2]])
@pytest.mark.parametrize("f", [branch_on_more, scaled_by_it, scaled_by_its_float,
                               counting_up_to_it, over_its_range, over_its_range_from_one],
                         ids=lambda f: f.__name__)
def test_x_size_0_as_a_number_under_batch_is_refused(f, lengths, dtype):
    _, batch = sequences(lengths, dtype=dtype)
    with pytest.raises(TypeError, match=REFUSED):
        f(batch)
