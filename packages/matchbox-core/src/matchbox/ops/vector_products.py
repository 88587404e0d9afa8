"""Products of vectors: ``dot``, ``vdot``, ``outer``/``ger``, ``mv`` and ``kron``.

Per example, as torch reads each example (its dimension 0 of size one included):
``dot``/``vdot`` take two 1-D tensors (a batch of one number per example, dims ``()``)
and give one number per example; ``outer``/``ger`` take two 1-D tensors, the batch
first (its dimension 0 stays the result's; a batch second too: each example's
``(1, 1)`` product); ``mv`` takes a matrix (each example a
``(1, m)`` row) and a vector.  They run as the ``einsum`` they are (``linalg.py``'s
rule: padding zeroed where a dimension is summed, each example's sizes checked).

``kron(batch, plain)``: the plain tensor of at most the batch's rank, its (aligned)
dimension 0 of size one; along a dynamic dimension each example's ``n`` positions
become ``n * q``, a real prefix again (padding filled with 0 first, the mask repeated).
A plain tensor first, or two batches, would interleave padding with real values:
refused.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _masking, _registry
from matchbox.masked_batch import MaskedBatch, normalize_dim
from matchbox.ops.linalg import einsum

FAMILY = "linalg"


def _require_ranks(op: str, names: tuple[str, ...], args: tuple[Any, ...],
                   ranks: tuple[int, ...]) -> None:
    for name, x, rank in zip(names, args, ranks):
        if not isinstance(x, (torch.Tensor, MaskedBatch)):
            raise TypeError(f"{op}: {name} must be a tensor, got {type(x).__name__}")
        if x.dim() != rank:
            what = "each example of " if isinstance(x, MaskedBatch) else ""
            raise RuntimeError(f"{op}: {what}{name} must have {rank} dimension"
                               f"{'s' if rank > 1 else ''}, got {x.dim()}")


def _same_dtype(op: str, a: Any, b: Any) -> None:
    if a.dtype != b.dtype:
        raise RuntimeError(f"{op}: expected both arguments to have the same dtype, but found "
                           f"{a.dtype} and {b.dtype}")


@_registry.implements(torch.dot, torch.Tensor.dot, torch.vdot, torch.Tensor.vdot,
                      family=FAMILY)
def dot(func, input, tensor, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    _require_ranks(op, ("input", "tensor"), (input, tensor), (1, 1))
    _same_dtype(op, input, tensor)
    if op.endswith("vdot") and input.is_complex():
        input = input.conj()
    return einsum(func, "i,i->", input, tensor)


@_registry.implements(torch.outer, torch.Tensor.outer, torch.ger, torch.Tensor.ger,
                      family=FAMILY)
def outer(func, input, vec2, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    _require_ranks(op, ("input", "vec2"), (input, vec2), (1, 1))
    if not isinstance(input, MaskedBatch):
        raise ValueError(f"{op}: vec2 is a batch, and its dimension 0 (each example's own, "
                         "of size one) would be the result's dimension 1: pass the batch as "
                         "input and transpose the result")
    if isinstance(vec2, MaskedBatch):  # (1, 1) per example: the two numbers' product
        return input.unsqueeze(1) * vec2.unsqueeze(1)
    dtype = torch.promote_types(input.dtype, vec2.dtype)
    return einsum(func, "i,j->ij", input.to(dtype), vec2.to(dtype))


@_registry.implements(torch.mv, torch.Tensor.mv, family=FAMILY)
def mv(func, input, vec, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    _require_ranks(op, ("input", "vec"), (input, vec), (2, 1))
    _same_dtype(op, input, vec)
    if not isinstance(input, MaskedBatch):
        raise ValueError(f"{op}: vec is a batch, and its dimension 0 (each example's own, of "
                         "size one) would be summed away: pass the batch as the matrix")
    return einsum(func, "ij,j->i", input, vec)


@_registry.implements(torch.kron, torch.Tensor.kron, family=FAMILY)
def kron(func, input, other, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if not isinstance(input, MaskedBatch):
        raise NotImplementedError(
            f"{op}: other is a batch: each of its positions would be repeated in blocks "
            "spaced by its own size, not by the padded one; pass the batch as input")
    if isinstance(other, MaskedBatch):
        raise NotImplementedError(f"{op}: both arguments are batches, which is not supported; "
                                  "one must be a plain tensor")
    if other.dim() > input.dim():
        raise ValueError(f"{op}: other has {other.dim()} dimensions, more than each example's "
                         f"{input.dim()}: the result's dimension 0 would not be the example's")
    aligned = other.reshape((1,) * (input.dim() - other.dim()) + tuple(other.shape))
    if aligned.size(0) != 1:
        raise ValueError(f"{op}: other's dimension 0 (aligned with each example's own, of "
                         f"size one) has size {aligned.size(0)}, which would grow it")
    dtype = torch.promote_types(input.dtype, other.dtype)
    data = _masking.fill_padding(input, 0).to(dtype)
    result = torch.kron(data, aligned.to(dtype))
    mask = input._mask
    if mask is not None:
        for d, dynamic in enumerate(input.dims, start=1):
            if dynamic and aligned.size(d) != 1:
                mask = mask.repeat_interleave(aligned.size(d), d)
    return MaskedBatch._make(_masking.guard_gradient(result, mask), mask, input.dims)


@_registry.implements(torch.linalg.vecdot, family=FAMILY)
def vecdot(func, x, y, *, dim=-1, out=None):
    """``sum(conj(x) * y)`` along ``dim``: the pointwise and sum rules of batches (each
    example's own positions summed, padding left out)."""
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if x.dtype != y.dtype:
        raise RuntimeError(f"{op}: expected x and y to have the same dtype, but found "
                           f"{x.dtype} and {y.dtype}")
    if x.is_complex():
        raise NotImplementedError(f"{op}: complex batches are not supported")
    return (x * y).sum(dim)


@_registry.implements(torch.cross, torch.Tensor.cross, torch.linalg.cross, family=FAMILY)
def cross(func, input, other, dim=None, *, out=None):
    """The cross product along ``dim``, a static dimension of size 3 of both (broadcast):
    ``a[i+1] * b[i+2] - a[i+2] * b[i+1]`` (indices mod 3, torch's formula), by rolls."""
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if dim is None:
        if func is torch.linalg.cross:
            dim = -1
        else:
            raise ValueError(f"{op}: pass dim: without it torch takes each example's first "
                             "dimension of size 3, which may differ between examples (torch "
                             "deprecates it; torch.linalg.cross takes the last)")
    if input.dtype != other.dtype:
        raise RuntimeError(f"{op}: expected both inputs to have the same dtype, but found "
                           f"{input.dtype} and {other.dtype}")
    if input.dim() != other.dim():
        raise RuntimeError(f"{op}: inputs must have the same number of dimensions, got "
                           f"{input.dim()} and {other.dim()}")
    rank = input.dim()
    d = normalize_dim(op, dim, rank)
    for name, x in (("input", input), ("other", other)):
        if isinstance(x, MaskedBatch) and (d == 0 or x.dims[d - 1]):
            raise ValueError(f"{op}: dimension {dim} of {name} must be static (of size 3), "
                             "the same in every example")
        if x.shape[d] != 3:
            raise RuntimeError(f"{op}: inputs dimension {dim} must have length 3, got "
                               f"{x.shape[d]} in {name}")
    return (input.roll(-1, d) * other.roll(-2, d)) - (input.roll(-2, d) * other.roll(-1, d))
