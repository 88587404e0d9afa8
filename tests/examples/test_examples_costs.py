"""What a forward of eager Matchbox runs, pinned (issue 22): host syncs and ATen ops of
the README RNN, the halting ``while`` and the shift-reduce TreeLSTM (``@batch``), and of
``nn.LSTM`` and ``nn.TransformerEncoderLayer`` on a batch, against the same models written
by hand (``benchmarks/control_costs.py`` prints them).

Counted as eager code runs on an accelerator (``host_reads(False)``: no mask is read on
the host to skip work), where a sync stalls the launch queue. Counts do not depend on
the machine. A count that grows fails here: say why in the commit, and update the pin.
"""

from __future__ import annotations

import random

import pytest
import torch

import matchbox
from benchmarks.control_costs import count, models, saved_bytes, written_bytes
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
    assert batched.syncs_from("control/", "_masking/", "ops/") == 0, batched.sync_sites
    assert hand.syncs == 0


def test_treelstm_makes_no_host_sync(costs):
    model, batched, hand = costs["TreeLSTM"]
    # One: core's per-op checks (each per-example index in range, three a step; cat's
    # parts real for the same examples, one a step) are deferred to the end of the
    # @batch call and read there together (156 syncs at this size before; 920 at batch
    # 32 before issue 22's work). That read is counted at the model's own frame (the
    # counter skips matchbox._capture); a sync made by an op would show its op's site.
    assert batched.syncs == 1, batched.sync_sites
    assert batched.sync_sites == {"model": 1}, batched.sync_sites


def test_treelstm_makes_no_host_sync_with_async_checks():
    # matchbox.set_async_checks(True): the call queues its checks' flags (a pinned copy
    # and an event on CUDA) and a later call or matchbox.raise_pending_checks() reads
    # them, so the forward makes no sync at all. Two forwards: on the CPU each reads its
    # own flags' bool at its end, and on CUDA the second the first's pinned copy once its
    # event completed: host memory both, read with no ATen op (no sync).
    model = next(m for m in models(BATCH, SIZE, LONGEST) if m.name.startswith("TreeLSTM"))
    matchbox.raise_pending_checks()
    with host_reads(False), matchbox.set_async_checks(True):
        batched = count(lambda: (model.batched(), model.batched()))
        matchbox.raise_pending_checks()  # every check passed
    assert batched.syncs == 0, batched.sync_sites


def test_treelstm_ops_against_hand_written(costs):
    model, batched, hand = costs["TreeLSTM"]
    # Measured 1.27x (issue 22 asks for 1.3x; 3.69x before, at batch 32; 2.91x before
    # the checks were deferred, which spared each an `any` and its read; 2.77x before
    # the fewer-ops work: a per-example index as one advanced index, a branch's masks
    # folded, a counter not merged again after the step, a masked linear layer's rows
    # zeroed once each way, two halves of a state checked with one xor; then 1.93x. The
    # step no longer guards the stack it reads only inside the if's sides (nor merges it
    # again): 1.88x; a per-example index takes its range as `-n <= i < n` with cached
    # bounds and rows: 1.69x; and its result has the batch's own mask (an index out of
    # range raises): the reduce's two reads share one, and their cat, the linear layer and
    # the gates need no guard between them: 1.38x; a read along the only dynamic
    # dimension is all real, so a shifted leaf needs no guard against the stack: 1.31x;
    # a linear layer's input and output that are rows already are not viewed as rows:
    # 1.27x, and 1.27x at batch 32). What is left: the sides' guards and
    # merges of `stack`, the index's range checks (three a step), the masked linear layer's
    # two wheres and the `where` of the one-hot write's guard.
    assert batched.total <= 1.3 * hand.total, (batched.total, hand.total)


def test_treelstm_saves_no_more_for_the_backward_than_by_hand():
    # 1.01x the hand-written code's saved bytes at this size (2.28x before: a per-example
    # index was a gather, which saves its whole input, the stack, for the backward; an
    # advanced index saves the positions only). It was 0.86x while the reduce's reads had
    # masks of their own: the gates' products saved guarded halves of the two items; they
    # save the items read, as the hand-written code's do.
    model = next(m for m in models(BATCH, SIZE, LONGEST) if m.name.startswith("TreeLSTM"))
    with host_reads(False):
        kept = saved_bytes(model.batched)
    assert kept <= 1.05 * saved_bytes(model.hand), (kept, saved_bytes(model.hand))


def test_treelstm_does_not_copy_its_stack_for_a_branchs_gradient_guard():
    # The bytes the forward's ops write: 1.31x the hand-written code's (1.93x while each
    # side of the step's if copied the stack for its gradient guard, which is now applied
    # to the two items the reduce reads, and carried through the write's where to the
    # merge, which needs none: core's _region_guard; 1.64x while each side's merge copied
    # the stack again, which the write's where, folding in the running examples, spares:
    # core's ops/pointwise.where). What is left: each side writes the stack (the
    # hand-written step selects its item first, and writes once).
    model = next(m for m in models(BATCH, SIZE, LONGEST) if m.name.startswith("TreeLSTM"))
    with host_reads(False):
        written = written_bytes(model.batched)
    assert written <= 1.35 * written_bytes(model.hand), (written, written_bytes(model.hand))


def test_lstm_module_runs_what_packing_by_hand_runs(costs):
    model, batched, hand = costs["LSTM"]
    # Measured 1.01x: nn.LSTM on a batch packs it as PackedSequence code does. Its reads
    # are of the lengths, copied to the CPU once as pack_padded_sequence wants them (the
    # one device sync; the rest read that CPU copy): 3, against the 2 of packing by hand.
    assert batched.total <= 1.05 * hand.total, (batched.total, hand.total)
    assert batched.syncs <= hand.syncs + 1, batched.sync_sites


def test_transformer_layer_makes_no_host_sync(costs):
    model, batched, hand = costs["transformer encoder layer"]
    assert batched.syncs == 0, batched.sync_sites
    # Measured 1.20x on torch 2.13 (65 ops against 54), 1.24x on torch 2.3 (68 against
    # 55; its layer runs other ops); issue 22 asks for 1.3x (1.50x and 1.53x before: a
    # RowMask's view of its mask built once, not at each of its 12 wheres; and padding
    # known to hold zeros, from a linear layer, a norm, attention or fromlist, through
    # relu, dropout or a residual sum, not zeroed again going in to the next row op: 5
    # wheres). What is left: each row op's where coming out, out_proj's going in
    # (attention's output at padding rows), and the key padding mask made from the
    # batch's mask.
    assert batched.total <= 1.25 * hand.total, (batched.total, hand.total)


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
