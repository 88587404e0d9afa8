"""Timing and reporting shared by the benchmarks: medians, ratios, Markdown."""

from __future__ import annotations

import contextlib
import gc
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent / "out"


@contextlib.contextmanager
def full_float32():
    """Compare variants in full float32 (usable as a decorator on a check).

    On Ampere and later GPUs cuDNN computes float32 convolutions and RNNs in
    TF32 by default, which rounds the batch and each example alone differently
    (differences of 1e-4); the checks are about the same mathematics, not the
    same rounding.  Timings keep PyTorch's defaults.
    """
    cudnn = torch.backends.cudnn
    saved = cudnn.allow_tf32
    cudnn.allow_tf32 = False
    try:
        yield
    finally:
        cudnn.allow_tf32 = saved


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    """Median wall time of ``fn`` (synchronising CUDA around each call)."""
    for _ in range(warmup):
        fn()
    return statistics.median(_once(fn) for _ in range(repeats))


def interleaved_medians(
    variants: dict[str, Callable[[], object]], repeats: int, warmup: int = 2
) -> dict[str, float]:
    """Median wall time of each variant, timed in alternating rounds.

    Timing the variants in turn (rather than one after the other) exposes
    them to the same drifts of a shared machine, which keeps their ratios
    steadier than their absolute times.
    """
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            times[name].append(_once(fn))
    return {name: statistics.median(t) for name, t in times.items()}


LOOP = "per-example loop"


def undecorated(method: Callable) -> Callable:
    """The user's own function behind a bound ``@matchbox.batch`` method, bound again.

    The per-example loop is what a user writes without Matchbox: the model's code as
    written, on plain tensors.  The decorated method on a plain tensor runs the rewritten
    (masked) code instead, several times the Python of the original, which made the
    loop slower than a user's loop and flattered Matchbox's speedup over it.
    """
    function = getattr(method, "__func__", method)
    original = getattr(function, "__wrapped__", function)
    owner = getattr(method, "__self__", None)
    return original if owner is None else original.__get__(owner)


def total(value: object) -> torch.Tensor:
    """The sum of everything a variant returned: a tensor, a batch (its ``data``) or a
    list or tuple of them.  A training step backpropagates it."""
    if isinstance(value, torch.Tensor):
        return value.sum()
    if isinstance(value, (list, tuple)):
        return sum((total(v) for v in value), torch.zeros(()))
    data = getattr(value, "data", None)
    if isinstance(data, torch.Tensor):
        return data.sum()
    raise TypeError(f"cannot sum a {type(value).__name__}")


def forward_and_backward(
    variants: dict[str, Callable[[], object]], repeats: int,
    loss: Callable[[str, object], torch.Tensor] | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Median seconds of each variant's forward, and of forward + backward.

    ``loss(name, output)`` makes the scalar to backpropagate (default: :func:`total`).
    The batched variants are timed in alternating rounds (their ratios are what
    matters); the per-example loop, whose heavy Python use slows whatever runs
    right after it, is timed on its own, with fewer repeats.
    """

    def step(name: str, fn: Callable[[], object]) -> Callable[[], None]:
        def forward_backward() -> None:
            output = fn()
            (total(output) if loss is None else loss(name, output)).backward()

        return forward_backward

    batched = {name: fn for name, fn in variants.items() if name != LOOP}
    forward = interleaved_medians(batched, repeats)
    both = interleaved_medians({name: step(name, fn) for name, fn in batched.items()}, repeats)
    if LOOP in variants:
        loop_repeats = max(2, repeats // 3)
        forward[LOOP] = median_seconds(variants[LOOP], loop_repeats)
        both[LOOP] = median_seconds(step(LOOP, variants[LOOP]), loop_repeats)
    return forward, both


def ratio_cells(name: str, forward: dict[str, float], both: dict[str, float],
                baseline: str) -> list[str]:
    """``[forward ms, × baseline, forward+backward ms, × baseline]`` for one variant."""
    return [f"{forward[name] * 1e3:.2f}", f"{forward[name] / forward[baseline]:.3f}",
            f"{both[name] * 1e3:.2f}", f"{both[name] / both[baseline]:.3f}"]


def _once(fn: Callable[[], object]) -> float:
    """One timed call, with the garbage of earlier calls collected beforehand
    and the collector paused (as ``timeit`` does), so that one variant's
    garbage is not charged to the next."""
    gc.collect()
    gc.disable()
    try:
        _sync()
        start = time.perf_counter()
        fn()
        _sync()
        return time.perf_counter() - start
    finally:
        gc.enable()


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
