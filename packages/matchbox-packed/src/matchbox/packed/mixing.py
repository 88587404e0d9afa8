"""``PackedBatch`` and ``MaskedBatch`` in one model: the conversion table.

| arguments of an op                                  | result                                    |
|-----------------------------------------------------|-------------------------------------------|
| ``PackedBatch`` only (with tensors, numbers)        | ``PackedBatch`` (computed on the packed rows) |
| ``PackedBatch`` and ``MaskedBatch``, in any order   | ``MaskedBatch``: each ``PackedBatch`` is converted with ``to_masked()`` first |
| a reduction or ``max``/``min`` over the packed dimension 1 | ``MaskedBatch`` of static examples (no padding) |
| ``nn.RNN``/``nn.LSTM``/``nn.GRU`` on a ``PackedBatch`` | ``PackedBatch`` output; final states: views of a ``MaskedBatch`` |
| an op ``PackedBatch`` does not implement            | ``NotImplementedError`` naming it: convert with ``as_masked(x)`` |

In words: the result is a ``MaskedBatch`` unless every batch argument is
packed.  The rule holds whichever argument comes first: ``masked + packed``
reaches ``MaskedBatch``'s dispatch, which converts the packed argument through
the conversion registered here with matchbox-core
(``register_conversion``); ``packed + masked`` reaches
``PackedBatch``'s, which hands the call to ``MaskedBatch``'s.  A converted
batch's data is padded with zeros, and batches converted from one layout share
one mask.

Explicit conversions, for either batch type and for plain tensors (a plain
tensor is one example, so per-example code runs unchanged on it):

- :func:`as_masked`: ``PackedBatch`` -> ``to_masked()``; ``MaskedBatch`` and
  tensors unchanged.
- :func:`as_packed`: ``MaskedBatch`` -> ``PackedBatch.from_masked``;
  ``PackedBatch`` and tensors unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox.extending import MaskedBatch, register_conversion
from matchbox.packed.packed_batch import PackedBatch

__all__ = ["as_masked", "as_packed"]


def as_masked(x: Any) -> Any:
    """``x`` as a ``MaskedBatch`` (a ``PackedBatch`` is converted; a tensor is returned as is)."""
    if isinstance(x, PackedBatch):
        return x.to_masked()
    if isinstance(x, (MaskedBatch, torch.Tensor)):
        return x
    raise TypeError(f"as_masked: expected a PackedBatch, a MaskedBatch or a tensor, got "
                    f"{type(x).__name__}")


def as_packed(x: Any, dim: int = 1) -> Any:
    """``x`` as a ``PackedBatch`` packed along ``dim`` (a tensor is returned as is)."""
    if isinstance(x, MaskedBatch):
        return PackedBatch.from_masked(x, dim)
    if isinstance(x, (PackedBatch, torch.Tensor)):
        return x
    raise TypeError(f"as_packed: expected a MaskedBatch, a PackedBatch or a tensor, got "
                    f"{type(x).__name__}")


register_conversion(PackedBatch, "MaskedBatch", PackedBatch.to_masked)
