"""Eager cost of Matchbox's dispatch: single ops and two small models, training step.

Prints one JSON line of medians in µs, for comparing two checkouts run alternately on
one machine (how issue 15's refactor was checked for an eager slowdown):

    python -m benchmarks.eager_ops [batch hidden max_length]   # default 32 32 20

Small sizes (``4 8 3``) show the Python per op; the defaults, a model's.
"""

from __future__ import annotations

import gc
import json
import random
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.control_while import Halting
from examples.readme_rnn import RNN
from matchbox import MaskedBatch


def median_us(fn: Callable[[], object], repeats: int = 300, warm_up: int = 30) -> float:
    for _ in range(warm_up):
        fn()
    times = []
    gc.disable()  # a collection inside one call would be timed as the op's
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    gc.enable()
    times.sort()
    return times[len(times) // 2] * 1e6


#: ``python3 dev.py bench --quick``: batch, hidden size and longest length (positional).
QUICK = ["8", "32", "10"]


def main(argv: list[str]) -> dict[str, float]:
    batch, hidden, max_length = (int(a) for a in (argv + ["32", "32", "20"][len(argv):]))
    torch.manual_seed(0)
    random.seed(0)
    torch.set_num_threads(1)
    examples = [torch.randn(1, random.randint(1, max_length), hidden) for _ in range(batch)]
    x = MaskedBatch.fromlist(examples, (True, False))
    y = x * 1.0
    xg = MaskedBatch.fromlist([e.clone().requires_grad_() for e in examples], (True, False))
    weight = torch.randn(hidden, hidden, requires_grad=True)
    bias = torch.zeros(hidden, requires_grad=True)
    norm_weight = torch.ones(hidden, requires_grad=True)
    ops = {
        "tanh": lambda: xg.tanh(),
        "add": lambda: xg + y,
        "mul_scalar": lambda: xg * 2,
        "torch.sigmoid": lambda: torch.sigmoid(xg),
        "matmul_W": lambda: xg @ weight,
        "F.linear": lambda: F.linear(xg, weight, bias),
        "softmax_dyn": lambda: xg.softmax(1),
        "layer_norm": lambda: F.layer_norm(xg, (hidden,), norm_weight),
        "sum_dyn": lambda: xg.sum(1),
        "view": lambda: xg.transpose(1, 2),
    }
    out = {name: median_us(op) for name, op in ops.items()}

    rnn = RNN(hidden)
    halting = Halting(hidden)
    states = MaskedBatch.fromlist([torch.randn(1, hidden) for _ in range(batch)], (False,))

    def rnn_step() -> None:
        rnn.zero_grad()
        rnn(x).data.sum().backward()

    def halting_step() -> None:
        halting.zero_grad()
        halting(states).data.sum().backward()

    out["readme_rnn_train"] = median_us(rnn_step, repeats=40, warm_up=5)
    out["halting_while_train"] = median_us(halting_step, repeats=40, warm_up=5)
    return {name: round(value, 2) for name, value in out.items()}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
