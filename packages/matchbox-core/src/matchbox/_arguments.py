"""Argument checks shared by every op family and every batch type.

Dimension numbers in a call are those of one example, whose dimension 0 is its
own batch dimension of size one: an op that would work across dimension 0 of
a batch would mix examples, so it is refused with an error naming the op and
the argument.  The checks read only what every batch type has (``dim()``,
``dims``), so one rule serves ``MaskedBatch`` and ``PackedBatch`` alike (a
``PackedBatch``'s dimension 1, the packed one, is dynamic).
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox._batch import Batch
from matchbox._sizes import refuse_size_number


def normalize_dim(op: str, dim: int, rank: int) -> int:
    """A dimension number in ``[0, rank)``; an out-of-range one names the op."""
    if not isinstance(dim, int):
        raise TypeError(f"{op}: dimension must be an int, got {type(dim).__name__}")
    if not -rank <= dim < rank:
        raise IndexError(
            f"{op}: dimension {dim} is out of range for examples of rank {rank} "
            f"(expected to be in [{-rank}, {rank - 1}])"
        )
    return dim % rank


#: Why most ops refuse dimension 0 (see :func:`example_dim`).
MIXES_EXAMPLES = "working across it would mix the examples of a batch"


def example_dim(op: str, dim: Any, rank: int, argument: str = "dim", *,
                why: str = MIXES_EXAMPLES) -> int:
    """``dim`` normalised to ``[1, rank)``; ``None`` and dimension 0 (the batch) raise.

    ``why`` says what the op would do to dimension 0 (the default: mix the examples).
    """
    if dim is None:
        raise ValueError(
            f"{op}: {argument}=None (PyTorch's implicit, deprecated choice of dimension) is not "
            f"supported for batches; pass {argument} explicitly"
        )
    d = normalize_dim(op, dim, rank)
    if d == 0:
        raise ValueError(
            f"{op}: dimension 0 is the batch dimension of each example (size one; "
            f"{argument}={dim}); {why}"
        )
    return d


def shape_dim(op: str, dim: Any, rank: int, scalars: bool = False) -> int:
    """``dim`` of a shape op (a transpose, a split, a join), as :func:`example_dim` gives it:
    dimension 0 cannot be moved, split or removed.  ``scalars``: the batch holds
    per-example scalars, which the loop sees as 0-d tensors (losses) with no dimension 0
    to keep, so the message says how to combine them instead."""
    hint = ("; these are per-example scalars (a loss, say), 0-d in the loop but (1,) in a "
            "batch, so a new dimension 0 cannot go in front of them: combine them with + or "
            "sum([...]) instead" if scalars else "")
    return example_dim(op, dim, rank,
                       why=f"it cannot be moved, split or removed on a batch{hint}")


def sizes_argument(args: tuple[Any, ...]) -> list[Any]:
    """The sizes of ``x.view(2, 3)`` and ``x.view((2, 3))`` alike, as a list."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return list(args[0])
    return list(args)


def static_dim(op: str, input: Any, dim: Any, argument: str = "dim", *, why: str) -> int:
    """``dim`` as :func:`example_dim` gives it, which must be static in ``input``: an op
    that splits or reduces it by position (``glu``) would cut every example elsewhere."""
    d = example_dim(op, dim, input.dim(), argument)
    if input.dims[d - 1]:
        raise ValueError(
            f"{op}: {argument}={dim} is dimension {d}, which is dynamic (its size differs "
            f"between examples); {why}"
        )
    return d


def static_trailing(op: str, input: Any, count: int, what: str) -> None:
    """The last ``count`` dimensions of ``input``'s examples (``what``: a phrase naming
    them, for the message) must be static and after dimension 0: an op on each row of
    them (a linear layer, a norm) sees the same sizes in every example."""
    rank = input.dim()
    if count >= rank:
        raise ValueError(
            f"{op}: {what} would cover dimension 0 of each example, its batch dimension (size "
            f"one): examples of rank {rank} have no dimension for it after dimension 0"
        )
    for i in range(rank - count, rank):
        if input.dims[i - 1]:
            raise ValueError(
                f"{op}: {what} covers dimension {i}, which is dynamic (its size differs "
                "between examples); it must be static"
            )


def normalized_dims(op: str, input: Any, normalized_shape: Any) -> int:
    """How many trailing dimensions a norm's ``normalized_shape`` covers, checked static."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    static_trailing(op, input, len(shape), f"normalized_shape {list(shape)}")
    return len(shape)


def only_input_batched(op: str, input: Any, **shared: Any) -> None:
    """Raise unless ``input`` is a batch and every named argument is a plain value (a
    weight or bias shared by every example, a number: ``ignore_index``, ``p``, ``tau``;
    not a batch's size, which each example reads as its own in the loop)."""
    if not isinstance(input, Batch):
        raise TypeError(f"{op}: the input must be the batch; got {_plain(input)}")
    for name, value in shared.items():
        refuse_size_number(op, name, value)  # x.size(0), x.maxsize(d): each example's own
        if isinstance(value, Batch) and getattr(value, "dims", None) != ():
            raise NotImplementedError(
                f"{op}: {name} must be a plain tensor shared by every example (only the input "
                "may be a batch)"
            )
        if isinstance(value, Batch):  # one value per example
            raise NotImplementedError(
                f"{op}: {name} is a batch (one value per example, such as x.item() under "
                f"@batch), but it must be the same for every example: a number or a plain "
                f"tensor shared by every example (only the input may be a batch); a "
                f"per-example {name} is not supported: run the examples of each value "
                "separately, or pass one value for all"
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
