"""A list slice's start or stop that is one int per example (``items[:n]`` in ``@batch``
code, ``n`` a counter or ``int(k)``): each example slices its own items
(``sequences._own_slice``), as the loop's int does."""

from __future__ import annotations

import torch

from matchbox.control.runtime.masks import _MASK
from matchbox.control.runtime.select import user_line
from matchbox.extending import fails
from matchbox.masked_batch import MaskedBatch


def per_example_bound(index: slice) -> MaskedBatch | None:
    """A start or stop of ``index`` that is a batch (one int per example), if any."""
    for part in (index.start, index.stop):
        if type(part) is MaskedBatch:
            return part
    return None


def own_ints(value: MaskedBatch, counts: torch.Tensor) -> torch.Tensor:
    """A slice bound of one int per example as a ``(batch,)`` tensor; refused where it is
    not one or is padding for a running example (a value that example never held)."""
    if value.dims or value.data.numel() != counts.numel() or (
            value.data.dtype.is_floating_point or value.data.dtype == torch.bool
            or value.data.dtype.is_complex):
        raise TypeError(
            "slice indices must be integers or None: a batch bound of a list slice must hold "
            f"one int per example (dims == ()), got dims {value.dims} and dtype {value.dtype}")
    if value._mask is not None:
        outer = _MASK.get()
        padding = ~value._mask.reshape(-1)
        if outer is not None:
            padding = padding & outer
        line = user_line()
        if fails(padding):
            examples = padding.nonzero().flatten().tolist()
            raise ValueError(
                f"@batch: a list slice's bound is padding for examples {examples} ({line}): "
                "those examples never assigned it; in the loop over examples they would have "
                "no value")
    return value.data.reshape(-1).to(torch.int64)
