"""The benchmark report: every model, batch sizes 1–128, two length skews, one run.

For each model the variants come from that model's own benchmark module
(``variants(model, examples)``, the functions the per-issue benchmarks time),
so the report and the detailed benchmarks measure the same code:

| model | module | variants |
|---|---|---|
| README RNN (`@batch`, `nn.RNNCell`) | `control_rnn` | loop, Matchbox, hand-padded |
| LSTM (`nn.LSTM`, one layer) | `lstm_module` | loop, Matchbox, `PackedSequence` (the limit), over padding |
| transformer encoder layer | `nn_transformer` | loop, Matchbox, hand-padded + key-padding mask, `torch.nested` |
| adaptive computation (`while`) | `control_while` | loop, Matchbox, hand-padded |
| shift-reduce TreeLSTM | `treelstm` | loop, Matchbox, hand-padded |

Each cell is the median time of a training step (forward, then backward of the
sum of the outputs), with the batched variants timed in alternating rounds.
Ratios are to the hand-written limit (hand-padded code, or ``PackedSequence``
for the LSTM), and speedups are over the per-example loop.  Memory: on CUDA,
the peak memory allocated during one step (``torch.cuda.max_memory_allocated``);
on the CPU, PyTorch keeps no peak, so the report gives the bytes allocated
during one step (``torch.profiler`` with ``profile_memory``), a measure of the
work on padding.

Two skews: *uniform* lengths in 5–60, and *skewed* lengths (90% in 5–20, 10%
in 100–200) for the sequence models; the adaptive-computation model's "length"
is its own number of steps (the lengths only set the batch size), and a
TreeLSTM example of length n is a random binary tree of n // 2 leaves.

``python -m benchmarks.report [--quick] [--device cuda]`` writes
``benchmarks/out/report.md`` and ``benchmarks/out/report.png`` (speedup over the
loop against batch size, one panel per model and skew, the limit drawn too).
"""

from __future__ import annotations

import argparse
import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks._harness import (
    OUT,
    interleaved_medians,
    machine,
    median_seconds,
    table,
    total,
    write,
)

LOOP = "per-example loop"
MATCHBOX = "Matchbox"
LIMIT = "hand-written limit"
MATCHBOX_COMPILED = "Matchbox, matchbox.compile"
LIMIT_COMPILED = "hand-written limit, torch.compile"
#: The compiled variants run from this batch size up (issue 14's targets start at 8).
COMPILED_FROM = 8
SKEWS = {
    "uniform": lambda rng: rng.randint(5, 60),
    "skewed": lambda rng: rng.randint(100, 200) if rng.random() < 0.1 else rng.randint(5, 20),
}


@dataclass
class Model:
    """How to build one model's variants for a batch: names mapped to report columns."""

    name: str
    build: Callable[[list[int], str], dict[str, Callable[[], object]]]
    #: ``benchmarks.compiled``'s builder of the compiled variants, and the hidden size.
    compiled: str = ""
    size: int = 0


def _sequence_examples(lengths: list[int], size: int, device: str) -> list[torch.Tensor]:
    return [torch.randn(1, n, size, device=device) for n in lengths]


def _renamed(fns: dict, names: dict[str, str]) -> dict:
    """The variants under the report's column names (others keep theirs)."""
    return {names.get(name, name): fn for name, fn in fns.items()}


def readme_rnn(lengths: list[int], device: str) -> dict:
    module = importlib.import_module("benchmarks.control_rnn")
    model = module.RNN(128).to(device)
    fns = module.variants(model, _sequence_examples(lengths, 128, device))
    fns.pop("by hand (Matchbox F.update)", None)
    return _renamed(fns, {"@batch": MATCHBOX, "hand-padded": LIMIT})


def lstm(lengths: list[int], device: str) -> dict:
    module = importlib.import_module("benchmarks.lstm_module")
    layer = torch.nn.LSTM(128, 128, batch_first=True).to(device)
    fns = module.variants(layer, _sequence_examples(lengths, 128, device), device)
    return _renamed({name: _first(fn) for name, fn in fns.items()},
                    {"Matchbox": MATCHBOX, "PackedSequence + nn.LSTM": LIMIT,
                     "per-example loop": LOOP})


def transformer(lengths: list[int], device: str) -> dict:
    module = importlib.import_module("benchmarks.nn_transformer")
    layer = torch.nn.TransformerEncoderLayer(256, 4, 512, dropout=0.0, batch_first=True)
    fns = module.variants(layer.to(device), _sequence_examples(lengths, 256, device))
    return _renamed(fns, {"Matchbox": MATCHBOX, module.BASELINE: LIMIT, module.LOOP: LOOP})


def adaptive_computation(lengths: list[int], device: str) -> dict:
    # The model's per-example length is the number of steps it decides to take;
    # the batch size is what varies here (lengths only give the batch size).
    module = importlib.import_module("benchmarks.control_while")
    torch.manual_seed(0)
    model = module.Halting(128).to(device)
    examples = [torch.randn(1, 128, device=device) * 2 for _ in lengths]
    fns = module.variants(model, examples)
    return _renamed(fns, {"@batch": MATCHBOX, "hand-padded": LIMIT})


def treelstm(lengths: list[int], device: str) -> dict:
    # A tree of n leaves takes 2n - 1 transitions: half the length in leaves.
    module = importlib.import_module("benchmarks.treelstm")
    fns = module.build([max(1, n // 2) for n in lengths], 64, device)
    return _renamed(fns, {"Matchbox": MATCHBOX, module.LIMIT: LIMIT, module.LOOP: LOOP})


MODELS = [
    Model("README RNN", readme_rnn, "readme_rnn", 128),
    Model("LSTM", lstm, "lstm", 128),
    Model("transformer encoder layer", transformer, "transformer_layer", 256),
    Model("adaptive computation", adaptive_computation, "halting_while", 128),
    Model("TreeLSTM", treelstm, "treelstm", 64),
]


def compiled_variants(model: Model, lengths: list[int], device: str) -> dict:
    """``matchbox.compile`` of the model and ``torch.compile`` of its hand-written limit
    (``benchmarks.compiled``), compiled here once (not timed)."""
    if device != "cpu":
        return {}  # benchmarks.compiled builds CPU models
    from benchmarks import compiled

    fns = getattr(compiled, model.compiled)(lengths, model.size)
    fns = {MATCHBOX_COMPILED: fns[compiled.COMPILED], LIMIT_COMPILED: fns[compiled.LIMIT_COMPILED]}
    compiled.compile_seconds(fns)
    return fns


def _first(fn: Callable[[], object]) -> Callable[[], object]:
    """A variant returning (outputs, states) timed on its outputs' sum."""

    def outputs():
        result = fn()
        return result[0] if isinstance(result, tuple) else result

    return outputs


def _step(fn: Callable[[], object]) -> Callable[[], None]:
    def step():
        total(fn()).backward()

    return step


def _memory(step: Callable[[], None], device: str) -> int:
    """Peak bytes on CUDA; bytes allocated during the step on the CPU."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as profile:
        step()
    return sum(max(e.self_cpu_memory_usage, 0) for e in profile.key_averages())


@dataclass
class Cell:
    seconds: float
    bytes: int


def measure(model: Model, batch: int, skew: str, device: str,
            repeats: int, with_compiled: bool = False,
            loop_in_rounds: bool = False) -> dict[str, Cell]:
    rng = random.Random(batch * 7919 + len(skew))
    lengths = [SKEWS[skew](rng) for _ in range(batch)]
    torch.manual_seed(0)
    fns = model.build(lengths, device)
    if with_compiled and batch >= COMPILED_FROM:
        fns.update(compiled_variants(model, lengths, device))
    steps = {name: _step(fn) for name, fn in fns.items()}
    # The loop is timed on its own by default (fewer repeats: it is the slowest variant);
    # ``loop_in_rounds`` times it in the alternating rounds too, so that its ratio to
    # Matchbox sees the same drifts of a shared machine as Matchbox's ratio to the limit.
    batched = {k: v for k, v in steps.items() if k != LOOP or loop_in_rounds}
    times = interleaved_medians(batched, repeats, warmup=1)
    if LOOP in steps and not loop_in_rounds:
        times[LOOP] = median_seconds(steps[LOOP], max(1, repeats // 3), warmup=1)
    return {name: Cell(times[name], _memory(step, device)) for name, step in steps.items()}


def report_rows(results: dict) -> list[list[str]]:
    rows = []
    for (model, skew, batch), cells in results.items():
        limit = cells.get(LIMIT)
        loop = cells.get(LOOP)
        for name, cell in cells.items():
            rows.append([
                model, skew, str(batch), name, f"{cell.seconds * 1e3:.2f}",
                f"{cell.seconds / limit.seconds:.2f}" if limit else "",
                f"{loop.seconds / cell.seconds:.1f}" if loop else "",
                f"{cell.bytes / 2**20:.1f}",
            ])
    return rows


def plot(results: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    panels = sorted({(model, skew) for model, skew, _ in results},
                    key=lambda p: ([m.name for m in MODELS].index(p[0]), p[1]))
    columns = 2
    rows = (len(panels) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(10, 3 * rows), squeeze=False)
    for axis, (model, skew) in zip(axes.flat, panels):
        batches = sorted(b for m, s, b in results if (m, s) == (model, skew))
        for name, style in ((MATCHBOX, "o-"), (LIMIT, "k--"), (MATCHBOX_COMPILED, "s-"),
                            (LIMIT_COMPILED, "k:")):
            shown = [b for b in batches if name in results[(model, skew, b)]]
            if not shown:
                continue
            speedups = [results[(model, skew, b)][LOOP].seconds
                        / results[(model, skew, b)][name].seconds for b in shown]
            axis.plot(shown, speedups, style, label=name)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_title(f"{model} ({skew})", fontsize=9)
        axis.set_xlabel("batch size")
        axis.set_ylabel("speedup over the loop")
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--models", nargs="+", default=[m.name for m in MODELS],
                        help="models to run (names as in the table)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="batch sizes 1 and 8, 1 repeat")
    parser.add_argument("--loop-in-rounds", action="store_true",
                        help="time the per-example loop in the alternating rounds too, with"
                             " the same repeats (steadier `× loop` ratios, a longer run)")
    parser.add_argument("--compiled", action="store_true",
                        help=f"add matchbox.compile and torch.compile of the limit from batch "
                             f"{COMPILED_FROM} up (CPU; each cell compiles its graphs first)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.repeats = [1, 8], 1
    if args.compiled:
        from benchmarks.compiled import compile_in_process

        compile_in_process()
    results = {}
    for model in MODELS:
        if model.name not in args.models:
            continue
        for skew in SKEWS:
            for batch in args.batches:
                cells = measure(model, batch, skew, args.device, args.repeats, args.compiled,
                                args.loop_in_rounds)
                results[(model.name, skew, batch)] = cells
                print(f"{model.name}, {skew}, batch {batch}: " + ", ".join(
                    f"{name} {cell.seconds * 1e3:.1f} ms {cell.bytes / 2**20:.1f} MiB"
                    for name, cell in cells.items()),
                    flush=True)
    text = "\n".join([
        f"Training step (forward + backward), {args.device}; {machine()}.",
        "`× limit`: time ÷ the hand-written limit; `× loop`: speedup over the per-example loop;",
        "memory: " + ("peak MiB allocated in a step" if args.device.startswith("cuda")
                      else "MiB allocated during a step (CPU: PyTorch keeps no peak)") + ".",
        "",
        table(["model", "lengths", "batch", "variant", "ms", "× limit", "× loop", "MiB"],
              report_rows(results)),
    ])
    suffix = "" if args.device == "cpu" else f"-{args.device.split(':')[0]}"
    path = write(f"report{suffix}", text)
    picture = plot(results, OUT / f"report{suffix}.png")
    print(text)
    print(f"wrote {path}" + (f" and {picture}" if picture else ""))
    return text


if __name__ == "__main__":
    main()
