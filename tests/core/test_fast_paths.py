"""Shortcuts of the hot paths: they must be taken where they are valid and give
what the general path gives, and must not be taken where they are not.

- Masks that are views of the same memory with one layout are one mask
  (``same_mask``): ops combine them without an ``and`` and keep them shared.
"""

from __future__ import annotations

import torch

from matchbox import MaskedBatch, _masking


def test_views_of_one_memory_are_one_mask():
    mask = torch.rand(4, 6, 1) > 0.5
    step = mask.unbind(1)[2]                      # (4, 1), strides (6, 1)
    as_rows = step.reshape(4).view(4, 1)          # (4, 1), strides (6, 6)
    assert as_rows.stride() != step.stride()
    assert _masking.same_mask(step, as_rows)
    assert _masking.combine_masks([step, None, as_rows]) is step
    assert not _masking.same_mask(step, mask.unbind(1)[3])  # another step
    assert not _masking.same_mask(step, step.clone())       # equal values, other memory
    assert not _masking.same_mask(mask[:, :2], mask[:, :3])


def test_ops_on_steps_of_one_batch_keep_sharing_its_step_mask():
    examples = [torch.randn(1, n, 2, dtype=torch.float64) for n in (3, 1, 0, 5)]
    xb = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    yb = xb * 2
    for xt, yt in zip(xb.unbind(1), yb.unbind(1)):
        assert (xt + yt)._mask is xt._mask
