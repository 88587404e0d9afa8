"""A layer scoring each position against a learned query by inner product, and the rule
that runs its op on Matchbox batches: the whole of a third party's extension."""

from __future__ import annotations

import torch
from torch import nn

from matchbox.extending import implements, is_batch, op_name, static_trailing


class InnerScorer(nn.Module):
    """``(1, ..., features)`` -> ``(1, ...)``: each position's inner product with a query."""

    def __init__(self, features: int):
        super().__init__()
        self.query = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.inner(x, self.query)


@implements(torch.inner, family="similarity", batch_type="Batch")
def inner(func, input, other):
    """Along the last, static dimension of the batch ``input``, against a plain ``other``
    of that size (one query for every example): an op on each row, so it runs on the real
    rows only and padding reaches neither the result nor a gradient."""
    op = op_name(func)
    if not is_batch(input) or is_batch(other) or other.dim() != 1:
        raise NotImplementedError(f"{op}: input must be the batch and other a plain vector")
    static_trailing(op, input, 1, "the last dimension")
    rows = input.rows(1)  # (real rows, features)
    return input.from_rows(func(rows, other).unsqueeze(-1), 1).squeeze(-1)
