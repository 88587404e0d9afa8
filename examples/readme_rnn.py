"""The README's RNN under ``@matchbox.batch``, trained on random sequences of different lengths.

What it shows: the model of the original README, written for one example
(``for xt in x.unbind(1): h = self.cell(xt, h)``), runs unchanged on a plain
tensor of batch size one and on a ``MaskedBatch`` of sequences of different
lengths; ``@matchbox.batch`` makes an example whose sequence has ended keep
its state. A linear read-out learns each sequence's mean (a per-example mean
over a dynamic dimension, which divides by each example's own length), with a
per-example loss averaged over the batch by ``matchbox.batch_mean``.

    python examples/readme_rnn.py --steps 200 --batch-size 32
"""

from __future__ import annotations

import argparse
import itertools
import random

import torch
import torch.nn.functional as F
from torch import nn

import matchbox
from matchbox import MaskedBatch

try:
    from examples import _training
except ImportError:  # run as ``python examples/<name>.py``: this folder is on sys.path
    import _training


class RNN(nn.Module):
    """The README's model (with ``self.cell`` where the README has the typo ``self.fwd``)."""

    def __init__(self, size: int):
        super().__init__()
        self.cell = nn.RNNCell(size, size)

    @matchbox.batch
    def forward(self, x):
        h = x.new_zeros(x.size(0), x.size(-1))
        for xt in x.unbind(1):
            h = self.cell(xt, h)
        return h


class MeanRegressor(nn.Module):
    """The README RNN plus a read-out: predicts the mean of one sequence ``(1, T, size)``."""

    def __init__(self, size: int):
        super().__init__()
        self.rnn = RNN(size)
        self.readout = nn.Linear(size, size)

    def forward(self, x):
        return self.readout(self.rnn(x))

    def loss(self, x):
        """This example's squared error against its own mean over time."""
        return F.mse_loss(self(x), x.mean(1))


def make_batch(batch_size: int, max_len: int, size: int, *, rng: random.Random,
               device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
    """Random examples ``(1, T, size)`` with ``T`` in ``[1, max_len]``, and their batch."""
    examples = [torch.rand(1, rng.randint(1, max_len), size, dtype=dtype, device=device)
                for _ in range(batch_size)]
    return examples, MaskedBatch.fromlist(examples, (True, False))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _training.parser(__doc__, steps=200, batch_size=32, lr=1e-3, log_every=50)
    parser.add_argument("--size", type=int, default=128, help="input and hidden size")
    parser.add_argument("--max-len", type=int, default=10, help="longest sequence")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model = MeanRegressor(args.size).to(args.device)

    # The README's two ways of calling the model: one plain example, and a batch.
    x_unbatched = torch.rand(1, rng.randint(1, args.max_len), args.size, device=args.device)
    print(f"one example {tuple(x_unbatched.shape)} -> h {tuple(model.rnn(x_unbatched).shape)}")
    _, x_batch = make_batch(args.batch_size, args.max_len, args.size, rng=rng,
                            device=args.device)
    print(f"a batch {x_batch!r}"[:120] + " ...")
    print(f"  -> h {model.rnn(x_batch)!r}"[:120] + " ...")

    batches = (make_batch(args.batch_size, args.max_len, args.size, rng=rng,
                          device=args.device)[1] for _ in itertools.count())
    losses = _training.train(model, batches, model.loss, steps=args.steps, lr=args.lr,
                             log_every=args.log_every)
    return {"losses": losses}


if __name__ == "__main__":
    main()
