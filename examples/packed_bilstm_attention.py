"""A packed BiLSTM encoder feeding masked attention pooling: docstring → a function name's first word.

What it shows: a model for ONE docstring ``(1, T)`` — embedding, a
bidirectional ``nn.LSTM``, attention pooling over the positions, a classifier —
run on a ``PackedBatch`` (matchbox-packed). The embedding and the LSTM work on
the packed rows only (no padding; on CUDA the LSTM is cuDNN's packed call, with
no copy); ``matchbox.as_masked`` turns the LSTM's output into a ``MaskedBatch``
(and leaves a plain tensor alone) for the attention, written with core ops
(``@``, ``softmax`` over the dynamic dimension, ``sum``). The loss is per
example; the whole model trains end to end and its gradients equal the loop's.

The task: predict the first word of a function's name (``get``, ``set``,
``is``, ...) from its docstring, over the standard library's functions
(``matchbox.data.corpus``), with ``PackedBatchField`` / ``MaskedBatchField``,
``BucketBatchSampler`` and ``Collate``.

    python examples/packed_bilstm_attention.py --steps 1000 --batch-size 64
"""

from __future__ import annotations

import argparse
import random
from collections import Counter

import torch
from torch import nn
from torch.utils.data import DataLoader

import matchbox
import matchbox.functional as F
from matchbox.data import BucketBatchSampler, Collate, MaskedBatchField, PackedBatchField, corpus
from matchbox.data.tokenizers import get_tokenizer

try:
    from examples import _training
except ImportError:  # run as ``python examples/<name>.py``: this folder is on sys.path
    import _training


class BiLSTMAttention(nn.Module):
    """Classify one sequence of ids ``(1, T)``: BiLSTM states pooled by learned attention."""

    def __init__(self, vocab: int, classes: int, d_embed: int = 64, d_hidden: int = 64,
                 dropout: float = 0.2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_embed)
        self.dropout = nn.Dropout(dropout)
        self.encoder = nn.LSTM(d_embed, d_hidden, bidirectional=True, batch_first=True)
        self.keys = nn.Linear(2 * d_hidden, 2 * d_hidden)
        self.query = nn.Parameter(torch.randn(2 * d_hidden, 1) / (2 * d_hidden) ** 0.5)
        self.classify = nn.Sequential(nn.Linear(2 * d_hidden, d_hidden), nn.Tanh(),
                                      nn.Linear(d_hidden, classes))

    def encode(self, x):
        """Vectors ``(1, T, d_embed)`` → BiLSTM states ``(1, T, 2 * d_hidden)``, masked."""
        states, _ = self.encoder(x)          # a PackedBatch in, a PackedBatch out
        return matchbox.as_masked(states)    # what the attention's ops take

    def pool(self, states):
        """Attention pooling: a weighted sum of the states ``(1, 2 * d_hidden)``."""
        scores = torch.tanh(self.keys(states)) @ self.query          # (1, T, 1)
        weights = F.softmax(scores, dim=1)                           # over this example's T
        return (weights * states).sum(1)

    def logits_from_vectors(self, x):
        return self.classify(self.pool(self.encode(x)))

    def forward(self, ids):
        return self.logits_from_vectors(self.dropout(self.embed(ids)))

    def loss(self, ids, label):
        return F.cross_entropy(self(ids), label)


# ---------------------------------------------------------------------------- the data


def first_word(name: str) -> str | None:
    parts = get_tokenizer("identifier")(name)
    return parts[0] if parts else None


def load_examples(max_files: int, classes: int, seed: int = 0, dev_fraction: float = 0.1):
    """``{"docstring", "label"}`` for the functions whose name starts with one of the
    ``classes`` most common first words; shuffled, split into train and dev."""
    pairs = [{"docstring": p["docstring"], "label": first_word(p["name"])}
             for p in corpus.docstring_pairs(max_files=max_files)]
    common = {word for word, _ in Counter(p["label"] for p in pairs
                                          if p["label"]).most_common(classes)}
    examples = [p for p in pairs if p["label"] in common]
    random.Random(seed).shuffle(examples)
    n_dev = max(1, int(len(examples) * dev_fraction))
    return examples[n_dev:], examples[:n_dev]


def make_fields(max_len: int = 60) -> tuple[PackedBatchField, MaskedBatchField]:
    text = PackedBatchField(tokenize="words", lower=True, name="docstring",
                            preprocessing=lambda words: words[:max_len])
    label = MaskedBatchField(sequential=False, unk_token=None, pad_token=None, name="label")
    return text, label


def make_batch(examples, text: PackedBatchField, label: MaskedBatchField, device=None):
    """One batch: ``(ids, labels)``, a ``PackedBatch`` and a ``MaskedBatch`` of ``(1,)``."""
    batch = Collate({"docstring": text, "label": label}, device=device)(examples)
    return batch["docstring"], batch["label"]


def accuracy(model: BiLSTMAttention, examples, text, label, batch_size: int, device) -> float:
    def correct(chunk):
        ids, labels = make_batch(chunk, text, label, device)
        return int(matchbox.batch_sum(model(ids).argmax(-1) == labels))
    return _training.score(model, examples, batch_size, correct)


# ---------------------------------------------------------------------------- training


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _training.parser(__doc__, steps=1000, batch_size=64, lr=2e-3, log_every=250)
    parser.add_argument("--max-files", type=int, default=1000,
                        help="standard-library files to read functions from")
    parser.add_argument("--classes", type=int, default=10, help="most common first words kept")
    parser.add_argument("--max-len", type=int, default=60, help="docstring words kept")
    parser.add_argument("--d-embed", type=int, default=64)
    parser.add_argument("--d-hidden", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.2)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    train, dev = load_examples(args.max_files, args.classes, args.seed)
    text, label = make_fields(args.max_len)
    text.build_vocab((e["docstring"] for e in train), min_freq=2)
    label.build_vocab(e["label"] for e in train + dev)
    print(f"{len(train)} training docstrings, {len(dev)} dev; classes {label.vocab.itos}")

    model = BiLSTMAttention(len(text.vocab), len(label.vocab), args.d_embed, args.d_hidden,
                            args.dropout).to(args.device)
    lengths = [len(text.preprocess(e["docstring"])) for e in train]
    loader = DataLoader(train, batch_sampler=BucketBatchSampler(lengths, args.batch_size,
                                                                seed=args.seed),
                        collate_fn=Collate({"docstring": text, "label": label},
                                           device=args.device))
    losses = _training.train(
        model, _training.epochs(loader),
        lambda batch: model.loss(batch["docstring"], batch["label"]),
        steps=args.steps, lr=args.lr, log_every=args.log_every,
        report=lambda: "dev accuracy "
                       f"{accuracy(model, dev, text, label, args.batch_size, args.device):.3f}")
    return {"losses": losses}


if __name__ == "__main__":
    main()
