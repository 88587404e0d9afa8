"""Adaptive computation time (Graves, 2016) written for one example: each input is pondered
until its own halting probabilities sum past a threshold.

What it shows: nested per-example control flow under ``@matchbox.batch``. For
each position of one sequence, the model iterates a recurrent cell on that
input, accumulating a halting probability per iteration, and ``break``s when
the sum passes ``1 - epsilon`` (or after ``max_ponder`` iterations); the state
passed on is the halting-weighted mean of the iterations' states, and the
ponder cost ``N + R`` (iterations plus remainder) is added to the loss. On a
batch, every example runs its own number of positions and, at every position,
its own number of iterations: the loops run while some example is still going,
and an example that has stopped keeps its state. No line of the model mentions
the batch.

The task: Graves's parity task over a sequence: each of 1 to ``--max-len``
inputs has a random number of ±1 entries (the rest 0); the class is whether
the number of +1 entries in the whole sequence is odd. With the defaults
(3 entries, up to 5 inputs) the model reaches full accuracy in about 1000
steps and learns to halt after one iteration; with ``--bits 4`` it learns
more slowly and ponders longer (its cost per input rose to 2.5 by step 1500
in our run).

    python examples/adaptive_computation.py --steps 1500 --batch-size 64
"""

from __future__ import annotations

import argparse
import itertools
import random

import torch
from torch import nn

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch

try:
    from examples import _training
except ImportError:  # run as ``python examples/<name>.py``: this folder is on sys.path
    import _training


class ACT(nn.Module):
    """An ACT recurrent network for one sequence ``(1, T, input_size)``."""

    def __init__(self, input_size: int, hidden_size: int, classes: int, *,
                 max_ponder: int = 6, epsilon: float = 0.01, ponder_weight: float = 1e-3):
        super().__init__()
        self.input = nn.Linear(input_size, hidden_size)
        # Graves's binary flag on the first iteration of each input, as a learnt offset.
        self.first = nn.Parameter(torch.zeros(hidden_size))
        self.cell = nn.GRUCell(hidden_size, hidden_size)
        self.halt = nn.Linear(hidden_size, 1)
        self.out = nn.Linear(hidden_size, classes)
        self.hidden_size = hidden_size
        self.max_ponder = max_ponder
        self.epsilon = epsilon
        self.ponder_weight = ponder_weight

    @matchbox.batch
    def ponder(self, x, h):
        """Iterate the cell on one input ``x`` from state ``h`` until it halts.

        Returns the halting-weighted mean of the states ``(1, hidden)`` and the
        ponder cost ``N + R`` ``(1,)``.
        """
        total = h.new_zeros(1)                       # halting probability so far
        state = torch.zeros_like(h)
        for n in range(self.max_ponder):
            if n == 0:
                h = self.cell(x + self.first, h)
            else:
                h = self.cell(x, h)
            p = torch.sigmoid(self.halt(h)).squeeze(-1)                  # (1,)
            if n == self.max_ponder - 1 or total + p > 1 - self.epsilon:
                remainder = 1 - total                # the last iteration takes what is left
                state = state + remainder.unsqueeze(-1) * h
                cost = remainder + (n + 1)
                break
            total = total + p
            state = state + p.unsqueeze(-1) * h
        return state, cost

    @matchbox.batch
    def forward(self, x):
        """Logits ``(1, classes)`` and the total ponder cost ``(1,)`` of one sequence."""
        h = x.batch_zeros(self.hidden_size)
        cost = x.batch_zeros()
        for xt in x.unbind(1):
            h, step_cost = self.ponder(self.input(xt), h)
            cost = cost + step_cost
        return self.out(h), cost

    def loss(self, x, label):
        """Cross-entropy plus the weighted ponder cost, for one example."""
        return self.objective(*self(x), label)

    def objective(self, logits, cost, label):
        return F.cross_entropy(logits, label) + self.ponder_weight * cost.sum()


def make_batch(batch_size: int, max_len: int, bits: int = 3, *, rng: random.Random,
               min_len: int = 1, device=None, dtype: torch.dtype = torch.float32):
    """Random parity examples: lists and batches of sequences ``(1, T, bits)`` and labels ``(1,)``.

    Each position is Graves's parity input: a random number (1 to ``bits``) of
    its entries are ±1, the rest 0. The label is the parity of the number of +1
    entries in the whole sequence.
    """
    xs, ys = [], []
    for _ in range(batch_size):
        sequence = torch.zeros(1, rng.randint(min_len, max_len), bits, dtype=dtype)
        for t in range(sequence.size(1)):
            for i in rng.sample(range(bits), rng.randint(1, bits)):
                sequence[0, t, i] = rng.choice((-1.0, 1.0))
        xs.append(sequence.to(device))
        ys.append(torch.tensor([int((sequence == 1).sum()) % 2], device=device))
    return xs, ys, MaskedBatch.fromlist(xs, (True, False)), MaskedBatch.fromlist(ys, ())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _training.parser(__doc__, steps=1500, batch_size=64, lr=3e-3, log_every=250)
    parser.add_argument("--max-len", type=int, default=5, help="longest sequence")
    parser.add_argument("--bits", type=int, default=3, help="entries of each input vector")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--max-ponder", type=int, default=6, help="most iterations per input")
    parser.add_argument("--ponder-weight", type=float, default=1e-3)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model = ACT(args.bits, args.hidden, 2, max_ponder=args.max_ponder,
                ponder_weight=args.ponder_weight).to(args.device)
    accuracies, ponders = [], []

    def loss(batch):
        x, y = batch
        logits, cost = model(x)
        accuracies.append(matchbox.batch_mean((logits.argmax(-1) == y).float()).item())
        # The ponder cost per input, this batch: the total cost over the total length.
        ponders.append((matchbox.batch_sum(cost) / matchbox.batch_sum(x.size_as_tensor(1))).item())
        return model.objective(logits, cost, y)

    batches = (make_batch(args.batch_size, args.max_len, args.bits, rng=rng,
                          device=args.device)[2:] for _ in itertools.count())
    losses = _training.train(
        model, batches, loss, steps=args.steps, lr=args.lr, log_every=args.log_every,
        report=lambda: f"accuracy {_training.recent_mean(accuracies, args.log_every):.3f}  "
                       "ponder cost per input (N + R) "
                       f"{_training.recent_mean(ponders, args.log_every):.2f}")
    return {"losses": losses, "accuracies": accuracies, "ponders": ponders}


if __name__ == "__main__":
    main()
