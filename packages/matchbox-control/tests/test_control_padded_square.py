"""A plain square tensor built at the padded size (``torch.ones(T, T).tril()``, ``T =
x.maxsize(1)``) in a product under ``@batch``: refused where a running example's length is
not ``T`` (the loop builds it at each example's own size), both at once and the
accelerator's way (the check deferred to the end of the call); the examples of that length
alone, under a per-example condition, equal the loop.  The padded size as a number (an
example's own size in the loop) is refused under ``@batch`` too: a comparison with each
example's size, ``range``."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox._masking import host_reads


@matchbox.batch
def causal_sums(x):
    size = x.maxsize(1)
    return torch.ones(size, size, dtype=x.dtype).tril() @ x


@matchbox.batch
def causal_sums_of_the_long_ones(x):
    y = x * 2
    if x.size_as_tensor(1) >= 4:
        size = x.maxsize(1)
        y = torch.ones(size, size, dtype=x.dtype).tril() @ x
    return y


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_a_causal_sum_over_a_square_of_the_padded_size_is_refused(reads, dtype):
    _, xb = sequences([4, 1, 0, 2], dtype=dtype)
    with host_reads(reads), pytest.raises(
            ValueError, match=r"Tensor\.matmul: a plain tensor of shape \(4, 4\), shared by "
                              r"every example, meets dimension 1 of the batch.*example 1 has "
                              r"1 there"):
        causal_sums(xb)


@pytest.mark.parametrize("lengths", [[3, 3], [1], [0, 0]])
def test_a_causal_sum_over_examples_of_the_padded_size_equals_the_loop(lengths, dtype):
    assert_batch_equals_loop(causal_sums, sequences(lengths, dtype=dtype))


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_only_the_running_examples_need_the_padded_size(reads, dtype):
    with host_reads(reads):
        assert_batch_equals_loop(causal_sums_of_the_long_ones,
                                 sequences([4, 2, 0, 4, 1], dtype=dtype))


@matchbox.batch
def scaled_where_longest(x):
    if x.size_as_tensor(1) == x.maxsize(1):
        x = x * 2
    return x


@matchbox.batch
def count_padded_steps(x):
    n = x.sum() * 0
    for _ in range(x.maxsize(1)):
        n = n + 1
    return n


@pytest.mark.parametrize("f", [scaled_where_longest, count_padded_steps])
@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_the_padded_size_as_a_number_is_refused(f, reads):
    _, xb = sequences([4, 2, 0])
    with host_reads(reads), pytest.raises(
            TypeError, match=r"x\.maxsize\(1\) is the padded size of dimension 1, which is "
                             r"dynamic.*range\(\) under @matchbox\.batch"):
        f(xb)
