"""``import matchbox.functional as F``: ``torch.nn.functional`` plus Matchbox's extras.

Every ``torch.nn.functional`` name is here unchanged (batches reach Matchbox
through PyTorch's ``__torch_function__`` protocol, so nothing is replaced);
the extras below work on batches and on plain tensors alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as _torch_functional
from torch.nn.functional import *  # noqa: F403

from matchbox import _lengths
from matchbox._masking import fit_mask
from matchbox.batch_reduce import batch_mean, batch_sum
from matchbox.convenience import (
    batch_empty,
    batch_ones,
    batch_zeros,
    causal_mask,
    join_dims,
    maxsize,
    size_as_tensor,
    split_dim,
)
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.shape import stack_batches


def stack(sequences: Sequence[Any], dim: int, dynamic: bool | None = None) -> Any:
    """Stack per-step results into a new dimension ``dim``.

    With batches, the new dimension is dynamic by default (``dynamic=None``):
    each step's mask says which examples had a value at that step, as when a
    loop appends each step's output and examples finish at different steps.
    ``dynamic=False`` gives ``torch.stack``'s static dimension.  With plain
    tensors this is ``torch.stack``.
    """
    sequences = list(sequences)
    if not any(isinstance(s, MaskedBatch) for s in sequences):
        return torch.stack(sequences, dim)
    return stack_batches("matchbox.functional.stack", sequences, dim,
                         dynamic=True if dynamic is None else dynamic)


def cat(tensors: Sequence[Any], dim: int = 0) -> Any:
    """``torch.cat`` (batches join through it as any op does), under the name the
    original Matchbox's functional module gave it."""
    return torch.cat(list(tensors), dim)


def update(old: Any, new: Any) -> Any:
    """``new`` where it is real, ``old`` elsewhere: assignment in a per-example loop.

    In a loop over a dynamic dimension, an example that has finished has no
    real step, so the step's result is padding for it; ``h = update(h, step(x_t, h))``
    keeps such an example's state.  This is what ``@matchbox.batch`` inserts
    for a loop-carried variable.  With plain tensors it returns ``new``; a
    plain ``old`` of one example's shape beside a batch ``new`` (a learned
    start state) is every example's own.

    The result is real wherever ``old`` is, so it is the state, not the step's
    output: to stack per-step outputs with ``stack(..., dynamic=True)``,
    append ``new`` (real only where the example had a step), not the result.
    """
    if not isinstance(new, MaskedBatch):
        return new
    if not isinstance(old, MaskedBatch):
        old = _plain_state(old, new)
    if new.dims != old.dims:
        raise ValueError(f"update: the new value has dims {new.dims} but the state has "
                         f"dims {old.dims}")
    if new._mask is None:
        return new
    data = torch.where(new._mask, new.data, old.data)
    if old._mask is None:  # the state is real everywhere, and stays so
        return MaskedBatch._make(data, None, old.dims)
    mask = fit_mask(old._mask | new._mask, data, old.dims)
    if _lengths.any_carried((old, new)):
        # Each example's sizes are its new ones where it has them (an absent 0 loses).
        mask = _lengths.rebuilt(mask, torch.maximum(_lengths.of(old), _lengths.of(new)),
                                old.dims)
    return MaskedBatch._make(data, mask, old.dims)


def _plain_state(old: Any, new: MaskedBatch) -> MaskedBatch:
    """A plain state (a learned start state, ``torch.zeros(1, hidden)``) beside a batch
    result: every example's own, as a plain tensor is in a pointwise op."""
    example = (1, *new.data.shape[1:])
    if not isinstance(old, torch.Tensor) or any(new.dims) or tuple(old.shape) != example:
        shape = tuple(old.shape) if isinstance(old, torch.Tensor) else type(old).__name__
        raise TypeError(
            f"update: the state is a plain {shape} and the new value a batch of examples "
            f"{example}{' with dynamic dims' if any(new.dims) else ''}; a plain state is "
            "every example's own only with the shape of one example, static in every "
            "dimension")
    return MaskedBatch._make(old.expand(new.data.shape), None, new.dims)


__all__ = [name for name in dir(_torch_functional) if not name.startswith("_")] + [
    "stack", "batch_zeros", "batch_ones", "batch_empty", "size_as_tensor", "maxsize",
    "split_dim", "join_dims", "causal_mask", "batch_sum", "batch_mean", "update", "cat",
]
