"""``addmm``, ``addmv`` and ``baddbmm``: ``beta * input + alpha * product``, the product by
``matmul``'s rule for batches (``linalg.py``: padding zeroed where it is summed, each
example's own product) and the sum by the pointwise rule.  ``beta=0`` leaves ``input``
out, so NaN or inf in it does not reach the result, as in torch.  Each example must have
the ranks torch requires of the loop's matrices (2 and 2, 2 and 1, 3 and 3), and
``input`` must broadcast to the product, not grow it.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.linalg import _refuse_out_dtype, matmul_batches

FAMILY = "linalg"


def _add_product(func: Any, input: Any, left: Any, right: Any, ranks: tuple[int, int],
                 names: tuple[str, str], beta: Any, alpha: Any, out: Any) -> Any:
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    for name, x, rank in zip(names, (left, right), ranks):
        if x.dim() != rank:
            what = "each example of " if isinstance(x, MaskedBatch) else ""
            raise RuntimeError(f"{op}: {what}{name} must have {rank} dimensions, got "
                               f"{x.dim()}")
    product = matmul_batches(op, left, right)
    result = product if alpha == 1 else product * alpha
    if beta != 0:
        result = (input if beta == 1 else input * beta) + result
        if result.dim() != product.dim() or _grown(result, product):
            raise RuntimeError(
                f"{op}: input (each example's shape {_shape(input)}) does not broadcast to "
                f"the product's {_shape(product)}, as torch requires")
    return result


def _shape(x: Any) -> tuple[int, ...]:
    return (1, *x.data.shape[1:]) if isinstance(x, MaskedBatch) else tuple(x.shape)


def _grown(result: Any, product: Any) -> bool:
    """Whether the sum grew a static dimension of the product (a dynamic one: the pointwise
    rule has checked each example's lengths)."""
    if not isinstance(product, MaskedBatch):
        return tuple(result.shape) != tuple(product.shape) if isinstance(
            result, torch.Tensor) else False
    return any(not dynamic and result.data.size(i) != product.data.size(i)
               for i, dynamic in enumerate(product.dims, start=1))


@_registry.implements(torch.addmm, torch.Tensor.addmm, family=FAMILY)
def addmm(func, input, mat1, mat2, *, beta=1, alpha=1, out=None, out_dtype=None):
    _refuse_out_dtype(func, out_dtype)
    return _add_product(func, input, mat1, mat2, (2, 2), ("mat1", "mat2"), beta, alpha, out)


@_registry.implements(torch.addmv, torch.Tensor.addmv, family=FAMILY)
def addmv(func, input, mat, vec, *, beta=1, alpha=1, out=None):
    return _add_product(func, input, mat, vec, (2, 1), ("mat", "vec"), beta, alpha, out)


@_registry.implements(torch.baddbmm, torch.Tensor.baddbmm, family=FAMILY)
def baddbmm(func, input, batch1, batch2, *, beta=1, alpha=1, out=None, out_dtype=None):
    _refuse_out_dtype(func, out_dtype)
    return _add_product(func, input, batch1, batch2, (3, 3), ("batch1", "batch2"), beta,
                        alpha, out)
