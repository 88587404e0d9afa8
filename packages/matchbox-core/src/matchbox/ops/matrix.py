"""Matrix structure: ``tril``/``triu`` (and in place), ``diagonal``, ``diag_embed`` and
``cdist``.

Each example's matrices are its last two dimensions (``diagonal``: the two it names).
Positions inside an example count from its start, and real values come first along
every dynamic dimension, so a triangle or a diagonal of the padded data is each
example's own where it is real.  What happens to padding and mask:

| op          | result                                                                   |
|-------------|--------------------------------------------------------------------------|
| tril, triu  | the data's triangle, mask kept (padding only reaches padding)            |
| diagonal    | the data's diagonal (a view, as in the loop); its length per example     |
|             | from the example's own sizes: dynamic where either dimension is          |
| diag_embed  | the data's (padding filled with 0), its squares of each example's own    |
|             | size ``n + abs(offset)``: dynamic where the last dimension is            |
| cdist       | padding filled with 0 (a distance of finite rows), the result real where |
|             | both rows are; gradients arriving at padding are dropped                 |

Examples of rank two, ``(1, n)``, are one-row matrices, as in the loop (their
dimension 0 is the matrix's first); ``diagonal`` of each example's dimension 0 with
another would drop it, which a batch cannot do: refused.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _copies, _masking, _registry
from matchbox.masked_batch import MaskedBatch, normalize_dim
from matchbox.ops.gather import refuse_partly_empty

FAMILY = "matrix"


# ------------------------------------------------------------------ triangles


def _on_matrices(op: str, func: Any, x: MaskedBatch, diagonal: int) -> torch.Tensor:
    """``func(data, diagonal)`` on each example's last two dimensions (the data of a
    rank-two example gets a size-one dimension for its own dimension 0 first)."""
    _registry.refuse_per_example(
        op, "diagonal", diagonal, "build the mask per example instead, with i and j the "
        "row and column positions: torch.where(j - i >= k, x, 0) for triu")
    _registry.refuse_size_number(op, "diagonal", diagonal)
    if x.dim() < 2:
        raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions (these "
                           "examples are scalars)")
    if x.dim() == 2:
        return func(x.data.unsqueeze(1), diagonal).squeeze(1)
    return func(x.data, diagonal)


@_registry.implements(torch.tril, torch.Tensor.tril, torch.triu, torch.Tensor.triu,
                      family=FAMILY)
def tril_triu(func, input, diagonal=0, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    return MaskedBatch._make(_on_matrices(op, func, input, diagonal), input._mask, input.dims)


@_registry.implements(torch.Tensor.tril_, torch.Tensor.triu_, family=FAMILY)
def tril_triu_(func, input, diagonal=0):
    op = _registry.op_name(func)
    _copies.refuse_in_place(op, input)
    _on_matrices(op, func, input, diagonal)  # in place on (a view of) the data
    return input


# ------------------------------------------------------------------ diagonal


@_registry.implements(torch.diagonal, torch.Tensor.diagonal, family=FAMILY)
def diagonal(func, input, offset=0, dim1=0, dim2=1):
    op = _registry.op_name(func)
    _registry.refuse_per_example(op, "offset", offset, "take each example's elements with "
                                 "gather at the positions it needs")
    _registry.refuse_size_number(op, "offset", offset)
    rank = input.dim()
    d1, d2 = normalize_dim(op, dim1, rank), normalize_dim(op, dim2, rank)
    if d1 == d2:
        raise RuntimeError(f"{op}: diagonal dimensions cannot be identical {dim1}, {dim2}")
    if 0 in (d1, d2):
        raise ValueError(
            f"{op}: dim1={dim1}, dim2={dim2} include dimension 0, each example's batch "
            "dimension (size one), which the diagonal would remove; name two dimensions "
            "after it (dim1=-2, dim2=-1 for each example's matrices)")
    data = input.data.diagonal(offset, d1, d2)
    kept = tuple(d for j, d in enumerate(input.dims, 1) if j not in (d1, d2))
    dynamic = input.dims[d1 - 1] or input.dims[d2 - 1]
    dims = kept + (dynamic,)
    mask = input._mask
    if mask is None:
        return MaskedBatch._make(data, None, dims)
    if not dynamic:
        return MaskedBatch._make(data, mask.squeeze((d1, d2)).unsqueeze(-1), dims)
    n1, n2 = _masking.sizes_along(input, d1), _masking.sizes_along(input, d2)
    length = (torch.minimum(n1, n2 - offset) if offset >= 0
              else torch.minimum(n1 + offset, n2)).clamp(min=0)
    if sum(dims) > 1:
        refuse_partly_empty(op, [_masking.sizes_along(input, j) for j in range(1, rank)
                                 if j not in (d1, d2) and input.dims[j - 1]] + [length])
    # Real along the other dimensions (an example empty in d1 or d2 has a diagonal
    # of length 0 and keeps its other sizes).
    empty = ((n1 == 0) | (n2 == 0)).view(-1, *[1] * (rank - 1))
    others = (mask.any(d2, keepdim=True).any(d1, keepdim=True) | empty).squeeze((d1, d2))
    size = data.size(-1)
    along = torch.arange(size, device=data.device) < length.view(-1, *[1] * (others.dim() - 1),
                                                                  1)
    mask = _masking.fit_mask(others.unsqueeze(-1) & along, data, dims)
    return MaskedBatch._make(data, mask, dims)


# ------------------------------------------------------------------ diag_embed


@_registry.implements(torch.diag_embed, torch.Tensor.diag_embed, family=FAMILY)
def diag_embed(func, input, offset=0, dim1=-2, dim2=-1):
    """Each example's last dimension (length ``n``) as the diagonal of new ``(n + |offset|)``
    square matrices at ``dim1``/``dim2`` (dynamic where that dimension is)."""
    op = _registry.op_name(func)
    _registry.refuse_per_example(op, "offset", offset, "build each example's matrices with "
                                 "torch.where on its row and column positions")
    rank = input.dim()
    if rank < 2:
        raise ValueError(f"{op}: the examples are scalars, whose last dimension is each "
                         "example's dimension 0 (of size one): unsqueeze them first")
    d1, d2 = normalize_dim(op, dim1, rank + 1), normalize_dim(op, dim2, rank + 1)
    if d1 == d2:
        raise RuntimeError(f"{op}: diagonal dimensions cannot be identical {dim1}, {dim2}")
    if 0 in (d1, d2):
        raise ValueError(
            f"{op}: dim1={dim1}, dim2={dim2} include dimension 0, where each example's batch "
            "dimension (of size one) must stay; name two dimensions after it")
    values = input.data if input._mask is None else _masking.fill_padding(input, 0)
    data = func(values, offset, d1, d2)
    # The result's dimensions: the input's others in order, its last at d1 and d2.
    others = iter(input.dims[:-1])
    dims = tuple(input.dims[-1] if p in (d1, d2) else next(others) for p in range(1, rank + 1))
    if input._mask is None:
        return MaskedBatch._make(data, None, dims)
    if not input.dims[-1]:
        # The mask along the other dimensions, two size-one dimensions moved to d1 and d2.
        mask = input._mask.unsqueeze(-1).movedim((rank - 1, rank), (d1, d2))
        return MaskedBatch._make(data, _masking.fit_mask(mask, data, dims), dims)
    # From each example's sizes (one empty along the last dimension has an all-false
    # mask): real where every position is within them, the new ones n + |offset|.
    n = _masking.sizes_along(input, rank - 1) + abs(offset)
    kept = [p for p in range(rank + 1) if p not in (d1, d2)]  # where the others go
    sizes = [(_masking.sizes_along(input, j), kept[j]) for j in range(1, rank - 1)
             if input.dims[j - 1]] + [(n, d1), (n, d2)]
    refuse_partly_empty(op, [size for size, _ in sizes])
    mask = None
    for size, p in sizes:
        line = torch.arange(data.size(p), device=data.device) < size.view(-1, 1)
        line = line.view(-1, *[line.size(1) if i == p else 1 for i in range(1, rank + 1)])
        mask = line if mask is None else mask & line
    return MaskedBatch._make(data, _masking.fit_mask(mask, data, dims), dims)


# ------------------------------------------------------------------ cdist


@_registry.implements(torch.cdist, family=FAMILY)
def cdist(func, x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """Distances between each example's rows ``(1, [...], P, M)`` and ``(1, [...], R, M)``.

    Either argument may be a plain tensor (the same for every example).  Rows are the
    second-last dimension of each example; a rank-two example ``(1, M)`` is one row.
    """
    op = _registry.op_name(func)
    like = x1 if isinstance(x1, MaskedBatch) else x2
    a = x1 if isinstance(x1, MaskedBatch) else None
    b = x2 if isinstance(x2, MaskedBatch) else None
    rank = like.dim()
    if rank < 2:
        raise RuntimeError(f"{op}: each example must have at least 2 dimensions (rows and "
                           "features); these examples are scalars")
    for batch in (a, b):
        if batch is not None and batch.dim() != rank:
            raise RuntimeError(f"{op}: the examples of x1 and x2 have ranks {a.dim()} and "
                               f"{b.dim()}; batches of the same rank are needed")
    _check_features(op, a, b, x1, x2)
    batch_size = like.data.size(0)
    # Each batch's data with a size-one dimension at 1: the batch becomes a batch
    # dimension of cdist and each example keeps its own leading 1 (its rows, at rank 2).
    left = _masking.fill_padding(a, 0).unsqueeze(1) if a is not None else x1
    right = _masking.fill_padding(b, 0).unsqueeze(1) if b is not None else x2
    out = func(left, right, p, compute_mode)
    if out.size(1) != 1:
        raise ValueError(
            f"{op}: each example's result would have size {out.size(1)} in dimension 0 (a "
            f"plain x1 of shape {tuple(x1.shape)} gives its own leading dimensions), but a "
            "batch keeps every example's dimension 0 at size one")
    out = out.reshape(batch_size, *out.shape[2:])
    dims = _result_dims(a, b, rank)
    if sum(dims) > 1:
        refuse_partly_empty(op, _result_sizes(a, b, rank))
    mask = _masking.fit_mask(_result_mask(a, b, rank), out, dims)
    return MaskedBatch._make(_masking.guard_gradient(out, mask), mask, dims)


def _check_features(op: str, a: MaskedBatch | None, b: MaskedBatch | None, x1: Any,
                    x2: Any) -> None:
    """Each example's feature dimension (the last) has one size in x1 and x2."""
    d = (a if a is not None else b).dim() - 1
    dynamic = [(t, d) for t in (a, b) if t is not None and t.dims[-1]]
    static = [(t, d if isinstance(t, MaskedBatch) else t.dim() - 1) for t in (x1, x2)
              if not (isinstance(t, MaskedBatch) and t.dims[-1])]
    if len(dynamic) == 2:
        _masking.check_lengths_agree(op, dynamic)
    elif dynamic and static:
        _masking.check_static_extents(op, dynamic, static, exact=True,
                                      label=f"the feature dimension {d}")


def _row_mask(batch: MaskedBatch, rank: int) -> torch.Tensor | None:
    """The mask of ``batch``'s rows (its feature dimension reduced), ``(B, ..., P|1, 1)``."""
    mask = batch._mask
    if mask is None or not batch.dims[-1]:
        return mask
    empty = (_masking.sizes_along(batch, rank - 1) == 0).view(-1, *[1] * (rank - 1))
    return mask.any(-1, keepdim=True) | empty


def _result_mask(a: MaskedBatch | None, b: MaskedBatch | None,
                 rank: int) -> torch.Tensor | None:
    rows = None if a is None else _row_mask(a, rank)
    columns = None if b is None else _row_mask(b, rank)
    if rank == 2:
        # (1, R) per example: a row of x1's and x2's whole rows (P = 1).
        return _masking.combine_masks([rows, None if columns is None
                                       else columns.reshape(columns.size(0), -1).all(1, True)])
    if columns is not None:
        columns = columns.transpose(-1, -2)
    return _masking.combine_masks([rows, columns])


def _result_sizes(a: MaskedBatch | None, b: MaskedBatch | None,
                  rank: int) -> list[torch.Tensor]:
    """Each example's sizes in the result's dynamic dimensions (its leading ones, rows of
    x1, rows of x2)."""
    sizes = [_masking.sizes_along(t, j) for j in range(1, rank - 2) for t in (a, b)
             if t is not None and t.dims[j - 1]][:rank - 3]
    return sizes + [_masking.sizes_along(t, rank - 2) for t in (a, b)
                    if t is not None and t.dims[-2]]


def _result_dims(a: MaskedBatch | None, b: MaskedBatch | None, rank: int) -> tuple[bool, ...]:
    if rank == 2:
        return (False,)
    lead = tuple(any(t.dims[j] for t in (a, b) if t is not None) for j in range(rank - 3))
    rows = a is not None and a.dims[-2]
    columns = b is not None and b.dims[-2]
    return lead + (rows, columns)
