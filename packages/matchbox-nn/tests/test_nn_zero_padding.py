"""The record that padding holds zeros through matchbox-nn's ops (issue 22): multi-head
attention's output and dropout keep it, so the linear layers and norms of a transformer
encoder layer zero their input only where it may hold something else (fromlist's
padding if not zero, attention's output before its projection, a residual sum with
such a batch).  Values and gradients equal the loop, NaN padding going in.

Counted as on an accelerator (``host_reads(False)``: every row runs, padding rows
zeroed by a ``where``), where the record spares ops.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as nnf
from op_counts import CountOps

from matchbox import MaskedBatch
from matchbox._masking import host_reads
from matchbox.masked_batch import has_zero_padding
from matchbox.testing import mb_assert

D, HEADS, FF = 8, 2, 16
LENGTHS = (3, 1, 5, 2)


def _seqs(dtype=torch.float64):
    return [torch.randn(1, n, D, dtype=dtype) for n in LENGTHS]


def _layer(norm_first=False, activation="relu", dropout=0.0, dtype=torch.float64):
    return torch.nn.TransformerEncoderLayer(
        D, HEADS, FF, dropout=dropout, activation=activation, norm_first=norm_first,
        batch_first=True).to(dtype).train()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("dropout", [0.0, 1.0])
def test_encoder_layer_without_host_reads_equals_the_loop(norm_first, activation, dropout,
                                                         dtype):
    # dropout 1 zeroes every branch whatever the random numbers (the loop draws others).
    layer = _layer(norm_first, activation, dropout, dtype)
    xs = _seqs(dtype)
    with host_reads(False):
        mb_assert(layer, [xs], [MaskedBatch.fromlist(xs, (True, False), padding_value=float(
            "nan"))], len(xs))


def _wheres(layer, padding):
    xb = MaskedBatch.fromlist(_seqs(), (True, False), padding_value=padding)
    with host_reads(False):
        layer(xb)
        with CountOps() as counted:
            layer(xb)
    return counted.ops["where"]


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_encoder_layer_zeroes_padding_only_where_not_known_zero(dropout):
    layer = _layer(dropout=dropout)
    zero, nan = _wheres(layer, 0.0), _wheres(layer, float("nan"))
    # Coming out of each row op (in_proj, out_proj, two norms, two linears), going in to
    # out_proj (attention's output at padding rows), and on torch 2.13 the attention
    # mask's: 8 (13 before; 7 on torch 2.3). NaN padding: also going in to in_proj and
    # to the first norm (x + attention), 2 more.
    assert zero <= 8, zero
    assert nan == zero + 2, (zero, nan)


def test_attention_output_records_zeros_at_padding():
    attention = torch.nn.MultiheadAttention(D, HEADS, batch_first=True).double()
    xb = MaskedBatch.fromlist(_seqs(), (True, False), padding_value=float("nan"))
    with host_reads(False):
        out, _ = attention(xb, xb, xb, need_weights=False)
    assert has_zero_padding(out)
    assert (out.data[~out.mask.expand_as(out.data)] == 0).all()


@pytest.mark.parametrize("dropout", [
    lambda x: nnf.dropout(x, 0.3), lambda x: torch.dropout(x, 0.3, True),
    lambda x: nnf.dropout1d(x, 0.3), lambda x: nnf.dropout(x, 0.3, training=False),
], ids=["F.dropout", "torch.dropout", "F.dropout1d", "eval"])
def test_dropout_keeps_the_record(dropout):
    xb = MaskedBatch.fromlist(_seqs(), (True, False))
    out = dropout(xb)
    assert has_zero_padding(out)
    assert (out.data[~out.mask.expand_as(out.data)] == 0).all()


@pytest.mark.parametrize("dropout", [
    lambda x: nnf.alpha_dropout(x, 0.3, True), lambda x: nnf.dropout(x, 0.3, inplace=True),
    lambda x: nnf.dropout(MaskedBatch.fromlist(_seqs(), (True, False), padding_value=1.0),
                          0.3),
], ids=["alpha (moves zero)", "in place (a write)", "padding not zero"])
def test_dropout_does_not_make_a_record_up(dropout):
    assert not has_zero_padding(dropout(MaskedBatch.fromlist(_seqs(), (True, False))))


def _sequence_loss(out, x, targets):
    """A language model's loss: a linear layer's logits, classes moved to dimension 1."""
    return nnf.cross_entropy(out(x).transpose(1, 2), targets, reduction="none").sum(1)


def test_a_loss_over_transposed_logits_reads_the_linear_layers_zero_padding(dtype):
    # A view (transpose, permute, unsqueeze, squeeze) of zero padding is zero padding: the
    # loss reads the logits as they are, with no where (under inductor a where there made
    # the transposed logits contiguous, and the log-softmax over the classes strided).
    out = torch.nn.Linear(D, 5).to(dtype)
    xs = _seqs(dtype)
    targets = [torch.randint(0, 5, (1, n)) for n in LENGTHS]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    tb = MaskedBatch.fromlist(targets, (True,), padding_value=10**6)
    with host_reads(False):
        logits = out(xb)
        assert has_zero_padding(logits)
        assert has_zero_padding(logits.transpose(1, 2))
        assert has_zero_padding(logits.permute(0, 2, 1).unsqueeze(3).squeeze(3))
        with CountOps() as counted:
            _sequence_loss(out, xb, tb)
        mb_assert(lambda x, t: _sequence_loss(out, x, t), [xs, targets], [xb, tb], len(xs))
    # the linear layer's two (its input's padding, its output's) and the loss's own three
    # (the per-position losses, the positions counted, their gradient guard); none on the
    # logits.
    assert counted.ops["where"] == 5
