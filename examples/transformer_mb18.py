"""The original Matchbox's transformer (2018), on PyTorch 2, with the original's calls.

What it shows: model code written for the original Matchbox runs here unchanged. The
classes are the original example's (``LayerNorm``, ``FeedForward``, ``ResidualBlock``,
``Attention``, ``MultiHead``, ``EncoderLayer``, ``DecoderLayer``, ``Encoder``,
``Decoder``, ``Transformer``), written for one sequence pair ``(1, S)`` -> ``(1, T)``
with the original's idioms: heads split out of the features with
``x.split_dim(-1, n_heads)`` and made examples of their own with ``join_dims(0, -1)``
(a batch of ``B`` sequences becomes ``B * n_heads`` head-sequences, and
``split_dim(0, n_heads)`` turns them back); ``causal_mask`` on the decoder's scores;
positional encodings built from ``x.maxsize(...)``, ``torch.arange(..., out=x.new(T))``
and expanded to ``x.maxsize()``; embeddings that share the output layer's weight,
scaled (``F.embedding(x, out.weight * sqrt(d_model))``); a per-position loss with
the legacy ``F.cross_entropy(..., reduce=False)`` on ``(1, T, V)`` logits, classes
last, as the original's ``cross_entropy`` read them (``matchbox.functional`` takes that
layout where PyTorch's does not fit). ``Transformer.loss(...,
unbatch=True)`` is the original's own loop over the examples.

What differs from the original code, each forced by PyTorch 2 or by this project
keeping PyTorch's functions as PyTorch defines them:

- ``softmax()`` takes ``-1``: ``Tensor.softmax`` needs a dimension (the original's
  batch ``softmax`` defaulted to the last one).
- The legacy ``torchtext`` import and its IWSLT download go: ``main`` trains on the
  standard library's docstrings and function names (``matchbox.data.corpus``).
- ``Transformer.forward``'s decoding branch called ``greedy`` and ``beam_search``,
  which the original never defined; it is left out.

    python examples/transformer_mb18.py --steps 300 --batch-size 32
"""

from __future__ import annotations

import argparse
import math
import random
import time
import warnings
from collections import namedtuple

import torch
from torch import nn
from torch.utils.data import DataLoader

from matchbox import functional as F
from matchbox.data import BucketBatchSampler, Collate, MaskedBatchField, corpus

try:
    from examples import _training
except ImportError:  # run as ``python examples/<name>.py``: this folder is on sys.path
    import _training

# ---------------------------------------------------------------------------- the model


def positional_encodings_like(x, t=None):
    """Sinusoids for every position of ``x`` ``(1, T, D)`` (or for positions ``t``).

    Built for the padded length of a batch, a plain tensor the same for every
    example, and expanded to ``x.maxsize()``: a position's encoding does not depend
    on the length of its sequence.
    """
    length, width = x.maxsize(-2), x.maxsize(-1)
    if t is None:
        t = torch.arange(0, length, out=x.new(length))
    rates = 1 / (10000 ** (torch.arange(0, width, 2, out=x.new(width)) / width))
    angles = t.unsqueeze(-1) @ rates.unsqueeze(0)                # (T, D / 2)
    pairs = torch.stack((angles.sin(), angles.cos()), -1)        # (T, D / 2, 2)
    encodings = pairs.contiguous().view(*pairs.size()[:-2], -1)  # (T, D): sin, cos, ...
    if encodings.dim() == 2:
        encodings = encodings.unsqueeze(0).expand(x.maxsize())
    return encodings


class LayerNorm(nn.Module):
    """Normalise the last dimension by its mean and standard deviation."""

    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return self.gamma * centred / (x.std(-1, keepdim=True) + self.eps) + self.beta


class FeedForward(nn.Module):
    def __init__(self, d_model, d_hidden, drop_ratio):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_hidden)
        self.linear2 = nn.Linear(d_hidden, d_model)
        self.dropout = nn.Dropout(drop_ratio)

    def forward(self, x):
        hidden = F.relu(self.linear1(x))
        return self.linear2(self.dropout(hidden))


class ResidualBlock(nn.Module):
    """``x + dropout(norm(layer(x, ...)))``: the original's residual connection."""

    def __init__(self, layer, d_model, drop_ratio):
        super().__init__()
        self.layer = layer
        self.dropout = nn.Dropout(drop_ratio)
        self.norm = LayerNorm(d_model)

    def forward(self, *x):
        residual = x[0]
        return residual + self.dropout(self.norm(self.layer(*x)))


class Attention(nn.Module):
    """Scaled dot-product attention of one sequence's queries ``(1, Tq, d)`` over its
    keys ``(1, Tk, d)``; causal attention hides every later key from a query."""

    def __init__(self, d_key, drop_ratio, causal=False):
        super().__init__()
        self.scale = math.sqrt(d_key)
        self.dropout = nn.Dropout(drop_ratio)
        self.causal = causal

    def forward(self, query, key, value):
        scores = query @ key.transpose(1, 2)                      # (1, Tq, Tk)
        if self.causal and query.dim() == 3:
            scores = scores.causal_mask(in_dim=2, out_dim=1)
        weights = (scores / self.scale).softmax(-1)
        return self.dropout(weights) @ value


class MultiHead(nn.Module):
    """Attention in ``n_heads`` heads, each head a sequence of its own."""

    def __init__(self, attention, d_key, d_value, n_heads):
        super().__init__()
        self.attention = attention
        self.wq = nn.Linear(d_key, d_key)
        self.wk = nn.Linear(d_key, d_key)
        self.wv = nn.Linear(d_value, d_value)
        self.wo = nn.Linear(d_value, d_key)
        self.n_heads = n_heads

    def forward(self, query, key, value):
        query, key, value = self.wq(query), self.wk(key), self.wv(value)
        # (1, T, D) -> (1, T, D / N, N) -> N sequences (1, T, D / N): on a batch of B
        # sequences, B * N of them.
        heads = [x.split_dim(-1, self.n_heads).join_dims(0, -1) for x in (query, key, value)]
        outputs = self.attention(*heads)
        # N sequences (1, T, D / N) -> (1, N, T, D / N) -> (1, T, D)
        return self.wo(outputs.split_dim(0, self.n_heads).join_dims(-1, 1))


class EncoderLayer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.selfattn = ResidualBlock(
            MultiHead(Attention(args.d_model, args.drop_ratio), args.d_model, args.d_model,
                      args.n_heads),
            args.d_model, args.drop_ratio)
        self.feedforward = ResidualBlock(
            FeedForward(args.d_model, args.d_hidden, args.drop_ratio), args.d_model,
            args.drop_ratio)

    def forward(self, x):
        return self.feedforward(self.selfattn(x, x, x))


class DecoderLayer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.selfattn = ResidualBlock(
            MultiHead(Attention(args.d_model, args.drop_ratio, True), args.d_model,
                      args.d_model, args.n_heads),
            args.d_model, args.drop_ratio)
        self.attention = ResidualBlock(
            MultiHead(Attention(args.d_model, args.drop_ratio), args.d_model, args.d_model,
                      args.n_heads),
            args.d_model, args.drop_ratio)
        self.feedforward = ResidualBlock(
            FeedForward(args.d_model, args.d_hidden, args.drop_ratio), args.d_model,
            args.drop_ratio)

    def forward(self, x, encoding):
        x = self.selfattn(x, x, x)
        x = self.attention(x, encoding, encoding)
        return self.feedforward(x)


class Encoder(nn.Module):
    """Token ids ``(1, S)`` -> every layer's output ``(1, S, d_model)``; the embedding is
    the field's output layer's weight, scaled by ``sqrt(d_model)``."""

    def __init__(self, field, args):
        super().__init__()
        self.out = field.out
        self.layers = nn.ModuleList(EncoderLayer(args) for _ in range(args.n_layers))
        self.dropout = nn.Dropout(args.drop_ratio)
        self.field = field
        self.d_model = args.d_model

    def forward(self, x):
        x = F.embedding(x, self.out.weight * math.sqrt(self.d_model))
        x += positional_encodings_like(x)
        x = self.dropout(x)
        encoding = []
        for layer in self.layers:
            x = layer(x)
            encoding.append(x)
        return encoding


class Decoder(nn.Module):
    """Token ids ``(1, T)`` and the encoder's layers -> logits ``(1, T, vocabulary)``."""

    def __init__(self, field, args):
        super().__init__()
        self.out = field.out
        self.layers = nn.ModuleList(DecoderLayer(args) for _ in range(args.n_layers))
        self.dropout = nn.Dropout(args.drop_ratio)
        self.d_model = args.d_model
        self.field = field
        self.length_ratio = args.length_ratio

    def forward(self, x, encoding):
        x = F.embedding(x, self.out.weight * math.sqrt(self.d_model))
        x += positional_encodings_like(x)
        x = self.dropout(x)
        for layer, enc in zip(self.layers, encoding):
            x = layer(x, enc)
        return self.out(x)


class Transformer(nn.Module):
    """Encoder-decoder between the vocabularies of two fields (one field for both
    shares one output layer, as the original trained it)."""

    def __init__(self, src, trg, args):
        super().__init__()
        for field in dict.fromkeys((src, trg)):  # one output layer per distinct field
            field.out = nn.Linear(args.d_model, len(field.vocab))
        self.encoder = Encoder(src, args)
        self.decoder = Decoder(trg, args)

    def forward(self, encoder_inputs, decoder_inputs):
        return self.decoder(decoder_inputs, self.encoder(encoder_inputs))

    def loss(self, batch, reduce=True, unbatch=False):
        """Teacher-forced cross-entropy of ``batch.trg`` (``<s> ... </s>``) given
        ``batch.src``: per example (its mean, or per position with ``reduce=False``);
        ``unbatch=True`` runs the original's loop over the examples instead and sums."""
        if unbatch:
            total = 0
            for src, trg in zip(batch.src.examples(), batch.trg.examples()):
                logits = self(src, trg[:, :-1])
                total += F.cross_entropy(logits, trg[:, 1:], reduce=reduce)
            return total
        logits = self(batch.src, batch.trg[:, :-1])
        return F.cross_entropy(logits, batch.trg[:, 1:], reduce=reduce)


# ---------------------------------------------------------------------------- the data

#: What the original read from a torchtext batch: its ``src`` and ``trg`` fields.
Batch = namedtuple("Batch", ["src", "trg"])


def make_fields(max_src_len: int = 30) -> tuple[MaskedBatchField, MaskedBatchField]:
    """Docstrings as lower-case words, names as identifier parts between <s> and </s>."""
    src = MaskedBatchField(tokenize="words", lower=True, name="docstring",
                           preprocessing=lambda words: words[:max_src_len])
    trg = MaskedBatchField(tokenize="identifier", init_token="<s>", eos_token="</s>",
                           name="name")
    return src, trg


def make_loader(pairs, src: MaskedBatchField, trg: MaskedBatchField, batch_size: int,
                seed: int = 0, device=None):
    """Length-bucketed batches of ``pairs`` as ``Batch(src, trg)``, epoch after epoch."""
    lengths = [len(src.preprocess(pair["docstring"])) for pair in pairs]
    loader = DataLoader(pairs, batch_sampler=BucketBatchSampler(lengths, batch_size, seed=seed),
                        collate_fn=Collate({"docstring": src, "name": trg}, device=device))
    return (Batch(b["docstring"], b["name"]) for b in _training.epochs(loader))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _training.parser(__doc__, steps=300, batch_size=32, lr=5e-4, log_every=100)
    parser.add_argument("--max-files", type=int, default=300,
                        help="standard-library files to read pairs from")
    parser.add_argument("--max-src-len", type=int, default=30, help="docstring words kept")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--d-hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--unbatch", action="store_true",
                        help="train with the original's loop over the examples (slow)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    with warnings.catch_warnings():
        # The original's calls that PyTorch 2 warns about on every step: out=x.new(D)
        # resized to the D / 2 values of torch.arange(0, D, 2), and cross_entropy's reduce=.
        warnings.filterwarnings("ignore", "The number of elements in the out tensor",
                                UserWarning)
        warnings.filterwarnings("ignore", "size_average and reduce args will be deprecated",
                                UserWarning)
        return _train(args)


def _train(args: argparse.Namespace) -> dict:
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    pairs = corpus.docstring_pairs(max_files=args.max_files)
    src, trg = make_fields(args.max_src_len)
    src.build_vocab((p["docstring"] for p in pairs), min_freq=2)
    trg.build_vocab((p["name"] for p in pairs), min_freq=2)
    print(f"{len(pairs)} docstring -> name pairs; vocabularies {len(src.vocab)} "
          f"(docstrings), {len(trg.vocab)} (name parts)")

    # The original's hyperparameter namespace.
    hyper = argparse.Namespace(d_model=args.d_model, d_hidden=args.d_hidden,
                               n_heads=args.heads, drop_ratio=args.dropout,
                               n_layers=args.layers, length_ratio=1.5)
    model = Transformer(src, trg, hyper).to(args.device)
    batches = make_loader(pairs, src, trg, args.batch_size, args.seed, args.device)
    start = time.perf_counter()
    losses = _training.train(model, batches,
                             lambda b: model.loss(b, unbatch=args.unbatch)
                             / (b.src.batch_size if args.unbatch else 1),
                             steps=args.steps, lr=args.lr, log_every=args.log_every)
    seconds = (time.perf_counter() - start) / max(args.steps, 1)
    mode = "the original's loop over examples" if args.unbatch else "batches"
    print(f"{seconds * 1000:.1f} ms per step with {mode}")
    return {"losses": losses, "seconds_per_step": seconds, "model": model}


if __name__ == "__main__":
    main()
