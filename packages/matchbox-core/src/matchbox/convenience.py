"""Convenience methods, defined for batches and for plain tensors of batch size one.

Code written for one example runs unchanged on a ``MaskedBatch`` and on a
plain tensor; these helpers say what a model means (a fresh state per example,
heads split out of a feature dimension, a causal attention mask) in a way
that works for both.  They are installed as methods on ``MaskedBatch`` and on
``torch.Tensor`` (new names only: no torch behaviour changes).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from matchbox import _capture
from matchbox._autograd_function import grad_enabled, refuse_untracked
from matchbox._op_table import declare_convenience
from matchbox._size_tensors import size_as_tensor
from matchbox.masked_batch import MaskedBatch, normalize_dim
from matchbox.ops.constructors import new_batch
from matchbox.ops.shape import reshape_batch


def _batch_new(x: Any, sizes: tuple[Any, ...], factory: Any, op: str) -> Any:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    if isinstance(x, MaskedBatch):
        return new_batch(op, x, (1, *sizes),
                         lambda shape: factory(shape, dtype=x.dtype, device=x.device))
    plain = [int(s) for s in sizes]
    return factory((1, *plain), dtype=x.dtype, device=x.device)


def batch_zeros(x: Any, *sizes: Any) -> Any:
    """Zeros of shape ``(1, *sizes)`` for each example (a fresh per-example state)."""
    return _batch_new(x, sizes, torch.zeros, "batch_zeros")


def batch_ones(x: Any, *sizes: Any) -> Any:
    """Ones of shape ``(1, *sizes)`` for each example."""
    return _batch_new(x, sizes, torch.ones, "batch_ones")


def batch_empty(x: Any, *sizes: Any) -> Any:
    """Uninitialised values of shape ``(1, *sizes)`` for each example."""
    return _batch_new(x, sizes, torch.empty, "batch_empty")


def maxsize(x: Any, dim: int | None = None) -> Any:
    """The padded size of ``dim`` (for a tensor, its size); without ``dim``, the padded
    size of every dimension as a ``torch.Size`` (dimension 0: the batch size), as the
    original Matchbox gave it."""
    return x.maxsize(dim) if isinstance(x, MaskedBatch) else x.size(dim)


def _example_shape(x: Any) -> list[int]:
    if isinstance(x, MaskedBatch):
        return [1] + [-1 if d else x.data.size(i) for i, d in enumerate(x.dims, start=1)]
    return list(x.shape)


def split_dim(x: Any, dim: int, split_by: int) -> Any:
    """Split static dimension ``dim`` of size ``s`` into ``(s // split_by, split_by)``.

    The original Matchbox's order: ``x.split_dim(-1, n_heads)`` gives
    ``(1, T, D // n_heads, n_heads)``, the heads last.  ``split_dim(0, n)`` on a
    batch of ``B * n`` examples undoes ``join_dims(0, d)``: each run of ``n``
    consecutive examples becomes one example with a new static dimension 1 of
    size ``n`` (they must have the same sizes).  On a plain tensor both are the
    plain reshape.
    """
    if isinstance(split_by, bool) or not isinstance(split_by, int) or split_by < 1:
        raise TypeError(f"split_dim: split_by must be a positive int (the size of the second "
                        f"new dimension), got {split_by!r}")
    d = normalize_dim("split_dim", dim, x.dim())
    if isinstance(x, MaskedBatch):
        if not grad_enabled():
            refuse_untracked("split_dim", (x,))
        if d == 0:
            return _split_batch(x, split_by)
        if x.dims[d - 1]:
            raise ValueError(f"split_dim: dimension {d} is dynamic; only static dimensions split")
    shape = _example_shape(x)
    if shape[d] % split_by:
        raise ValueError(
            f"split_dim: dimension {d} has size {shape[d]}, not divisible by {split_by}"
        )
    new = shape[:d] + [shape[d] // split_by, split_by] + shape[d + 1:]
    if isinstance(x, MaskedBatch):
        return reshape_batch("split_dim", x, new)
    return x.reshape(new)


def join_dims(x: Any, dim1: int, dim2: int) -> Any:
    """Merge ``dim2`` into ``dim1`` (moving it next to ``dim1`` first): ``dim1`` is the
    major one.

    ``join_dims(0, d)`` on a batch merges static dimension ``d`` into the batch:
    ``B`` examples with ``d`` of size ``N`` become ``B * N`` examples, example
    ``b``'s slice ``n`` the example ``b * N + n`` (as the original Matchbox
    ordered them), each with ``b``'s sizes.  On a plain tensor this is the
    plain reshape, ``(1, ..., N, ...) -> (N, ...)``.
    """
    rank = x.dim()
    d1 = normalize_dim("join_dims", dim1, rank)
    d2 = normalize_dim("join_dims", dim2, rank)
    if d1 == d2:
        raise ValueError(f"join_dims: dimensions {dim1} and {dim2} are the same")
    if isinstance(x, MaskedBatch) and not grad_enabled():
        refuse_untracked("join_dims", (x,))
    if isinstance(x, MaskedBatch) and 0 in (d1, d2):
        if d1 != 0:
            raise ValueError(
                f"join_dims({dim1}, {dim2}): merging the batch dimension into dimension {d1} "
                f"would mix examples; join_dims(0, {dim1}) makes each slice of dimension {d1} "
                "an example of its own"
            )
        return _join_batch(x, d2)
    if isinstance(x, MaskedBatch) and x.dims[d2 - 1]:
        # (flatten's own error would name flatten, which the user did not call)
        raise ValueError(
            f"join_dims({dim1}, {dim2}): dimension {d2} is dynamic and would be the minor "
            "of the merged dimension: padding would fall between each example's real "
            f"values; only the major (first) dimension may be dynamic: join_dims({dim2}, "
            f"{dim1}) keeps it major")
    if d2 != d1 + 1:
        order = [n for n in range(rank) if n != d2]
        order.insert(order.index(d1) + 1, d2)
        x = x.permute(*order)
        d1 = order.index(d1)
    return x.flatten(d1, d1 + 1)


def _join_batch(x: MaskedBatch, d: int) -> MaskedBatch:
    """``join_dims(0, d)`` of a batch: every slice of static dimension ``d`` an example."""
    if x.dims[d - 1]:
        raise ValueError(
            f"join_dims(0, {d}): dimension {d} is dynamic; only a static dimension can join "
            "the batch (each of its slices becomes an example, so it needs one size)"
        )
    batch, n = x.data.size(0), x.data.size(d)
    data = x.data.movedim(d, 1)
    data = data.reshape(batch * n, *data.shape[2:])
    dims = x.dims[:d - 1] + x.dims[d:]
    mask = x._mask
    if mask is not None:
        # Every slice of example b keeps b's mask: b's rows, each repeated n times.
        mask = mask.movedim(d, 1)
        mask = mask.expand(batch, n, *mask.shape[2:]).reshape(batch * n, *mask.shape[2:])
    return MaskedBatch._make(data, mask, dims)


def _split_batch(x: MaskedBatch, n: int) -> MaskedBatch:
    """``split_dim(0, n)`` of a batch: each run of ``n`` examples one example."""
    batch = x.data.size(0)
    if batch % n:
        raise ValueError(
            f"split_dim(0, {n}): the batch has {batch} examples, not divisible by {n}"
        )
    data = x.data.reshape(batch // n, n, *x.data.shape[1:])
    mask = x._mask
    if mask is not None:
        grouped = mask.reshape(batch // n, n, *mask.shape[1:])
        mask = grouped[:, :1]
        if _capture.fails(grouped != mask.expand_as(grouped)):
            # One device sync, as other shape checks on per-example sizes pay.
            raise ValueError(
                f"split_dim(0, {n}): the examples joined into one differ in their real "
                f"positions (each run of {n} consecutive examples becomes one example, with "
                "a new static dimension 1, so they need the same sizes)"
            )
    return MaskedBatch._make(data, mask, (False, *x.dims))


def causal_mask(x: Any, in_dim: int, out_dim: int) -> Any:
    """``x`` with ``-inf`` where the ``in_dim`` index exceeds the ``out_dim`` index.

    For attention scores of shape ``(1, queries, keys)``,
    ``scores.causal_mask(in_dim=2, out_dim=1)`` hides every later key from a
    query.  Positions are absolute, so a batch needs nothing per example.
    """
    rank = x.dim()
    i = normalize_dim("causal_mask", in_dim, rank)
    o = normalize_dim("causal_mask", out_dim, rank)
    data = x.data if isinstance(x, MaskedBatch) else x
    shape_i = [1] * rank
    shape_o = [1] * rank
    shape_i[i] = data.size(i)
    shape_o[o] = data.size(o)
    later = (torch.arange(data.size(i), device=data.device).reshape(shape_i)
             > torch.arange(data.size(o), device=data.device).reshape(shape_o))
    if isinstance(x, MaskedBatch):
        if not grad_enabled():
            refuse_untracked("causal_mask", (x,))
        # ``later`` has padded sizes along dynamic dimensions, which a plain
        # tensor argument of masked_fill may not; positions are the same in
        # every example, so fill the data and keep the mask.
        return MaskedBatch._make(data.masked_fill(later, -math.inf), x.mask, x.dims)
    return x.masked_fill(later, -math.inf)


CONVENIENCE = {
    "batch_zeros": batch_zeros,
    "batch_ones": batch_ones,
    "batch_empty": batch_empty,
    "size_as_tensor": size_as_tensor,
    "split_dim": split_dim,
    "join_dims": join_dims,
    "causal_mask": causal_mask,
}


def install() -> None:
    """Add the convenience methods to ``MaskedBatch`` and (new names only) ``torch.Tensor``."""
    for name, function in CONVENIENCE.items():
        setattr(MaskedBatch, name, function)
        if not hasattr(torch.Tensor, name):
            setattr(torch.Tensor, name, function)
    if not hasattr(torch.Tensor, "maxsize"):
        torch.Tensor.maxsize = maxsize  # type: ignore[attr-defined]
    declare_convenience(sorted([*CONVENIENCE, "maxsize"]))
