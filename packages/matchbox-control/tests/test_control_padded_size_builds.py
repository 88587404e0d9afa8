"""``x.maxsize(d)`` as a size of an op that builds a batch, under ``@batch``: each
example's own size there, as in the loop (core's ``test_padded_size_builds.py``), in a
per-example branch too; a ``view`` to it where the examples are static is refused where a
running example's size differs, at once and the accelerator's way (deferred to the end of
the call)."""

from __future__ import annotations

import pytest
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox._masking import host_reads


@matchbox.batch
def padded_builds(x):
    size = x.maxsize(1)
    y = x * 2
    if x.size_as_tensor(1) >= 2:
        y = x + x.new_ones(x.size(0), size, 3) \
            + x.sum(1, keepdim=True).expand(x.size(0), size, 3) \
            + x.mean(1, keepdim=True).repeat(1, size, 1)
    return y


@matchbox.batch
def static_viewed_to_the_padded_size(x):
    size = x.maxsize(1)
    y = x * 2
    if x.size_as_tensor(1) >= 2:
        y = x + x.new_ones(x.size(0), 12).view(x.size(0), size, 3)
    return y


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
@pytest.mark.parametrize("lengths", [[4, 1, 0, 2], [3], [0, 3, 2]])
def test_batches_built_to_the_padded_size_equal_the_loop(reads, lengths, dtype):
    with host_reads(reads):
        assert_batch_equals_loop(padded_builds, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_a_static_view_to_the_padded_size_is_refused_where_a_running_example_differs(reads):
    _, xb = sequences([4, 1, 0, 2])
    with host_reads(reads), pytest.raises(
            ValueError, match=r"Tensor\.view \(size 1, x\.maxsize\(1\)\): the padded size of a "
                              r"dynamic dimension stands for each example's own size there"):
        static_viewed_to_the_padded_size(xb)


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_a_static_view_to_the_padded_size_runs_where_the_running_examples_have_it(reads):
    # Only the examples of length 4 (the padded size) or below 2 (not running) here.
    with host_reads(reads):
        assert_batch_equals_loop(static_viewed_to_the_padded_size, sequences([4, 1, 0, 4]))
