"""examples/readme_rnn.py: the README's RNN under ``@matchbox.batch`` equals the loop."""

from __future__ import annotations

import random

import pytest
import torch

from examples import readme_rnn
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


def sequences(lengths, size, dtype):
    xs = [torch.randn(1, n, size, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


@pytest.mark.parametrize("lengths", [[3, 7, 1, 5], [0, 2, 1], [4], [2, 2]],
                         ids=["ragged", "with-empty", "one-example", "equal"])
def test_readme_rnn_equals_the_loop(lengths, dtype):
    xs, xb = sequences(lengths, 6, dtype)
    mb_assert(readme_rnn.RNN(6).to(dtype), [xs], [xb], len(lengths))


def test_the_per_example_loss_equals_the_loop(dtype):
    # The training objective: the read-out against each example's own mean over time.
    model = readme_rnn.MeanRegressor(5).to(dtype)
    xs, xb = sequences([3, 1, 6, 2], 5, dtype)
    mb_assert(model.loss, [xs], [xb], len(xs), params=list(model.parameters()))


def test_make_batch_holds_the_examples():
    xs, xb = readme_rnn.make_batch(5, 4, 3, rng=random.Random(1))
    assert xb.dims == (True, False)
    for x, y in zip(xs, xb.examples()):
        assert torch.equal(x, y)
        assert 1 <= x.size(1) <= 4


def test_main_trains_briefly():
    result = readme_rnn.main(["--steps", "3", "--batch-size", "4", "--size", "8",
                              "--max-len", "5", "--log-every", "2", "--device", "cpu"])
    assert len(result["losses"]) == 3
    assert all(torch.isfinite(torch.tensor(result["losses"])))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_readme_rnn_equals_the_loop_on_cuda():
    xs = [x.cuda() for x in sequences([3, 7, 1, 5], 6, torch.float64)[0]]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    mb_assert(readme_rnn.RNN(6).double().cuda(), [xs], [xb], len(xs))
