"""Vector norms: ``torch.norm`` (``"fro"`` and numeric orders) and
``torch.linalg.vector_norm``.

Padding becomes an element that adds nothing: 0 for orders of 0 and above, ``inf`` for
negative ones.  Orders without an identity (``inf``, and below 0) raise over an empty
example, as the loop does.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from matchbox import _lengths, _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.reductions._reduce import reduce, reduced_dimensions, refuse_empty


def _norm(op: str, x: MaskedBatch, order: Any, dim: Any, keepdim: bool, dtype: Any):
    if isinstance(order, bool) or not isinstance(order, (int, float)):
        raise NotImplementedError(f"{op}: order {order!r} is not supported")
    # Padding becomes 0, which no norm of order >= 0 counts.  A negative order
    # (-inf included: the smallest magnitude) sums |x|^order, to which 0
    # contributes inf: there padding becomes +inf, which contributes 0.
    fill = math.inf if order < 0 else 0
    if order < 0 or order == math.inf:
        # These orders have no identity: torch refuses an empty dimension.
        refuse_empty(op, x, reduced_dimensions(op, x, dim))
    return reduce(op, x, dim, keepdim,
                  lambda d, ds, k: torch.linalg.vector_norm(d, order, ds, k, dtype=dtype), fill)


@_lengths.aware
@_registry.implements(torch.norm, torch.Tensor.norm, family="reduction")
def norm(func, input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    op = _registry.op_name(func)
    # torch.norm is Python code that forwards out= (usually None) to us.
    _registry.refuse_out(op, out)
    # "fro" is the 2-norm of the flattened reduced; "nuc" (a matrix norm) is not supported.
    return _norm(op, input, 2 if p in ("fro", None) else p, dim, keepdim, dtype)


@_lengths.aware
@_registry.implements(torch.linalg.vector_norm, family="reduction")
def vector_norm(func, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    return _norm(_registry.op_name(func), x, ord, dim, keepdim, dtype)
