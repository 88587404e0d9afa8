"""Where eager ``@batch``'s CPU time goes on the TreeLSTM: Python bytecodes against ATen ops.

For the report's TreeLSTM cells (``benchmarks.report``'s lengths and seeds), one
forward of each variant (Matchbox, hand-written padded code, the per-example
loop) is counted: the bytecodes Python runs (``sys.settrace`` opcode events,
Matchbox's split by package: core's ops, control's runtime, the model's own
code, torch), the Python calls, and the ATen ops (``TorchDispatchMode``).
Counts do not depend on the machine.  Then each variant's forward and training
step is timed in thread CPU time, one torch thread, the variants alternated
(times depend on the machine; thread time keeps other processes' load out).

The last column reads the two together: Matchbox runs about as many ATen ops
as the hand-written code (fewer where it skips finished examples), so its step's
excess over the hand-written one is its Python; the share of Matchbox's
bytecodes that would have to go for its step to match the loop's is that
excess's share which the loop does not leave room for (``beat the loop: cut``).
This is what picks between shaving the per-op dispatch and replaying a step
(``benchmarks/RESULTS.md``, round twelve).

    python -m benchmarks.eager_python [--cells uniform:8 skewed:8 skewed:32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks import report
from benchmarks._harness import machine, table, total, write

QUICK = ["--cells", "skewed:2", "--repeats", "1"]
VARIANTS = (report.MATCHBOX, report.LIMIT, report.LOOP)


class _AtenCount(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops += 1
        return func(*args, **(kwargs or {}))


def _package(filename: str) -> str:
    if "matchbox/control" in filename:
        return "control"
    if "matchbox-" in filename or "/matchbox/" in filename:
        return "core"
    if "examples" in filename or "benchmarks" in filename:
        return "model"
    return "torch" if "torch" in filename else "other"


def python_counts(fn: Callable[[], object]) -> tuple[collections.Counter, int]:
    """Bytecodes of one call of ``fn`` by package, and its Python calls."""
    bytecodes: collections.Counter = collections.Counter()
    calls = [0]

    def trace(frame, event, _arg):  # noqa: ANN001, ANN202
        frame.f_trace_opcodes = True
        if event == "opcode":
            bytecodes[_package(frame.f_code.co_filename)] += 1
        elif event == "call":
            calls[0] += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return bytecodes, calls[0]


def aten_ops(fn: Callable[[], object]) -> int:
    with _AtenCount() as counter:
        fn()
    return counter.ops


def thread_ms(fn: Callable[[], object], repeats: int = 5) -> float:
    """The least thread CPU time of ``repeats`` calls, in ms."""
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best * 1e3


def cell_variants(skew: str, batch: int) -> dict[str, Callable[[], object]]:
    """The report's TreeLSTM variants for one cell (its lengths and seeds)."""
    rng = random.Random(batch * 7919 + len(skew))
    lengths = [report.SKEWS[skew](rng) for _ in range(batch)]
    torch.manual_seed(0)
    return report.treelstm(lengths, "cpu")


def measure_cell(skew: str, batch: int, rounds: int) -> list[list[str]]:
    fns = cell_variants(skew, batch)
    steps = {name: (lambda fn=fns[name]: total(fn()).backward()) for name in VARIANTS}
    for step in steps.values():
        step()  # warm up: a first call's caches are not what a step costs
    counts = {name: (python_counts(fns[name]), aten_ops(fns[name])) for name in VARIANTS}
    forward = {name: float("inf") for name in VARIANTS}
    trained = dict(forward)
    for _ in range(rounds):  # alternated: a drift of the machine reaches every variant
        for name in VARIANTS:
            forward[name] = min(forward[name], thread_ms(fns[name]))
            trained[name] = min(trained[name], thread_ms(steps[name]))
    bytecodes = {name: sum(counts[name][0][0].values()) for name in VARIANTS}
    excess = trained[report.MATCHBOX] - trained[report.LIMIT]
    over_loop = trained[report.MATCHBOX] - trained[report.LOOP]
    python = bytecodes[report.MATCHBOX] - bytecodes[report.LIMIT]
    # (more than ``python`` when even the hand-written step is slower than the loop's)
    needed = max(over_loop, 0.0) / excess * python if excess > 0 else float("inf")
    rows = []
    for name in VARIANTS:
        (by_package, calls), ops = counts[name]
        split = ", ".join(f"{k} {v:,}" for k, v in by_package.most_common() if v >= 1000)
        cut = ""
        if name == report.MATCHBOX:
            cut = (
                f"{needed / bytecodes[name]:.0%}"
                if needed <= python
                else "none enough: hand-written is slower than the loop"
            )
        rows.append(
            [
                f"{skew} {batch}",
                name,
                f"{bytecodes[name]:,}",
                split,
                f"{calls:,}",
                f"{ops:,}",
                f"{forward[name]:.1f}",
                f"{trained[name]:.1f}",
                cut,
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cells",
        nargs="+",
        default=["uniform:8", "skewed:8", "skewed:32"],
        help="skew:batch cells of benchmarks.report",
    )
    parser.add_argument("--repeats", type=int, default=3, help="alternated rounds of timing")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for cell in args.cells:
        skew, batch = cell.split(":")
        rows += measure_cell(skew, int(batch), args.repeats)
    text = "\n".join(
        [
            f"TreeLSTM (benchmarks.report's cells), one forward; thread CPU ms, one torch thread, "
            f"least of {args.repeats} alternated rounds of 5; {machine()}",
            "",
            table(
                [
                    "cell",
                    "variant",
                    "bytecodes",
                    "by package",
                    "Python calls",
                    "ATen ops",
                    "forward ms",
                    "step ms",
                    "beat the loop: cut",
                ],
                rows,
            ),
        ]
    )
    print(text)
    print(f"wrote {write('eager_python', text)}")
    return text


if __name__ == "__main__":
    main()
