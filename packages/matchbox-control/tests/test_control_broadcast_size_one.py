"""Under ``@batch``, a slice of padded size one along a dynamic dimension (``x[:, :1]``,
``x[:, -1:]``) broadcasts against each example's positions as in the loop, also under a
per-example condition and in a loop over the positions (core's rule)."""

from __future__ import annotations

import pytest
from control_cases import assert_batch_equals_loop, sequences

import matchbox


@matchbox.batch
def centred(x):
    if x.sum() > 0:
        x = x - x[:, :1]
    else:
        x = x / (x[:, -1:].norm(dim=-1, keepdim=True) + 1)
    return x


@matchbox.batch
def against_the_last(x):
    total = x[:, :1] * 0
    for t in range(x.size_as_tensor(1)):
        total = total + x[:, t:t + 1] - x[:, -1:]
    return x * total.sum()


@pytest.mark.parametrize("f", [centred, against_the_last])
@pytest.mark.parametrize("lengths", [(3, 0, 1, 2), (1,), (0,), (4, 2)], ids=str)
def test_a_size_one_slice_broadcasts_as_in_the_loop(f, lengths, dtype):
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype))
