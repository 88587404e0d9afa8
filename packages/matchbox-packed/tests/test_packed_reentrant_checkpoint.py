"""Reentrant ``torch.utils.checkpoint`` on a ``PackedBatch`` is refused as on a
``MaskedBatch`` (its autograd.Function would drop the gradient); the non-reentrant
form equals the loop."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert


def examples(lengths, dtype):
    return [torch.randn(1, n, 3, dtype=dtype) for n in lengths]


@pytest.mark.parametrize("block", [lambda x: x.tanh(), lambda x: torch.tanh(x) * 2,
                                   lambda x: x.sum(1)], ids=["method", "function", "reduction"])
def test_reentrant_checkpoint_on_a_packed_batch_is_refused(block):
    pb = PackedBatch.fromlist(examples([2, 3], torch.float64))
    pb.requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match=r"torch\.utils\.checkpoint with "
                                               r"use_reentrant=True was given a batch; .* pass "
                                               r"use_reentrant=False"):
            checkpoint(block, pb, use_reentrant=True)


def test_non_reentrant_checkpoint_on_a_packed_batch_equals_the_loop(dtype):
    xs = examples([2, 1, 3], dtype)
    mb_assert(lambda x: checkpoint(lambda y: y.tanh() * 2, x, use_reentrant=False), [xs],
              [PackedBatch.fromlist(xs)], 3)
