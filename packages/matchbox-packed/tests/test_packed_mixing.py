"""PackedBatch and MaskedBatch in one model: the conversion table of matchbox.packed.mixing.

"The result is a MaskedBatch unless every batch argument is packed", whichever
argument comes first and however the op is called (torch function, operator,
method, list argument); each row of the table is checked against the loop.
The end-to-end test trains a packed LSTM encoder feeding masked attention
(written in core ops) and compares parameters with the loop's training.
"""

from __future__ import annotations

import copy

import pytest
import torch
from packed_strategies import examples_of_lengths
from torch import nn

import matchbox
from matchbox import MaskedBatch
from matchbox.packed import PackedBatch, as_masked
from matchbox.testing import mb_assert

LENGTHS = [3, 0, 5, 1]


def pair(dtype=torch.float64, lengths=LENGTHS, static=(3,)):
    xs = examples_of_lengths(lengths, static=static, dtype=dtype)
    ys = examples_of_lengths(lengths, static=static, dtype=dtype)
    return xs, ys, PackedBatch.fromlist(xs), MaskedBatch.fromlist(ys, (True,) + (False,) * len(
        static), padding_value=float("nan"))


CALLS = {
    "operator": lambda a, b: a * b + a,
    "torch function": lambda a, b: torch.add(a, b),
    "method": lambda a, b: a.sub(b),
    "where": lambda a, b: torch.where(a > b, a, b),
    "cat (static dim)": lambda a, b: torch.cat([a, b], 2),
    "cat (dynamic dim)": lambda a, b: torch.cat([a, b], 1),
    # (1, T, 3) @ (1, 3, 1): a batch of static examples (a reduction's) on the right.
    "matmul": lambda a, b: torch.matmul(a, b.sum(1, keepdim=True).transpose(1, 2)),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("packed_first", [True, False], ids=["packed-first", "masked-first"])
def test_packed_meets_masked_gives_masked_and_equals_loop(call, packed_first, dtype):
    xs, ys, pb, mb = pair(dtype)
    args = ([xs, ys], [pb, mb]) if packed_first else ([ys, xs], [mb, pb])
    f = CALLS[call]
    result = f(*args[1])
    assert isinstance(result, MaskedBatch), f"{call}: got {type(result).__name__}"
    mb_assert(f, args[0], args[1], len(xs))


@pytest.mark.parametrize("call", ["operator", "torch function", "method", "where",
                                  "cat (static dim)", "cat (dynamic dim)"])
def test_packed_with_packed_stays_packed(call, dtype):
    xs, ys, pb, _ = pair(dtype)
    pb2 = PackedBatch.fromlist(ys)
    assert isinstance(CALLS[call](pb, pb2), PackedBatch)
    mb_assert(CALLS[call], [xs, ys], [pb, pb2], len(xs))


@pytest.mark.parametrize("op", ["add_", "mul_", "sub_"])
def test_in_place_op_on_packed_with_masked_argument_changes_the_packed_batch(op, dtype):
    # The loop changes each x in place: the packed batch must change too (the
    # op runs on a masked copy, whose rows are written back), and gradients
    # reach both arguments through the write.
    def f(x, y):
        x = x * 1  # a non-leaf, which may be written in place
        same = getattr(x, op)(y)
        assert same is x
        return x

    xs, ys, pb, mb = pair(dtype)
    result = f(pb, mb)
    assert isinstance(result, PackedBatch)
    mb_assert(f, [xs, ys], [pb, mb], len(xs))


def _in_place_running(op, x, y, runs):
    """``op`` in place on a copy of ``x`` under the execution mask ``runs`` (as
    matchbox-control's ``@batch`` sets it under a per-example condition)."""
    from matchbox.extending import EXECUTION_MASK

    x = x * 1
    token = EXECUTION_MASK.set(runs)
    try:
        assert getattr(x, op)(y) is x
    finally:
        EXECUTION_MASK.reset(token)
    return x


def test_in_place_op_on_packed_with_masked_argument_under_a_mask_changes_running_examples():
    # Handed over to the masked dispatch, which writes the running examples only.
    runs = [True, False, True, False]
    xs, ys, pb, mb = pair()
    out = _in_place_running("add_", pb, mb, torch.tensor(runs))
    assert isinstance(out, PackedBatch)
    for got, x, y, run in zip(out.examples(), xs, ys, runs):
        torch.testing.assert_close(got, x + y if run else x)


def test_in_place_op_on_packed_alone_under_a_mask_is_refused():
    # A packed batch has no per-example write back: refused, not written for every example.
    _, _, pb, _ = pair()
    with pytest.raises(NotImplementedError, match=r"Tensor.mul_: an in-place op on a "
                                                  r"PackedBatch under a per-example condition"):
        _in_place_running("mul_", pb, 2.0, torch.tensor([True, False, True, False]))


def test_reductions_over_the_packed_dimension_give_masked_batches():
    _, _, pb, _ = pair(lengths=[3, 1, 5, 2])  # max of an empty example raises
    for result in (pb.sum(1), pb.mean(1, keepdim=True), pb.max(1).values, pb.sum()):
        assert isinstance(result, MaskedBatch) and result._mask is None


def test_a_packed_result_meets_a_masked_one_after_the_fact():
    # Per example: the mean over time (static) plus each step (dynamic).
    xs, ys, pb, mb = pair()
    mb_assert(lambda x, y: y - x.mean(1, keepdim=True), [xs, ys], [pb, mb], len(xs))


def test_ops_only_maskedbatch_implements_work_when_a_masked_batch_is_there():
    xs, ys, pb, mb = pair()
    # Tensor.transpose is a MaskedBatch op only; bmm with a MaskedBatch goes there.
    mb_assert(lambda x, y: torch.bmm(y.transpose(1, 2), x), [xs, ys], [pb, mb], len(xs))


def test_explicit_conversions_are_the_identity_on_examples():
    xs, ys, pb, mb = pair()
    mb_assert(lambda x, y: as_masked(x).transpose(1, 2) @ y, [xs, ys], [pb, mb], len(xs))


def test_converted_batches_of_one_layout_skip_the_length_comparison():
    _, _, pb, _ = pair()
    a, b = pb.tanh(), pb.exp()
    with torch.autograd.profiler.profile() as prof:
        torch.cat([as_masked(a), as_masked(b)], 2)
    # Shared mask: no per-example lengths are computed to compare them.
    assert not any(e.name == "aten::sum" for e in prof.function_events)


class PackedEncoderMaskedAttention(nn.Module):
    """Written for one example: source (1, S, F) and target (1, Q, F)."""

    def __init__(self, features=3, hidden=4):
        super().__init__()
        self.encoder = nn.LSTM(features, hidden, batch_first=True, bidirectional=True)
        self.skip = nn.Linear(features, 2 * hidden)
        self.query = nn.Linear(features, 2 * hidden)
        self.out = nn.Linear(4 * hidden, 2)

    def forward(self, source, target):
        memory, _ = self.encoder(source)                # PackedBatch when source is one
        memory = memory + as_masked(self.skip(source))  # packed + masked: a MaskedBatch
        queries = self.query(target)
        scores = queries @ memory.transpose(1, 2)       # (1, Q, S)
        scores = scores - scores.amax(2, keepdim=True).detach()
        weights = scores.exp()
        weights = weights / weights.sum(2, keepdim=True)  # softmax over the source steps
        context = weights @ memory                       # (1, Q, 2H)
        features = torch.cat([context, queries], 2)
        return self.out(features).tanh().sum((1, 2))


def _loss_batch(model, source, target):
    return matchbox.batch_sum(model(source, target))


def test_packed_lstm_encoder_feeding_masked_attention_equals_loop(dtype):
    torch.manual_seed(0)
    model = PackedEncoderMaskedAttention().to(dtype)
    sources = examples_of_lengths([3, 1, 5, 2], dtype=dtype)
    targets = examples_of_lengths([2, 4, 1, 3], dtype=dtype)
    pb = PackedBatch.fromlist(sources)
    mb = MaskedBatch.fromlist(targets, (True, False), padding_value=float("nan"))
    mb_assert(lambda s, t: model(s, t), [sources, targets], [pb, mb], 4,
              params=list(model.parameters()))


def test_it_trains_end_to_end_with_the_loops_gradients():
    torch.manual_seed(1)
    batched = PackedEncoderMaskedAttention().double()
    looped = copy.deepcopy(batched)
    sources = examples_of_lengths([3, 1, 5, 2, 6])
    targets = examples_of_lengths([2, 4, 1, 3, 2])
    pb = PackedBatch.fromlist(sources)
    mb = MaskedBatch.fromlist(targets, (True, False), padding_value=float("nan"))
    opt_b = torch.optim.SGD(batched.parameters(), lr=0.1)
    opt_l = torch.optim.SGD(looped.parameters(), lr=0.1)
    for _ in range(3):
        opt_b.zero_grad()
        _loss_batch(batched, pb, mb).backward()
        opt_b.step()
        opt_l.zero_grad()
        sum(looped(s, t) for s, t in zip(sources, targets)).sum().backward()
        opt_l.step()
    for (name, p_b), p_l in zip(batched.named_parameters(), looped.parameters()):
        torch.testing.assert_close(p_b, p_l, msg=f"parameter {name} after training")
