"""A variable that holds ``None`` (or another value no batch can hold) before a region
that assigns it a batch: where every running example took the region, the loop over
examples never sees the old value, so nothing is merged (a user trial found
``h = None`` before a loop whose first step assigns it refused on an accelerator, and
``v = None`` before an ``if`` every example takes refused everywhere)."""

from __future__ import annotations

import pytest
from control_cases import assert_batch_equals_loop, scalars, sequences

import matchbox
from matchbox._masking import host_reads


@matchbox.batch
def first_step_assigns(x):
    h = None
    for t, xt in enumerate(x.unbind(1)):
        if t == 0:
            h = xt * 2
        else:
            h = h * 0.5 + xt
    return h


@matchbox.batch
def every_example_takes(x):
    v = None
    if x > -100:
        v = x * 3
    return v


@matchbox.batch
def some_examples_take(x):
    v = None
    if x > 0:
        v = x * 3
    return v


@pytest.mark.parametrize("reads", [True, False], ids=["host_reads", "no_host_reads"])
@pytest.mark.parametrize("lengths", [[3, 1, 2, 4], [1], [2]])
def test_none_before_a_loop_whose_first_step_assigns(dtype, reads, lengths):
    with host_reads(reads):
        assert_batch_equals_loop(first_step_assigns, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("reads", [True, False], ids=["host_reads", "no_host_reads"])
def test_none_before_an_if_every_example_takes(dtype, reads):
    with host_reads(reads):
        assert_batch_equals_loop(every_example_takes, scalars([0.5, -2.0, 3.0], dtype))
        assert_batch_equals_loop(every_example_takes, scalars([1.5], dtype))


@pytest.mark.parametrize("reads", [True, False], ids=["host_reads", "no_host_reads"])
def test_none_kept_by_some_examples_is_still_refused(reads):
    _, xb = scalars([1.0, -1.0])
    with host_reads(reads), pytest.raises(
            TypeError, match=r"@batch: 'v' is a batch for the examples on one path and "
                             r"NoneType None for the others"):
        some_examples_take(xb)


@pytest.mark.parametrize("reads", [True, False], ids=["host_reads", "no_host_reads"])
def test_none_kept_by_an_empty_example_is_still_refused(reads):
    # The loop gives the empty example None (its loop has no first step).
    _, xb = sequences([2, 0, 1])
    with host_reads(reads), pytest.raises(
            TypeError, match=r"@batch: 'h' is a batch for the examples on one path and "
                             r"NoneType None for the others"):
        first_step_assigns(xb)
