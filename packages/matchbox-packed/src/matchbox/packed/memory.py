"""Bytes held by a batch, and what a ``MaskedBatch`` of the same examples would hold.

A ``PackedBatch`` holds ``sum(lengths)`` rows plus its layout (``batch_sizes``
and the two permutations); a ``MaskedBatch`` of the same examples holds
``batch * longest`` rows plus its mask (one byte per position, none when no
example is shorter than the longest).  :func:`memory_report` puts the two side
by side without building the padded batch.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from matchbox.extending import MaskedBatch
from matchbox.packed.packed_batch import PackedBatch

__all__ = ["MemoryReport", "memory_report", "nbytes"]


def _tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def nbytes(x: Any) -> int:
    """Bytes of the tensors a batch (or a tensor) holds: data, and mask or layout."""
    if isinstance(x, torch.Tensor):
        return _tensor_bytes(x)
    if isinstance(x, MaskedBatch):
        return _tensor_bytes(x.data) + (0 if x._mask is None else _tensor_bytes(x._mask))
    if isinstance(x, PackedBatch):
        layout = x.layout
        # batch_sizes, sorted_indices and unsorted_indices (int64), as a PackedSequence.
        return _tensor_bytes(x.data) + 8 * (layout.max_length + 2 * layout.batch_size)
    raise TypeError(f"nbytes: expected a batch or a tensor, got {type(x).__name__}")


@dataclasses.dataclass(frozen=True)
class MemoryReport:
    """A ``PackedBatch`` beside a ``MaskedBatch`` of the same examples."""

    real_rows: int
    padded_rows: int
    packed_bytes: int
    masked_bytes: int

    @property
    def ratio(self) -> float:
        """``masked_bytes / packed_bytes``: how much more the padded batch holds."""
        return self.masked_bytes / self.packed_bytes if self.packed_bytes else math.nan

    def __str__(self) -> str:
        return (f"PackedBatch: {self.real_rows} rows, {self.packed_bytes} bytes; MaskedBatch: "
                f"{self.padded_rows} rows, {self.masked_bytes} bytes ({self.ratio:.2f}x)")


def memory_report(x: PackedBatch) -> MemoryReport:
    """Bytes of ``x`` and of ``x.to_masked()``, computed without padding anything."""
    if not isinstance(x, PackedBatch):
        raise TypeError(f"memory_report: expected a PackedBatch, got {type(x).__name__}")
    layout = x.layout
    padded_rows = layout.batch_size * layout.max_length
    row_bytes = x.data[0:0].element_size() * math.prod(x.data.shape[1:])
    padding = bool((layout.lengths != layout.max_length).any())
    mask_bytes = padded_rows if padding else 0  # torch.bool: one byte per position
    return MemoryReport(layout.n_rows, padded_rows, nbytes(x), padded_rows * row_bytes + mask_bytes)
