"""Reductions across the examples of a batch (the batch dimension itself)."""

from __future__ import annotations

from typing import Any

import torch

from matchbox._absent import refuse_absent
from matchbox._masking import fill_padding
from matchbox.masked_batch import MaskedBatch


def batch_sum(x: Any) -> torch.Tensor:
    """The sum over examples of every real value: a plain tensor.

    For a batch of per-example losses, ``batch_sum(loss).backward()`` equals
    calling ``backward()`` on each example's loss in a loop.  A batch with an absent
    example (a step past its end, outside ``@matchbox.batch``) is refused
    (``matchbox._absent``).
    """
    if isinstance(x, torch.Tensor):
        return x.sum()
    if not isinstance(x, MaskedBatch):
        # Another batch type (PackedBatch): each example's sum is a MaskedBatch of scalars.
        x = x.sum()
    refuse_absent(x, "matchbox.batch_sum")
    return fill_padding(x, 0).sum()


def batch_mean(x: Any) -> torch.Tensor:
    """The mean over examples of a batch of per-example scalars: a plain tensor."""
    if isinstance(x, torch.Tensor):
        return x.mean()
    if not isinstance(x, MaskedBatch):
        raise ValueError(
            "batch_mean: expected a batch of per-example scalars (dims == ()), got a "
            f"{type(x).__name__}; reduce each example first"
        )
    if x.dims:
        raise ValueError(
            "batch_mean: expected a batch of per-example scalars (dims == ()), got dims "
            f"{x.dims}; reduce each example first"
        )
    refuse_absent(x, "matchbox.batch_mean")
    return batch_sum(x) / x.mask.sum().to(x.dtype)
