"""``F.linear`` / ``nn.Linear``: a product with a shared weight (see core's linalg)."""

from __future__ import annotations

import torch.nn.functional as F

from matchbox import _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.linalg import matmul_batches


@_registry.implements(F.linear, family="linear")
def linear(func, input, weight, bias=None):
    op = _registry.op_name(func)
    if isinstance(weight, MaskedBatch) or isinstance(bias, MaskedBatch):
        raise NotImplementedError(f"{op}: a batch as weight or bias is not supported")
    out = matmul_batches(op, input, weight.t())
    return out if bias is None else out + bias



