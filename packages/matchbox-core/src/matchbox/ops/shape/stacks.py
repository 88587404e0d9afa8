"""``hstack``/``column_stack``/``dstack``/``vstack``/``row_stack`` and
``atleast_1d``/``atleast_2d``/``atleast_3d``: torch's spellings of ``cat`` along one
dimension after raising each part to a rank, run as ``cat`` of those parts (``joins.py``:
its checks, named with the op).

Each example has a dimension 0 of size one, so it is at least 1-D: ``hstack`` of
rank-two-or-more examples joins dimension 1, and ``vstack``/``row_stack`` of several
parts (dimension 0), like ``hstack`` of per-example scalars ``(1,)``, would join each
example's dimension 0 with another's: refused, as ``cat`` along it is.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _lengths, _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.shape.joins import cat


def _at_least(x: Any, rank: int) -> Any:
    """``torch.atleast_{rank}d`` of one example (a batch) or of a plain tensor."""
    if not isinstance(x, MaskedBatch):
        return (torch.atleast_1d, torch.atleast_2d, torch.atleast_3d)[rank - 1](x)
    while x.dim() < rank:  # (1,) -> (1, 1) -> (1, 1, 1); (1, n) -> (1, n, 1), as torch
        x = x.unsqueeze(-1)
    return x


def _parts(tensors: Any) -> list[Any]:
    return [tensors] if isinstance(tensors, (torch.Tensor, MaskedBatch)) else list(tensors)


@_registry.implements(torch.atleast_1d, torch.atleast_2d, torch.atleast_3d, family="shape")
def atleast(func, *tensors):
    rank = {torch.atleast_1d: 1, torch.atleast_2d: 2, torch.atleast_3d: 3}[func]
    if len(tensors) == 1 and isinstance(tensors[0], (torch.Tensor, MaskedBatch)):
        return _at_least(tensors[0], rank)
    return tuple(_at_least(x, rank) for x in _parts(tensors[0] if len(tensors) == 1
                                                     else tensors))


@_lengths.aware  # (cat's rule builds the lengths)
@_registry.implements(torch.hstack, torch.column_stack, torch.dstack, torch.vstack,
                      torch.row_stack, family="shape")
def stacks(func, tensors, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    parts = _parts(tensors)
    if func is torch.hstack:
        parts = [_at_least(x, 1) for x in parts]
        dim = 0 if all(x.dim() == 1 for x in parts) else 1
    elif func is torch.column_stack:
        # 0-d and 1-D parts become columns (n, 1); per-example scalars (1,) so too.
        parts = [x.reshape(-1, 1) if isinstance(x, torch.Tensor) and x.dim() <= 1
                 else x.unsqueeze(-1) if x.dim() == 1 else x for x in parts]
        dim = 1
    elif func is torch.dstack:
        parts, dim = [_at_least(x, 3) for x in parts], 2
    else:  # vstack, row_stack: one part is itself (a copy); more would join dimension 0
        parts, dim = [_at_least(x, 2) for x in parts], 1
        if len(parts) > 1:
            raise ValueError(
                f"{op}: joins its parts along dimension 0, each example's own batch "
                "dimension (of size one), which a batch keeps; join them along dimension 1 "
                "(torch.cat(parts, 1)) or stack them (torch.stack(parts, 1))")
    return cat(func, parts, dim)
