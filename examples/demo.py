"""Matchbox in one minute: the README's RNN, written for one example, run on a batch.

The model below never mentions a batch.  We run it three ways on the same
examples of different lengths and show that Matchbox gives the loop's values
and gradients at batched speed:

1. the per-example loop (what you write without batching),
2. Matchbox: the same code on a ``MaskedBatch``,
3. hand-written padded PyTorch (a padded tensor, a length mask, ``torch.where``).

Until ``@matchbox.batch`` lands (matchbox-control), the loop writes the
per-example state update explicitly with ``F.update``; that is exactly what
the decorator will insert.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
from torch import nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


class RNN(nn.Module):
    """The README's RNN: an ``nn.RNNCell`` run over dimension 1 of one example."""

    def __init__(self, size: int):
        super().__init__()
        self.cell = nn.RNNCell(size, size)

    def forward(self, x):
        h = x.new_zeros(x.size(0), x.size(-1))
        for xt in x.unbind(1):
            h = F.update(h, self.cell(xt, h))  # @matchbox.batch will write this line for you
        return h


def padded_rnn(cell: nn.RNNCell, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The same model written by hand for a padded batch."""
    h = x.new_zeros(x.size(0), x.size(-1))
    for t in range(x.size(1)):
        h = torch.where((t < lengths).unsqueeze(1), cell(x[:, t], h), h)
    return h


def timed(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--max-len", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rng = random.Random(0)

    model = RNN(args.size)
    lengths = [rng.randint(1, args.max_len) for _ in range(args.batch)]
    examples = [torch.rand(1, n, args.size) for n in lengths]
    batch = MaskedBatch.fromlist(examples, (True, False))
    print(f"matchbox {matchbox.__version__}, torch {torch.__version__}")
    print(f"{args.batch} examples of lengths {min(lengths)}-{max(lengths)}, size {args.size}")
    print(f"the batch: {batch!r}"[:160] + "...")

    # 1. Same values and gradients (input and parameter) as the loop, checked
    #    in float64 so that only a real difference, not summation order, shows.
    model64 = RNN(args.size).double()
    model64.load_state_dict(model.state_dict())
    examples64 = [x.double() for x in examples]
    mb_assert(model64, [examples64], [MaskedBatch.fromlist(examples64, (True, False))],
              args.batch)
    print("check: batched outputs and gradients equal the per-example loop  [ok]")

    # 2. Speed, measured in this run.
    padded = batch.data
    length_tensor = torch.tensor(lengths)
    with torch.no_grad():
        loop = timed(lambda: [model(x) for x in examples], args.repeats)
        batched = timed(lambda: model(batch), args.repeats)
        hand = timed(lambda: padded_rnn(model.cell, padded, length_tensor), args.repeats)
    print()
    print("| variant | ms per batch | speedup over the loop |")
    print("|---|---|---|")
    for name, seconds in [("per-example loop", loop), ("Matchbox", batched),
                          ("hand-padded PyTorch", hand)]:
        print(f"| {name} | {seconds * 1e3:.1f} | {loop / seconds:.1f}x |")


if __name__ == "__main__":
    main()
