"""``x.size_as_tensor(d)``: each example's size along a dimension, as a batch of
per-example scalars (public as ``matchbox.size_as_tensor`` and the batch method, from
:mod:`matchbox.convenience`; here, below the ops, so that ops which build batches of the
sizes a padded size stands for can use it without importing the convenience layer)."""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _capture
from matchbox._example_scalars import SCALAR, mark
from matchbox._masking import lengths_along
from matchbox.masked_batch import MaskedBatch, normalize_dim


def size_as_tensor(x: Any, dim: int) -> Any:
    """Each example's size along ``dim``: a batch of per-example scalars (or a 0-d tensor)."""
    if not isinstance(x, MaskedBatch):
        return torch.tensor(x.size(dim), device=x.device)
    d = normalize_dim("size_as_tensor", dim, x.dim())
    batch = x.data.size(0)
    if d > 0 and x.dims[d - 1]:
        sizes = lengths_along(x, d)
    else:
        sizes = torch.full((batch,), 1 if d == 0 else x.data.size(d), device=x.device)
    _capture.note_size_bound(sizes, 1 if d == 0 else x.data.size(d))
    mask = torch.ones(batch, dtype=torch.bool, device=x.device)
    return mark(MaskedBatch._make(sizes, mask, ()), SCALAR)  # the loop's is 0-d
