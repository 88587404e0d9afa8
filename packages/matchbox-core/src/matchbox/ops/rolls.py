"""Ordering's rolls (``torch.roll``, ``Tensor.roll``): each example's real positions
rotated in place, i -> (i + shift) mod n; without dims, each example's flattened values
(the table in :mod:`matchbox.ops.ordering`)."""

from __future__ import annotations

import math

import torch

from matchbox import _masking, _registry
from matchbox.masked_batch import MaskedBatch, normalize_dim
from matchbox.ops.ordering import FAMILY, _dim_list, _padded_along


@_registry.implements(torch.roll, torch.Tensor.roll, family=FAMILY)
def roll(func, input, shifts, dims=None):
    op = _registry.op_name(func)
    _registry.refuse_per_example(op, "shift", shifts, "gather each example's positions")
    # (x.roll(x.maxsize(1), 1) of each example in the loop is no roll at all: refused.)
    shift_list = [_registry.int_argument(op, "shift", s) for s in _dim_list(shifts)]
    dim_list = _dim_list(dims) if dims is not None else None
    if dim_list is None:
        if len(shift_list) != 1:
            raise RuntimeError(f"{op}: without dims, shifts must be one int (got {shifts!r})")
        return MaskedBatch._make(_roll_flat(input, int(shift_list[0])), input._mask, input.dims)
    if len(shift_list) != len(dim_list):
        raise RuntimeError(f"{op}: shifts and dimensions must align: {len(shift_list)} "
                           f"shifts, {len(dim_list)} dims")
    data = input.data
    for shift, dim in zip(shift_list, dim_list):
        d = normalize_dim(op, dim, input.dim())
        if d == 0:
            continue  # each example's dimension 0 has size one
        if _padded_along(input, d):
            index = _rolled_prefix(input._mask, d, data.size(d), int(shift))
            data = data.gather(d, index.expand_as(data))
        else:
            data = data.roll(int(shift), d)
    return MaskedBatch._make(data, input._mask, input.dims)


def _rolled_prefix(mask: torch.Tensor, d: int, size: int, shift: int) -> torch.Tensor:
    """Per line along ``d``: position i <- (i - shift) mod n for the n real positions, i
    for padding (a permutation of each example's own positions, as ``_reversed_prefix``)."""
    n = mask.sum(d, keepdim=True)
    shape = [1] * mask.dim()
    shape[d] = size
    positions = torch.arange(size, device=mask.device).view(shape)
    return torch.where(positions < n, (positions - shift).remainder(n.clamp(min=1)), positions)


def _roll_flat(x: MaskedBatch, shift: int) -> torch.Tensor:
    """``roll`` without dims: each example's flattened real values rolled, in place of them.

    An example's element at coordinates ``c`` is its flat element ``k = sum c_j * s_j``
    (``s_j``: its own strides, from its own sizes); it takes flat element ``(k - shift)
    mod n``, found at the coordinates those strides give, read from the padded layout.
    Padding takes itself.
    """
    data = x.data
    batch, shape = data.size(0), data.shape[1:]
    flat = data.reshape(batch, -1)
    if x._mask is None or not any(x.dims):
        return flat.roll(shift, 1).reshape(data.shape)
    sizes = [_masking.sizes_along(x, j) for j in range(1, data.dim())]
    strides, stride = [], torch.ones_like(sizes[0])
    for size in reversed(sizes):
        strides.append(stride)
        stride = stride * size
    strides.reverse()
    total = stride  # each example's number of elements
    rank = data.dim()
    view = [batch] + [1] * (rank - 1)
    own = torch.zeros(data.shape, dtype=torch.long, device=data.device)  # k of each position
    itself = torch.zeros_like(own)  # each position's flat index in the padded layout
    for j in range(1, rank):
        line = [1] * rank
        line[j] = shape[j - 1]
        coordinate = torch.arange(shape[j - 1], device=data.device).view(line)
        own = own + coordinate * strides[j - 1].view(view)
        itself = itself + coordinate * math.prod(shape[j:])
    source = (own - shift).remainder(total.clamp(min=1).view(view))
    padded = torch.zeros_like(own)
    for j in range(1, rank):
        size = sizes[j - 1].view(view).clamp(min=1)
        coordinate = (source // strides[j - 1].view(view).clamp(min=1)).remainder(size)
        padded = padded + coordinate * math.prod(shape[j:])
    index = torch.where(x.mask, padded, itself)
    return flat.gather(1, index.reshape(batch, -1)).reshape(data.shape)
