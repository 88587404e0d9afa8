"""A transformer translating docstrings into function names, written for one example.

What it shows: the original Matchbox project's transformer (encoder, decoder,
multi-head attention, residual blocks with layer norm), modernised, in code for
ONE pair of sequences ``(1, S)`` → ``(1, T)``: no padding, no masks, no batch
dimension in the model. Attention heads are split out of the feature dimension
with ``split_dim`` and joined back with ``join_dims``; the decoder hides later
positions with ``causal_mask``; positional encodings are sliced to
``x.maxsize(1)`` positions. On a ``MaskedBatch`` of docstrings of different
lengths the same code gives each example what it gives alone: softmax and
matmul see only an example's own positions, the loss is per example.

Greedy decoding is written for one example too: a ``while`` loop that stops at
``</s>`` or at a maximum length. Under ``@matchbox.batch`` every example stops
at its own step and gets back its own decoded ids.

The data: the standard library's own functions (``matchbox.data.corpus``),
docstring → name, through ``MaskedBatchField``, ``BucketBatchSampler`` and
``Collate``.

    python examples/translation.py --steps 2000 --batch-size 64
"""

from __future__ import annotations

import argparse
import math
import random

import torch
from torch import nn
from torch.utils.data import DataLoader

import matchbox
import matchbox.functional as F
from matchbox.data import BucketBatchSampler, Collate, MaskedBatchField, corpus

try:
    from examples import _training
except ImportError:  # run as ``python examples/<name>.py``: this folder is on sys.path
    import _training

# ---------------------------------------------------------------------------- the model


def positional_encodings(length: int, size: int) -> torch.Tensor:
    """The sinusoidal encodings of positions ``0 .. length - 1``: ``(length, size)``."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, size, 2, dtype=torch.float32)
                          * (-math.log(10000.0) / size))
    encodings = torch.zeros(length, size)
    encodings[:, 0::2] = torch.sin(position * frequency)
    encodings[:, 1::2] = torch.cos(position * frequency)
    return encodings


class Attention(nn.Module):
    """Scaled dot-product attention of one example's queries over its keys."""

    def __init__(self, d_key: int, dropout: float, causal: bool):
        super().__init__()
        self.scale = math.sqrt(d_key)
        self.dropout = nn.Dropout(dropout)
        self.causal = causal

    def forward(self, query, key, value):              # (1, heads, Tq, d), (1, heads, Tk, d)
        scores = query @ key.transpose(-2, -1) / self.scale       # (1, heads, Tq, Tk)
        if self.causal:
            scores = scores.causal_mask(in_dim=-1, out_dim=-2)    # no query sees a later key
        return self.dropout(F.softmax(scores, dim=-1)) @ value


class MultiHead(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float, causal: bool = False):
        super().__init__()
        self.attention = Attention(d_model // n_heads, dropout, causal)
        self.wq = nn.Linear(d_model, d_model)
        self.wk = nn.Linear(d_model, d_model)
        self.wv = nn.Linear(d_model, d_model)
        self.wo = nn.Linear(d_model, d_model)
        self.d_head = d_model // n_heads

    def forward(self, query, key, value):                         # (1, T, d_model) each
        query, key, value = (x.split_dim(-1, self.d_head).transpose(1, 2)    # (1, heads, T, d)
                             for x in (self.wq(query), self.wk(key), self.wv(value)))
        outputs = self.attention(query, key, value)
        return self.wo(outputs.transpose(1, 2).join_dims(-2, -1))  # (1, Tq, d_model)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_hidden: int):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_hidden)
        self.linear2 = nn.Linear(d_hidden, d_model)

    def forward(self, x):
        return self.linear2(F.relu(self.linear1(x)))


class ResidualBlock(nn.Module):
    """``layernorm(x + dropout(layer(x, ...)))``: the original's post-norm residual."""

    def __init__(self, layer: nn.Module, d_model: int, dropout: float):
        super().__init__()
        self.layer = layer
        self.dropout = nn.Dropout(dropout)
        self.layernorm = nn.LayerNorm(d_model)

    def forward(self, x, *context):
        return self.layernorm(x + self.dropout(self.layer(x, *context)))


class SelfAttention(MultiHead):
    def forward(self, x):
        return super().forward(x, x, x)


class CrossAttention(MultiHead):
    def forward(self, x, encoding):
        return super().forward(x, encoding, encoding)


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, d_hidden: int, n_heads: int, dropout: float):
        super().__init__()
        self.selfattn = ResidualBlock(SelfAttention(d_model, n_heads, dropout), d_model, dropout)
        self.feedforward = ResidualBlock(FeedForward(d_model, d_hidden), d_model, dropout)

    def forward(self, x):
        return self.feedforward(self.selfattn(x))


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, d_hidden: int, n_heads: int, dropout: float):
        super().__init__()
        self.selfattn = ResidualBlock(SelfAttention(d_model, n_heads, dropout, causal=True),
                                      d_model, dropout)
        self.attention = ResidualBlock(CrossAttention(d_model, n_heads, dropout),
                                       d_model, dropout)
        self.feedforward = ResidualBlock(FeedForward(d_model, d_hidden), d_model, dropout)

    def forward(self, x, encoding):
        return self.feedforward(self.attention(self.selfattn(x), encoding))


class Transformer(nn.Module):
    """Encoder-decoder for one pair: source ids ``(1, S)``, target ids ``(1, T)``."""

    def __init__(self, src_vocab: int, trg_vocab: int, *, bos: int, eos: int,
                 d_model: int = 128, d_hidden: int = 256, n_heads: int = 4,
                 n_layers: int = 2, dropout: float = 0.1, max_len: int = 512):
        super().__init__()
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.trg_embed = nn.Embedding(trg_vocab, d_model)
        self.register_buffer("positions", positional_encodings(max_len, d_model),
                             persistent=False)
        self.encoder = nn.ModuleList(EncoderLayer(d_model, d_hidden, n_heads, dropout)
                                     for _ in range(n_layers))
        self.decoder = nn.ModuleList(DecoderLayer(d_model, d_hidden, n_heads, dropout)
                                     for _ in range(n_layers))
        self.out = nn.Linear(d_model, trg_vocab)
        self.dropout = nn.Dropout(dropout)
        self.scale = math.sqrt(d_model)
        self.bos, self.eos = bos, eos

    def embed(self, embedding: nn.Embedding, ids):
        x = embedding(ids) * self.scale                           # (1, T, d_model)
        return self.dropout(x + self.positions[:x.maxsize(1)])

    def encode(self, src):
        x = self.embed(self.src_embed, src)
        for layer in self.encoder:
            x = layer(x)
        return x

    def decode(self, trg, encoding):
        """Next-token logits ``(1, T, trg_vocab)`` for every prefix of ``trg``."""
        x = self.embed(self.trg_embed, trg)
        for layer in self.decoder:
            x = layer(x, encoding)
        return self.out(x)

    def forward(self, src, trg):
        return self.decode(trg, self.encode(src))

    def loss(self, src, trg):
        """Cross-entropy of this example's target (``<s> ... </s>``), teacher-forced."""
        logits = self(src, trg[:, :-1])                           # predict from each prefix
        return F.cross_entropy(logits.transpose(1, 2), trg[:, 1:])

    @matchbox.batch
    def greedy(self, src, max_len: int = 20):
        """This example's greedy translation: ids ``(1, L)``, ending with ``</s>`` unless
        ``max_len`` tokens came first."""
        encoding = self.encode(src)
        token = src.new_full((1,), self.bos)
        tokens = [token]
        while token != self.eos and len(tokens) <= max_len:
            logits = self.decode(F.stack(tokens, 1), encoding)    # (1, L, trg_vocab)
            token = logits[:, -1].argmax(-1)                      # (1,): the last position's
            tokens.append(token)
        return F.stack(tokens[1:], 1)


# ---------------------------------------------------------------------------- the data


def make_fields(max_src_len: int = 40) -> tuple[MaskedBatchField, MaskedBatchField]:
    """Docstrings as lower-case words (cut to ``max_src_len``), names as identifier parts."""
    src = MaskedBatchField(tokenize="words", lower=True, name="docstring",
                           preprocessing=lambda words: words[:max_src_len])
    trg = MaskedBatchField(tokenize="identifier", init_token="<s>", eos_token="</s>",
                           name="name")
    return src, trg


def load_pairs(max_files: int, seed: int = 0, dev_fraction: float = 0.1):
    """The corpus's docstring → name pairs, shuffled and split into train and dev."""
    pairs = corpus.docstring_pairs(max_files=max_files)
    random.Random(seed).shuffle(pairs)
    n_dev = max(1, int(len(pairs) * dev_fraction))
    return pairs[n_dev:], pairs[:n_dev]


def make_loader(pairs, src: MaskedBatchField, trg: MaskedBatchField, batch_size: int,
                seed: int = 0, device=None) -> DataLoader:
    lengths = [len(src.preprocess(pair["docstring"])) for pair in pairs]
    return DataLoader(pairs, batch_sampler=BucketBatchSampler(lengths, batch_size, seed=seed),
                      collate_fn=Collate({"docstring": src, "name": trg}, device=device))


def make_batch(pairs, src: MaskedBatchField, trg: MaskedBatchField, device=None):
    """One batch of ``pairs``: ``(docstring ids, name ids)``, ``MaskedBatch`` each."""
    batch = Collate({"docstring": src, "name": trg}, device=device)(pairs)
    return batch["docstring"], batch["name"]


def exact_match(model: Transformer, pairs, src, trg, batch_size: int, device) -> float:
    """The fraction of ``pairs`` whose greedy translation is exactly the name's parts."""
    def correct(chunk):
        docs, _ = make_batch(chunk, src, trg, device)
        guesses = trg.reverse(model.greedy(docs))
        # Against the name's own parts: an <unk> guess never counts as right.
        return sum(guess == trg.preprocess(pair["name"]) for guess, pair in zip(guesses, chunk))
    return _training.score(model, pairs, batch_size, correct)


# ---------------------------------------------------------------------------- training


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _training.parser(__doc__, steps=2000, batch_size=64, lr=5e-4, log_every=500)
    parser.add_argument("--max-files", type=int, default=1000,
                        help="standard-library files to read pairs from")
    parser.add_argument("--max-src-len", type=int, default=40, help="docstring words kept")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--d-hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.1)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    train, dev = load_pairs(args.max_files, args.seed)
    src, trg = make_fields(args.max_src_len)
    src.build_vocab((p["docstring"] for p in train), min_freq=2)
    trg.build_vocab((p["name"] for p in train), min_freq=2)
    print(f"{len(train)} training pairs, {len(dev)} dev pairs; vocabularies "
          f"{len(src.vocab)} (docstrings), {len(trg.vocab)} (name parts)")

    model = Transformer(len(src.vocab), len(trg.vocab), bos=trg.vocab.stoi["<s>"],
                        eos=trg.vocab.stoi["</s>"], d_model=args.d_model,
                        d_hidden=args.d_hidden, n_heads=args.heads, n_layers=args.layers,
                        dropout=args.dropout).to(args.device)
    loader = make_loader(train, src, trg, args.batch_size, args.seed, args.device)
    losses = _training.train(
        model, _training.epochs(loader),
        lambda batch: model.loss(batch["docstring"], batch["name"]),
        steps=args.steps, lr=args.lr, log_every=args.log_every,
        report=lambda: "dev exact match "
                       f"{exact_match(model, dev, src, trg, args.batch_size, args.device):.3f}")

    docs, _ = make_batch(dev[:5], src, trg, args.device)
    model.eval()
    with torch.no_grad():
        guesses = trg.reverse(model.greedy(docs))
    for pair, guess in zip(dev[:5], guesses):
        print(f"  {pair['docstring'][:60]!r:64} -> {'_'.join(guess)!r} ({pair['name']!r})")
    return {"losses": losses, "examples": list(zip(dev[:5], guesses))}


if __name__ == "__main__":
    main()
