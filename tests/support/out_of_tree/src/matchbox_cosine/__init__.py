"""A layer scoring each position against a learned query by cosine similarity, and the
rule that runs its op on Matchbox batches: the whole of a third party's extension."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from matchbox.extending import implements, is_batch, op_name, static_trailing


class CosineScorer(nn.Module):
    """``(1, ..., features)`` -> ``(1, ...)``: each position's cosine with a query."""

    def __init__(self, features: int):
        super().__init__()
        self.query = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return F.cosine_similarity(x, self.query, dim=-1)


@implements(torch.cosine_similarity, family="similarity", batch_type="Batch")
def cosine_similarity(func, x1, x2, dim=1, eps=1e-8):
    """Along the last, static dimension of the batch ``x1``, against a plain ``x2`` of that
    size (one query for every example): an op on each row, so it runs on the real rows only
    and padding reaches neither the result nor a gradient."""
    op = op_name(func)
    if not is_batch(x1) or is_batch(x2):
        raise NotImplementedError(f"{op}: x1 must be the batch and x2 a plain tensor")
    if dim not in (-1, x1.dim() - 1):
        raise NotImplementedError(f"{op}: only dim=-1 (the features) is supported; got {dim}")
    static_trailing(op, x1, 1, "dim=-1")
    rows = x1.rows(1)  # (real rows, features)
    return x1.from_rows(func(rows, x2, dim=-1, eps=eps), 1)
