"""``x.maxsize(d)`` of a dynamic dimension (a :class:`~matchbox._sizes.PaddedSize`) given
as a size of an op that builds a batch of the sizes it is given (``x.new_zeros(x.size(0),
T, H)``, ``h.expand(x.size(0), T, H)``, ``h.repeat(1, T, 1)``).

In the loop over examples each example's ``T`` is its own size there, so the batch such
an op builds is dynamic in that dimension, each example of the size it has in the batch
``T`` was read from (``T.source``), as the loop's would be.  Where that cannot be known
(no source, or a source of other examples) the op is refused, naming the op and the
argument.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox._size_tensors import size_as_tensor
from matchbox._sizes import PADDED_SIZES, SIZE_PARTS
from matchbox.masked_batch import MaskedBatch


def is_padded(size: Any) -> bool:
    """Whether ``size`` is ``x.maxsize(d)`` of a dynamic dimension."""
    return type(size) in PADDED_SIZES


def own_sizes(op: str, arg: str, size: Any, batch: Any) -> torch.Tensor:
    """Each example's own size that the padded ``size`` stands for (``(batch,)`` int64, in
    the order of the batch's examples): its source batch's sizes along its dimension.

    Refused (``ValueError``) where the padded size does not say which batch it was read
    from, or was read from a batch of another number of examples than ``batch``."""
    source = getattr(size, "source", None)
    if source is None:
        raise ValueError(
            f"{op}: {arg} is a padded size (x.maxsize({size.dim}) of a dynamic dimension) "
            "that does not say which batch it was read from, so each example's own size "
            "there, which the loop over examples would build, is unknown; give "
            f"x.size_as_tensor({size.dim}) of the batch instead")
    if hasattr(type(source), "to_masked"):  # a PackedBatch: its examples in batch order
        source = source.to_masked()
    examples = source.data.size(0)
    if examples != batch:
        raise ValueError(
            f"{op}: {arg} is x.maxsize({size.dim}) of a batch of {examples} examples, but "
            f"the batch it builds has {batch}: each example's own size there (the size "
            "the loop over examples would build) belongs to other examples")
    return size_as_tensor(source, size.dim).data


def own_dimension(size: Any, batch: Any, d: int) -> bool:
    """Whether the padded ``size`` is ``batch``'s own dynamic dimension ``d``: read from
    ``batch`` along ``d``, or from a batch of its layout (its mask, its dims), so that each
    example's own size there, which ``size`` stands for, is its size in ``batch``."""
    source = size.source
    if source is None:
        return False
    if source is not batch and (getattr(source, "_mask", None) is None
                                or source._mask is not getattr(batch, "_mask", None)
                                or source.dims != batch.dims):
        return False
    dim = size.dim + source.dim() if size.dim < 0 else size.dim
    return dim == d


def _size_parts(batch: MaskedBatch) -> tuple[Any, ...]:
    """What :func:`_of_sizes` rebuilds ``batch``'s layout and sizes from (its mask, not its
    values): held by a ``PaddedSize`` read from it instead of the batch and its graph."""
    data = batch._data
    return (_of_sizes, batch._mask, batch.dims, data.shape, data.dtype, data.device)


def _of_sizes(mask: Any, dims: tuple[bool, ...], shape: Any, dtype: torch.dtype,
              device: torch.device) -> MaskedBatch:
    """A batch of the given layout and sizes without values (a stride-0 view of one
    element): what a ``PaddedSize`` stands for once the batch it was read from is gone."""
    return MaskedBatch._make(torch.empty((), dtype=dtype, device=device).expand(shape), mask,
                             dims)


SIZE_PARTS[MaskedBatch] = _size_parts
