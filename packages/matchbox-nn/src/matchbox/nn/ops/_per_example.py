"""Argument checks shared by matchbox-nn's basic families (softmax, norms, losses, ...).

Dimension numbers in a call are those of one example, whose dimension 0 is its
own batch dimension of size one; an op that would work across dimension 0 of a
batch would mix examples, so it is refused with an error naming the op and the
argument.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox.masked_batch import MaskedBatch, normalize_dim


def example_dim(op: str, dim: Any, rank: int, argument: str = "dim") -> int:
    """``dim`` normalised to ``[1, rank)``; dimension 0 (the batch) raises."""
    if dim is None:
        raise ValueError(
            f"{op}: {argument}=None (PyTorch's implicit, deprecated choice of dimension) is not "
            f"supported for batches; pass {argument} explicitly"
        )
    d = normalize_dim(dim, rank, op)
    if d == 0:
        raise ValueError(
            f"{op}: {argument}={dim} is dimension 0, the batch dimension of each example (size "
            "one); working across it would mix the examples of a batch"
        )
    return d


def only_input_batched(op: str, input: Any, **shared: Any) -> None:
    """Raise unless ``input`` is the batch and every named argument is a plain value."""
    if not isinstance(input, MaskedBatch):
        raise TypeError(f"{op}: the input must be the MaskedBatch; got {_plain(input)}")
    for name, value in shared.items():
        if isinstance(value, MaskedBatch):
            raise NotImplementedError(
                f"{op}: {name} must be a plain tensor shared by every example, not a "
                "MaskedBatch"
            )


def _plain(value: Any) -> str:
    """What a plain argument is, and the likeliest reason it is not a batch."""
    if not isinstance(value, torch.Tensor):
        return type(value).__name__
    return (
        f"Tensor of shape {tuple(value.shape)}: a plain tensor is the same for every example "
        "(values computed from plain tensors only, or from a batch's .data, are plain; "
        "compute them from the batch itself)"
    )
