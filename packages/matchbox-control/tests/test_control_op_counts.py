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


@matchbox.batch
def read_only_in_the_sides(x, s):
    for x_t in x.unbind(1):
        if x_t > 0:
            s = s + x_t.log()  # NaN for the examples that take the other side
        else:
            s = s * 2
    return s


@matchbox.batch
def read_after_the_if_too(x, s):
    for x_t in x.unbind(1):
        if x_t > 0:
            s = s + x_t
        s = s.sqrt()  # an infinite derivative at 0: an ended example's zero state
    return s


@matchbox.batch
def read_under_a_plain_if(x, s, flag: bool):
    for _x_t in x.unbind(1):
        if flag:  # one side for every example: the step's mask, which must still guard
            s = s.sqrt()
    return s


def _states(xs, seed):  # noqa: ANN001, ANN202
    # Positive, but zero for examples with no step (the square root's derivative there
    # is infinite: were it computed for them unguarded, 0 * inf would be NaN).
    torch.manual_seed(seed)
    ss = [torch.rand(1, 2) * bool(x.size(1)) for x in xs]
    ss = [s.requires_grad_() for s in ss]
    return ss, MaskedBatch.fromlist([s.detach() for s in ss], (False,))


def test_a_state_read_only_in_the_sides_is_guarded_by_the_sides_alone():
    xs, xb = _steps([3, 5, 0, 1, 4], seed=4)
    xs = [x.unsqueeze(-1) for x in xs]
    xb = MaskedBatch.fromlist(xs, (True, False))
    ss, sb = _states(xs, 5)
    _, ops = _count(read_only_in_the_sides, xb, sb.requires_grad_())
    # Per step: the sides' guards of the state (2), the merges after each side (2), and
    # the sum's guard of the state where the item's log is padding (1). The step guarded
    # the state too, and merged it again after the step: two wheres more a step.
    assert ops["where"] == 5 * 5, ops
    for reads in (False, True):
        with host_reads(reads):
            mb_assert(read_only_in_the_sides, [xs, ss], [xb, sb], len(xs))


@pytest.mark.parametrize("reads", [False, True], ids=["no host reads", "host reads"])
def test_a_state_read_after_the_if_is_still_guarded_by_the_step(reads):
    # The state is read outside the if's sides: the step guards it (without, the square
    # root of an ended example's zero state would send it 0 * inf = nan).
    xs, xb = _steps([3, 5, 0, 1, 4], seed=6)
    xs = [x.unsqueeze(-1) for x in xs]
    xb = MaskedBatch.fromlist(xs, (True, False))
    ss, sb = _states(xs, 7)
    with host_reads(reads):
        mb_assert(read_after_the_if_too, [xs, ss], [xb, sb], len(xs))
        mb_assert(read_under_a_plain_if, [xs, ss, [True] * len(xs)], [xb, sb, True],
                  len(xs))
