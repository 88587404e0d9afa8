"""Dimension arguments of the shape ops: dimension 0 is each example's own."""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _registry
from matchbox._sizes import plain_size
from matchbox.masked_batch import normalize_dim


def _nonbatch_dim(op: str, dim: int, rank: int, scalars: bool = False) -> int:
    """``dim`` normalised; dimension 0 raises.  ``scalars``: the batch holds per-example
    scalars, which the loop sees as 0-d tensors (losses) with no dimension 0 to keep."""
    d = normalize_dim(op, dim, rank)
    if d == 0:
        hint = ("; these are per-example scalars (a loss, say), 0-d in the loop but (1,) "
                "in a batch, so a new dimension 0 cannot go in front of them: combine "
                "them with + or sum([...]) instead" if scalars else "")
        raise ValueError(
            f"{op}: dimension 0 is the batch dimension of each example and cannot be "
            f"moved, split or removed on a batch{hint}"
        )
    return d


def _sizes(args: tuple[Any, ...]) -> list[int]:
    """The sizes given as ``f(*sizes)`` or ``f(sizes)``; a padded size (``x.maxsize(1)``,
    refused as a number) as the plain size it stands for."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        args = args[0]
    return [plain_size(s) for s in args]


def _batch_dim_view(dim: Any, rank: int, dims: tuple[bool, ...]) -> Any:
    """The view provider if a new dimension 0 (``dim``, in a result of ``rank``) is asked.

    A new dimension 0 in front of each example's batch dimension puts the batch
    dimension in position 1, which a view (``_registry.batch_dim_view``) holds;
    per-example scalars (``dims == ()``) have no dimension 0 in the loop.
    """
    if dims == () or not isinstance(dim, int) or dim % rank != 0 or not -rank <= dim < rank:
        return None
    return _registry.batch_dim_view("MaskedBatch")
