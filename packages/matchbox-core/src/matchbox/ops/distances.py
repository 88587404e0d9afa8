"""Similarities and distances of two arguments: ``cosine_similarity``,
``pairwise_distance`` and ``dist`` (``F.cosine_similarity`` and ``F.pairwise_distance``
are the same callables as torch's).

Either argument, or both, may be a batch; the other may be a plain tensor, the same for
every example (a shared query).  They are aligned as a pointwise op's arguments are
(``_masking.align``: broadcast the way each example's would, sizes along dynamic
dimensions checked, masks combined with *and*), then reduced over one dimension
(``cosine_similarity``'s ``dim``, ``pairwise_distance``'s last) or every dimension
(``dist``):

- over a static dimension the op runs on the data: padding only reaches padding, and an
  argument real where the result is padding (a shared tensor) gets no gradient from
  there (``_masking.guard_wider``);
- over a dynamic dimension each example reduces over its own real positions only:
  ``cosine_similarity``'s arguments have padding filled with 0 (adding nothing to the
  norms or the dot product), ``pairwise_distance``'s and ``dist``'s difference (with
  ``eps`` added, as torch adds it) has padding filled as the norms' rule fills it (0,
  ``inf`` for negative orders; orders without an identity, ``inf`` and below 0, raise
  for an empty example as the loop does).  The fill is a ``torch.where``, so padding,
  NaN included, reaches neither a value nor a gradient.

The ops run torch's own kernels on the aligned data (``pairwise_distance`` and ``dist``
are ``norm(x1 - x2 + eps)`` and ``norm(x1 - x2)`` in ATen), so each example's value and
gradients are the loop's.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _lengths, _masking, _registry
from matchbox._arguments import example_dim
from matchbox._example_scalars import reduced_over
from matchbox._padding import _ZERO
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.reductions import reduced_layout
from matchbox.ops.reductions.norms import _norm

FAMILY = "distance"


def _aligned(op: str, x1: Any, x2: Any) -> tuple[list[Any], Any, tuple[bool, ...]]:
    """The two arguments aligned (data of batches, plain tensors as given), the result's
    mask and dims; a plain argument's gradient guarded where the result is padding."""
    args = [x1, x2]
    values, mask, dims = _masking.align(op, args)
    return _masking.guard_wider(args, values, mask, dims), mask, dims


def _scalars(op: str, dims: tuple[bool, ...], what: str) -> None:
    if not dims:
        raise ValueError(
            f"{op}: the examples are scalars (dims ()), whose only dimension is each "
            f"example's dimension 0, the batch's; {what} would reduce across the examples "
            "(give each example a feature dimension: x.unsqueeze(-1))")


@_lengths.aware
@_registry.implements(torch.cosine_similarity, family=FAMILY)
def cosine_similarity(func, x1, x2, dim=1, eps=1e-8):
    op = _registry.op_name(func)
    values, mask, dims = _aligned(op, x1, x2)
    _scalars(op, dims, "the similarity along it")
    d = example_dim(op, dim, len(dims) + 1, why="the similarity along it would mix the "
                                                 "examples")
    if mask is not None and dims[d - 1]:
        # Over a dynamic dimension: padding (and a plain tensor beyond an example's
        # length) adds nothing to the norms or the product.
        values = [torch.where(mask, v, _ZERO if v.is_floating_point() else v.new_zeros(()))
                  if isinstance(v, torch.Tensor) else v for v in values]
    result = func(values[0], values[1], d, eps)
    # The layout of the broadcast arguments, the dimension reduced.
    shape = torch.broadcast_shapes(*(v.shape for v in values))
    data = torch.empty((), device=result.device).expand(shape)
    layout = MaskedBatch._make(data, _masking.fit_mask(mask, data, dims), dims)
    mask, new_dims = reduced_layout(layout, (d,), False)
    return reduced_over(MaskedBatch._make(result, mask, new_dims), dim)


def _difference_norm(op: str, x1: Any, x2: Any, p: Any, eps: float, dim: Any,
                     keepdim: bool) -> MaskedBatch:
    """``norm(x1 - x2 + eps, p, dim, keepdim)`` (``dim``: the last, or all of them for
    ``dim=None``), each example over its own real positions."""
    values, mask, dims = _aligned(op, x1, x2)
    difference = values[0] - values[1]
    if eps:
        difference = difference + eps
    batch = MaskedBatch._make(difference, _masking.fit_mask(mask, difference, dims), dims)
    if dim is not None:
        _scalars(op, dims, "the distance along the last dimension")
        dim = len(dims)
    return _norm(op, batch, p, dim, keepdim, None)


@_lengths.aware
@_registry.implements(torch.pairwise_distance, family=FAMILY)
def pairwise_distance(func, x1, x2, p=2.0, eps=1e-6, keepdim=False):
    return _difference_norm(_registry.op_name(func), x1, x2, p, eps, -1, keepdim)


@_lengths.aware
@_registry.implements(torch.dist, torch.Tensor.dist, family=FAMILY)
def dist(func, input, other, p=2):
    return _difference_norm(_registry.op_name(func), input, other, p, 0.0, None, False)
