"""Where ``@batch``'s time goes: ATen ops per loop iteration and the cost of one op.

For the two control-flow models of ``control_rnn`` and ``control_while``, counts
the ATen ops one iteration runs (``TorchDispatchMode``), for ``@batch`` and for
the hand-written masked code, with the ``where``s and ``.any()`` syncs apart:
the ops ``@batch`` adds are its guards (the region guard of each state read
from outside a region, the guard of each product with a weight) and its
merges.  Then times single ops on a ``(batch, hidden)`` tensor, with and
without autograd, so the counts can be read as microseconds.  Counts do not
depend on the machine; times do.
"""

from __future__ import annotations

import argparse
import collections
import random

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks._harness import machine, median_seconds, table, write
from benchmarks.control_rnn import hand_padded
from benchmarks.control_while import Halting, hand_written, step_counts
from examples.readme_rnn import RNN
from matchbox import MaskedBatch

SPLIT_OUT = ("where", "any")  # the ops a masked loop adds, counted apart


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn) -> collections.Counter[str]:  # noqa: ANN001
    with _OpCounter() as counter:
        fn()
    return counter.counts


def op_rows(setting: str, variants: dict, iterations: int) -> list[list[str]]:
    rows = []
    for name, fn in variants.items():
        counts = count_ops(fn)
        total = sum(counts.values()) / iterations
        split = [counts[op] / iterations for op in SPLIT_OUT]
        rows.append([setting, name, f"{total:.1f}", *(f"{n:.1f}" for n in split),
                     f"{total - sum(split):.1f}"])
    return rows


def models(batch: int, size: int) -> list[tuple[str, dict, int]]:
    """(setting, {variant: forward}, iterations) for the README RNN and the halting while."""
    rng = random.Random(0)
    lengths = [rng.randint(5, 60) for _ in range(batch)]
    rnn = RNN(size)
    xb = MaskedBatch.fromlist([torch.randn(1, n, size) for n in lengths], (True, False))
    lengths_t = torch.tensor(lengths)
    torch.manual_seed(0)
    halting = Halting(size)
    hb = MaskedBatch.fromlist([torch.randn(1, size) * 2 for _ in range(batch)], (False,))
    steps = int(step_counts(halting, hb.data).max())
    return [
        (f"README RNN, hidden {size}", {
            "@batch": lambda: rnn(xb),
            "hand-padded": lambda: hand_padded(rnn, xb.data, lengths_t)}, max(lengths)),
        (f"halting while, hidden {size}", {
            "@batch": lambda: halting(hb),
            "hand-written masked": lambda: hand_written(halting, hb.data)}, steps),
    ]


def single_op_rows(batch: int, size: int, repeats: int) -> list[list[str]]:
    """Microseconds of one op on ``(batch, size)`` floats (median of ``repeats`` runs)."""
    x = torch.randn(batch, size, requires_grad=True)
    y = torch.randn(batch, size, requires_grad=True)
    rows_mask = (torch.rand(batch) > 0.3).view(batch, 1)
    zero = torch.zeros(())
    ops = {
        "x + y": lambda: x + y,
        "where(rows, x, y) (a merge)": lambda: torch.where(rows_mask, x, y),
        "where(rows, x, 0) (a guard)": lambda: torch.where(rows_mask, x, zero),
        "rows.any() (a sync on the GPU)": lambda: rows_mask.any(),
    }
    calls = 200
    result = []
    for name, op in ops.items():
        def many(op=op):
            for _ in range(calls):
                op()
        with_grad = median_seconds(many, repeats) / calls
        with torch.no_grad():
            without = median_seconds(many, repeats) / calls
        result.append([name, f"{with_grad * 1e6:.2f}", f"{without * 1e6:.2f}"])
    return result


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, nargs="+", default=[256, 32])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    counted = []
    for size in args.size:
        for setting, variants, iterations in models(args.batch, size):
            counted += op_rows(setting, variants, iterations)
    timed = single_op_rows(args.batch, min(args.size), max(args.repeats, 3))
    text = (f"### What an iteration of @batch runs: batch {args.batch}\n\n{machine()}\n\n"
            "ATen ops per loop iteration (forward):\n\n"
            + table(["model", "variant", "ops", "where", "any", "other"], counted)
            + f"\n\nOne op on ({args.batch}, {min(args.size)}) floats, µs:\n\n"
            + table(["op", "with autograd", "no grad"], timed))
    print(text)
    print(f"\nwritten to {write('control_costs', text)}")
    return text


if __name__ == "__main__":
    main()
