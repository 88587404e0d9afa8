"""``matchbox.compile`` against eager Matchbox and hand-written padded code, eager and compiled.

Issue 14's targets, in one run per model and batch size (ratios to hand-padded
eager PyTorch, the first limit, and to the same code under ``torch.compile``,
the second):

| model | module | hand-written limit |
|---|---|---|
| README RNN (`@batch`, `nn.RNNCell`) | `control_rnn` | padded tensor, `where` per step |
| adaptive computation (halting `while`) | `control_while` | `active` mask, `where` per variable |
| shift-reduce TreeLSTM | `treelstm` | SPINN-style padded parse |
| transformer encoder layer | `nn_transformer` | key-padding mask |
| `nn.LSTM` | `lstm_module` | `PackedSequence` |
| the demo's GRU language model | `examples/demo.py` | its `padded_loss` |

Variants: Matchbox eager; Matchbox under ``matchbox.compile`` (inductor, bucket
8: one graph per padded size rounded up to 8); the hand-written limit eager;
the limit under ``torch.compile`` (inductor).  Each is timed forward and
forward + backward (the sum of the outputs), the batched variants in
alternating rounds after a warm-up that compiles.  ``compile s`` is the
wall time of the first training step of a compiled variant (capture, compile
and one run), i.e. what a training run pays once per graph; a second process
finds inductor's caches warm (``--cold`` empties them first).  Inductor's first
compile in a process (a one-op function, :func:`first_use`: its probes of the CPU's
instruction sets on a fresh cache) runs before them, reported apart: it is paid
once, not per graph, and was counted in whichever variant compiled first.

    python -m benchmarks.compiled [--batches 8 64] [--models ...] [--repeats 5] [--device cuda]
        [--mode reduce-overhead] [--fixed-sizes] [--python-wrapper]
"""

from __future__ import annotations

import argparse
import importlib
import random
import time
import warnings
from collections.abc import Callable

import torch
import torch._inductor.config

import matchbox
from benchmarks._harness import forward_and_backward, machine, table, total, write
from matchbox import MaskedBatch

LIMIT = "hand-padded"
LIMIT_COMPILED = "hand-padded, torch.compile"
EAGER = "Matchbox"
COMPILED = "Matchbox, matchbox.compile"
#: Settings of every ``matchbox.compile`` here (``--fixed-sizes``: ``dynamic=False``).
COMPILE_SETTINGS: dict = {}


class Parse(torch.nn.Module):
    """The TreeLSTM's ``parse`` as a module's forward (``matchbox.compile`` compiles modules)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, leaves, transitions):
        return self.model.parse(leaves, transitions)


def readme_rnn(lengths: list[int], size: int, device: str, mode: str | None) -> dict:
    module = importlib.import_module("benchmarks.control_rnn")
    model = module.RNN(size).to(device)
    examples = [torch.randn(1, n, size, device=device) for n in lengths]
    xb = MaskedBatch.fromlist(examples, (True, False))
    lengths = torch.tensor([x.size(1) for x in examples], device=device)
    compiled = matchbox.compile(model, mode=mode, **COMPILE_SETTINGS)
    hand = torch.compile(module.hand_padded, mode=mode)
    return {
        EAGER: lambda: model(xb).data,
        COMPILED: lambda: compiled(xb).data,
        LIMIT: lambda: module.hand_padded(model, xb.data, lengths),
        LIMIT_COMPILED: lambda: hand(model, xb.data, lengths),
    }


def halting_while(lengths: list[int], size: int, device: str, mode: str | None) -> dict:
    # The model's per-example length is the number of steps it decides to take; the
    # lengths give only the batch size.
    module = importlib.import_module("benchmarks.control_while")
    torch.manual_seed(0)
    model = module.Halting(size).to(device)
    xb = MaskedBatch.fromlist([torch.randn(1, size, device=device) * 2 for _ in lengths],
                              (False,))
    compiled = matchbox.compile(model, mode=mode, **COMPILE_SETTINGS)
    hand = torch.compile(module.hand_written, mode=mode)
    return {
        EAGER: lambda: model(xb).data,
        COMPILED: lambda: compiled(xb).data,
        LIMIT: lambda: module.hand_written(model, xb.data),
        LIMIT_COMPILED: lambda: hand(model, xb.data),
    }


def treelstm(lengths: list[int], size: int, device: str, mode: str | None) -> dict:
    # A tree of n leaves takes 2n - 1 transitions: half the length in leaves.
    module = importlib.import_module("benchmarks.treelstm")
    sizes = [max(1, n // 2) for n in lengths]
    trees, depth = module.make_trees(sizes, size, device)
    torch.manual_seed(0)
    model = module.TreeLSTM(10, 2, d_embed=8, hidden=size, max_depth=depth).to(device)
    leaves = MaskedBatch.fromlist([leaf for leaf, _ in trees], (True, False))
    transitions = MaskedBatch.fromlist([t for _, t in trees], (True,))
    steps = torch.tensor([t.size(1) for _, t in trees], device=device)
    padded_transitions = torch.where(transitions.mask, transitions.data, module.SHIFT)
    padded_leaves = torch.where(leaves.mask, leaves.data, 0.0)
    compiled = matchbox.compile(Parse(model), mode=mode, **COMPILE_SETTINGS)
    hand = torch.compile(module.hand_padded_parse, mode=mode)
    return {
        EAGER: lambda: model.parse(leaves, transitions).data,
        COMPILED: lambda: compiled(leaves, transitions).data,
        LIMIT: lambda: module.hand_padded_parse(model, padded_leaves, padded_transitions, steps),
        LIMIT_COMPILED: lambda: hand(model, padded_leaves, padded_transitions, steps),
    }


def _real_values(batch: MaskedBatch) -> torch.Tensor:
    """A compiled call's batch is padded to its bucket (its padding differs from eager's)."""
    return batch.data * batch.mask


def transformer_layer(lengths: list[int], size: int, device: str, mode: str | None) -> dict:
    module = importlib.import_module("benchmarks.nn_transformer")
    layer = torch.nn.TransformerEncoderLayer(size, 4, 2 * size, dropout=0.0, batch_first=True,
                                             device=device)
    examples = [torch.randn(1, n, size, device=device) for n in lengths]
    fns = module.variants(layer, examples)
    xb = MaskedBatch.fromlist(examples, (True, False))
    real = xb.mask.to(xb.dtype)
    compiled = matchbox.compile(layer, mode=mode, **COMPILE_SETTINGS)
    padded_layer = torch.compile(layer, mode=mode)
    key_padding_mask = ~xb.mask[:, :, 0]
    return {
        EAGER: fns["Matchbox"],
        COMPILED: lambda: _real_values(compiled(xb)),
        LIMIT: fns[module.BASELINE],
        LIMIT_COMPILED: lambda: padded_layer(xb.data, src_key_padding_mask=key_padding_mask)
        * real,
    }


def lstm(lengths: list[int], size: int, device: str, mode: str | None) -> dict:
    module = importlib.import_module("benchmarks.lstm_module")
    layer = torch.nn.LSTM(size, size, batch_first=True, device=device)
    examples = [torch.randn(1, n, size, device=device) for n in lengths]
    fns = module.variants(layer, examples, device)
    xb = MaskedBatch.fromlist(examples, (True, False))

    class Outputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(x)[0]

    compiled = matchbox.compile(Outputs(), mode=mode, **COMPILE_SETTINGS)
    packed = torch.compile(fns[module.BASELINE], mode=mode)
    return {
        EAGER: lambda: fns["Matchbox"]()[0],
        COMPILED: lambda: _real_values(compiled(xb)),
        LIMIT: lambda: fns[module.BASELINE]()[0],
        LIMIT_COMPILED: lambda: packed()[0],
    }


def demo_language_model(lengths: list[int], size: int, device: str, mode: str | None) -> dict:
    # The demo's CodeLM (a GRU cell over tokens, appending its states, then the output
    # layer over the stack and the loss), with the demo's vocabulary size.
    demo = importlib.import_module("examples.demo")
    vocabulary = 4004
    torch.manual_seed(0)
    model = demo.CodeLM(vocabulary, size, "gru").to(device)
    lines = [torch.randint(0, vocabulary, (1, n + 1), device=device) for n in lengths]
    batch = MaskedBatch.fromlist(lines, (True,))
    ids = torch.where(batch.mask, batch.data, torch.zeros_like(batch.data))
    counts = batch.size_as_tensor(1).data
    compiled = matchbox.compile(model, mode=mode, **COMPILE_SETTINGS)
    hand = torch.compile(demo.padded_loss, mode=mode)
    return {
        EAGER: lambda: model(batch).data,
        COMPILED: lambda: compiled(batch).data,
        LIMIT: lambda: demo.padded_loss(model, ids, counts),
        LIMIT_COMPILED: lambda: hand(model, ids, counts),
    }


MODELS: dict[str, tuple[Callable[..., dict], list[int]]] = {
    "README RNN": (readme_rnn, [32, 256]),
    "adaptive computation": (halting_while, [32, 256]),
    "TreeLSTM": (treelstm, [64]),
    "transformer encoder layer": (transformer_layer, [256]),
    "nn.LSTM": (lstm, [128]),
    "demo language model": (demo_language_model, [128]),
}


def compile_in_process() -> None:
    """Compile in this process: inductor's pool of compile workers would start (each
    importing torch) after the first compile and slow the timings that follow."""
    torch._inductor.config.compile_threads = 1


def first_use(device: str) -> float:
    """Seconds of inductor's first compile in this process and cache, of a one-op function:
    what the first graph of any variant would otherwise pay (on the CPU, compiling small
    test programs that probe the instruction sets, 6-7 of them, about 8 s of CPU time
    on a fresh cache), not a model's own compile time.  Paid here, before any variant is
    timed, and reported apart."""
    start = time.perf_counter()
    torch.compile(lambda x: (x * 2).sum())(torch.randn(8, device=device))
    return time.perf_counter() - start


def compile_seconds(fns: dict) -> dict[str, float]:
    """The first training step of each compiled variant (what compiling costs, once)."""
    seconds = {}
    for name in (COMPILED, LIMIT_COMPILED):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an eager fallback is reported in the table
            total(fns[name]()).backward()
        seconds[name] = time.perf_counter() - start
    return seconds


def run(name: str, batch: int, size: int, repeats: int, device: str,
        mode: str | None) -> list[list[str]]:
    build, _ = MODELS[name]
    torch.manual_seed(0)
    rng = random.Random(batch * 31 + size)
    fns = build([rng.randint(5, 60) for _ in range(batch)], size, device, mode)
    compiled_in = compile_seconds(fns)
    forward, both = forward_and_backward(fns, repeats)
    rows = []
    for variant in fns:
        rows.append([
            name, str(size), str(batch), variant,
            f"{forward[variant] * 1e3:.2f}", f"{forward[variant] / forward[LIMIT]:.2f}",
            f"{both[variant] * 1e3:.2f}", f"{both[variant] / both[LIMIT]:.2f}",
            f"{both[variant] / both[LIMIT_COMPILED]:.2f}",
            f"{compiled_in[variant]:.1f}" if variant in compiled_in else "",
        ])
    return rows


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="hidden sizes (default: each model's own)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--mode", default=None,
                        help="torch.compile mode of both compiled variants (e.g. reduce-overhead)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads (default: torch's); 1 is steadier on a shared machine")
    parser.add_argument("--fixed-sizes", action="store_true",
                        help="matchbox.compile(..., dynamic=False): a graph per batch size and "
                             "padded size, as before symbolic sizes")
    parser.add_argument("--python-wrapper", action="store_true",
                        help="matchbox.compile(..., options={'cpp_wrapper': False}): a CPU graph "
                             "holding a scan in inductor's Python wrapper, as before")
    parser.add_argument("--cold", action="store_true",
                        help="empty inductor's caches first (compile times of a first run)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    compile_in_process()
    if args.fixed_sizes:
        COMPILE_SETTINGS["dynamic"] = False
    if args.python_wrapper:
        COMPILE_SETTINGS["options"] = {"cpp_wrapper": False}
    if args.cold:
        import os
        import tempfile

        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cold-")
    first = first_use(args.device)
    print(f"inductor's first use: {first:.1f} s", flush=True)
    rows = []
    for name in args.models:
        for size in args.sizes or MODELS[name][1]:
            for batch in args.batches:
                part = run(name, batch, size, args.repeats, args.device, args.mode)
                rows += part
                print("\n".join(" | ".join(r) for r in part), flush=True)
    text = "\n".join([
        f"Compiled execution, {args.device}, mode {args.mode}, "
        f"{'fixed' if args.fixed_sizes else 'symbolic'} sizes, training step unless noted; "
        f"{machine()}.",
        "`× limit`: ÷ hand-padded eager; `× compiled limit`: forward+backward ÷ hand-padded "
        "under torch.compile; `compile s`: the first training step of a compiled variant, "
        f"after inductor's first use in the process (a one-op function: {first:.1f} s).",
        "",
        table(["model", "hidden", "batch", "variant", "fwd ms", "× limit", "fwd+bwd ms",
               "× limit", "× compiled limit", "compile s"], rows),
    ])
    print(text)
    print(f"wrote {write('compiled', text)}")
    return text


if __name__ == "__main__":
    main()
