"""A 1D convolution stack (Conv1d + ReLU + MaxPool1d) over sequences of different lengths.

The same modules run three ways in one process:

- Matchbox: the modules called on a ``MaskedBatch`` of ``(1, channels, length)``
  examples (one convolution and one pooling call for the batch; padding filled
  with 0 / -inf, output masks from each example's own output length);
- hand-written padded code with a length mask (the limit Matchbox aims for):
  zero the padding, convolve, ReLU, set padding to -inf, pool, and mask the
  loss with the pooled lengths computed by hand;
- the per-example loop (the oracle, and what users write without batching).

Each is timed forward and forward+backward (loss: the sum of every real output);
ratios are to the hand-written padded code.
"""

from __future__ import annotations

import argparse
import random

import torch
import torch.nn.functional as F

import matchbox
from benchmarks._harness import (
    forward_and_backward,
    full_float32,
    machine,
    ratio_cells,
    table,
    write,
)
from matchbox import MaskedBatch

BASELINE = "padded + length mask (by hand)"


class ConvBlock(torch.nn.Module):
    """Per-example code: ``x`` is ``(1, channels, length)``."""

    def __init__(self, channels: int, kernel: int):
        super().__init__()
        self.conv = torch.nn.Conv1d(channels, channels, kernel, padding=kernel // 2)

    def forward(self, x):
        return F.max_pool1d(torch.relu(self.conv(x)), 2)


def variants(block: ConvBlock, examples: list[torch.Tensor]) -> dict:
    """Each variant returns a loss-ready output: a batch, a list, or (padded, mask)."""
    xb = MaskedBatch.fromlist(examples, (False, True))
    padded, lengths = xb.data, torch.tensor([e.size(2) for e in examples],
                                            device=xb.device)
    positions = torch.arange(padded.size(2), device=xb.device)
    mask = (positions < lengths.unsqueeze(1)).unsqueeze(1)  # (batch, 1, length)
    pooled_positions = torch.arange(padded.size(2) // 2, device=xb.device)
    pooled_mask = (pooled_positions < (lengths // 2).unsqueeze(1)).unsqueeze(1)

    def matchbox_batch():
        return block(xb)

    def by_hand():
        y = torch.relu(block.conv(padded.masked_fill(~mask, 0.0)))  # 'same' length
        y = F.max_pool1d(y.masked_fill(~mask, float("-inf")), 2)
        return y, pooled_mask

    def loop():
        return [block(x) for x in examples]

    return {"Matchbox": matchbox_batch, BASELINE: by_hand, "per-example loop": loop}


def _loss(name: str, output) -> torch.Tensor:
    if name == "Matchbox":
        return matchbox.batch_sum(output.sum((1, 2)))
    if name == BASELINE:
        y, mask = output
        return torch.where(mask, y, torch.zeros(())).sum()
    return sum(y.sum() for y in output)


@full_float32()
def check_same(fns: dict) -> None:
    """The three variants give the same outputs per example."""
    out_m = list(fns["Matchbox"]().examples())
    padded, mask = fns[BASELINE]()
    outs_l = fns["per-example loop"]()
    for b, out in enumerate(outs_l):
        n = out.size(2)
        assert int(mask[b].sum()) == n
        torch.testing.assert_close(out_m[b], out, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(padded[b : b + 1, :, :n], out, rtol=1e-4, atol=1e-5)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--kernel", type=int, default=5)
    parser.add_argument("--lengths", type=int, nargs=2, default=[5, 60])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rng = random.Random(0)
    lengths = [rng.randint(*args.lengths) for _ in range(args.batch)]
    examples = [torch.randn(1, args.channels, n, device=args.device) for n in lengths]
    block = ConvBlock(args.channels, args.kernel).to(args.device)
    fns = variants(block, examples)
    check_same(fns)

    forward, both = forward_and_backward(fns, args.repeats, loss=_loss)
    rows = [[name, *ratio_cells(name, forward, both, BASELINE)] for name in fns]
    real, padded = sum(lengths), len(lengths) * max(lengths)
    text = (f"### Conv1d({args.channels}, {args.channels}, k={args.kernel}) + ReLU + "
            f"MaxPool1d(2): batch {args.batch}, lengths {args.lengths[0]}-{args.lengths[1]} "
            f"({real} real positions of {padded} padded), {args.device}\n\n{machine()}\n\n"
            + table(["variant", "forward ms", f"× {BASELINE}", "fwd+bwd ms",
                     f"× {BASELINE}"], rows))
    print(text)
    print(f"\nwritten to {write('nn_conv', text)}")
    return text


if __name__ == "__main__":
    main()
