"""Norms: ``torch.norm`` (``"fro"`` and numeric orders), ``torch.linalg.vector_norm``,
``torch.linalg.norm`` and ``torch.linalg.matrix_norm``; ``renorm``, which scales by a norm.

``linalg.norm`` is the vector norm over one dimension (or, without ``dim`` and ``ord``,
over all), and the matrix norm over two; a matrix norm of ``ord='fro'`` is the vector
2-norm over both, any other runs ``torch.linalg.matrix_norm`` on the data when both
dimensions are static (no padding in either) and is refused over a dynamic one (zero
padding would change ``-1``/``-2``'s values, and ``'nuc'``/``2``'s gradients go through an
SVD of the padded matrix).

Padding becomes an element that adds nothing: 0 for orders of 0 and above, ``inf`` for
negative ones.  Orders without an identity (``inf``, and below 0) raise over an empty
example, as the loop does.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from matchbox import _lengths, _registry
from matchbox._padding import fill_padding
from matchbox.masked_batch import MaskedBatch, normalize_dim
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


def _dims(op: str, dim: Any) -> tuple[Any, ...]:
    if isinstance(dim, (tuple, list, torch.Size)):
        return tuple(dim)
    return (dim,)


def _matrix_norm(op: str, x: MaskedBatch, ord: Any, dim: tuple[Any, ...], keepdim: bool,
                 dtype: Any) -> MaskedBatch:
    if ord == "fro":
        return _norm(op, x, 2, dim, keepdim, dtype)
    reduced = reduced_dimensions(op, x, dim)
    dynamic = [d for d in reduced if x.dims[d - 1]]
    if dynamic:
        raise NotImplementedError(
            f"{op}: the matrix norm ord={ord!r} over dimension {dynamic[0]}, which is "
            "dynamic (each example's own size), is not supported: padding would enter the "
            "matrix; only ord='fro' is (or make the dimension static, every example one "
            "size, or run the norm on each example: [torch.linalg.matrix_norm(e, ord, dim) "
            "for e in x.examples()])")
    if x._mask is not None:
        # Padding positions along the other dimensions hold whole matrices of anything
        # (NaN fails torch's SVD): 0 there, their results padding.
        x = MaskedBatch._make(fill_padding(x, 0.0), x._mask, x.dims)
    # In the order given: the first is the rows' dimension, the second the columns'
    # (reduce sorts them).
    ordered = tuple(d % x.dim() for d in dim)
    return reduce(op, x, tuple(dim), keepdim,
                  lambda d, ds, k: torch.linalg.matrix_norm(d, ord, ordered, k, dtype=dtype),
                  None)


@_lengths.aware
@_registry.implements(torch.linalg.norm, family="reduction")
def linalg_norm(func, input, ord=None, dim=None, keepdim=False, *, out=None, dtype=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if dim is None:
        if ord is None or (ord == "fro" and input.dim() == 2):
            return _norm(op, input, 2, None, keepdim, dtype)
        if input.dim() == 1:  # the examples are scalars: one-element vectors
            return _norm(op, input, ord, None, keepdim, dtype)
        if input.dim() == 2:
            raise NotImplementedError(
                f"{op}: ord={ord!r} without dim is the matrix norm of each example's "
                f"{input.dim()}-D tensor, over its dimension 0 (the batch's) too, which "
                "is not supported; give dim: torch.linalg.vector_norm(x, ord, dim=-1) "
                "for the norm of the one row")
        raise RuntimeError(f"{op}: If dim is not specified but ord is, the input must be 1D "
                           f"or 2D. Got {input.dim()}D (each example's rank).")
    dims = _dims(op, dim)
    if len(dims) == 1:
        return _norm(op, input, 2 if ord is None else ord, dim if type(dim) is int else dims,
                     keepdim, dtype)
    if len(dims) == 2:
        return _matrix_norm(op, input, "fro" if ord is None else ord, dims, keepdim, dtype)
    raise RuntimeError(f"{op}: If dim is specified, it must be of length 1 or 2. Got {dim}")


@_lengths.aware
@_registry.implements(torch.linalg.matrix_norm, family="reduction")
def matrix_norm(func, A, ord="fro", dim=(-2, -1), keepdim=False, *, out=None, dtype=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    dims = _dims(op, dim)
    if len(dims) != 2:
        raise RuntimeError(f"{op}: dim must be a 2-tuple. Got {len(dims)}")
    return _matrix_norm(op, A, ord, dims, keepdim, dtype)


@_registry.implements(torch.renorm, torch.Tensor.renorm, family="reduction")
def renorm(func, input, p, dim, maxnorm, *, out=None):
    """Each slice along ``dim`` scaled down to the norm ``maxnorm`` where its own norm
    (over the example's other dimensions, its real values only) exceeds it: torch's
    formula, ``x * maxnorm / (norm + 1e-7)``, written with the batch's ``vector_norm``,
    whose derivative is torch's ``renorm_backward``."""
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if input.dim() < 2:
        raise RuntimeError(f"{op}: renorm: input needs at least 2 dimensions, got 1 "
                           "dimensions (these examples are scalars)")
    if p <= 0:
        raise RuntimeError(f"{op}: renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"{op}: renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    d = normalize_dim(op, dim, input.dim())
    others = tuple(i for i in range(1, input.dim()) if i != d)
    if others and p == math.inf:  # (no identity: torch's vector_norm raises there too)
        refuse_empty(op, input, others)
    # (over no dimension but each example's size-one dimension 0: each value's own)
    norm = torch.linalg.vector_norm(input, p, others, True) if others else input.abs()
    return input * torch.where(norm > maxnorm, maxnorm / (norm + 1e-7), 1.0)
