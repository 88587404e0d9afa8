"""What a forward of eager ``@batch`` runs, pinned (issue 22): host syncs and ATen ops of
the README RNN, the halting ``while`` and the shift-reduce TreeLSTM, against the same
models written by hand for a padded batch (``benchmarks/control_costs.py`` prints them).

Counted as eager code runs on an accelerator (``host_reads(False)``: no mask is read on
the host to skip work), where a sync stalls the launch queue. Counts do not depend on
the machine. A count that grows fails here: say why in the commit, and update the pin.
"""

from __future__ import annotations

import random

import pytest
import torch

from benchmarks.control_costs import count, models
from examples import treelstm as example
from matchbox import MaskedBatch
from matchbox._masking import host_reads
from matchbox.testing import mb_assert

BATCH, SIZE, LONGEST = 8, 16, 20


@pytest.fixture(scope="module")
def costs():
    """``{name: (model, @batch's counts, hand-written counts)}``, one forward each."""
    out = {}
    for model in models(BATCH, SIZE, LONGEST):
        with host_reads(False):
            batched = count(model.batched)
        out[model.name.split(",")[0]] = (model, batched, count(model.hand))
    return out


def test_readme_rnn_makes_no_host_sync_and_fewer_ops_than_by_hand(costs):
    model, batched, hand = costs["README RNN"]
    assert batched.syncs == 0, batched.sync_sites
    assert batched.total <= 1.3 * hand.total, (batched.total, hand.total)


def test_halting_while_syncs_once_per_iteration(costs):
    model, batched, hand = costs["halting while"]
    # The loop's test, once before the first iteration and once after each, as the
    # hand-written loop's `while active.any()`.
    assert batched.syncs <= model.iterations + 1, batched.sync_sites
    assert batched.syncs == hand.syncs
    assert batched.total <= 1.3 * hand.total, (batched.total, hand.total)


def test_treelstm_control_flow_makes_no_host_sync(costs):
    model, batched, hand = costs["TreeLSTM"]
    assert batched.syncs_from("control/", "_masking/") == 0, batched.sync_sites
    assert hand.syncs == 0
    # What is left (156 at this size; 920 at batch 32 before issue 22's work): core's
    # per-op checks, one per per-example index (three a step) and one per cat.
    assert batched.syncs <= 4 * model.iterations, batched.sync_sites


@pytest.mark.xfail(strict=True, reason="core's per-op checks (a per-example index in range, "
                   "cat's parts real for the same examples) still read their result on the "
                   "host, once per op: issue 22, the per-op checks' part")
def test_treelstm_makes_no_host_sync(costs):
    model, batched, hand = costs["TreeLSTM"]
    assert batched.syncs == 0, batched.sync_sites


def test_treelstm_ops_against_hand_written(costs):
    model, batched, hand = costs["TreeLSTM"]
    # Measured 2.91x (issue 22 asks for 1.3x; 3.69x before, at batch 32): the
    # per-example index's checks and masks in core's indexing, cat's check, and the
    # merges of `stack`, `top` and `position` after each side of the `if` and after
    # each step make most of the rest.
    assert batched.total <= 2.95 * hand.total, (batched.total, hand.total)


@pytest.mark.parametrize("sizes", [[1, 6, 2, 5], [7]], ids=["ragged", "big"])
def test_treelstm_without_host_reads_equals_the_loop(sizes):
    # The accelerator's way (no branch skipped, linear layers on every row) on the CPU:
    # values and gradients, NaN padding.
    torch.manual_seed(0)
    m = example.TreeLSTM(20, 3, d_embed=5, hidden=4, max_depth=8).double()
    rng = random.Random(0)

    def tree(leaves):
        if len(leaves) == 1:
            return leaves[0]
        split = rng.randint(1, len(leaves) - 1)
        return (tree(leaves[:split]), tree(leaves[split:]))

    trees = [tree([str(i) for i in range(n)]) for n in sizes]
    ts = [torch.tensor([example.leaves_and_transitions(t)[1]]) for t in trees]
    leaves = [torch.randn(1, n, 8, dtype=torch.float64) for n in sizes]
    lb = MaskedBatch.fromlist(leaves, (True, False), padding_value=float("nan"))
    with host_reads(False):
        mb_assert(m.parse, [leaves, ts], [lb, MaskedBatch.fromlist(ts, (True,))], len(sizes),
                  params=list(m.parameters()))
