"""Compile time of the README RNN under ``matchbox.compile`` at one longest length.

Issue 21: with loops captured as ``scan`` (the default where torch has it), compile time
should not grow with the sequence length.  One process per measurement, with cold
inductor caches::

    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python -m benchmarks.compile_lengths --length 16
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python -m benchmarks.compile_lengths --length 128
    MATCHBOX_COMPILE_LOOPS=unroll TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) \\
        python -m benchmarks.compile_lengths --length 16  # unrolled

Prints the first training step's compile time (capture, compile, first run), the
graph's node count and scans, and the time of a training step compiled and eager.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

import matchbox
from examples.readme_rnn import RNN
from matchbox import MaskedBatch


def step(model, batch):
    h = model(batch)
    loss = matchbox.batch_mean(h.sum(-1))
    loss.backward()


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--backend", default="inductor",
                        help="the torch.compile backend (loops are scans on any of them)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = RNN(args.hidden)
    compiled = matchbox.compile(model, backend=args.backend)
    lengths = torch.randint(1, args.length + 1, (args.batch,)).tolist()
    lengths[0] = args.length
    batch = MaskedBatch.fromlist([torch.rand(1, n, args.hidden) for n in lengths], (True, False))
    start = time.perf_counter()
    step(compiled, batch)
    first = time.perf_counter() - start
    spec = compiled.specializations[0]
    timings = {}
    for name, m in (("compiled", compiled), ("eager", model)):
        step(m, batch)
        start = time.perf_counter()
        for _ in range(args.repeats):
            step(m, batch)
        timings[name] = (time.perf_counter() - start) / args.repeats
    line = (f"length {args.length} batch {args.batch} hidden {args.hidden} "
            f"backend {args.backend} loops={os.environ.get('MATCHBOX_COMPILE_LOOPS', 'auto')} "
            f"torch {torch.__version__}: first step {first:.1f} s "
            f"(compile_seconds {spec.compile_seconds:.1f}), {spec.nodes} nodes, "
            f"scans {spec.scans}, eager_reason {spec.eager_reason}; training step "
            f"compiled {timings['compiled'] * 1e3:.1f} ms, eager {timings['eager'] * 1e3:.1f} ms "
            f"({timings['compiled'] / timings['eager']:.2f}x eager)")
    print(line)
    return line


if __name__ == "__main__":
    main()
