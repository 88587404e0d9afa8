"""A stack of linear + activation + layer_norm on a PackedBatch vs a MaskedBatch.

Per-row layers do work proportional to the rows they are given: a
``MaskedBatch`` hands them ``batch x longest`` rows, a ``PackedBatch`` only the
real ones.  The target (from the issue): the PackedBatch's speedup over the
MaskedBatch is at least 0.8x the ratio of padded to real rows.  Timed in one
run, forward and forward+backward, beside the same layers on the plain packed
rows and on the plain padded tensor (the two limits, no batch type), and the
bytes each batch holds (``matchbox.packed.memory_report``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks._harness import full_float32, interleaved_medians, machine, table, write
from benchmarks.lstm_module import lengths_of, lengths_title, skewed_arguments
from matchbox import MaskedBatch, _registry
from matchbox.packed import PackedBatch, memory_report, nbytes


class ComposedLayerNorm(nn.LayerNorm):
    """``layer_norm`` written with core ops (mean and var over the last, static dim)."""

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        scale = (centred.pow(2).mean(-1, keepdim=True) + self.eps).rsqrt()
        return centred * scale * self.weight + self.bias


def layer_norm_type() -> type[nn.LayerNorm]:
    """``nn.LayerNorm`` when MaskedBatch implements ``F.layer_norm`` (matchbox-nn), else the
    same normalisation in core ops, used for both batch types so they run the same code."""
    registered = _registry.lookup(F.layer_norm, "MaskedBatch") is not None
    return nn.LayerNorm if registered else ComposedLayerNorm


def make_stack(width: int, depth: int) -> nn.Sequential:
    norm = layer_norm_type()
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU(), norm(width)]
    return nn.Sequential(*layers)


def variants(stack: nn.Module, examples: list[torch.Tensor]) -> dict:
    pb = PackedBatch.fromlist(examples)
    mb = MaskedBatch.fromlist(examples, (True, False))
    rows, padded = pb.data, mb.data
    return {
        "PackedBatch": lambda: stack(pb).data,
        "MaskedBatch": lambda: stack(mb).data,
        "plain packed rows (limit)": lambda: stack(rows),
        "plain padded tensor (limit)": lambda: stack(padded),
    }


def _backward(fn):
    def forward_backward():
        fn().sum().backward()

    return forward_backward


@full_float32()
def check_same(stack: nn.Module, examples: list[torch.Tensor]) -> None:
    packed = list(stack(PackedBatch.fromlist(examples)).examples())
    masked = list(stack(MaskedBatch.fromlist(examples, (True, False))).examples())
    for p, m in zip(packed, masked):
        torch.testing.assert_close(p, m, rtol=1e-4, atol=1e-5)


def main(argv: list[str] | None = None) -> str:
    parser = skewed_arguments(__doc__.splitlines()[0], width=256, depth=4)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    examples = [torch.randn(1, n, args.width, device=args.device) for n in lengths_of(args)]
    stack = make_stack(args.width, args.depth).to(args.device)
    check_same(stack, examples)
    fns = variants(stack, examples)
    forward = interleaved_medians(fns, args.repeats)
    both = interleaved_medians({k: _backward(v) for k, v in fns.items()}, args.repeats)
    report = memory_report(PackedBatch.fromlist(examples))
    ratio = report.padded_rows / report.real_rows
    rows = [[name, f"{forward[name] * 1e3:.2f}",
             f"{forward['MaskedBatch'] / forward[name]:.2f}", f"{both[name] * 1e3:.2f}",
             f"{both['MaskedBatch'] / both[name]:.2f}"] for name in fns]
    speedups = (forward["MaskedBatch"] / forward["PackedBatch"],
                both["MaskedBatch"] / both["PackedBatch"])
    verdict = ", ".join(f"{what} {s:.2f}x ({'meets' if s >= 0.8 * ratio else 'misses'} "
                        f"{0.8 * ratio:.2f}x)" for what, s in zip(("forward", "fwd+bwd"), speedups))
    text = (f"### linear + GELU + layer_norm x {args.depth} (width {args.width}): PackedBatch vs "
            f"MaskedBatch, {lengths_title(args)}, {args.device}\n\n"
            f"{machine()}; layer norm: {layer_norm_type().__name__}\n\n"
            f"Rows: {report.real_rows} real, {report.padded_rows} padded (ratio {ratio:.2f}); "
            f"target speedup >= 0.8 x ratio = {0.8 * ratio:.2f}x. PackedBatch speedup over "
            f"MaskedBatch: {verdict}.\n\n"
            + table(["variant", "forward ms", "speedup vs MaskedBatch", "fwd+bwd ms",
                     "speedup vs MaskedBatch"], rows)
            + "\n\nBytes of the input batch: "
            f"PackedBatch {nbytes(PackedBatch.fromlist(examples)) / 1e6:.2f} MB, MaskedBatch "
            f"{nbytes(MaskedBatch.fromlist(examples, (True, False))) / 1e6:.2f} MB "
            f"({report.ratio:.2f}x).")
    print(text)
    print(f"\nwritten to {write('packed_layers', text)}")
    return text


if __name__ == "__main__":
    main()
