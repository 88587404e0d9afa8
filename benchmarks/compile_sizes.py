"""Graphs and compile time over a training run whose batches vary in size and length.

Issue 21 asks that a run over bucketed data compile a couple of graphs, not one per
padded-size bucket and batch size.  This runs ``--steps`` training steps of one model
under ``matchbox.compile`` (inductor, bucket 8, defaults otherwise) on batches whose
size is ``--batch`` except every ``--epoch``-th step (the last, smaller batch of an
epoch) and whose longest example has a random length in ``--lengths``, once with
symbolic sizes (``dynamic=True``, the default) and once with a graph per size
(``dynamic=False``), and prints the graphs each compiled, their compile seconds (capture,
compile, first forward and backward), and the share of the run's time they took::

    python -m benchmarks.compile_sizes --model "transformer encoder layer" --steps 40
    python -m benchmarks.compile_sizes --model "README RNN" --steps 40
    python -m benchmarks.compile_sizes --model nn.LSTM --steps 40

Each variant runs in a fresh process (``--only``) with inductor's caches emptied, so
that one does not find the other's kernels compiled.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

import torch

import matchbox
from matchbox import MaskedBatch

MODELS = ("README RNN", "transformer encoder layer", "nn.LSTM")


class LSTMOutputs(torch.nn.Module):
    """``nn.LSTM`` on a batch, its outputs (the module's own weights stepped in the graph)."""

    def __init__(self, size: int):
        super().__init__()
        self.lstm = torch.nn.LSTM(size, size, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def model_of(name: str, size: int) -> torch.nn.Module:
    if name == "README RNN":
        from examples.readme_rnn import RNN

        return RNN(size)
    if name == "nn.LSTM":
        return LSTMOutputs(size)
    layer = torch.nn.TransformerEncoderLayer(size, 4, 2 * size, dropout=0.0, batch_first=True)
    return layer


def batches(args: argparse.Namespace) -> list[MaskedBatch]:
    rng = random.Random(0)
    low, high = args.lengths
    out = []
    for step in range(args.steps):
        batch = args.batch if (step + 1) % args.epoch else max(2, args.batch // 3)
        longest = rng.randint(low, high)
        lengths = [rng.randint(1, longest) for _ in range(batch - 1)] + [longest]
        out.append(MaskedBatch.fromlist([torch.randn(1, n, args.size) for n in lengths],
                                        (True, False)))
    return out


def run_one(args: argparse.Namespace, dynamic: bool) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = model_of(args.model, args.size)
    # A graph per size is what the fixed-size variant measures: with recompile_limit's
    # default (8) its later sizes would run eagerly and the counts would stop there.
    compiled = matchbox.compile(model, dynamic=dynamic,
                                recompile_limit=8 if dynamic else None)
    start = time.perf_counter()
    for xb in batches(args):
        out = compiled(xb)
        while out.dim() > 1:  # each example's outputs summed
            out = out.sum(-1)
        matchbox.batch_mean(out).backward()
    total = time.perf_counter() - start
    specs = compiled.specializations
    compiling = sum(s.compile_seconds for s in specs)
    print(f"{args.model}, dynamic={dynamic}: {len(specs)} graphs, compile {compiling:.1f} s "
          f"of {total:.1f} s ({100 * compiling / total:.0f}%), steady step "
          f"{1e3 * (total - compiling) / args.steps:.1f} ms")
    for s in specs:
        print(f"    {s.summary}: {s.calls} calls, {s.compile_seconds:.1f} s, {s.nodes} nodes")


#: ``python3 dev.py bench --quick``: a short run.
QUICK = ["--steps", "4"]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default=MODELS[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--epoch", type=int, default=10, help="a smaller batch every N steps")
    parser.add_argument("--lengths", type=int, nargs=2, default=(3, 40))
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", choices=("dynamic", "fixed"))
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    if args.only is not None:
        run_one(args, args.only == "dynamic")
        return ""
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.threads} thread(s); "
          f"{args.steps} steps, batch {args.batch} (every {args.epoch}th smaller), "
          f"longest length {args.lengths[0]}-{args.lengths[1]}, size {args.size}")
    for variant in ("dynamic", "fixed"):
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp())
        subprocess.run([sys.executable, "-m", "benchmarks.compile_sizes", *argv,
                        "--only", variant], check=True, env=env)
    return ""


if __name__ == "__main__":
    main()
