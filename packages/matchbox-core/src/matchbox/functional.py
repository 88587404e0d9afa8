"""``import matchbox.functional as F``: ``torch.nn.functional`` plus Matchbox's extras.

Every ``torch.nn.functional`` name is here unchanged (batches reach Matchbox
through PyTorch's ``__torch_function__`` protocol, so nothing is replaced),
except ``cross_entropy``, which also takes the original Matchbox's layout (see
:func:`cross_entropy`) and otherwise is PyTorch's; the extras below work on
batches and on plain tensors alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as _torch_functional
from torch.nn.functional import *  # noqa: F403

from matchbox import _capture, _lengths
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


def cross_entropy(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
    """``torch.nn.functional.cross_entropy``, also taking the original Matchbox's layout.

    The original Matchbox's ``cross_entropy`` read the classes in the *last*
    dimension: logits ``(1, T, C)`` against class-index targets ``(1, T)``, as its
    transformer's ``F.cross_entropy(logits, batch.trg[:, 1:], reduce=reduce)``.
    PyTorch reads them in dimension 1 (``(1, C, T)``).  When the targets fit the
    classes-last layout and not PyTorch's, the logits' last dimension is moved to
    dimension 1 (``input.movedim(-1, 1)``) and PyTorch's function runs; a call that
    PyTorch's layout fits is PyTorch's call, unchanged (so a plain ``(1, C, C)``
    against ``(1, C)`` reads the classes in dimension 1, as PyTorch does).

    On a batch, the layout is told by the dims: logits ``(1, T, C)`` with ``T``
    dynamic and ``C`` static against targets ``(1, T)``.  An example whose ``T``
    equals ``C`` would be read PyTorch's way by the loop over the examples, so
    such a batch is refused, saying to write ``logits.movedim(-1, 1)``.
    """
    if _classes_last(input, target):
        input = input.movedim(-1, 1)
    return _torch_functional.cross_entropy(input, target, *args, **kwargs)


def _classes_last(input: Any, target: Any) -> bool:
    """Whether ``cross_entropy(input, target)`` is the original Matchbox's classes-last
    call that PyTorch's classes-in-dimension-1 layout does not fit."""
    if not all(isinstance(a, (torch.Tensor, MaskedBatch)) for a in (input, target)):
        return False
    if input.dim() < 3 or target.dim() != input.dim() - 1 or target.is_floating_point():
        return False
    batched = isinstance(input, MaskedBatch), isinstance(target, MaskedBatch)
    if not any(batched):
        torch_layout = tuple(target.shape) == (input.shape[0], *input.shape[2:])
        return not torch_layout and tuple(target.shape) == tuple(input.shape[:-1])
    if not all(batched) or type(input) is not MaskedBatch or type(target) is not MaskedBatch:
        return False
    # Per example (dims leave out the batch dimension): PyTorch's layout pairs the
    # target's dimension j with the input's j + 1, the original's with the input's j.
    def static_sizes_agree(offset: int) -> bool:
        return all(target.dims[j] or target.data.size(j + 1) == input.data.size(j + 1 + offset)
                   for j in range(target.dim() - 1))

    if target.dims != input.dims[:-1] or input.dims[-1] or not static_sizes_agree(0):
        return False
    if target.dims == input.dims[1:] and static_sizes_agree(1):
        return False  # PyTorch's layout fits every example: PyTorch's call
    # Classes last by the dims.  An example whose dynamic sizes would let PyTorch's
    # layout fit too is read PyTorch's way by the loop: refuse the batch.
    classes = input.data.size(-1)
    ambiguous = None
    for j in range(1, target.dim() - 1):  # input dim j + 1 against target dim j
        pairs = [(input, j + 1), (target, j)]
        sizes = [_lengths.along(b, d) if b.dims[d - 1] else
                 torch.full((b.data.size(0),), b.data.size(d), device=b.data.device)
                 for b, d in pairs]
        same = sizes[0] == sizes[1]
        ambiguous = same if ambiguous is None else ambiguous & same
    last = target.dim() - 1  # the target's last dimension against the input's classes
    sizes = (_lengths.along(target, last) if target.dims[last - 1] else
             torch.full((target.data.size(0),), target.data.size(last), device=target.data.device))
    same = sizes == classes
    ambiguous = same if ambiguous is None else ambiguous & same
    if _capture.fails(ambiguous):
        example = int(ambiguous.nonzero()[0, 0])
        raise ValueError(
            f"cross_entropy: logits {_example_shape(input, example)} against targets "
            f"{_example_shape(target, example)} (example {example}) fit both PyTorch's "
            "layout (classes in dimension 1) and the original Matchbox's (classes last), "
            "so the loop over the examples would read that example PyTorch's way and the "
            "others the original's; say which: F.cross_entropy(logits.movedim(-1, 1), "
            "target) for classes last")
    return True


def _example_shape(batch: MaskedBatch, example: int) -> tuple[int, ...]:
    return (1, *(int(_lengths.along(batch, d)[example]) if batch.dims[d - 1]
                 else batch.data.size(d) for d in range(1, batch.dim())))


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
    "cross_entropy",
]
