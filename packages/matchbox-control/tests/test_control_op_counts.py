"""The ops a loop step with an ``if`` runs (issue 22): masks folded, counters merged once
per side, a masked linear layer zeroing its rows once; results still the loop's."""

from __future__ import annotations

import collections

import pytest
import torch
from op_counts import CountOps

import matchbox
from matchbox import MaskedBatch
from matchbox._masking import host_reads
from matchbox.testing import mb_assert


def _count(fn, *args):  # noqa: ANN001, ANN202
    with host_reads(False), CountOps() as counter:
        out = fn(*args)
    return out, counter.ops


@matchbox.batch
def up_and_down(x):
    n = x.sum() * 0
    for x_t in x.unbind(1):
        if x_t > 0:
            n = n + 1
        else:
            n = n - 1
    return n


def _steps(lengths, seed=0):
    torch.manual_seed(seed)
    xs = [torch.randn(1, n) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True,))


def test_counter_assigned_on_both_sides_is_merged_once_per_side():
    xs, xb = _steps([3, 5, 2])
    out, ops = _count(up_and_down, xb)
    assert [int(e) for e in out.examples()] == [int(up_and_down(x)) for x in xs]
    # Per step: one where after each side; the step's own merge sees that the counter
    # equals its old value outside the step already (it was three wheres a step).
    assert ops["where"] == 2 * 5, ops
    # The step's condition: its *and* with the item's own mask (the step's mask) and the
    # else side as an exclusive or (it was and, and, not, and).
    assert ops["bitwise_and"] + ops["bitwise_xor"] + ops["bitwise_not"] == 2 * 5, ops


@matchbox.batch
def grows_on_one_side(x, h):
    for x_t in x.unbind(1):
        if x_t > 0:
            h = h + x_t
        else:
            h = h * x_t
    return h


def test_merged_once_per_side_keeps_the_loops_values_and_gradients():
    xs, xb = _steps([3, 5, 1, 4], seed=1)
    hs = [torch.randn(1, 1, requires_grad=True) for _ in xs]
    hb = MaskedBatch.fromlist([h.detach() for h in hs], (False,))
    for reads in (False, True):
        with host_reads(reads):
            mb_assert(grows_on_one_side, [xs, hs], [xb, hb], len(xs))


@matchbox.batch
def written_in_place_after_a_side(x, n):
    for x_t in x.unbind(1):
        if x_t > 0:
            n = n + 1
        n.add_(1)  # an in-place write after the side's merge, before the step's
    return n


@pytest.mark.parametrize("reads", [True, False], ids=["host reads", "no host reads"])
def test_merges_under_inference_mode_equal_the_loop(reads):
    # Inference tensors have no version counter: no merge is spared on a record of one
    # (reading it raised), and the per-example index keeps no lengths of one.
    xs, xb = _steps([3, 5, 0, 1])
    ys, yb = _steps([3, 5, 2, 1], seed=1)
    positions = (2, 4, 1, 0)
    with torch.inference_mode(), host_reads(reads):
        out = up_and_down(xb)
        index = MaskedBatch.fromlist([torch.tensor([k]) for k in positions], ())
        read, again = yb[:, index], yb[:, index]
    assert [int(e) for e in out.examples()] == [int(up_and_down(x)) for x in xs]
    for j, (y, k) in enumerate(zip(ys, positions)):
        assert float(read.data[j]) == float(again.data[j]) == float(y[0, k])


def test_a_value_changed_in_place_is_merged_again():
    xs, xb = _steps([3, 5, 2], seed=2)
    nb = MaskedBatch.fromlist([torch.zeros(1) for _ in xs], ())
    out, _ = _count(written_in_place_after_a_side, xb, nb)
    assert [int(e) for e in out.examples()] == [
        int(written_in_place_after_a_side(x, torch.zeros(1))) for x in xs]


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)

    @matchbox.batch
    def forward(self, x):
        h = x[:, 0] * 0
        for x_t in x.unbind(1):
            if x_t.sum() > 0:
                h = self.linear(x_t)
        return h


def test_a_masked_linear_layer_zeroes_its_rows_once_each_way():
    pytest.importorskip("matchbox.nn", reason="nn.Linear on batches is in matchbox-nn, which "
                        "matchbox-control does not depend on (tox's `all` runs this)")
    torch.manual_seed(3)
    layer = _Layer()
    xs = [torch.randn(1, n, 3) for n in (2, 4, 3)]
    xb = MaskedBatch.fromlist(xs, (True, False))
    _, ops = _count(layer, xb)
    # Per step: the input's rows of padding and of examples not running (one where),
    # the output's the same way (one where), the merge, and the gradient guards of the
    # step and of the branch on the input and the state (it was two wheres more).
    with host_reads(False):
        mb_assert(layer, [xs], [xb], len(xs), params=list(layer.parameters()))
    assert ops["addmm"] == 4 and ops["where"] <= 24, ops  # 32 before


def test_a_loop_step_with_an_if_asks_no_batch_for_a_missing_attribute(monkeypatch):
    # An unset record slot (_kept_outside, _not_a_view, ...) or a batch asked for
    # ``__self__`` falls to Batch.__getattr__, which builds an AttributeError: slow.
    missing = collections.Counter()
    fallback = MaskedBatch.__getattr__

    def counted(self, name):  # noqa: ANN001, ANN202
        missing[name] += 1
        return fallback(self, name)

    monkeypatch.setattr(MaskedBatch, "__getattr__", counted)
    xs, xb = _steps([3, 5, 2])
    out = up_and_down(xb)
    assert [int(e) for e in out.examples()] == [int(up_and_down(x)) for x in xs]
    assert not missing, missing
