"""Vandermonde matrices: ``torch.vander`` and ``torch.linalg.vander``.

Each position's powers along a new last dimension: no position mixes with another, so
torch's op runs on the data and the mask gains that dimension.  Per example, as torch
reads it: ``torch.vander`` takes a 1-D tensor (a batch of one number per example, dims
``()``): each example's ``(1, N)``, ``N`` 1 by default.  ``torch.linalg.vander`` takes
``(*, n)``: each example's ``(1, ..., n, N)``, ``N`` its own ``n`` by default: along a
dynamic last dimension the new one is dynamic too (real where both powers and
positions are); ``N`` (given or not) must be at least 2 in every running example, as
torch requires.
"""

from __future__ import annotations

import torch

from matchbox import _capture, _masking, _registry
from matchbox.masked_batch import MaskedBatch

FAMILY = "linalg"


def _refuse_plain(op: str, x: object) -> MaskedBatch:
    if not isinstance(x, MaskedBatch):
        raise TypeError(f"{op}: x must be the batch, got {type(x).__name__}")
    return x


@_registry.implements(torch.vander, family=FAMILY)
def vander(func, x, N=None, increasing=False):
    op = _registry.op_name(func)
    x = _refuse_plain(op, x)
    _registry.refuse_size_number(op, "N", N)
    if x.dims != ():
        raise RuntimeError(f"{op}: x must be a one-dimensional tensor: each example has "
                           f"{x.dim()} dimensions (torch.linalg.vander takes more)")
    data = torch.vander(x.data, N=1 if N is None else N, increasing=increasing)
    mask = None if x._mask is None else x._mask.view(-1, 1)
    return MaskedBatch._make(data, mask, (False,))


@_registry.implements(torch.linalg.vander, family=FAMILY)
def linalg_vander(func, x, *, N=None):
    op = _registry.op_name(func)
    x = _refuse_plain(op, x)
    _registry.refuse_size_number(op, "N", N)
    if x.dims == ():  # each example (1,): its last dimension is its dimension 0
        if (1 if N is None else N) <= 1:
            raise RuntimeError(f"{op}: N must be greater than 1 (each example's x has size 1, "
                               "the default N)")
        data = torch.linalg.vander(x.data.unsqueeze(-1), N=N).squeeze(1)
        mask = None if x._mask is None else x._mask.view(-1, 1)
        return MaskedBatch._make(data, mask, (False,))
    dynamic = x.dims[-1] and x._mask is not None
    if N is None and dynamic:
        sizes = _masking.sizes_along(x, x.dim() - 1)
        short = _masking.running(sizes <= 1)
        _capture.check(short, lambda: RuntimeError(
            f"{op}: N must be greater than 1: example {int(short.nonzero()[0])} has size "
            f"{int(sizes[short][0])} in its last dimension, the default N"))
        data = torch.linalg.vander(x.data, N=max(x.data.size(-1), 2))
        data = data.narrow(-1, 0, x.data.size(-1))
        mask = x._mask.unsqueeze(-1) & x._mask.unsqueeze(-2)
        return MaskedBatch._make(_masking.guard_gradient(data, mask), mask, x.dims + (True,))
    if (x.data.size(-1) if N is None else N) <= 1:
        raise RuntimeError(f"{op}: N must be greater than 1, got "
                           f"{x.data.size(-1) if N is None else N}")
    data = torch.linalg.vander(x.data, N=N)
    mask = None if x._mask is None else x._mask.unsqueeze(-1)
    return MaskedBatch._make(data, mask, x.dims + (False,))
