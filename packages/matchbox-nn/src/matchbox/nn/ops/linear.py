"""``F.linear`` / ``nn.Linear``: a product with a shared weight and bias.

Semantics: rows keep their mask (the feature dimension, the last, is static).
The weight's and the bias's gradients sum over every row, so padding must not
take part: the product runs on the real rows only (gathered once, scattered
back with zeros at padding, see ``matchbox._masking.real_rows``), so padding is
never read, gets no gradient, and costs no work.
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
    rows = _masking.real_rows(input)
    data = func(_masking.pack_rows(input.data, rows), weight, bias)
    data = _masking.unpack_rows(data, rows, input.data.shape[:-1])
    return MaskedBatch._make(data, input._mask, input.dims)
