"""The original Matchbox README's transformer, written for ONE example, run on batches.

Every block below is plain per-example code: a layer norm from ``mean``/``std``, a
feed-forward network, a residual connection, scaled dot-product attention with
the ``causal_mask`` convenience, multi-head attention that splits heads out of the
feature dimension with ``split_dim`` and merges them back with ``join_dims``,
sinusoidal positional encodings of the padded length (``maxsize``), and encoder and
decoder layers built from them.  Nothing in it knows about batches; the batch must
give what the loop over its examples gives, values and gradients (inputs and every
parameter), with NaN in the padding.

Per example an input is ``(1, length, size)``; heads are kept in a dimension of
their own, ``(1, heads, length, size // heads)``, since dimension 0 is each example's
own (the original code merged heads into the batch dimension, which a batch keeps).

Empty sequences are drawn everywhere: a decoder whose target is empty but whose
memory is not forms cross-attention scores ``(1, heads, 0, memory length)``, and one
whose memory is empty scores ``(1, heads, target length, 0)``: empty in one of two
dynamic dimensions and not the other, which the batch holds (its mask carries the
lengths) and attends over as the loop does.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

SIZE, HEADS, HIDDEN = 8, 2, 16
NAN = float("nan")
# torch warns when std() reduces an empty tensor: an empty example in the loop, or a
# batch whose examples are all empty.
pytestmark = pytest.mark.filterwarnings(r"ignore:std\(\). degrees of freedom is <= 0")

# ------------------------------------------------------------------ the blocks (per example)


class LayerNorm(nn.Module):
    def __init__(self, size, eps=1e-6):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(size))
        self.shift = nn.Parameter(torch.zeros(size))
        self.eps = eps

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return self.gain * centred / (x.std(-1, keepdim=True) + self.eps) + self.shift


class FeedForward(nn.Module):
    def __init__(self, size, hidden, drop=0.0):
        super().__init__()
        self.expand, self.project = nn.Linear(size, hidden), nn.Linear(hidden, size)
        self.dropout = nn.Dropout(drop)

    def forward(self, x):
        return self.project(self.dropout(F.relu(self.expand(x))))


class Residual(nn.Module):
    """``norm(x + dropout(layer(x, *context)))``."""

    def __init__(self, layer, size, drop=0.0):
        super().__init__()
        self.layer, self.norm, self.dropout = layer, LayerNorm(size), nn.Dropout(drop)

    def forward(self, x, *context):
        return self.norm(x + self.dropout(self.layer(x, *context)))


class Attention(nn.Module):
    def __init__(self, key_size, causal=False, drop=0.0):
        super().__init__()
        self.scale, self.causal, self.dropout = math.sqrt(key_size), causal, nn.Dropout(drop)

    def forward(self, query, key, value):
        scores = query @ key.transpose(-2, -1) / self.scale  # (1, heads, queries, keys)
        if self.causal:
            scores = scores.causal_mask(in_dim=-1, out_dim=-2)
        return self.dropout(scores.softmax(-1)) @ value


class MultiHead(nn.Module):
    def __init__(self, size, heads, causal=False, drop=0.0):
        super().__init__()
        self.heads = heads
        self.attention = Attention(size // heads, causal, drop)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(size, size) for _ in range(4))

    def forward(self, x, memory=None):
        memory = x if memory is None else memory
        q, k, v = self.wq(x), self.wk(memory), self.wv(memory)
        # (1, length, size) -> (1, length, heads, size / heads) -> (1, heads, length, ...)
        q, k, v = (t.split_dim(-1, t.size(-1) // self.heads).transpose(1, 2) for t in (q, k, v))
        out = self.attention(q, k, v).transpose(1, 2).join_dims(2, 3)
        return self.wo(out)


def positional_encodings_like(x):
    """Sinusoids over the padded length: positions line up with every example's."""
    length, size = F.maxsize(x, 1), F.maxsize(x, -1)
    positions = torch.arange(length, dtype=x.dtype, device=x.device).unsqueeze(1)
    rates = 1 / 10000 ** (torch.arange(0, size, 2, dtype=x.dtype, device=x.device) / size)
    angles = positions * rates
    return torch.stack((angles.sin(), angles.cos()), -1).reshape(1, length, size)


class EncoderLayer(nn.Module):
    def __init__(self, size, heads, hidden, drop=0.0):
        super().__init__()
        self.attend = Residual(MultiHead(size, heads, drop=drop), size, drop)
        self.feed = Residual(FeedForward(size, hidden, drop), size, drop)

    def forward(self, x):
        return self.feed(self.attend(x))


class DecoderLayer(nn.Module):
    def __init__(self, size, heads, hidden, drop=0.0):
        super().__init__()
        self.attend_self = Residual(MultiHead(size, heads, causal=True, drop=drop), size, drop)
        self.attend_memory = Residual(MultiHead(size, heads, drop=drop), size, drop)
        self.feed = Residual(FeedForward(size, hidden, drop), size, drop)

    def forward(self, x, memory):
        return self.feed(self.attend_memory(self.attend_self(x), memory))


class Transformer(nn.Module):
    """Encoder and decoder stacks over positionally encoded inputs."""

    def __init__(self, size, heads, hidden, layers=2):
        super().__init__()
        self.encoder = nn.ModuleList(EncoderLayer(size, heads, hidden) for _ in range(layers))
        self.decoder = nn.ModuleList(DecoderLayer(size, heads, hidden) for _ in range(layers))

    def forward(self, source, target):
        x = source + positional_encodings_like(source)
        for layer in self.encoder:
            x = layer(x)
        y = target + positional_encodings_like(target)
        for layer in self.decoder:
            y = layer(y, x)
        return y


# ------------------------------------------------------------------ tests


def seqs(lengths, dtype=torch.float64):
    return [torch.randn(1, n, SIZE, dtype=dtype) for n in lengths]


def batch(xs):
    return MaskedBatch.fromlist(xs, (True, False), padding_value=NAN)


def check(module, *groups):
    module = module.to(groups[0][0].dtype)
    mb_assert(module, list(groups), [batch(g) for g in groups], len(groups[0]))


lengths = st.lists(st.integers(0, 6), min_size=1, max_size=4)
dtypes = st.sampled_from([torch.float32, torch.float64])


@given(lengths=lengths, dtype=dtypes)
def test_layer_norm(lengths, dtype):
    check(LayerNorm(SIZE), seqs(lengths, dtype))


@given(lengths=lengths, dtype=dtypes)
def test_feed_forward_and_residual(lengths, dtype):
    check(Residual(FeedForward(SIZE, HIDDEN), SIZE), seqs(lengths, dtype))


@given(lengths=lengths, causal=st.booleans(), dtype=dtypes)
def test_self_attention(lengths, causal, dtype):
    # Empty sequences included: their scores are (1, 0, 0).
    attention = Attention(SIZE, causal)
    xs = seqs(lengths, dtype)
    mb_assert(lambda x: attention(x, x, x), [xs], [batch(xs)], len(xs))


@given(lengths=lengths, data=st.data(), causal=st.booleans(), dtype=dtypes)
def test_attention_onto_other_lengths(lengths, data, causal, dtype):
    # Causal with fewer keys than queries: later queries see every key of their example.
    keys = data.draw(st.lists(st.integers(0, 6), min_size=len(lengths), max_size=len(lengths)))
    attention = Attention(SIZE, causal)
    qs, ks, vs = seqs(lengths, dtype), seqs(keys, dtype), seqs(keys, dtype)
    mb_assert(attention, [qs, ks, vs], [batch(qs), batch(ks), batch(vs)], len(qs))


@given(lengths=lengths, causal=st.booleans(), dtype=dtypes)
def test_multi_head_attention(lengths, causal, dtype):
    check(MultiHead(SIZE, HEADS, causal), seqs(lengths, dtype))


@given(lengths=lengths, dtype=dtypes)
def test_encoder_layer(lengths, dtype):
    check(EncoderLayer(SIZE, HEADS, HIDDEN), seqs(lengths, dtype))


@given(lengths=lengths, data=st.data(), dtype=dtypes)
def test_decoder_layer(lengths, data, dtype):
    memory = data.draw(st.lists(st.integers(0, 6), min_size=len(lengths),
                                max_size=len(lengths)))
    check(DecoderLayer(SIZE, HEADS, HIDDEN), seqs(lengths, dtype), seqs(memory, dtype))


@given(sources=lengths, data=st.data(), dtype=dtypes)
def test_whole_transformer_with_positional_encodings(sources, data, dtype):
    targets = data.draw(st.lists(st.integers(0, 6), min_size=len(sources),
                                 max_size=len(sources)))
    check(Transformer(SIZE, HEADS, HIDDEN), seqs(sources, dtype), seqs(targets, dtype))


def test_batch_size_one(dtype):
    check(Transformer(SIZE, HEADS, HIDDEN), seqs([3], dtype), seqs([2], dtype))
    check(EncoderLayer(SIZE, HEADS, HIDDEN), seqs([1], dtype))


def test_full_dropout_equals_loop():
    # Dropout 1 zeroes every branch: the one rate whose result the loop can check.
    check(EncoderLayer(SIZE, HEADS, HIDDEN, drop=1.0).train(), seqs([2, 0, 3]))


def test_empty_target_or_memory_beside_a_nonempty_one(dtype):
    # Example 0: no target, a memory of 3; example 1: a target of 2, no memory.
    check(DecoderLayer(SIZE, HEADS, HIDDEN), seqs([0, 2], dtype), seqs([3, 0], dtype))
    check(Transformer(SIZE, HEADS, HIDDEN), seqs([0, 2], dtype), seqs([3, 0], dtype))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda():
    model = Transformer(SIZE, HEADS, HIDDEN).double().cuda()
    sources, targets = seqs([3, 1, 4]), seqs([2, 5, 1])
    sources, targets = [x.cuda() for x in sources], [x.cuda() for x in targets]
    mb_assert(model, [sources, targets], [batch(sources), batch(targets)], 3)
