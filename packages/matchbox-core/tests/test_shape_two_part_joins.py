"""A join of two parts static in every dimension (two halves of a state, issue 22): its
check that each example is real in both or in neither is one exclusive or."""

from __future__ import annotations

import pytest
import torch
from op_counts import CountOps

from matchbox import MaskedBatch


def _half(real):  # noqa: ANN001, ANN202
    mask = torch.tensor(real).view(-1, 1)
    return MaskedBatch(torch.randn(len(real), 3), mask, (False,))


def test_two_halves_real_for_the_same_examples_join_with_one_comparison():
    left, right = _half([True, False, True]), _half([True, False, True])
    with CountOps() as counter:
        joined = torch.cat([left, right], -1)
    assert joined.mask.view(-1).tolist() == [True, False, True]
    # xor, its reshape, and the read of any (it was view, any, not for each part, two
    # stacks, two anys and an and)
    assert counter.ops["bitwise_xor"] == 1 and counter.ops["stack"] == 0, counter.ops
    assert sum(counter.ops.values()) <= 8, counter.ops


@pytest.mark.parametrize("join", [lambda a, b: torch.cat([a, b], -1),
                                  lambda a, b: torch.stack([a, b], 1)])
def test_two_halves_real_for_different_examples_are_refused(join):
    left, right = _half([True, True, True]), _half([True, False, True])
    with pytest.raises(ValueError, match=r"example 1 is real in some of the 2 tensors"):
        join(left, right)
