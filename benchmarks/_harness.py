"""Timing and reporting shared by the benchmarks: medians, ratios, Markdown."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent / "out"


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    """Median wall time of ``fn`` (synchronising CUDA around each call)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync()
        start = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def machine() -> str:
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    return (f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
            f"{device}; Python {platform.python_version()}, torch {torch.__version__}")


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def write(name: str, text: str) -> Path:
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.md"
    path.write_text(text + "\n")
    return path
