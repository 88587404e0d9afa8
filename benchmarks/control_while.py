"""A per-example ``while`` under ``@matchbox.batch``: iterate a cell until a per-example
halting score passes a threshold (at most 20 steps).

The model is written once, for one example (``Halting.forward``); examples
halt after different numbers of steps.  Variants, timed in one process:

- per-example loop: the model's own ``forward``, undecorated (``__wrapped__``),
  on each example alone (plain tensors);
- ``@batch``: the same model on a ``MaskedBatch`` (the loop runs while some
  example is still iterating, finished examples keep their state);
- hand-written masked: plain PyTorch on the whole batch, an ``active`` mask
  and ``torch.where`` for every carried variable (the limit).

Each is timed forward and forward+backward; ratios are to the hand-written
masked code.  The table also gives the mean and largest number of steps.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import matchbox
from benchmarks._harness import machine, table, undecorated, write
from benchmarks.control_rnn import TIME_COLUMNS, check, timed_rows
from matchbox import MaskedBatch

THRESHOLD = 1.0
MAX_STEPS = 20


class Halting(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.w = nn.Parameter(torch.randn(size, size) / size ** 0.5)
        self.b = nn.Parameter(torch.zeros(size))
        self.halt = nn.Parameter(torch.randn(size, 1) / size ** 0.5)

    @matchbox.batch
    def forward(self, h):
        score = (h @ self.halt).sigmoid().sum(-1) * 0.5
        steps = 0
        while score < THRESHOLD and steps < MAX_STEPS:
            h = (h @ self.w + self.b).tanh() + h
            score = score + (h @ self.halt).sigmoid().sum(-1) * 0.1
            steps = steps + 1
        return h


def hand_written(model: Halting, h: torch.Tensor) -> torch.Tensor:
    """The batch masked by hand: an active mask, `where` for every carried variable."""
    score = (h @ model.halt).sigmoid().sum(-1) * 0.5
    steps = torch.zeros(h.size(0), dtype=torch.long, device=h.device)
    active = (score < THRESHOLD) & (steps < MAX_STEPS)
    while active.any():
        new_h = (h @ model.w + model.b).tanh() + h
        new_score = score + (new_h @ model.halt).sigmoid().sum(-1) * 0.1
        h = torch.where(active.unsqueeze(1), new_h, h)
        score = torch.where(active, new_score, score)
        steps = steps + active.long()
        active = active & (score < THRESHOLD) & (steps < MAX_STEPS)
    return h


def step_counts(model: Halting, h: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        score = (h @ model.halt).sigmoid().sum(-1) * 0.5
        steps = torch.zeros(h.size(0), dtype=torch.long, device=h.device)
        active = (score < THRESHOLD) & (steps < MAX_STEPS)
        while active.any():
            h = torch.where(active.unsqueeze(1), (h @ model.w + model.b).tanh() + h, h)
            score = torch.where(active, score + (h @ model.halt).sigmoid().sum(-1) * 0.1, score)
            steps = steps + active.long()
            active = active & (score < THRESHOLD) & (steps < MAX_STEPS)
    return steps


def variants(model: Halting, examples: list[torch.Tensor]) -> dict:
    xb = MaskedBatch.fromlist(examples, (False,))
    one = undecorated(model.forward)
    return {
        "per-example loop": lambda: torch.cat([one(x) for x in examples]),
        "@batch": lambda: model(xb).data,
        "hand-padded": lambda: hand_written(model, xb.data),
    }


def run(batch: int, size: int, repeats: int, device: str) -> tuple[list[list[str]], str]:
    torch.manual_seed(0)
    model = Halting(size).to(device)
    examples = [torch.randn(1, size, device=device) * 2 for _ in range(batch)]
    check(variants, model, examples)
    steps = step_counts(model, torch.cat(examples))
    note = f"steps per example: mean {steps.float().mean():.1f}, max {int(steps.max())}"
    return timed_rows(f"batch {batch}, size {size}", variants(model, examples), repeats), note


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, nargs="+", default=[256, 32])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    rows, notes = [], []
    for size in args.size:
        part, note = run(args.batch, size, args.repeats, args.device)
        rows += part
        notes.append(f"size {size}: {note}")
    text = (f"### Halting while loop under @batch (at most {MAX_STEPS} steps): batch "
            f"{args.batch}, {args.device}\n\n{machine()}\n\n" + "; ".join(notes) + "\n\n"
            + table(["setting", "variant", *TIME_COLUMNS], rows))
    print(text)
    print(f"\nwritten to {write('control_while', text)}")
    return text


if __name__ == "__main__":
    main()
