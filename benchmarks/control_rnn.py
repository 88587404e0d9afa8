"""The README RNN under ``@matchbox.batch``: the per-example loop, ``@batch``, the same
model masked by hand with Matchbox (``F.update``), and hand-written padded+masked
PyTorch code.

The model is the README's (``h = self.cell(xt, h)`` over ``x.unbind(1)``, with
``nn.RNNCell``), written once for one example.  Variants, timed in one process:

- per-example loop: the model's own ``forward``, undecorated (``__wrapped__``),
  called on each example alone (plain tensors, batch size one: what one runs
  without Matchbox; the decorated method on a plain tensor runs the rewritten
  code, several times the Python);
- ``@batch``: the same model on a ``MaskedBatch``;
- by hand (Matchbox): the same loop written without the decorator, keeping
  finished examples' state with ``F.update`` (what ``@batch`` generates the
  equivalent of), so ``@batch`` ÷ by-hand is the decorator's own cost;
- hand-padded: a padded tensor, a length mask and ``torch.where`` (the limit).

Each is timed forward and forward+backward; ratios are to hand-padded.
Decoration happens once, when the class is defined, and is not timed.
"""

from __future__ import annotations

import argparse
import copy
import random

import torch
from torch import nn

import matchbox.functional as F
from benchmarks._harness import (
    LOOP,
    forward_and_backward,
    full_float32,
    interleaved_medians,
    machine,
    median_seconds,
    ratio_cells,
    table,
    undecorated,
    write,
)
from examples.readme_rnn import RNN  # the README's model, as the example trains it
from matchbox import MaskedBatch


def by_hand(model: RNN, x: MaskedBatch):
    """The same model masked by hand with Matchbox, as the README wrote it before @batch."""
    h = x.new_zeros(x.size(0), x.size(-1))
    for xt in x.unbind(1):
        h = F.update(h, model.cell(xt, h))
    return h


def hand_padded(model: RNN, data: torch.Tensor, lengths: torch.Tensor):
    """Padded PyTorch: what one writes without Matchbox."""
    h = data.new_zeros(data.size(0), data.size(-1))
    for t in range(data.size(1)):
        real = (t < lengths).unsqueeze(1)
        h = torch.where(real, model.cell(data[:, t], h), h)
    return h


def variants(model: RNN, examples: list[torch.Tensor]) -> dict:
    xb = MaskedBatch.fromlist(examples, (True, False))
    one = undecorated(model.forward)
    lengths = torch.tensor([x.size(1) for x in examples], device=xb.device)
    return {
        "per-example loop": lambda: torch.cat([one(x) for x in examples]),
        "@batch": lambda: model(xb).data,
        "by hand (Matchbox F.update)": lambda: by_hand(model, xb).data,
        "hand-padded": lambda: hand_padded(model, xb.data, lengths),
    }


def run(batch: int, size: int, min_len: int, max_len: int, repeats: int,
        device: str) -> list[list[str]]:
    rng = random.Random(0)
    lengths = [rng.randint(min_len, max_len) for _ in range(batch)]
    examples = [torch.randn(1, n, size, device=device) for n in lengths]
    model = RNN(size).to(device)
    check(variants, model, examples)
    return timed_rows(f"batch {batch}, size {size}", variants(model, examples), repeats)


@full_float32()
def check(make_variants, model: nn.Module, examples: list[torch.Tensor]) -> None:
    """The variants compute the same thing, in float64 (where rounding hides no bug)."""
    model = copy.deepcopy(model).double()
    computed = {name: fn() for name, fn in
                make_variants(model, [x.double() for x in examples]).items()}
    for name, value in computed.items():
        torch.testing.assert_close(value, computed["hand-padded"], msg=name)


def timed_rows(setting: str, variants: dict, repeats: int) -> list[list[str]]:
    """Forward, forward+backward and no-grad forward medians, as ratios to the
    hand-padded variant.

    Without gradients ``@batch`` skips its gradient guards (the ``where`` that
    keeps the examples not running a step out of the gradients): the no-grad
    column shows what the rewritten control flow costs by itself.
    """
    forward, both = forward_and_backward(variants, repeats)
    with torch.no_grad():
        inference = interleaved_medians(
            {name: fn for name, fn in variants.items() if name != LOOP}, repeats)
        if LOOP in variants:
            inference[LOOP] = median_seconds(variants[LOOP], max(2, repeats // 3))
    baseline = inference["hand-padded"]
    return [[setting, name, *ratio_cells(name, forward, both, "hand-padded"),
             f"{inference[name] * 1e3:.2f}", f"{inference[name] / baseline:.3f}"]
            for name in variants]


#: The columns of :func:`timed_rows`, after the setting and the variant.
TIME_COLUMNS = ["forward ms", "× hand-padded", "fwd+bwd ms", "× hand-padded",
                "no-grad fwd ms", "× hand-padded"]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, nargs="+", default=[256, 32])
    parser.add_argument("--lengths", type=int, nargs=2, default=[5, 60])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    rows = []
    for size in args.size:
        rows += run(args.batch, size, *args.lengths, args.repeats, args.device)
    text = (f"### README RNN under @batch: batch {args.batch}, lengths {args.lengths[0]}-"
            f"{args.lengths[1]} (uniform), {args.device}\n\n{machine()}\n\n"
            + table(["setting", "variant", *TIME_COLUMNS], rows))
    print(text)
    print(f"\nwritten to {write('control_rnn', text)}")
    return text


if __name__ == "__main__":
    main()
