"""Issue 22 on a GPU: ``@batch`` with masks read on the host (skipping, with syncs) and
without (the default on an accelerator), against hand-written code and the loop.

Training step (forward + backward) ms, peak MiB above the inputs, host syncs and ATen
ops per forward, for the README RNN, the halting ``while`` and the TreeLSTM (uniform
and skewed trees), batch 128 by default:

    python -m benchmarks.control_gpu [--device cuda] [--batch 128]

Not yet run on a GPU by the session that wrote it (its device machine received
another checkout); on the CPU it runs, slowly, with ``--device cpu --batch 4``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from benchmarks.control_costs import count
from benchmarks.control_rnn import hand_padded
from benchmarks.control_while import Halting, hand_written
from benchmarks.treelstm import LIMIT, LOOP, build
from examples.readme_rnn import RNN
from matchbox import MaskedBatch
from matchbox._masking import host_reads

dev = "cuda"
B = 128


def sync() -> None:
    if dev == "cuda":
        torch.cuda.synchronize()

def out(y):  # noqa: ANN001, ANN201
    return y.data if type(y).__name__ == "MaskedBatch" else y

def timed(fn, n):  # noqa: ANN001, ANN201
    def step():  # noqa: ANN202
        out(fn()).sum().backward()
    step()
    sync()
    ts = []
    for _ in range(n):
        sync()
        t = time.perf_counter()
        step()
        sync()
        ts.append(time.perf_counter() - t)
    if dev != "cuda":
        return statistics.median(ts) * 1e3, float("nan")
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    sync()
    return statistics.median(ts) * 1e3, (torch.cuda.max_memory_allocated() - base) / 2**20

def models():  # noqa: ANN201
    rng = random.Random(0)
    torch.manual_seed(0)
    lengths = [rng.randint(5, 60) for _ in range(B)]
    rnn = RNN(64).to(dev)
    xb = MaskedBatch.fromlist([torch.randn(1, n, 64, device=dev) for n in lengths],
                              (True, False))
    lt = torch.tensor(lengths, device=dev)
    hal = Halting(64).to(dev)
    hb = MaskedBatch.fromlist([torch.randn(1, 64, device=dev) * 2 for _ in range(B)], (False,))
    res = {"README RNN": {"@batch": lambda: rnn(xb),
                          "hand": lambda: hand_padded(rnn, xb.data, lt)},
           "halting while": {"@batch": lambda: hal(hb),
                             "hand": lambda: hand_written(hal, hb.data)}}
    for skew, lo, hi in (("uniform", 3, 30), ("skewed", 3, 60)):
        r = random.Random(1)
        sizes = [r.randint(lo, hi) if skew == "uniform" else
                 (r.randint(3, 8) if r.random() < 0.9 else r.randint(40, 60)) for _ in range(B)]
        t = build(sizes, 64, dev)
        res[f"TreeLSTM {skew}"] = {"@batch": t["Matchbox"], "hand": t[LIMIT], "loop": t[LOOP]}
    return res


#: ``python3 dev.py bench --quick``: a small batch.
QUICK = ["--batch", "8"]


def main(argv: list[str] | None = None) -> None:
    global dev, B
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args(argv)
    dev, B = args.device, args.batch
    name = torch.cuda.get_device_name() if dev == "cuda" else "CPU"
    print(name, torch.__version__, f"batch {B}", flush=True)
    for name, v in models().items():
        n = 3 if "Tree" in name else 10
        row = [name]
        for label, reads in (("no reads (accelerator default)", False), ("reads", True)):
            with host_reads(reads):
                c = count(v["@batch"])
                ms, mib = timed(v["@batch"], n)
            row.append(f"{label}: {ms:.1f} ms {mib:.1f} MiB {c.syncs} syncs {c.total} ops")
        hc = count(v["hand"])
        ms, mib = timed(v["hand"], n)
        row.append(f"hand: {ms:.1f} ms {mib:.1f} MiB {hc.syncs} syncs {hc.total} ops")
        if "loop" in v:
            ms, mib = timed(v["loop"], 1)
            row.append(f"loop: {ms:.1f} ms")
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
