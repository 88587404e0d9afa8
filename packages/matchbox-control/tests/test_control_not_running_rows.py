"""Shared weights get no NaN gradient from what a region computed for the examples that
do not run it.

Under a per-example ``if``, the batch computes the branch for every example; for
an example that does not take it, the values may be anything (``x * s.log()``
with ``s < 0`` is NaN). They are discarded, but a product with a weight
multiplies them by the zero gradient arriving there: ``0 * nan`` is NaN in the
weight's gradient. Ops with a weight read those rows as padding (zeros, no
gradient). The oracle is the loop, where those examples never run the branch.
"""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop

import matchbox
from matchbox import MaskedBatch

SIGNS = [1.0, -1.0, 1.0]  # the middle example does not take the branch


def branch_examples(dtype, lengths=(3, 2, 4)):
    """Sequences whose sum is positive, negative, positive (a NaN log for the middle one)."""
    torch.manual_seed(0)
    xs = [(torch.randn(1, n, 3, dtype=dtype).abs() + 0.5) * sign
          for n, sign in zip(lengths, SIGNS)]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


def through_a_branch(layer):
    @matchbox.batch
    def f(x):
        s = x.sum()
        if s > 0:
            y = layer(x * s.log()).sum()  # NaN rows for the example that does not run this
        else:
            y = x.sum() * 0.0
        return y

    return f


def core_layers(dtype):
    weight = torch.randn(3, 3, dtype=dtype, requires_grad=True)
    return {
        "matmul": (lambda h: h @ weight, [weight]),
        "einsum": (lambda h: torch.einsum("btf,fg->btg", h, weight), [weight]),
        # A shared query compared with each position (features) or each feature (positions).
        "cosine_similarity": (lambda h: torch.cosine_similarity(h, weight[0], -1)
                              + torch.cosine_similarity(h, weight[:1, :1], 1).sum(), [weight]),
        "pairwise_distance": (lambda h: torch.pairwise_distance(weight[1], h), [weight]),
        "dist": (lambda h: torch.dist(h, weight[2], 3), [weight]),
        "broadcast_tensors": (lambda h: torch.broadcast_tensors(weight[0], h)[0] * h, [weight]),
    }


def nn_layers(dtype):
    torch.manual_seed(1)
    modules = {
        "linear": (torch.nn.Linear(3, 2), lambda m, h: m(h)),
        "layer_norm": (torch.nn.LayerNorm(3), lambda m, h: m(h)),
        "prelu": (torch.nn.PReLU(1), lambda m, h: m(h)),
        "conv1d": (torch.nn.Conv1d(3, 2, 2), lambda m, h: m(h.transpose(1, 2))),
        "bilinear": (torch.nn.Bilinear(3, 3, 2), lambda m, h: m(h, h)),
        "rnn_cell": (torch.nn.RNNCell(3, 3), lambda m, h: m(h[:, 0], h[:, 0])),
        "lstm_cell": (torch.nn.LSTMCell(3, 3), lambda m, h: m(h[:, 0], (h[:, 0], h[:, 0]))[0]),
        "gru": (torch.nn.GRU(3, 2, batch_first=True), lambda m, h: m(h)[0]),
        "lstm_state": (torch.nn.LSTM(3, 2, batch_first=True), lambda m, h: m(h)[1][1]),
        "attention": (torch.nn.MultiheadAttention(3, 1, batch_first=True),
                      lambda m, h: m(h, h, h)[0]),
    }
    return {name: ((lambda h, m=m, call=call: call(m, h)), list(m.to(dtype).parameters()))
            for name, (m, call) in modules.items()}


@pytest.mark.parametrize("name", ["matmul", "einsum", "cosine_similarity", "pairwise_distance",
                                  "dist", "broadcast_tensors"])
def test_core_products_with_a_weight(name, dtype):
    layer, params = core_layers(dtype)[name]
    xs, xb = branch_examples(dtype)
    assert_batch_equals_loop(through_a_branch(layer), (xs, xb), params=params)


NN_LAYERS = ["linear", "layer_norm", "prelu", "conv1d", "bilinear", "rnn_cell", "lstm_cell",
             "gru", "lstm_state", "attention"]


@pytest.mark.parametrize("name", NN_LAYERS)
def test_nn_layers(name, dtype):
    pytest.importorskip("matchbox.nn", reason="layers on batches are in matchbox-nn, which the "
                                              "control environment does not install")
    layer, params = nn_layers(dtype)[name]
    xs, xb = branch_examples(dtype)
    assert_batch_equals_loop(through_a_branch(layer), (xs, xb), params=params)


def test_a_for_loop_under_a_branch_keeps_the_padding_of_examples_not_running(dtype):
    # Every running example has each step here, so the steps need no mask of their
    # own, but the example that does not run the loop has padding there: that must
    # stay padding (it used to pass for real values: -inf from log(|padding|)).
    weight = torch.randn(2, 2, dtype=dtype, requires_grad=True)

    @matchbox.batch
    def f(x):
        h = x.new_zeros(1, 2)
        if x.sum() < 3:
            for xt in x.unbind(1):
                h = h + xt.abs().log()
            h = h @ weight
        return h

    xs = [torch.full((1, 1, 2), 5.0, dtype=dtype),
          torch.tensor([[[-1.6, 0.2], [2.2, -0.8]]], dtype=dtype)]
    for padding in (0.0, float("nan")):
        xb = MaskedBatch.fromlist(xs, (True, False), padding_value=padding)
        assert_batch_equals_loop(f, (xs, xb), params=[weight])


def test_zero_and_one_length_sequences_and_batch_size_one(dtype):
    weight = torch.randn(3, 3, dtype=dtype, requires_grad=True)
    layer = through_a_branch(lambda h: h @ weight)
    for lengths in [(0, 1, 2), (1,), (0,)]:
        torch.manual_seed(2)
        xs = [(torch.randn(1, n, 3, dtype=dtype).abs() + 0.5) * sign
              for n, sign in zip(lengths, SIGNS)]
        xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
        assert_batch_equals_loop(layer, (xs, xb), params=[weight])
