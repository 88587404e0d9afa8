"""``F.pad`` on batches: every mode, per example, along static and dynamic dimensions.

Semantics: each example is padded as ``F.pad`` pads it alone.  Along a dynamic
dimension the right-hand padding goes after each example's own end, and
``'reflect'``, ``'replicate'`` and ``'circular'`` read the example's own edges,
so the batch builds, for every output position, the input position it copies
(one ``gather`` per padded dimension) from each example's size, by ATen's own
index rules (negative pads crop).  The result's
mask holds each example's new size.  This is what ``nn.Conv1d``/``nn.Conv2d``
call for a ``padding_mode`` other than ``'zeros'``.

An example PyTorch cannot pad (a reflection as long as the example, a circular
pad wrapping more than once, an empty example with a non-constant mode) makes
the batch raise, naming the example and repeating PyTorch's reason.  So does a
circular pad that wraps more than once around what a negative pad leaves:
PyTorch accepts it and returns uninitialised memory.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    MaskedBatch,
    guard_gradient,
    implements,
    lengths_along,
    mask_from_lengths,
    mask_lengths,
    op_name,
)
from matchbox.nn.ops._windows import example_sizes

MODES = ("constant", "reflect", "replicate", "circular")


@mask_lengths.aware
@implements(F.pad, family="padding")
def pad(func, input, pad, mode="constant", value=None):
    op = op_name(func)
    if not isinstance(input, MaskedBatch):
        raise TypeError(f"{op}: the input must be the MaskedBatch, got {type(input).__name__}")
    pads = [int(p) for p in pad]
    if len(pads) % 2 or len(pads) // 2 > input.dim() - 1:
        raise ValueError(
            f"{op}: pad {tuple(pad)} must hold a (left, right) pair for each of at most "
            f"{input.dim() - 1} trailing dimensions; dimension 0 is each example's batch "
            "dimension (size one) and cannot be padded")
    if mode not in MODES:
        raise ValueError(f"{op}: mode must be one of {MODES}, got {mode!r}")
    # (dimension, left, right) for each padded dimension, last dimension first.
    padded = [(input.dim() - 1 - k, pads[2 * k], pads[2 * k + 1]) for k in range(len(pads) // 2)]
    if input._mask is None or not any(input.dims[dim - 1] for dim, _, _ in padded):
        # Every example has the batch's sizes where it is padded: PyTorch's pad is theirs.
        return MaskedBatch._make(func(input.data, pad, mode=mode, value=value), input._mask,
                                 input.dims)
    _check_examples(op, func, input, pad, mode, value, padded)
    data = input.data
    valid = None
    lengths = {}
    for dim, left, right in padded:
        size = example_sizes(input, dim)  # (batch, 1)
        index, inside = _source_positions(size, data.size(dim), left, right, mode)
        data = _gather(data, dim, index)
        if inside is not None:
            inside = inside.reshape(_along(data, dim, inside.size(1)))
            valid = inside if valid is None else valid & inside
        lengths[dim] = (size + left + right).clamp(min=0)
    if valid is not None:
        fill = torch.full((), 0.0 if value is None else value, dtype=data.dtype,
                          device=data.device)
        data = torch.where(valid, data, fill)
    columns = [lengths[dim] if dim in lengths else example_sizes(input, dim)
               for dim in range(1, input.dim()) if input.dims[dim - 1]]
    new = torch.cat(columns, 1)
    mask = mask_from_lengths(new, data.shape, input.dims)
    # A negative pad may leave an example empty in one dynamic dimension only.
    mask = (mask_lengths.rebuilt(mask, new, input.dims) if mask_lengths.any_carried((input,))
            else mask_lengths.settle(mask, new))
    # Output padding positions copy clamped positions, some of them real: guard.
    return MaskedBatch._make(guard_gradient(data, mask), mask, input.dims)


def _source_positions(size: torch.Tensor, padded: int, left: int, right: int,
                      mode: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """For each output position, the input position it copies: ``(batch, out)``.

    ATen's index rules, in the input's coordinates ``v = out - left``:
    ``'reflect'`` mirrors around the example's first and last positions and
    ``'replicate'`` clamps to them (a negative pad then just crops), while
    ``'circular'`` first crops, then wraps around what is left.  For
    ``'constant'`` also where the position is inside the example (elsewhere
    the output is ``value``).
    """
    out = torch.arange(max(padded + left + right, 0), device=size.device).unsqueeze(0)
    v = out - left
    inside = None
    if mode == "constant":
        inside = (v >= 0) & (v < size)
    elif mode == "reflect":
        v = v.abs()
        v = torch.where(v >= size, 2 * (size - 1) - v, v)
    elif mode == "replicate":
        v = torch.minimum(v.clamp(min=0), size - 1)
    else:  # circular
        crop_left, crop_right = max(-left, 0), max(-right, 0)
        core = (size - crop_left - crop_right).clamp(min=1)
        v = crop_left + torch.remainder(v - crop_left, core)
    index = v.clamp(0, max(padded - 1, 0)).expand(size.size(0), out.size(1))
    return index, inside


def _along(data: torch.Tensor, dim: int, size: int) -> list[int]:
    shape = [data.size(0)] + [1] * (data.dim() - 1)
    shape[dim] = size
    return shape


def _gather(data: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    if data.size(dim) == 0:  # nothing to copy: every output position is constant fill
        shape = list(data.shape)
        shape[dim] = index.size(1)
        return data.new_zeros(shape)
    index = index.reshape(_along(data, dim, index.size(1)))
    shape = list(data.shape)
    shape[dim] = index.size(dim)
    return data.gather(dim, index.expand(shape))


def _check_examples(op: str, func: Any, input: MaskedBatch, pad: Any, mode: str, value: Any,
                    padded: list[tuple[int, int, int]]) -> None:
    """Raise PyTorch's own error for the first example it would refuse alone.

    PyTorch's checks are per dimension and hold for every size above the
    smallest refused one, so each padded dynamic dimension is checked (on the
    meta device: no data) at its shortest example's size.
    """
    for dim, left, right in padded:
        if not input.dims[dim - 1]:
            continue
        sizes = lengths_along(input, dim)
        shortest = int(sizes.argmin())
        core = int(sizes[shortest]) - max(-left, 0) - max(-right, 0)
        if mode == "circular" and min(left, right) < 0 and max(left, right) > core:
            # PyTorch checks the wrap against the uncropped size and then reads
            # uninitialised memory: refuse rather than copy that.
            raise ValueError(
                f"{op}: circular padding {(left, right)} of dimension {dim} wraps example "
                f"{shortest} more than once after cropping (it keeps {core} positions); "
                "PyTorch gives undefined values for it")
        shape = list(input.data.shape)
        shape[0], shape[dim] = 1, int(sizes[shortest])
        try:
            func(torch.empty(shape, dtype=input.dtype, device="meta"), pad, mode=mode,
                 value=value)
        except (RuntimeError, ValueError, NotImplementedError) as error:
            raise type(error)(
                f"{op}: example {shortest} (size {shape[dim]} in dimension {dim}) cannot be "
                f"padded with {tuple(pad)} in mode {mode!r}: {error}") from None
