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

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch._dispatch.python import no_python_dispatcher
from torch.utils._python_dispatch import _disable_current_modes

from matchbox.extending import (
    MaskedBatch,
    fails,
    guard_gradient,
    implements,
    lengths_along,
    mask_from_lengths,
    mask_lengths,
    op_name,
    refuse_size_number,
    running,
)
from matchbox.nn.ops._windows import example_sizes

MODES = ("constant", "reflect", "replicate", "circular")


@mask_lengths.aware
@implements(F.pad, family="padding")
def pad(func, input, pad, mode="constant", value=None):
    op = op_name(func)
    if not isinstance(input, MaskedBatch):
        raise TypeError(f"{op}: the input must be the MaskedBatch, got {type(input).__name__}")
    if any(isinstance(p, MaskedBatch) for p in pad):
        raise NotImplementedError(
            f"{op}: a pad width is a batch (one value per example); per-example widths are "
            "not implemented: each width must be the same int for every example (pad to the "
            "largest width and mask the positions with torch.where)")
    refuse_size_number(op, "pad width", pad)  # x.maxsize(1): each example's own in the loop
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
    """Raise PyTorch's own error for the shortest running example it would refuse alone.

    PyTorch's checks are per dimension and refuse, in each, the sizes below some
    threshold (a bad pad elsewhere refuses every size), found on the meta device (no
    data) for each padded dynamic dimension: :func:`_smallest_padded`.  Whether an
    example is that short is asked through ``fails``: one host sync eagerly, a flag of
    the graph while ``matchbox.compile`` captures it.  Nothing is asked where every size
    can be padded (a constant pad that does not crop).
    """
    # While matchbox.compile captures with symbolic sizes a padded size is a symbol (no
    # hash for the cache, and an int of it would fix it): any size that every pad fits
    # stands for it (each dimension's own sizes are checked in its own turn).
    fits = sum(abs(p) for p in pad) + 2
    shape = [s if isinstance(s, int) else fits for s in input.data.shape]
    shape[0] = 1
    for dim, left, right in padded:
        if not input.dims[dim - 1]:
            continue
        smallest = _smallest_padded(func, tuple(shape), dim, tuple(pad), mode, value,
                                    input.dtype, left, right)
        if smallest == 0:
            continue
        sizes = lengths_along(input, dim)
        failing = running(sizes < smallest if smallest is not None
                          else torch.ones_like(sizes, dtype=torch.bool))
        if fails(failing):
            raise _refusal(op, func, input, pad, mode, value, (dim, left, right), sizes,
                           failing) from None


@functools.lru_cache(maxsize=512)
def _smallest_padded(func: Any, shape: tuple[int, ...], dim: int, pad: tuple[int, ...],
                     mode: str, value: Any, dtype: torch.dtype, left: int, right: int
                     ) -> int | None:
    """The smallest size of dimension ``dim`` from which on PyTorch pads an example of
    ``shape`` (and Matchbox does not refuse a circular pad; see :func:`_refused`);
    ``None``: no size.

    Every size from the smallest one padded on is padded (checked for every mode and
    pads in [-4, 4]), and it is at most ``|left| + |right| + 1``: a binary search."""

    def padded(size: int) -> bool:
        return _refused(func, shape, dim, pad, mode, value, dtype, left, right, size) is None

    high = abs(left) + abs(right) + 2
    if not padded(high):
        return None
    low = 0
    while low < high:  # padded(high) holds
        middle = (low + high) // 2
        if padded(middle):
            high = middle
        else:
            low = middle + 1
    return high


def _refused(func: Any, shape: tuple[int, ...], dim: int, pad: Any, mode: str, value: Any,
             dtype: torch.dtype, left: int, right: int, size: int,
             op: str = "", example: int = 0) -> Exception | None:
    """The error for an example of size ``size`` in dimension ``dim``, or ``None``."""
    core = size - max(-left, 0) - max(-right, 0)
    if mode == "circular" and min(left, right) < 0 and max(left, right) > core:
        # PyTorch checks the wrap against the uncropped size and then reads
        # uninitialised memory: refuse rather than copy that.
        return ValueError(
            f"{op}: circular padding {(left, right)} of dimension {dim} wraps example "
            f"{example} more than once after cropping (it keeps {core} positions); "
            "PyTorch gives undefined values for it")
    shape = list(shape)
    shape[dim] = size
    try:
        # Outside any mode: a capture in progress (its fake and proxy modes) would record
        # the probe in the graph; and outside the Python dispatcher a capture with symbolic
        # sizes turns on, whose decomposition of a constant pad let a crop of an empty
        # example through (a threshold of 0, cached for eager calls too).
        with _disable_current_modes(), no_python_dispatcher():
            func(torch.empty(shape, dtype=dtype, device="meta"), pad, mode=mode, value=value)
    except (RuntimeError, ValueError, NotImplementedError) as error:
        return type(error)(
            f"{op}: example {example} (size {size} in dimension {dim}) cannot be "
            f"padded with {tuple(pad)} in mode {mode!r}: {error}")
    return None


def _refusal(op: str, func: Any, input: MaskedBatch, pad: Any, mode: str, value: Any,
             padded: tuple[int, int, int], sizes: torch.Tensor, failing: torch.Tensor
             ) -> Exception:
    """The error for the shortest of the ``failing`` examples (read on the host: it is
    raised next)."""
    dim, left, right = padded
    candidates = failing.nonzero().flatten()
    example = int(candidates[sizes[candidates].argmin()])
    shape = list(input.data.shape)
    shape[0] = 1
    error = _refused(func, tuple(shape), dim, tuple(pad), mode, value, input.dtype,
                     left, right, int(sizes[example]), op, example)
    if error is None:  # not expected: the sizes refused are those below the smallest padded
        error = RuntimeError(f"{op}: example {example} cannot be padded with {tuple(pad)} "
                             f"in mode {mode!r}")
    return error
