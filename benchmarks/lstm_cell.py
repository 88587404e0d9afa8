"""An LSTM cell loop over a batch of sequences of different lengths.

The model is written once, for one example (``lstm_over_sequence``), with core
ops only, and run three ways in the same process:

- the per-example loop (the oracle, and what users write without batching);
- Matchbox: the same function on a ``MaskedBatch``, with the loop unrolled by
  hand the way ``@matchbox.batch`` will (``F.update`` keeps finished examples'
  state);
- hand-written padded PyTorch: a padded tensor, a length mask and
  ``torch.where`` (the limit Matchbox aims for);
- for reference, ``nn.LSTM`` on a ``PackedSequence`` (a fused kernel, a
  different algorithm than a cell loop).

Each is timed forward and forward+backward; ratios are to hand-padded.
"""

from __future__ import annotations

import argparse
import random

import torch
from torch.nn.utils.rnn import pack_sequence

import matchbox.functional as F
from benchmarks._harness import machine, median_seconds, table, write
from matchbox import MaskedBatch


def lstm_cell(x, h, c, w_ih, w_hh, b):
    """One LSTM step for one example (works unchanged on a batch)."""
    gates = x @ w_ih + h @ w_hh + b
    i, f, g, o = gates.chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    return h, c


def lstm_over_sequence(x, w_ih, w_hh, b):
    """The final hidden state of one example ``x`` of shape ``(1, length, input)``."""
    hidden = w_hh.size(0)
    h = x.batch_zeros(hidden)
    c = x.batch_zeros(hidden)
    for xt in x.unbind(1):
        h_new, c_new = lstm_cell(xt, h, c, w_ih, w_hh, b)
        h, c = F.update(h, h_new), F.update(c, c_new)
    return h


def padded_lstm(x, lengths, w_ih, w_hh, b):
    """Hand-written padded+masked code: what one writes without Matchbox."""
    batch, steps, _ = x.shape
    hidden = w_hh.size(0)
    h = x.new_zeros(batch, hidden)
    c = x.new_zeros(batch, hidden)
    for t in range(steps):
        real = (t < lengths).unsqueeze(1)
        h_new, c_new = lstm_cell(x[:, t], h, c, w_ih, w_hh, b)
        h = torch.where(real, h_new, h)
        c = torch.where(real, c_new, c)
    return h


def run(batch: int, hidden: int, min_len: int, max_len: int, repeats: int,
        device: str) -> list[str]:
    rng = random.Random(0)
    lengths = [rng.randint(min_len, max_len) for _ in range(batch)]
    examples = [torch.randn(1, n, hidden, device=device) for n in lengths]
    w_ih = (torch.randn(hidden, 4 * hidden, device=device) / hidden**0.5).requires_grad_()
    w_hh = (torch.randn(hidden, 4 * hidden, device=device) / hidden**0.5).requires_grad_()
    b = torch.zeros(4 * hidden, device=device, requires_grad=True)
    xb = MaskedBatch.fromlist(examples, (True, False))
    padded = xb.data.masked_fill(~xb.mask, 0)
    length_tensor = torch.tensor(lengths, device=device)
    lstm = torch.nn.LSTM(hidden, hidden, batch_first=True).to(device)
    packed = pack_sequence([e[0] for e in examples], enforce_sorted=False)

    def loop():
        return torch.cat([lstm_over_sequence(x, w_ih, w_hh, b) for x in examples])

    def matchbox_batch():
        return lstm_over_sequence(xb, w_ih, w_hh, b).data

    def hand_padded():
        return padded_lstm(padded, length_tensor, w_ih, w_hh, b)

    def packed_lstm():
        return lstm(packed)[1][0]

    # The three cell implementations compute the same thing.
    torch.testing.assert_close(matchbox_batch(), hand_padded(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loop(), hand_padded(), rtol=1e-4, atol=1e-5)

    def with_backward(fn):
        return lambda: fn().sum().backward()

    variants = {"per-example loop": loop, "Matchbox": matchbox_batch,
                "hand-padded": hand_padded, "PackedSequence + nn.LSTM": packed_lstm}
    forward = {k: median_seconds(v, repeats) for k, v in variants.items()}
    backward = {k: median_seconds(with_backward(v), repeats) for k, v in variants.items()}
    rows = []
    for name in variants:
        rows.append([f"hidden {hidden}", name,
                     f"{forward[name] * 1e3:.1f}", f"{forward[name] / forward['hand-padded']:.2f}",
                     f"{backward[name] * 1e3:.1f}",
                     f"{backward[name] / backward['hand-padded']:.2f}"])
    return rows


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
            + table(["size", "variant", "forward ms", "× hand-padded", "fwd+bwd ms",
                     "× hand-padded"], rows))
    print(text)
    print(f"\nwritten to {write('lstm_cell', text)}")
    return text


if __name__ == "__main__":
    main()
