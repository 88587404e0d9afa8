"""``F.linear`` / ``nn.Linear``: a product with a shared weight and bias.

Semantics: rows keep their mask (the feature dimension, the last, is static).
The weight's and the bias's gradients sum over every row, so padding rows are
zeroed before the product and their gradient is dropped after it: one guard
serves product and bias together (cheaper than ``x @ W.t() + b`` in core ops).
"""

from __future__ import annotations

import torch.nn.functional as F

from matchbox import _masking, _registry
from matchbox.masked_batch import MaskedBatch


@_registry.implements(F.linear, family="linear")
def linear(func, input, weight, bias=None):
    op = _registry.op_name(func)
    if not isinstance(input, MaskedBatch) or isinstance(weight, MaskedBatch) or isinstance(
        bias, MaskedBatch
    ):
        raise NotImplementedError(f"{op}: only the input may be a batch (weight and bias are "
                                  "shared by every example)")
    if input.dims[-1]:
        raise ValueError(f"{op}: the feature dimension (the last) of the input is dynamic; "
                         "a linear layer needs it static")
    data = func(_masking.fill_padding(input, 0), weight, bias)
    return MaskedBatch._make(_masking.guard_gradient(data, input._mask), input._mask, input.dims)
