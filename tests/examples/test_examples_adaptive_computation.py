"""examples/adaptive_computation.py: per-example pondering (nested loops, ``break``) equals
the loop over examples."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from examples import adaptive_computation as example
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")


def model(dtype, bits=3, hidden=6, max_ponder=5):
    torch.manual_seed(0)
    m = example.ACT(bits, hidden, 2, max_ponder=max_ponder).to(dtype)
    with torch.no_grad():  # spread the halting probabilities: examples halt at different steps
        m.halt.weight.mul_(8.0)
    return m


def iterations(cost):
    """N from the ponder cost N + R (R in (0, 1])."""
    return math.ceil(cost - 1e-9) - 1


def test_ponder_halts_per_example_and_equals_the_loop(dtype):
    m = model(dtype)
    xs = [torch.randn(1, 6, dtype=dtype) for _ in range(8)]
    hs = [torch.randn(1, 6, dtype=dtype) for _ in range(8)]
    counts = [iterations(m.ponder(x, h)[1].item()) for x, h in zip(xs, hs)]
    assert len(set(counts)) >= 3, counts  # the batch holds examples stopping at different steps
    assert max(counts) <= 5
    mb_assert(m.ponder, [xs, hs], [MaskedBatch.fromlist(xs, (False,)),
                                   MaskedBatch.fromlist(hs, (False,))], len(xs))


@pytest.mark.parametrize("lengths", [[3, 0, 5, 1, 2], [4], [2, 2], [0]],
                         ids=["ragged-with-empty", "one-example", "equal", "empty"])
def test_forward_on_nan_padded_sequences_equals_the_loop(lengths, dtype):
    m = model(dtype)
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
    mb_assert(m, [xs], [xb], len(xs))


def test_loss_on_parity_batches_equals_the_loop(dtype):
    m = model(dtype)
    xs, ys, _, yb = example.make_batch(5, 4, 3, rng=random.Random(0), min_len=0, dtype=dtype)
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
    mb_assert(m.loss, [xs, ys], [xb, yb], len(xs), params=list(m.parameters()))


def test_make_batch_labels_are_the_parity_of_the_plus_ones():
    xs, ys, xb, yb = example.make_batch(6, 5, 4, rng=random.Random(1))
    for x, y in zip(xs, ys):
        assert 1 <= x.size(1) <= 5 and x.shape[2] == 4
        assert ((x != 0).sum(-1) >= 1).all()  # every input has at least one ±1 entry
        assert y.item() == int((x == 1).sum()) % 2
    assert xb.dims == (True, False) and yb.dims == ()


def test_main_trains_briefly():
    result = example.main(["--steps", "3", "--batch-size", "4", "--max-len", "3", "--bits",
                           "3", "--hidden", "8", "--max-ponder", "3", "--device", "cpu"])
    assert len(result["losses"]) == 3
    assert all(torch.isfinite(torch.tensor(result["losses"])))
    assert all(2 <= p <= 4 for p in result["ponders"])  # N + R per input: N in 1..3, R in (0, 1]


@settings(max_examples=10)
@given(lengths=st.lists(st.integers(0, 4), min_size=1, max_size=5))
def test_forward_on_drawn_lengths_equals_the_loop(lengths):
    m = model(torch.float64)
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in lengths]
    mb_assert(m, [xs], [MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)], len(xs))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_loss_equals_the_loop_on_cuda():
    m = model(torch.float64).cuda()
    xs, ys, _, yb = example.make_batch(5, 4, 3, rng=random.Random(0), min_len=0,
                                       dtype=torch.float64, device="cuda")
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)
    mb_assert(m.loss, [xs, ys], [xb, yb], len(xs), params=list(m.parameters()))
