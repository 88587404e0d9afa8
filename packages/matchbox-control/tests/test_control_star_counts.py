"""``f(*items)`` of a list whose items only some examples have, where every running
example has the same number of them: ``combine(*outs[-2:])`` after a loop over the
steps of ``x.unbind(1)`` (each example's own last two steps, at different positions
of the batch's list when the examples' lengths differ).  In the loop each example
passes its own two items; the batch passes argument ``j`` as each example's own
``j``-th item (``items[j]``).  It was refused with a message saying the numbers of
arguments differ between examples, which they did not.  Where they do differ it is
still refused, naming two examples' numbers.
"""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, compiled_for_batches, sequences
from hypothesis import given
from hypothesis import strategies as st

import matchbox


def combine(a, b):  # undecorated: it sees the arguments it is given
    return a * 2 + b.tanh()


@matchbox.batch
def last_two_steps(x):
    outs = []
    for xt in x.unbind(1):
        outs.append(xt * 3)
    return combine(*outs[-2:])


@matchbox.batch
def last_two_of_a_fixed_range(x):
    outs = []
    for i in range(3):
        outs.append(x.sum(1) * (i + 1))
    return combine(*outs[-2:])


@matchbox.batch
def under_a_condition(x):
    outs = [xt.sin() for xt in x.unbind(1)]
    y = x.sum(1) * 0.0
    if len(outs) >= 2:  # the examples with fewer than two steps do not call combine
        y = combine(*outs[-2:])
    return y


@matchbox.batch
def every_step(x):
    return combine(*[xt for xt in x.unbind(1)])


TWO_OR_MORE = st.lists(st.integers(2, 5), min_size=1, max_size=4)
ANY = st.lists(st.integers(0, 5), min_size=1, max_size=4)


@given(lengths=TWO_OR_MORE)
def test_the_last_two_steps_spread_into_a_helper_equal_the_loop(lengths):
    assert_batch_equals_loop(last_two_steps, sequences(lengths))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [[3, 2, 4], [2], [5, 5], [0, 1, 3]])
def test_the_last_two_of_a_fixed_count_equal_the_loop(lengths, dtype):
    assert_batch_equals_loop(last_two_of_a_fixed_range, sequences(lengths, dtype=dtype))


@given(lengths=ANY)
def test_the_spread_under_a_per_example_condition_equals_the_loop(lengths):
    # Zero- and one-step examples do not run the call: only the running ones' count.
    assert_batch_equals_loop(under_a_condition, sequences(lengths))


@pytest.mark.parametrize("f, lengths, counts", [
    (every_step, [3, 2], "example 0 has 3, example 1 has 2"),
    (last_two_steps, [2, 0, 4], "example 0 has 2, example 1 has 0"),
    (last_two_steps, [1, 3], "example 0 has 1, example 1 has 2"),
])
def test_different_numbers_of_items_are_refused_naming_them(f, lengths, counts):
    # (The loop refuses them too: combine() takes two arguments.)
    with pytest.raises(NotImplementedError, match=(
            r"@batch: combine\(\*items\) \(.*\) spreads a list whose items only some examples "
            r"have \(a step past an example's end\) into arguments, and the running examples "
            r"have different numbers of them \(" + counts + r"\): in the loop")):
        f(sequences(lengths)[1])


@pytest.mark.filterwarnings("ignore:matchbox.compile")  # the capture runs it eagerly
@pytest.mark.parametrize("lengths", [[3, 2, 4], [2, 2]])
def test_the_spread_in_a_compiled_call_equals_the_loop(lengths):
    assert_batch_equals_loop(compiled_for_batches(last_two_steps), sequences(lengths))
