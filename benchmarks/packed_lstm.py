"""nn.LSTM on a PackedBatch vs a raw PackedSequence, batch 64 with skewed lengths.

The same ``nn.LSTM`` (``batch_first=True``) runs in one process on:

- ``PackedBatch``: the module called on a ``PackedBatch`` (its rows go to the
  packed op as they are; output ``PackedBatch``, final states in caller order);
- ``PackedSequence``: the module called on a ``PackedSequence`` of the same
  rows (the baseline; target: PackedBatch within **1.05x** of it);
- ``MaskedBatch`` (matchbox-nn's path: gather the real rows, run, scatter back),
  for reference.

Each is timed with the batch already built ("module only") and with building it
from the list of examples included ("from examples": ``PackedBatch.fromlist``,
``pack_sequence(enforce_sorted=False)``, ``MaskedBatch.fromlist``), forward
and forward+backward.  The bytes of each input are reported beside.
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pack_sequence

from benchmarks._harness import full_float32, interleaved_medians, machine, table, write
from benchmarks.lstm_module import lengths_of, lengths_title, lstm_configs, skewed_arguments
from matchbox import MaskedBatch
from matchbox.nn import TimeMajorBatch, batch_major
from matchbox.packed import PackedBatch, nbytes

BASELINE = "PackedSequence"


def variants(lstm: torch.nn.LSTM, examples: list[torch.Tensor]) -> dict:
    """name -> (module only, from examples); each returns (output, final h)."""
    pb = PackedBatch.fromlist(examples)
    ps = pack_sequence([x[0] for x in examples], enforce_sorted=False)
    mb = MaskedBatch.fromlist(examples, (True, False))

    def packed_batch(x):
        out, (h, _) = lstm(x)
        # A batch's h is a state view (examples (L*D, 1, H)): its plain (L*D, B, H) form.
        return out, batch_major(h).data.transpose(0, 1) if isinstance(h, TimeMajorBatch) else h

    packed_sequence = masked_batch = packed_batch  # the same call; named for the table

    return {
        "PackedBatch": (lambda: packed_batch(pb),
                        lambda: packed_batch(PackedBatch.fromlist(examples))),
        BASELINE: (lambda: packed_sequence(ps),
                   lambda: packed_sequence(pack_sequence([x[0] for x in examples],
                                                         enforce_sorted=False))),
        "MaskedBatch": (lambda: masked_batch(mb),
                        lambda: masked_batch(MaskedBatch.fromlist(examples, (True, False)))),
    }, {"PackedBatch": nbytes(pb), BASELINE: nbytes(ps.data) + 8 * (
        ps.batch_sizes.numel() + 2 * len(examples)), "MaskedBatch": nbytes(mb)}


@full_float32()
def check_same(fns: dict) -> None:
    """PackedBatch and PackedSequence compute the same examples and states (their rows may
    differ in order: pack_sequence's sort does not keep ties in the caller's order)."""
    out_b, h_b = fns["PackedBatch"][0]()
    out_s, h_s = fns[BASELINE][0]()
    for b, s in zip(out_b.examples(), PackedBatch.from_packed_sequence(out_s).examples()):
        torch.testing.assert_close(b, s, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(h_b, h_s, rtol=1e-4, atol=1e-5)


def _backward(fn):
    def forward_backward():
        out, h = fn()
        (out.data.sum() + h.sum()).backward()

    return forward_backward


def run(config: str, lstm: torch.nn.LSTM, examples: list[torch.Tensor],
        repeats: int) -> list[list[str]]:
    fns, sizes = variants(lstm, examples)
    check_same(fns)
    rows = []
    for setting, index in (("module only", 0), ("from examples", 1)):
        chosen = {name: pair[index] for name, pair in fns.items()}
        forward = interleaved_medians(chosen, repeats)
        both = interleaved_medians({k: _backward(v) for k, v in chosen.items()}, repeats)
        rows += [[config, setting, name, f"{forward[name] * 1e3:.2f}",
                  f"{forward[name] / forward[BASELINE]:.3f}", f"{both[name] * 1e3:.2f}",
                  f"{both[name] / both[BASELINE]:.3f}", f"{sizes[name] / 1e6:.2f}"]
                 for name in chosen]
    return rows


def main(argv: list[str] | None = None) -> str:
    args = skewed_arguments(__doc__.splitlines()[0], hidden=256).parse_args(argv)
    torch.manual_seed(0)
    lengths = lengths_of(args)
    examples = [torch.randn(1, n, args.hidden, device=args.device) for n in lengths]
    rows = []
    for config, lstm in lstm_configs(args.hidden, args.device):
        rows += run(config, lstm, examples, args.repeats)
    real, padded = sum(lengths), len(lengths) * max(lengths)
    text = (f"### nn.LSTM on PackedBatch vs PackedSequence: {lengths_title(args)}, hidden "
            f"{args.hidden} ({real} real rows of {padded} padded), {args.device}; target: "
            f"PackedBatch within 1.05x\n\n{machine()}\n\n"
            + table(["config", "timed", "input", "forward ms", f"x {BASELINE}", "fwd+bwd ms",
                     f"x {BASELINE}", "input MB"], rows))
    print(text)
    print(f"\nwritten to {write('packed_lstm', text)}")
    return text


if __name__ == "__main__":
    main()
