"""Dropout in all its forms (``dropout``, ``dropout1d/2d/3d``, ``alpha_dropout``,
``feature_alpha_dropout``, their ``torch.*`` and in-place variants; ``nn.Dropout`` & co).

Semantics: one call of the op on the batch data; the result keeps the mask.

- In eval mode (``training=False``) or with ``p=0`` the op returns its input
  (or an exact copy), so the batch equals the loop exactly.
- In training the one call draws an independent random number per position
  (per channel for the feature variants), so every example gets its own mask,
  independent of the others, with the loop's distribution; the random numbers
  themselves differ from a loop's (one draw for the batch, not one per
  example).  Padding is dropped or kept like any position and stays padding.
- The feature variants read the same rank as the loop does: each example
  has the batch's rank, so PyTorch interprets the channel dimension the same
  way in both (a channel is a channel of one example).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from matchbox import _registry
from matchbox.masked_batch import MaskedBatch

DROPOUT_OPS = (
    F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout,
    torch.dropout, torch.dropout_, torch.alpha_dropout, torch.alpha_dropout_,
    torch.feature_dropout, torch.feature_dropout_, torch.feature_alpha_dropout,
    torch.feature_alpha_dropout_,
)


@_registry.implements(*DROPOUT_OPS, family="dropout")
def dropout(func, input, *args, **kwargs):
    if not isinstance(input, MaskedBatch):
        raise TypeError(f"{_registry.op_name(func)}: the input must be the MaskedBatch; got "
                        f"{type(input).__name__}")
    out = func(input.data, *args, **kwargs)
    if out is input.data:  # eval mode, or written in place: the input itself, as torch gives
        return input
    return MaskedBatch._make(out, input._mask, input.dims)
