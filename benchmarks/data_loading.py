"""Data loading: raw text to Matchbox batches, and its share of a training step.

The corpus is the standard library's docstring→name pairs
(``matchbox.data.corpus``, read once beforehand, as a dataset on disk would
be). One epoch goes through a ``DataLoader`` with ``BucketBatchSampler`` and
``Collate`` (tokenize, look up, pad, mask), timed as examples per second,
beside a hand-written ``collate_fn`` (the same tokenizing and lookups, then
``pad_sequence`` and a lengths tensor) for reference.

The share: a small per-example model (embedding, a ``GRUCell`` loop over the
docstring with ``F.update``, a linear layer, cross-entropy on the name's first
word) takes one optimiser step per batch; the share is data-loading time over
data-loading plus step time, for the same batches (target: under 10% at batch
64).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

import matchbox.functional as F
from benchmarks._harness import interleaved_medians, machine, table, write
from matchbox import MaskedBatch
from matchbox.data import BucketBatchSampler, Collate, MaskedBatchField, corpus
from matchbox.data.tokenizers import identifier


def first_word(name: str) -> str:
    """The target: the first word of a function's name (``get`` of ``getValue``)."""
    parts = identifier(name)
    return parts[0] if parts else "<unk>"


def make_fields(pairs: list[dict]) -> dict:
    doc = MaskedBatchField(tokenize="words", lower=True, name="docstring")
    doc.build_vocab((p["docstring"] for p in pairs), min_freq=2)
    name = MaskedBatchField(sequential=False, preprocessing=first_word, pad_token=None,
                            name="name")
    name.build_vocab(p["name"] for p in pairs)
    return {"docstring": doc, "name": name}


def hand_written_collate(fields: dict):
    """What users write today: tokenize, look up, ``pad_sequence``, lengths."""
    doc, name = fields["docstring"], fields["name"]
    pad = doc.vocab.stoi["<pad>"]

    def collate(examples: list[dict]):
        ids = [torch.tensor(doc.vocab.lookup_indices(doc.preprocess(e["docstring"])))
               for e in examples]
        lengths = torch.tensor([len(i) for i in ids])
        labels = torch.tensor(name.vocab.lookup_indices(name.preprocess(e["name"])
                                                        for e in examples))
        return pad_sequence(ids, batch_first=True, padding_value=pad), lengths, labels

    return collate


class NameFromDocstring(torch.nn.Module):
    """Written for one example; runs unchanged on a MaskedBatch."""

    def __init__(self, vocab: int, classes: int, hidden: int):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, hidden)
        self.cell = torch.nn.GRUCell(hidden, hidden)
        self.out = torch.nn.Linear(hidden, classes)
        self.hidden = hidden

    def forward(self, ids):
        x = embed(self.embedding, ids)
        h = x.batch_zeros(self.hidden)
        for xt in x.unbind(1):
            h = F.update(h, self.cell(xt, h))
        return self.out(h)


def embed(embedding: torch.nn.Embedding, ids: MaskedBatch) -> MaskedBatch:
    """An embedding lookup on a batch of ids (the padding holds the pad id, a valid row).

    Written out here because ``F.embedding`` is not yet registered in matchbox-nn on
    this branch; the mask gains the new static dimension.
    """
    mask = None if ids._mask is None else ids._mask.unsqueeze(-1)
    return MaskedBatch._make(embedding(ids.data), mask, ids.dims + (False,))


def run(pairs: list[dict], batch: int, hidden: int, repeats: int, device: str,
        step_batches: int) -> tuple[list[list[str]], float]:
    fields = make_fields(pairs)
    lengths = [len(fields["docstring"].preprocess(p["docstring"])) for p in pairs]
    sampler = BucketBatchSampler(lengths, batch, seed=0)
    loaders = {
        "matchbox-data (field + sampler + Collate)":
            DataLoader(pairs, batch_sampler=sampler, collate_fn=Collate(fields, device=device)),
        "hand-written collate_fn (pad_sequence)":
            DataLoader(pairs, batch_sampler=sampler, collate_fn=hand_written_collate(fields)),
    }
    epoch = interleaved_medians({k: (lambda v=v: list(v)) for k, v in loaders.items()}, repeats)
    n_batches = len(sampler)
    rows = [[name, f"{len(pairs) / seconds:,.0f}", f"{seconds / n_batches * 1e3:.2f}"]
            for name, seconds in epoch.items()]

    # The share of a training step: loading and stepping timed apart, per batch. The step
    # is timed on the first `step_batches` batches of the epoch (shuffled buckets, so
    # their lengths are typical), as a full epoch of a GRU loop would take long.
    model = NameFromDocstring(len(fields["docstring"].vocab), len(fields["name"].vocab),
                              hidden).to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = list(loaders["matchbox-data (field + sampler + Collate)"])[:step_batches]

    def train():
        for b in batches:
            optimiser.zero_grad()
            logits = model(b["docstring"])
            loss = torch.nn.functional.cross_entropy(logits.data, b["name"].data)
            loss.backward()
            optimiser.step()

    step = interleaved_medians({"train": train}, repeats, warmup=1)["train"] / len(batches)
    load = epoch["matchbox-data (field + sampler + Collate)"] / n_batches
    rows.append([f"one training step (embedding, GRUCell loop, hidden {hidden}; "
                 f"mean of {len(batches)} batches)", "", f"{step * 1e3:.2f}"])
    return rows, load / (load + step)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300,
                        help="standard-library files to read (all: 0)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--step-batches", type=int, default=10,
                        help="batches over which a training step is timed")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    pairs = corpus.docstring_pairs(max_files=args.files or None)
    read = time.perf_counter() - start
    rows, share = run(pairs, args.batch, args.hidden, args.repeats, args.device,
                      args.step_batches)
    text = (f"### Data loading: {len(pairs):,} docstring→name pairs from {args.files or 'all'} "
            f"stdlib files (read once in {read:.1f} s), batch {args.batch}, {args.device}\n\n"
            f"{machine()}\n\n"
            + table(["pipeline", "examples/s", "ms per batch"], rows)
            + f"\n\nData loading takes {share:.1%} of a training step at batch {args.batch} "
            "(loading / (loading + step); target under 10%).")
    print(text)
    print(f"\nwritten to {write('data_loading', text)}")
    return text


if __name__ == "__main__":
    main()
