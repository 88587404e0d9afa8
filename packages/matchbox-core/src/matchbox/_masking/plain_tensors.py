"""The plain tensors beside a batch in dimension 0, each example's batch dimension (size
one): one row shared by every example, or one expanded from it to the batch size
(:func:`matchbox._layout.expanded_row`); any other is refused, with a hint where it was
most likely built with ``x.size(0)`` as a size; and a plain square tensor built at a
dynamic dimension's padded size, in a product (:func:`check_padded_square`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from matchbox import _lengths
from matchbox._capture import fails
from matchbox._execution import running
from matchbox._layout import expanded_row


def check_plain_batch_dim(op: str, args: Sequence[Any], rank: int,
                          batch_size: int | None = None) -> list[Any]:
    """A plain tensor of full rank must have size one in dimension 0.

    Or the batch size, with stride 0 there: an ``expand`` of size one, the same
    for every example (``encodings.unsqueeze(0).expand(x.maxsize())``, as the
    original Matchbox's code wrote it); it stands as its first row.  Returns the
    arguments with such tensors narrowed to that row.
    """
    out = list(args)
    for k, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.dim() == rank and a.size(0) != 1:
            if (row := expanded_row(a, batch_size)) is not a:
                out[k] = row
                continue
            if rank == 1:
                raise ValueError(_against_scalars(op, a.size(0)))
            raise ValueError(_with_a_row_per_example(op, a, batch_size))
    return out


def _with_a_row_per_example(op: str, tensor: torch.Tensor, batch_size: int | None) -> str:
    """Why a plain tensor of more than one row in dimension 0 cannot meet a batch; with
    the batch size there, most often built with ``x.size(0)`` as a size
    (``torch.zeros(x.size(0), H)``, a state), what to build instead."""
    message = (
        f"{op}: a plain tensor argument has size {tensor.size(0)} in dimension 0, which is "
        "the batch dimension of each example (size one); a tensor shared by all examples "
        "must have size 1 there or fewer dimensions (or be expanded to the batch size from "
        "size 1, as expand(x.maxsize()) does)"
    )
    if batch_size is None or tensor.size(0) != batch_size:
        return message
    sizes = ", ".join(str(n) for n in tensor.shape[1:])
    return message + (
        f". Its size is the batch size: built with x.size(0) as a size (torch.zeros("
        f"x.size(0), {sizes}), a state), it is a plain tensor, which cannot be told from "
        f"one holding a row per example; build a batch, one row per example, with "
        f"x.new_zeros(x.size(0), {sizes}), or share one row, torch.zeros(1, {sizes})"
    )


def _against_scalars(op: str, size: int) -> str:
    """Why a plain vector cannot meet a batch of per-example scalars (a counter)."""
    return (
        f"{op}: a plain tensor of shape ({size},) meets a batch of per-example scalars (a "
        "counter, a length, x.sum()); in the loop each example's scalar broadcasts to shape "
        f"({size},), but a batch holds each example with dimension 0 of size one (its batch "
        f"dimension), so no batch can hold ({size},) per example. Give the plain tensor a "
        f"leading dimension of size one, e.g. torch.arange({size}).unsqueeze(0) < n: each "
        f"example's result is then (1, {size}), in the loop and in the batch"
    )


def check_padded_square(op: str, plain: torch.Tensor, dim: int, kept: int,
                        batch: Any, batch_dim: int) -> None:
    """A plain tensor meeting a batch's dynamic dimension ``batch_dim`` along its ``dim``,
    in a product that keeps its dimension ``kept`` of the same size in the result, must
    have each running example's length there.

    Such a tensor is most often built at the padded size (``A = torch.ones(T,
    T).tril()``, ``T = x.maxsize(1)``, a causal sum): each example meets its own first
    ``n`` columns of it (a plain tensor longer than an example along a dynamic dimension
    is read as a prefix), but keeps all ``T`` rows, where the loop, building ``A`` at the
    example's own size, gives it ``n``.  A tensor of a fixed size would not fit the
    shorter examples in the loop either.  Costs a comparison of lengths (a device sync
    outside ``@batch``) only where the plain tensor is square across the two.
    """
    size = plain.size(dim)
    if size <= 1 or plain.size(kept) != size or batch._mask is None:
        return
    lengths = _lengths.along(batch, batch_dim)
    failing = running(lengths != size)

    def error() -> ValueError:
        j = int(failing.nonzero()[0])
        n = int(lengths[j])
        return ValueError(
            f"{op}: a plain tensor of shape {tuple(plain.shape)}, shared by every example, "
            f"meets dimension {batch_dim} of the batch, which is dynamic, with size {size}, "
            f"and keeps another dimension of size {size} in the result; example {j} has "
            f"{n} there. Built at example {j}'s own size, as the loop builds it (x.maxsize"
            f"({batch_dim}) is the longest example's), it would be {n} long in both, and so "
            f"would that dimension of the result, where here every example keeps {size}; a "
            f"tensor of a fixed size would not fit example {j} in the loop either. Build it "
            f"from the batch, one per example (torch.ones_like(scores).tril() of scores = "
            f"x @ x.transpose(1, 2), x.causal_mask)"
        )

    if fails(failing, error):
        raise error()
