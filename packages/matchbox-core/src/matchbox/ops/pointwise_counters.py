"""A pointwise op between a ``@batch`` counter and a plain integer tensor, without the
general rule's alignment (``ops/pointwise.py`` runs it first for such pairs)."""

from __future__ import annotations

from typing import Any

import torch

from matchbox.masked_batch import MaskedBatch


def with_counter(func: Any, a: Any, b: Any) -> MaskedBatch | None:
    """``slots == top``: a plain integer (or bool) tensor of examples' shape ``(1, ...)``
    and a batch of per-example ints without padding (a ``@batch`` counter), in either
    order, as the general rule would align them (the batch's ints viewed ``(batch, 1,
    ...)``), without aligning: the one-hot idiom of a stack pointer, run every step.
    ``None`` for any other pair."""
    batch, plain = (a, b) if type(a) is MaskedBatch else (b, a)
    if (type(batch) is not MaskedBatch or type(plain) is not torch.Tensor or batch.dims
            or batch._mask is not None or batch._deferred_guard is not None
            or plain.dim() < 2 or plain.size(0) != 1
            or plain.dtype not in _COUNTER_DTYPES or batch._data.dtype not in _COUNTER_DTYPES):
        return None
    ones = (1,) * (plain.dim() - 1)
    data = batch._data.view(-1, *ones)
    result = func(data, plain) if batch is a else func(plain, data)
    return MaskedBatch._make(result, None, (False,) * len(ones))


_COUNTER_DTYPES = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                             torch.bool})
