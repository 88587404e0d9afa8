"""A whole nn.LSTM over a batch of sequences of skewed lengths (most short, a few long).

The same ``nn.LSTM`` (``batch_first=True``) runs four ways in one process:

- Matchbox: the module called on a ``MaskedBatch`` (packs the real rows
  itself, returns a ``MaskedBatch`` and the final states);
- ``PackedSequence`` + ``nn.LSTM``, packed and unpacked by hand
  (``pack_padded_sequence(..., enforce_sorted=False)`` from CPU lengths, then
  ``pad_packed_sequence``): the limit Matchbox aims for (target: within 1.05×);
- the per-example loop (the oracle, and what users write without batching);
- the module on the padded tensor, running over the padding (fast but wrong
  final states for every example shorter than the longest; for reference).

Each is timed forward and forward+backward; ratios are to ``PackedSequence``.
"""

from __future__ import annotations

import argparse
import random

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from benchmarks._harness import (
    forward_and_backward,
    full_float32,
    machine,
    ratio_cells,
    table,
    write,
)
from matchbox import MaskedBatch
from matchbox.nn import batch_major

BASELINE = "PackedSequence + nn.LSTM"


def skewed_lengths(batch: int, short: tuple[int, int], long: tuple[int, int],
                   long_fraction: float, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(*long) if rng.random() < long_fraction else rng.randint(*short)
            for _ in range(batch)]


def variants(lstm: torch.nn.LSTM, examples: list[torch.Tensor], device: str) -> dict:
    """Each variant returns (padded output, final hidden state) as plain tensors."""
    xb = MaskedBatch.fromlist(examples, (True, False))
    padded = xb.data
    lengths = torch.tensor([e.size(1) for e in examples])  # CPU, as packing wants them
    total = padded.size(1)

    def matchbox():
        out, (h, _) = lstm(xb)
        # h is a state view (examples (L*D, 1, H)); its batch holds (B, L*D, H).
        return out.data, batch_major(h).data.transpose(0, 1)

    def packed_sequence():
        packed = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
        out, (h, _) = lstm(packed)
        return pad_packed_sequence(out, batch_first=True, total_length=total)[0], h

    def loop():
        results = [lstm(x) for x in examples]
        return [o for o, _ in results], torch.cat([h for _, (h, _) in results], 1)

    def over_padding():
        out, (h, _) = lstm(padded.nan_to_num())
        return out, h

    return {"Matchbox": matchbox, BASELINE: packed_sequence,
            "per-example loop": loop, "padded nn.LSTM (over padding)": over_padding}


@full_float32()
def check_same(fns: dict) -> None:
    """Matchbox, PackedSequence and the loop compute the same outputs and states."""
    out_m, h_m = fns["Matchbox"]()
    out_p, h_p = fns[BASELINE]()
    outs_l, h_l = fns["per-example loop"]()
    torch.testing.assert_close(out_m, out_p, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(h_m, h_p, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(h_m, h_l, rtol=1e-4, atol=1e-5)
    for b, out in enumerate(outs_l):
        torch.testing.assert_close(out_m[b : b + 1, : out.size(1)], out, rtol=1e-4, atol=1e-5)


def run(config: str, lstm: torch.nn.LSTM, examples: list[torch.Tensor], repeats: int,
        device: str) -> list[list[str]]:
    fns = variants(lstm, examples, device)
    check_same(fns)
    forward, both = forward_and_backward(fns, repeats)  # the loss sums outputs and states
    return [[config, name, *ratio_cells(name, forward, both, BASELINE)] for name in fns]


def skewed_arguments(description: str, **widths: int) -> argparse.ArgumentParser:
    """A parser for a batch of skewed lengths (shared by the sequence benchmarks).

    ``widths`` are extra integer options (``hidden=256`` gives ``--hidden``).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch", type=int, default=64)
    for name, default in widths.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--short", type=int, nargs=2, default=[5, 20])
    parser.add_argument("--long", type=int, nargs=2, default=[100, 200])
    parser.add_argument("--long-fraction", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return parser


def lengths_of(args: argparse.Namespace) -> list[int]:
    """The skewed lengths the parsed ``skewed_arguments`` describe."""
    return skewed_lengths(args.batch, tuple(args.short), tuple(args.long), args.long_fraction)


def lengths_title(args: argparse.Namespace) -> str:
    return (f"batch {args.batch}, lengths {args.short[0]}-{args.short[1]} with "
            f"{args.long_fraction:.0%} in {args.long[0]}-{args.long[1]}")


def lstm_configs(size: int, device: str):
    """The LSTMs the sequence benchmarks time: (name, module), one layer and two bidirectional."""
    for layers, bidirectional in ((1, False), (2, True)):
        lstm = torch.nn.LSTM(size, size, num_layers=layers, batch_first=True,
                             bidirectional=bidirectional).to(device)
        yield f"{layers} layer{'s' if layers > 1 else ''}" + (", bidir." if bidirectional
                                                              else ""), lstm


def main(argv: list[str] | None = None) -> str:
    args = skewed_arguments(__doc__.splitlines()[0], hidden=256).parse_args(argv)
    torch.manual_seed(0)
    lengths = lengths_of(args)
    examples = [torch.randn(1, n, args.hidden, device=args.device) for n in lengths]
    rows = []
    for config, lstm in lstm_configs(args.hidden, args.device):
        rows += run(config, lstm, examples, args.repeats, args.device)
    real, padded = sum(lengths), len(lengths) * max(lengths)
    text = (f"### nn.LSTM module: {lengths_title(args)}, hidden {args.hidden} ({real} real rows "
            f"of {padded} padded), {args.device}\n\n{machine()}\n\n"
            + table(["config", "variant", "forward ms", f"× {BASELINE}", "fwd+bwd ms",
                     f"× {BASELINE}"], rows))
    print(text)
    print(f"\nwritten to {write('lstm_module', text)}")
    return text


if __name__ == "__main__":
    main()
