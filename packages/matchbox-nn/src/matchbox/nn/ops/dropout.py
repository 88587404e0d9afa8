"""Dropout in all its forms (``dropout``, ``dropout1d/2d/3d``, ``alpha_dropout``,
``feature_alpha_dropout``, their ``torch.*`` and in-place variants; ``nn.Dropout`` & co),
one rule for every batch type (registered for ``"Batch"``).

Semantics: one call of the op on the batch's values (``positions()``: a
``MaskedBatch``'s padded data, a ``PackedBatch``'s rows); the result keeps the
layout.

- In eval mode (``training=False``) or with ``p=0`` the op returns its input
  (or an exact copy), so the batch equals the loop exactly.
- In training the one call draws an independent random number per position
  (per channel for the feature variants), so every example gets its own mask,
  independent of the others, with the loop's distribution; the random numbers
  themselves differ from a loop's (one draw for the batch, not one per
  example).  Padding is dropped or kept like any position and stays padding.
- The feature variants read the rank to find the channels: a ``MaskedBatch``'s
  data has the rank of each example, so PyTorch interprets the channel
  dimension the same way in both (a channel is a channel of one example).  A
  batch type whose data has another rank (``PackedBatch``'s rows) refuses them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from matchbox.extending import (
    has_zero_padding,
    implements,
    mark_zero_padding,
    only_input_batched,
    op_name,
    unsupported,
)

DROPOUT_OPS = (
    F.dropout, F.alpha_dropout, torch.dropout, torch.dropout_, torch.alpha_dropout,
    torch.alpha_dropout_,
)
# Dropout of whole channels: PyTorch finds them by the input's rank.
FEATURE_DROPOUT_OPS = (
    F.dropout1d, F.dropout2d, F.dropout3d, F.feature_alpha_dropout, torch.feature_dropout,
    torch.feature_dropout_, torch.feature_alpha_dropout, torch.feature_alpha_dropout_,
)
# Those that scale each value (zero stays zero, the derivative is the finite scale):
# a batch with zeros at padding keeps them, and the record of it, so that a linear
# layer after the dropout need not zero them again (``_real_rows.batch_rows``).  Not
# the alpha variants, which move zero to the dropped value's affine image.
ZERO_KEEPING = (F.dropout, torch.dropout, F.dropout1d, F.dropout2d, F.dropout3d,
                torch.feature_dropout)


@implements(*DROPOUT_OPS, *FEATURE_DROPOUT_OPS, family="dropout", batch_type="Batch")
def dropout(func, input, *args, **kwargs):
    # p (and training) as torch takes them: positional after the input, or by keyword.
    only_input_batched(op_name(func), input, **dict(zip(("p", "training"), args)), **{
        k: v for k, v in kwargs.items() if k in ("p", "training", "train")})
    if func in FEATURE_DROPOUT_OPS and input.data.dim() != input.dim():
        raise unsupported(func, type(input).__name__)
    values = input.positions()
    out = func(values, *args, **kwargs)
    if out is values:  # eval mode, or written in place: the input itself, as torch gives
        return input
    result = input.from_positions(out)
    if func in ZERO_KEEPING and has_zero_padding(input):
        mark_zero_padding(result)
    return result
