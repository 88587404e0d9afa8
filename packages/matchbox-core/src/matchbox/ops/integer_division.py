"""Integer division and remainder of batches: no zero divisor where the loop divides by
nothing.

torch raises ``RuntimeError: ZeroDivisionError`` for an integer ``//``, ``%``,
``floor_divide``, ``remainder``, ``fmod`` or ``div(..., rounding_mode=...)`` by zero.
A batch divides every position of its data, and two kinds of position hold values the
loop never divides by:

- padding (``fromlist`` pads integer examples with 0): ``t // u`` of ids or counts
  ``(1, n)`` raised for every batch with examples of different lengths;
- under ``@matchbox.batch``, the examples that do not run the code at hand: the guard
  ``if n > 0: q = 12 // n`` (or ``x[:, i % n]``) left ``n == 0`` for the examples it
  excludes, and the batch raised where the loop skips them (a user trial).

There an integer divisor is read as 1: what the op gives is padding, or is discarded
when the region merges. A real zero divisor of a running example still raises, as in
the loop. Floating-point batches are left as they are (``x / 0`` is ``inf``, no error,
and their gradients are the pointwise family's).
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox._execution import and_running
from matchbox.masked_batch import MaskedBatch

# The integer divisions by name (``Tensor.__mod__`` is ``remainder``, ``__floordiv__``
# ``floor_divide``); ``div``/``divide`` divide so with a ``rounding_mode`` only.
DIVIDING = frozenset({
    "floor_divide", "floor_divide_", "remainder", "remainder_", "fmod", "fmod_",
    "__floordiv__", "__rfloordiv__", "__ifloordiv__", "__mod__", "__rmod__", "__imod__",
})


def read_zeros_as_ones(args: tuple[Any, ...], in_place: bool) -> tuple[Any, ...]:
    """``args`` with every integer batch's padding, and its rows of examples that do not
    run the code at hand, holding 1 (a copy; the batch itself is not written). The
    target of an in-place op (``args[0]``) keeps its data: it is written, and a dividend
    may be zero."""
    out = list(args)
    for k in range(1 if in_place else 0, len(args)):
        a = args[k]
        if not isinstance(a, MaskedBatch) or a._data.is_floating_point() or a._data.is_complex():
            continue
        data = a.data
        real = and_running(a._mask, data.size(0), data.dim())
        if real is None:
            continue
        filled = MaskedBatch._make(torch.where(real, data, data.new_ones(())), a._mask, a.dims)
        filled._scalar, filled._present = a._scalar, a._present  # what it stands for
        out[k] = filled
    return tuple(out)
