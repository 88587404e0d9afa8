"""The tensor (advanced) indices of ``x[:, idx]``, for ``__getitem__`` (``ops/indexing.py``).

The index's shape replaces the indexed dimension: a plain index (a tensor or a list) is
the same for every example, static; a batch index holds each example's own index
tensor, with its dims.  Negative values count from each example's end.

A plain tensor indexed by a batch (``W[prev, cur]``, ``W[tags]``: a weight shared by
every example, a CRF's transition scores) is a lookup per example (:func:`table_lookup`).
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _masking
from matchbox._example_scalars import SCALAR, combined, mark
from matchbox.masked_batch import MaskedBatch, constant_pad
from matchbox.ops.gather._indices import checked_positions, refuse_partly_empty


def is_tensor_index(item: Any) -> bool:
    """A tensor (advanced) index of ``__getitem__``: a tensor, a list, or a batch of index
    tensors (a batch of one int per example is an int index, as before)."""
    if isinstance(item, MaskedBatch):
        return item.dims != ()
    return isinstance(item, (torch.Tensor, list))


def tensor_index(op: str, x: MaskedBatch, d: int, item: Any) -> tuple[MaskedBatch, int]:
    """``x[..., item]`` with ``item`` a tensor index at dimension ``d``.

    A plain index (a tensor or a list) is the same for every example: its shape
    replaces dimension ``d``, static.  A batch index holds each example's own index
    tensor ``(1, *J)``: dimension ``d`` is replaced by ``(1, *J)`` with the index's dims.
    Returns the result and the number of dimensions that replaced ``d``.
    """
    if isinstance(item, list):
        item = torch.tensor(item, device=x.device)
    batch = x.data.size(0)
    if isinstance(item, MaskedBatch):
        if item.data.size(0) != batch:
            raise ValueError(f"{op}: the index holds {item.data.size(0)} examples but the "
                             f"batch has {batch}")
        values = item.data.unsqueeze(1)
        index_mask = None if item._mask is None else item._mask.unsqueeze(1)
        index_dims = (False,) + item.dims
    else:
        values = item.to(x.device).expand(batch, *item.shape)
        index_mask, index_dims = None, (False,) * item.dim()
    if values.dtype in (torch.bool, torch.uint8):  # torch reads a uint8 index as a mask
        raise NotImplementedError(
            f"{op}: bool (mask) indices are not supported for batches (each example would "
            "keep its own number of positions); use torch.where, or sort the kept positions "
            "first")
    idx = MaskedBatch._make(values, index_mask, index_dims)
    positions = checked_positions(op, idx, _masking.sizes_along(x, d), d, negative=True).long()
    # Gather along d at the flattened index positions, every other dimension kept.
    count = positions[0].numel()
    rank = x.data.dim()
    view = [batch] + [1] * (rank - 1)
    view[d] = count
    full = list(x.data.shape)
    full[d] = count
    data = x.data
    if data.size(d) == 0 and count:
        data = constant_pad(data, [0, 0] * (rank - 1 - d) + [0, 1])
    out = torch.gather(data, d, positions.reshape(view).expand(full))
    index_shape = list(values.shape[1:])
    out = out.reshape(*full[:d], *index_shape, *full[d + 1:])
    k = len(index_shape)
    mask = x._mask
    if mask is not None:
        if x.dims[d - 1]:
            # Real along the other dimensions; an example empty along d has no
            # position an index may point at (it was refused unless its index is empty).
            mask = mask.any(d, keepdim=True)
        mask = mask.reshape(*mask.shape[:d], *[1] * k, *mask.shape[d + 1:])
    if index_mask is not None:
        index_mask = index_mask.reshape(batch, *[1] * (d - 1), *index_mask.shape[1:],
                                        *[1] * (rank - 1 - d))
    dims = x.dims[:d - 1] + index_dims + x.dims[d:]
    if sum(dims) > 1:
        refuse_partly_empty(op, [_masking.sizes_along(b, j) for b, skip in ((x, d), (idx, None))
                                 for j in range(1, b.dim()) if j != skip and b.dims[j - 1]])
    mask = _masking.fit_mask(_masking.combine_masks([mask, index_mask]), out, dims)
    return MaskedBatch._make(_masking.guard_gradient(out, mask), mask, dims), k


def table_lookup(op: str, table: torch.Tensor, index: Any, *, negative: bool = True
                 ) -> MaskedBatch:
    """``table[idx, ...]``: a plain tensor (shared by every example) indexed along its
    dimension 0 by a batch of integers, each example reading its own rows, as in the
    loop (and as ``F.embedding(idx, table)``).

    ``idx`` of one int per example (dims ``()``) gives each example ``(1, *rest)``, which
    the remaining indices then index (``W[prev, cur]``); a batch of index tensors
    ``(1, *J)`` gives ``(1, *J, *rest)``.  A real index outside ``[-n, n)`` (``[0, n)``
    without ``negative``, as ``index_select``) of a running example raises ``IndexError``
    naming it, as the loop would.
    """
    items = list(index) if isinstance(index, tuple) else [index]
    first, rest = items[0], items[1:]
    if not isinstance(first, MaskedBatch) or first.dtype == torch.bool \
            or first.dtype.is_floating_point or first.dtype.is_complex:
        raise IndexError(
            f"{op}: a plain tensor of shape {tuple(table.shape)} indexed with a batch takes "
            "the batch as its first index, holding integers: each example looks up its own "
            "rows (as F.embedding(index, table)); index the rest per example afterwards")
    if first.dims and any(item != slice(None) for item in rest):
        raise NotImplementedError(
            f"{op}: a plain tensor indexed by a batch of index tensors takes no further "
            "index in the same subscript (torch would pair the indices element by element); "
            "for pairs, index the flattened table: W.view(-1)[a * W.size(1) + b]")
    if any(is_tensor_index(item) for item in rest):
        raise NotImplementedError(
            f"{op}: a plain tensor indexed by one int per example and a tensor index in the "
            "same subscript (torch broadcasts them together) is not supported; write "
            "W[i][:, idx], which keeps the example's leading dimension of size one")
    sizes = torch.full((first.data.size(0),), table.size(0), device=first.data.device)
    positions = checked_positions(op, first, sizes, 0, negative=negative).long()
    data = table[positions]
    dims = first.dims + (False,) * (table.dim() - 1)
    mask = first._mask
    if mask is not None:
        mask = _masking.fit_mask(mask.reshape(*mask.shape, *[1] * (table.dim() - 1)), data,
                                 dims)
    looked = MaskedBatch._make(_masking.guard_gradient(data, mask), mask, dims)
    if first.dims or not rest:
        return mark(looked, combined([first])) if not looked.dims else looked
    kind = combined([first, *rest])  # the loop's result: 0-d, or of shape (1, ...)
    # Ints per example after the first pair with it (torch broadcasts them together):
    # each takes one position of its dimension, which the result does not keep.
    rest = [mark(MaskedBatch._make(item._data, item._mask, ()), SCALAR)
            if isinstance(item, MaskedBatch) and not item.dims else item for item in rest]
    looked = looked[(slice(None), *rest)]
    return mark(looked, kind) if not looked.dims else looked
