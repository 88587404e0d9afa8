"""Writing by index: ``scatter``, ``scatter_add`` and ``scatter_reduce``, and their
in-place forms.

The result has the input's layout; a padding index position writes into a slot past the
data, which is dropped.  An in-place scatter writes into the input batch's data.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _copies, _masking, _registry
from matchbox.masked_batch import MaskedBatch, normalize_dim
from matchbox.ops.gather._indices import (
    FAMILY,
    _check_same_rank,
    _first_batch,
    _narrow_to,
    _with_dim_one,
    as_batch,
    check_not_larger,
    checked_positions,
)

_SCATTER = {
    torch.scatter: "scatter_", torch.Tensor.scatter: "scatter_", torch.Tensor.scatter_: "scatter_",
    torch.scatter_add: "scatter_add_", torch.Tensor.scatter_add: "scatter_add_",
    torch.Tensor.scatter_add_: "scatter_add_",
    torch.scatter_reduce: "scatter_reduce_", torch.Tensor.scatter_reduce: "scatter_reduce_",
    torch.Tensor.scatter_reduce_: "scatter_reduce_",
}
_IN_PLACE = {torch.Tensor.scatter_, torch.Tensor.scatter_add_, torch.Tensor.scatter_reduce_}


@_registry.implements(*_SCATTER, family=FAMILY)
def scatter(func, input, dim, index, *args, out=None, **kwargs):
    """``scatter(input, dim, index, src or value, *, reduce)``, ``scatter_add(input, dim,
    index, src)``, ``scatter_reduce(input, dim, index, src, reduce, *, include_self)``."""
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if args:
        src, args = args[0], args[1:]
    else:
        src = kwargs.pop("src", kwargs.pop("value", None))
    _registry.refuse_size_number(op, "value", src)  # x.size(0): 1 in each example, B here
    inplace = func in _IN_PLACE
    if inplace:
        if not isinstance(input, MaskedBatch):
            raise ValueError(f"{op}: an in-place op on a plain tensor cannot take a batch "
                             "argument (the tensor would have to hold every example); use "
                             "the out-of-place op")
        _copies.refuse_in_place(op, input)
    like = _first_batch(input, index, src)
    x = as_batch(op, input, like, "input")
    idx = as_batch(op, index, like, "index")
    source = as_batch(op, src, like, "src") if isinstance(src, (torch.Tensor, MaskedBatch)) \
        else src
    _check_same_rank(op, x, idx, "index")
    d = normalize_dim(op, dim, x.dim())
    method = _SCATTER[func]
    if d == 0:
        source = _with_dim_one(source) if isinstance(source, MaskedBatch) else source
        data = _scatter(op, method, _with_dim_one(x), 1, _with_dim_one(idx), source, args,
                        kwargs).squeeze(1)
    else:
        data = _scatter(op, method, x, d, idx, source, args, kwargs)
    if inplace:
        input.data.copy_(data)
        return input
    return MaskedBatch._make(data, x._mask, x.dims)


def _scatter(op: str, method: str, x: MaskedBatch, d: int, idx: MaskedBatch, source: Any,
             args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    """The scattered data of ``x``: one slot past the data along ``d`` takes what the
    index's padding positions write, and is dropped."""
    check_not_larger(op, idx, x, d, "index", "input")
    if isinstance(source, MaskedBatch):
        if source.dim() != idx.dim():
            raise RuntimeError(f"{op}: the src has rank {source.dim()} but the index has rank "
                               f"{idx.dim()}; they must have the same number of dimensions")
        check_not_larger(op, idx, source, None, "index", "src")
    positions = checked_positions(op, idx, _masking.sizes_along(x, d), d, negative=False)
    size = x.data.size(d)
    if idx._mask is not None:
        positions = torch.where(idx._mask, positions, size)
    # The loop's sizes fit (checked above): cut the index's padding to the data's.
    limits: list[int | None] = [None]
    for j in range(1, x.dim()):
        bounds = [] if j == d else [x.data.size(j)]
        if isinstance(source, MaskedBatch):
            bounds.append(source.data.size(j))
        limits.append(min(bounds) if bounds else None)
    value = source.data if isinstance(source, MaskedBatch) else source
    positions = _narrow_to(positions, limits)
    slot = list(x.data.shape)
    slot[d] = 1
    extended = torch.cat([x.data, x.data.new_zeros(slot)], d)
    return getattr(extended, method)(d, positions, value, *args, **kwargs).narrow(d, 0, size)
