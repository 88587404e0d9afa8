"""Reading by index: ``gather``, ``take_along_dim`` and ``index_select``.

The result has the index's layout (``index_select``: the input's, the selected dimension
static); a padding index position reads position 0, and its gradient is dropped.
Along dimension 0 (each example's size-one batch dimension) the ops run on a size-one
dimension put in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from matchbox import _masking, _registry
from matchbox.masked_batch import MaskedBatch, constant_pad, normalize_dim
from matchbox.ops.gather._indices import (
    FAMILY,
    _check_same_rank,
    _example_real,
    _first_batch,
    _narrow_to,
    _with_dim_one,
    _without_dim_one,
    as_batch,
    check_not_larger,
    checked_positions,
)
from matchbox.ops.gather.tensor_indices import table_lookup


def _take_along_dim_counts_from_the_end() -> bool:
    """Whether ``torch.take_along_dim`` reads a negative index from the end of ``dim``
    (newer torch does, pytorch/pytorch#146211; torch 2.3 raises "out of bounds" for it,
    as ``gather`` does)."""
    try:
        torch.take_along_dim(torch.zeros(1, 1), torch.tensor([[-1]]), 1)
    except RuntimeError:
        return False
    return True


#: The loop's ``take_along_dim`` takes negative indices: so does the batch's.
TAKE_ALONG_DIM_COUNTS_FROM_THE_END = _take_along_dim_counts_from_the_end()


def _gather_positions(x: MaskedBatch, d: int, index: MaskedBatch, positions: torch.Tensor,
                     sparse_grad: bool = False) -> MaskedBatch:
    """``x`` gathered along ``d`` at checked ``positions`` (the data of ``index``).

    The result has the index's layout; where the index is padding it is padding, and
    its gradient (which would reach position 0 of the example) is dropped.
    """
    data = x.data
    limits = [None] + [data.size(j) if j != d else None for j in range(1, data.dim())]
    positions = _narrow_to(positions, limits)
    mask = index._mask
    if mask is not None:
        mask = _narrow_to(mask, [None if n == 1 else limit
                                 for n, limit in zip(mask.shape, limits)])
    if data.size(d) == 0 and positions.numel():
        # No example has a position there (an index would have been refused): read
        # from one slot of fill, which only padding positions reach.
        pads = [0, 0] * (data.dim() - 1 - d) + [0, 1]
        data = constant_pad(data, pads)
    out = torch.gather(data, d, positions, sparse_grad=sparse_grad)
    mask = _masking.fit_mask(_masking.combine_masks([mask, _example_real(x)]), out, index.dims)
    return MaskedBatch._make(_masking.guard_gradient(out, mask), mask, index.dims)


@_registry.implements(torch.gather, torch.Tensor.gather, family=FAMILY)
def gather(func, input, dim, index, *, sparse_grad=False, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    like = _first_batch(input, index)
    x, idx = as_batch(op, input, like, "input"), as_batch(op, index, like, "index")
    _check_same_rank(op, x, idx, "index")
    d = normalize_dim(op, dim, x.dim())
    return _along(d, x, idx, lambda x, d, idx: _gather(op, x, d, idx, sparse_grad, False))


def _gather(op: str, x: MaskedBatch, d: int, idx: MaskedBatch, sparse_grad: bool,
            negative: bool) -> MaskedBatch:
    check_not_larger(op, idx, x, d, "index", "input")
    positions = checked_positions(op, idx, _masking.sizes_along(x, d), d, negative=negative)
    return _gather_positions(x, d, idx, positions, sparse_grad)


def _along(d: int, x: MaskedBatch, idx: MaskedBatch,
           run: Callable[[MaskedBatch, int, MaskedBatch], MaskedBatch]) -> MaskedBatch:
    """``run(x, d, idx)``; along dimension 0 on a size-one dimension 1 put in its place."""
    if d:
        return run(x, d, idx)
    return _without_dim_one(run(_with_dim_one(x), 1, _with_dim_one(idx)))


@_registry.implements(torch.take_along_dim, torch.Tensor.take_along_dim, family=FAMILY)
def take_along_dim(func, input, indices, dim=None, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if dim is None:
        raise ValueError(
            f"{op}: dim=None flattens each example, its batch dimension 0 included, into a "
            "1-D result, which a batch (each example keeps its dimension 0) cannot hold; "
            "pass dim")
    like = _first_batch(input, indices)
    x, idx = as_batch(op, input, like, "input"), as_batch(op, indices, like, "indices")
    _check_same_rank(op, x, idx, "indices")
    d = normalize_dim(op, dim, x.dim())

    def run(x: MaskedBatch, d: int, idx: MaskedBatch) -> MaskedBatch:
        x, idx = _broadcast_except(op, x, idx, d)
        return _gather(op, x, d, idx, False, TAKE_ALONG_DIM_COUNTS_FROM_THE_END)

    return _along(d, x, idx, run)


def _broadcast_except(op: str, x: MaskedBatch, idx: MaskedBatch,
                      d: int) -> tuple[MaskedBatch, MaskedBatch]:
    """Broadcast input and indices against each other in every dimension but ``d``, as
    each example's ``take_along_dim`` does.

    A size-one dimension takes the other's size; where the other is dynamic, each
    example's own size (the expanded index is real up to the input's length there).
    """
    for j in range(1, x.dim()):
        if j == d:
            continue
        a, b = x.data.size(j), idx.data.size(j)
        x_dynamic, idx_dynamic = x.dims[j - 1], idx.dims[j - 1]
        if not x_dynamic and not idx_dynamic:
            if a == b:
                continue
            if a != 1 and b != 1:
                raise RuntimeError(
                    f"{op}: the input has size {a} and the indices {b} in dimension {j}; "
                    "they must be equal or one of them 1 (they broadcast in every dimension "
                    "but dim)")
        if not idx_dynamic and b == 1:
            idx = _expand_to(idx, j, x)
        elif not x_dynamic and a == 1:
            x = _expand_to(x, j, idx)
        elif x_dynamic and idx_dynamic:
            _masking.check_lengths_agree(op, [(x, j), (idx, j)])
        elif x_dynamic:
            _masking.check_static_extents(op, [(x, j)], [(idx, j)])
        else:
            _masking.check_static_extents(op, [(idx, j)], [(x, j)])
    return x, idx


def _expand_to(x: MaskedBatch, j: int, other: MaskedBatch) -> MaskedBatch:
    """``x`` (size one in static dimension ``j``) expanded to ``other``'s size there: each
    example's own size where ``other`` is dynamic."""
    size = other.data.size(j)
    shape = list(x.data.shape)
    shape[j] = size
    data = x.data.expand(shape)
    if not other.dims[j - 1]:
        return MaskedBatch._make(data, x._mask, x.dims)
    view = [-1] + [1] * (x.dim() - 1)
    view[j] = size
    along = (torch.arange(size, device=x.device)
             < _masking.sizes_along(other, j).unsqueeze(1)).view(view)
    mask = along if x._mask is None else x._mask & along
    dims = x.dims[:j - 1] + (True,) + x.dims[j:]
    return MaskedBatch._make(data, _masking.fit_mask(mask, data, dims), dims)


@_registry.implements(torch.index_select, torch.Tensor.index_select, family=FAMILY)
def index_select(func, input, dim, index, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    like = _first_batch(input, index)
    if (not isinstance(input, MaskedBatch) and isinstance(index, MaskedBatch)
            and index.dims == () and normalize_dim(op, dim, input.dim()) == 0):
        # A plain table's rows, one per example (as table[index]): a lookup.
        return table_lookup(op, input, index, negative=False)
    x = as_batch(op, input, like, "input")
    d = normalize_dim(op, dim, x.dim())
    if d == 0:
        raise ValueError(
            f"{op}: dim=0 is the batch dimension of each example (size one); selecting "
            "along it would change that size, which a batch cannot hold")
    if isinstance(index, MaskedBatch):
        if index.dims != ():
            raise ValueError(
                f"{op}: a batch index must hold one int per example (a batch of per-example "
                f"scalars, dims ()); this one has dims {index.dims}. index_select takes a 1-D "
                "index, which a batch (each example keeps a leading dimension of size one) "
                "cannot hold per example: use gather, take_along_dim or x[:, idx] for "
                "per-example index tensors")
        # The loop's 0-d index keeps the dimension, with size one.
        shape = [-1] + [1] * (x.dim() - 1)
        positions = index.data.reshape(shape)
        idx = MaskedBatch._make(positions, None if index._mask is None
                                else index._mask.reshape(shape), (False,) * (x.dim() - 1))
    else:
        if not isinstance(index, torch.Tensor) or index.dim() > 1:
            raise IndexError(f"{op}: the index must be a 1-D tensor (or a batch of one int "
                             f"per example), got {_describe(index)}")
        shape = [1] * x.dim()
        shape[d] = -1
        idx = MaskedBatch._make(index.reshape(shape).expand(x.data.size(0), *shape[1:]),
                                None, (False,) * (x.dim() - 1))
    sizes = _masking.sizes_along(x, d)
    positions = checked_positions(op, idx, sizes, d, negative=False).long()  # int32 too
    full = list(x.data.shape)
    full[d] = positions.size(d)
    positions = positions.expand(full)
    data = x.data
    if data.size(d) == 0 and positions.numel():
        data = constant_pad(data, [0, 0] * (data.dim() - 1 - d) + [0, 1])
    out = torch.gather(data, d, positions)
    dims = x.dims[:d - 1] + (False,) + x.dims[d:]
    mask = x._mask
    if mask is not None and x.dims[d - 1]:
        mask = mask.any(d, keepdim=True)
    mask = _masking.fit_mask(_masking.combine_masks([mask, idx._mask]), out, dims)
    return MaskedBatch._make(_masking.guard_gradient(out, mask), mask, dims)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return type(value).__name__
