"""The per-example oracle for sliding-window ops (convolution, pooling) and its inputs.

PyTorch raises for an example that is empty in a spatial dimension or shorter
than the window; Matchbox's documented semantics for such an example is an
empty output (size 0 in every dynamic dimension).  ``loop_or_empty`` is the
loop with exactly that rule written out, and nothing else: any other error
of the per-example call propagates.
"""

from __future__ import annotations

import re

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from matchbox import MaskedBatch

# PyTorch's messages for an input too small for the window, per op family and backend
# (oneDNN, used for grouped transposed convolutions on the CPU, says "memory descriptor").
TOO_SHORT = re.compile(
    "Kernel size can't be greater than actual input size|Output size is too small|"
    "could not construct a memory descriptor|"
    "Invalid computed output size|Only zero batch or zero channel inputs are supported|"
    r"Expected \dD or \dD \(batch mode\) tensor")


def loop_or_empty(f, dynamic=(2,)):
    """``f`` on a batch as is; on one example, ``f`` or, where PyTorch refuses the
    example as too short, ``f``'s output emptied in the ``dynamic`` dimensions."""

    def per_example(x, *rest):
        if isinstance(x, MaskedBatch):
            return f(x, *rest)
        try:
            return f(x, *rest)
        except RuntimeError as error:
            if not TOO_SHORT.search(str(error)):
                raise
        # The shape and dtype of the output: f on an input long enough in the
        # dynamic dimensions (static ones keep their size).
        big = x.new_zeros([64 if d in dynamic else s for d, s in enumerate(x.shape)])
        return _emptied(f(big, *rest), dynamic)

    return per_example


def _emptied(y, dynamic):
    if isinstance(y, tuple):
        return tuple(_emptied(t, dynamic) for t in y)
    for dim in dynamic:
        y = y.narrow(dim, 0, 0)
    return y


def examples(sizes, channels, dtype=torch.float64, seed=0):
    """One ``(1, channels, *size)`` example per entry of ``sizes`` (ints or tuples)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, channels, *((s,) if isinstance(s, int) else s), generator=g,
                        dtype=dtype) for s in sizes]


def batch(xs, dims, padding_value=float("nan")):
    return MaskedBatch.fromlist(xs, dims, padding_value=padding_value)


class CountOps(TorchDispatchMode):
    """Records the ATen ops that run (below autograd): ``names`` after the ``with``.

    The batch must run one convolution / pooling op where the loop runs one per example.
    """

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))
