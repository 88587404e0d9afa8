"""A region's guarded state chunked and joined again keeps its record of zeros (core's
``chunk`` and ``cat``, ``matchbox._layout.zero_padding_along``): the product with a weight
it reaches needs no ``where`` of its own (a tree cell's ``h_left``, ``h_right``: one
``where`` a reduce step fewer, eager and in the compiled scan's body).  Values and
gradients are still the loop's."""

from __future__ import annotations

import pytest
import torch
from op_counts import CountOps

import matchbox
from matchbox import MaskedBatch
from matchbox._masking import host_reads
from matchbox.testing import mb_assert

HIDDEN = 2


@matchbox.batch
def chunked_cell(x, s, w):
    for x_t in x.unbind(1):
        if x_t.sum() > 0:  # the state is read (and guarded) on one side only
            h, c = s.chunk(2, -1)
            s = torch.cat([(torch.cat([h, c], -1) @ w).tanh(), c + x_t.sum(-1, keepdim=True)],
                          -1)
    return s


def _inputs(lengths, dtype, seed=0):
    torch.manual_seed(seed)
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    ss = [torch.randn(1, 2 * HIDDEN, dtype=dtype) for _ in lengths]
    w = torch.randn(2 * HIDDEN, HIDDEN, dtype=dtype, requires_grad=True)
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    sb = MaskedBatch.fromlist(ss, (False,))
    return xs, ss, w, xb, sb


@pytest.mark.parametrize("lengths", [[3, 0, 1, 5], [4], [0], [1, 2]])
@pytest.mark.parametrize("reads", [False, True])
def test_a_chunked_and_joined_state_equals_the_loop(lengths, reads, dtype):
    xs, ss, w, xb, sb = _inputs(lengths, dtype)
    ss = [s.requires_grad_() for s in ss]
    with host_reads(reads):
        mb_assert(chunked_cell, [xs, ss, [w] * len(xs)], [xb, sb, w], len(xs), params=[w])


def test_the_join_of_a_guarded_states_pieces_is_not_zeroed_again():
    _, _, w, xb, sb = _inputs([3, 5, 2], torch.float64)
    with host_reads(False), CountOps() as counter:
        out = chunked_cell(xb, sb.requires_grad_(), w)
        matchbox.batch_sum(out.sum(-1)).backward()
    # 5 steps (the longest example): the region's guards, merges and the product's output
    # guard, forward and backward.  Before, the product's input (the join) was zeroed
    # again every step, and its backward's where with it: 65.
    assert counter.ops["where"] == 55, counter.ops
