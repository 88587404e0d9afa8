"""``matmul`` / ``@`` of a ``PackedBatch`` with a plain matrix or vector on the right.

Semantics: each example ``(1, T_e, ..., F)`` times a shared ``(F, K)`` matrix
(or ``(F,)`` vector) contracts its last, static dimension, so every row is
multiplied on its own: one ``matmul`` on ``data``, the layout is kept.  A
product that would contract the packed dimension (a plain tensor on the
left, another batch, examples ``(1, T)``) is refused with a way out
(``as_masked``); with a ``MaskedBatch`` the mixing rule applies.
"""

from __future__ import annotations

import torch

from matchbox.extending import implements, op_name
from matchbox.packed.packed_batch import PackedBatch


@implements(torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__,
            torch.Tensor.__rmatmul__, family="linalg", batch_type="PackedBatch")
def matmul(func, input, other):
    op = op_name(func)
    if func is torch.Tensor.__rmatmul__:  # other @ input
        input, other = other, input
    if not isinstance(input, PackedBatch) or not isinstance(other, torch.Tensor) or (
            other.dim() > 2 or input.dim() < 3):
        raise NotImplementedError(
            f"{op}: a PackedBatch multiplies on the left of a plain (F, K) matrix or (F,) "
            "vector, contracting a static dimension; for other products (over the packed "
            "dimension, between batches) convert with matchbox.packed.as_masked(x)"
        )
    return PackedBatch._make(torch.matmul(input.data, other), input.layout)
