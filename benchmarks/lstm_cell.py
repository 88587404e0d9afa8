"""An LSTM cell loop over a batch of sequences of different lengths.

The model is written once, for one example (``lstm_over_sequence``), with its
step either written out in core ops or as ``nn.LSTMCell``, and run three ways
in the same process:

- the per-example loop (the oracle, and what users write without batching);
- Matchbox: the same function on a ``MaskedBatch``, with the loop unrolled by
  hand the way ``@matchbox.batch`` will (``F.update`` keeps finished examples'
  state);
- hand-written padded PyTorch: a padded tensor, a length mask and
  ``torch.where`` (the limit Matchbox aims for);
- for reference, ``nn.LSTM`` on a ``PackedSequence`` (a fused kernel, a
  different algorithm than a cell loop), as a ratio to hand-padded
  ``nn.LSTMCell`` code.

Each is timed forward and forward+backward; ratios are to hand-padded.
"""

from __future__ import annotations

import argparse
import random

import torch
from torch.nn.utils.rnn import pack_sequence

import matchbox.functional as F
from benchmarks._harness import forward_and_backward, machine, ratio_cells, table, write
from matchbox import MaskedBatch


def lstm_cell(x, h, c, w_ih, w_hh, b):
    """One LSTM step for one example (works unchanged on a batch)."""
    gates = x @ w_ih + h @ w_hh + b
    i, f, g, o = gates.chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    return h, c


def lstm_over_sequence(x, step, hidden: int):
    """The final hidden state of one example ``x`` of shape ``(1, length, input)``."""
    h = x.batch_zeros(hidden)
    c = x.batch_zeros(hidden)
    for xt in x.unbind(1):
        h_new, c_new = step(xt, (h, c))
        h, c = F.update(h, h_new), F.update(c, c_new)
    return h


def padded_lstm(x, lengths, step, hidden: int):
    """Hand-written padded+masked code: what one writes without Matchbox."""
    h = x.new_zeros(x.size(0), hidden)
    c = x.new_zeros(x.size(0), hidden)
    for t in range(x.size(1)):
        real = (t < lengths).unsqueeze(1)
        h_new, c_new = step(x[:, t], (h, c))
        h = torch.where(real, h_new, h)
        c = torch.where(real, c_new, c)
    return h


def cells(hidden: int, device: str) -> dict:
    """The same LSTM step two ways: core ops written out, and ``nn.LSTMCell``."""
    module = torch.nn.LSTMCell(hidden, hidden).to(device)
    w_ih = module.weight_ih.detach().t().clone().requires_grad_()
    w_hh = module.weight_hh.detach().t().clone().requires_grad_()
    b = (module.bias_ih + module.bias_hh).detach().clone().requires_grad_()

    def core_ops(x, state):
        return lstm_cell(x, *state, w_ih, w_hh, b)

    return {"core ops": core_ops, "nn.LSTMCell": module}


def run(batch: int, hidden: int, min_len: int, max_len: int, repeats: int,
        device: str) -> list[list[str]]:
    rng = random.Random(0)
    lengths = [rng.randint(min_len, max_len) for _ in range(batch)]
    examples = [torch.randn(1, n, hidden, device=device) for n in lengths]
    xb = MaskedBatch.fromlist(examples, (True, False))
    padded = xb.data
    length_tensor = torch.tensor(lengths, device=device)
    rows = []
    for cell_name, step in cells(hidden, device).items():
        variants = {
            "per-example loop": lambda step=step: torch.cat(
                [lstm_over_sequence(x, step, hidden) for x in examples]),
            "Matchbox": lambda step=step: lstm_over_sequence(xb, step, hidden).data,
            "hand-padded": lambda step=step: padded_lstm(padded, length_tensor, step, hidden),
        }
        # The three compute the same thing.
        expected = variants["hand-padded"]()
        for name in ("per-example loop", "Matchbox"):
            torch.testing.assert_close(variants[name](), expected, rtol=1e-4, atol=1e-5)
        rows += _timed_rows(f"hidden {hidden}", cell_name, variants, repeats)
    lstm = torch.nn.LSTM(hidden, hidden, batch_first=True).to(device)
    packed = pack_sequence([e[0] for e in examples], enforce_sorted=False)
    reference = {"PackedSequence + nn.LSTM": lambda: lstm(packed)[1][0],
                 "hand-padded": lambda: padded_lstm(padded, length_tensor,
                                                    cells(hidden, device)["nn.LSTMCell"], hidden)}
    rows += _timed_rows(f"hidden {hidden}", "fused", reference, repeats)[:1]
    return rows


def _timed_rows(size: str, cell: str, variants: dict, repeats: int) -> list[list[str]]:
    """Forward and forward+backward medians, as ratios to the hand-padded variant."""
    forward, both = forward_and_backward(variants, repeats)
    return [[size, cell, name, *ratio_cells(name, forward, both, "hand-padded")]
            for name in variants]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 32])
    parser.add_argument("--lengths", type=int, nargs=2, default=[5, 60])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    rows = []
    for hidden in args.hidden:
        rows += run(args.batch, hidden, *args.lengths, args.repeats, args.device)
    text = (f"### LSTM cell loop: batch {args.batch}, lengths {args.lengths[0]}-"
            f"{args.lengths[1]} (uniform), {args.device}\n\n{machine()}\n\n"
            + table(["size", "cell", "variant", "forward ms", "× hand-padded", "fwd+bwd ms",
                     "× hand-padded"], rows))
    print(text)
    print(f"\nwritten to {write('lstm_cell', text)}")
    return text


if __name__ == "__main__":
    main()
