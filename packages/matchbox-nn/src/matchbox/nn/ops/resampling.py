"""Resampling and rearranging ops over static dimensions: ``F.interpolate`` (``nn.Upsample``,
``F.upsample*``), ``F.unfold``/``F.fold`` (``nn.Unfold``/``nn.Fold``),
``F.pixel_shuffle``/``F.pixel_unshuffle`` and ``F.channel_shuffle``.

Per example, as the loop runs them on ``(1, C, *spatial)``: the batch's data is the same
call's ``(N, C, *spatial)`` with ``N`` the batch size, every example its own sample, so the
op runs once on the data.  That is each example's result only where the dimensions the op
resamples or rearranges are static: over a dynamic one each example's output would depend
on its own size (``interpolate``'s positions, ``unfold``'s windows), and padding would
enter the last real positions.  Those are refused, naming the op, the dimension and what
to write.  ``interpolate`` takes a dynamic channel dimension too (each channel is
resampled alone: padding channels only reach padding channels).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    Batch,
    MaskedBatch,
    fit_mask,
    implements,
    is_batch,
    op_name,
    refuse_size_number,
)

FAMILY = "resampling"


def _check(op: str, input: Any, first: int, what: str, instead: str,
           numbers: tuple[Any, ...] = ()) -> None:
    """``input`` a batch whose dimensions from ``first`` on are static; ``numbers`` (sizes,
    factors) the same plain numbers for every example."""
    if not is_batch(input) or not isinstance(input, MaskedBatch):
        raise NotImplementedError(f"{op}: only the input may be a batch (a MaskedBatch)")
    for value in numbers:
        for v in (value if isinstance(value, (tuple, list)) else (value,)):
            # (x.maxsize(d), x.size(0): the loop's would be each example's own)
            refuse_size_number(op, "size or factor", v)
            if isinstance(v, Batch):
                raise TypeError(f"{op}: sizes and factors must be the same numbers for "
                                "every example; a batch of them is not supported")
    if input.dim() <= first:
        raise ValueError(f"{op}: each example must be (1, C, ...) (got rank {input.dim()})")
    for i in range(first, input.dim()):
        if input.dims[i - 1]:
            raise NotImplementedError(
                f"{op}: dimension {i} ({what}) is dynamic (each example's own size): each "
                "example's result would depend on its own size, and padding would enter its "
                f"last real positions; {instead}")


def _rebuilt(input: MaskedBatch, result: torch.Tensor) -> MaskedBatch:
    return MaskedBatch._make(result, fit_mask(input._mask, result, input.dims), input.dims)


_ALONE = ("make it static (every example one size) or run the op on each example: "
          "[{call} for e in x.examples()]")


@implements(F.interpolate, family=FAMILY)
def interpolate(func, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    op = op_name(func)
    _check(op, input, 2, "a spatial dimension",
           _ALONE.format(call="F.interpolate(e, ...)"), (size, scale_factor))
    result = func(input.data, size, scale_factor, mode, align_corners, recompute_scale_factor,
                  antialias)
    return _rebuilt(input, result)


@implements(F.unfold, family=FAMILY)
def unfold(func, input, kernel_size, dilation=1, padding=0, stride=1):
    op = op_name(func)
    _check(op, input, 1, "channels or spatial", _ALONE.format(call="F.unfold(e, ...)"),
           (kernel_size, dilation, padding, stride))
    return _rebuilt(input, func(input.data, kernel_size, dilation, padding, stride))


@implements(F.fold, family=FAMILY)
def fold(func, input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    op = op_name(func)
    _check(op, input, 1, "blocks or their count", _ALONE.format(call="F.fold(e, ...)"),
           (output_size, kernel_size, dilation, padding, stride))
    return _rebuilt(input, func(input.data, output_size, kernel_size, dilation, padding,
                                stride))


@implements(*[getattr(torch, name) for name in ("pixel_shuffle", "pixel_unshuffle",
                                                 "channel_shuffle") if hasattr(torch, name)],
            family=FAMILY)
def shuffle(func, input, factor):
    op = op_name(func)
    _check(op, input, 1, "channels or spatial", _ALONE.format(call=f"{op}(e, ...)"),
           (factor,))
    return _rebuilt(input, func(input.data, factor))
