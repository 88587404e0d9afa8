"""``torch.fft`` on batches: the transforms (``fft``, ``ifft``, ``rfft``, ``irfft``,
``hfft``, ``ihfft`` and their ``2``/``n`` forms) and ``fftshift``/``ifftshift``.

Per example, as the loop runs them, over the dimensions ``dim`` names (never dimension 0,
each example's batch dimension):

- over a static dimension the transform runs on the data as it is: each row of the
  transformed dimensions is an example's own, padding (in another, dynamic dimension)
  only reaches padding;
- over a dynamic dimension each example's transform reads its own length, which the
  padded length cannot stand for (padding would enter every frequency), unless the
  output length is given (``n=``, or the entry of ``s=``): torch then zero-pads (or
  trims) each example's signal to it, and so does the batch, whose padding is filled
  with 0 first (a ``torch.where``: padding, NaN included, reaches neither a value nor a
  gradient).  The dimension is then static in the result.  Without it the transform is
  refused, naming the op, the dimension and what to write.  ``fftshift``/``ifftshift``
  (a roll by each example's own half length) are refused over a dynamic dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from matchbox import _lengths, _masking, _registry
from matchbox._arguments import example_dim
from matchbox._batch import Batch
from matchbox._sizes import refuse_size_number
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.reductions import reduced_layout

FAMILY = "fft"
_NAMES = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
ONE = [getattr(torch.fft, n) for n in _NAMES if hasattr(torch.fft, n)]
TWO = [getattr(torch.fft, n + "2") for n in _NAMES if hasattr(torch.fft, n + "2")]
MANY = [getattr(torch.fft, n + "n") for n in _NAMES if hasattr(torch.fft, n + "n")]
SHIFTS = [torch.fft.fftshift, torch.fft.ifftshift]
WHY = "the transform would mix the examples"


def _as_list(value: Any) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, (int, torch.SymInt)):
        return [value]
    return list(value)


def _dynamic_message(op: str, argument: str, d: int) -> str:
    return (f"{op}: dimension {d} is dynamic (each example's own length), and without "
            f"{argument} each example's transform has its own length, which the padded "
            f"one cannot stand for (padding would enter every frequency); pass {argument} "
            f"(each example's signal zero-padded or trimmed to it, as torch does), or make "
            f"the dimension static (every example one length)")


def _transform(op: str, input: Any, sizes: list[Any] | None, dims: list[int],
               argument: str, call: Any) -> Any:
    if not isinstance(input, MaskedBatch):
        raise NotImplementedError(f"{op}: only the input may be a batch")
    for size in sizes or ():
        refuse_size_number(op, argument, size)  # (the loop's would be each example's own)
        if isinstance(size, Batch):
            raise TypeError(f"{op}: {argument} must be the same ints for every example; a "
                            "batch of per-example lengths is not supported")
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"{op}: dims must be unique")
    dynamic = []
    for i, d in enumerate(dims):
        if input.dims[d - 1]:
            if sizes is None or sizes[i] == -1:
                raise NotImplementedError(_dynamic_message(op, argument, d))
            dynamic.append(d)
    data = input.data
    mask, new_dims = input._mask, input.dims
    if dynamic:
        data = _masking.fill_padding(input, 0.0)
        mask, _ = reduced_layout(input, tuple(sorted(dynamic)), True)
        new_dims = tuple(False if i in dynamic else d for i, d in enumerate(input.dims, 1))
    result = call(data)
    return MaskedBatch._make(result, _masking.fit_mask(mask, result, new_dims), new_dims)


@_lengths.aware
@_registry.implements(*ONE, family=FAMILY)
def fft_one(func, input, n=None, dim=-1, norm=None):
    op = _registry.op_name(func)
    d = example_dim(op, dim, input.dim(), why=WHY)
    return _transform(op, input, None if n is None else [n], [d], "n=",
                      lambda data: func(data, n, d, norm))


def _dims_and_sizes(op: str, input: Any, s: Any, dim: Any, default: Sequence[int] | None
                    ) -> tuple[list[Any] | None, list[int]]:
    sizes = _as_list(s)
    asked = _as_list(dim)
    if asked is None:
        if sizes is not None:
            asked = list(range(-len(sizes), 0))
        elif default is not None:
            asked = list(default)
        else:
            if not input.dims:
                raise ValueError(f"{op}: the examples are scalars (dims ()); their only "
                                 "dimension is each example's dimension 0, the batch's")
            asked = list(range(1, input.dim()))
    if sizes is not None and len(sizes) != len(asked):
        raise RuntimeError(f"{op}: when given, dim and shape arguments must have the same "
                           f"length (s={list(sizes)}, dim={asked})")
    return sizes, [example_dim(op, d, input.dim(), why=WHY) for d in asked]


@_lengths.aware
@_registry.implements(*TWO, family=FAMILY)
def fft_two(func, input, s=None, dim=(-2, -1), norm=None):
    op = _registry.op_name(func)
    sizes, dims = _dims_and_sizes(op, input, s, dim, (-2, -1))
    return _transform(op, input, sizes, dims, "s=",
                      lambda data: func(data, sizes, dims, norm))


@_lengths.aware
@_registry.implements(*MANY, family=FAMILY)
def fft_many(func, input, s=None, dim=None, norm=None):
    op = _registry.op_name(func)
    sizes, dims = _dims_and_sizes(op, input, s, dim, None)
    return _transform(op, input, sizes, dims, "s=",
                      lambda data: func(data, sizes, dims, norm))


@_lengths.aware
@_registry.implements(*SHIFTS, family=FAMILY)
def fft_shift(func, input, dim=None):
    op = _registry.op_name(func)
    _, dims = _dims_and_sizes(op, input, None, dim, None)
    for d in dims:
        if input.dims[d - 1]:
            raise NotImplementedError(
                f"{op}: dimension {d} is dynamic (each example's own length): each example "
                "would roll by half its own length, which this op does not do for batches; "
                "make the dimension static, or roll each example: torch.roll(x, shifts, d) "
                "with a static shift")
    return MaskedBatch._make(func(input.data, dims), input._mask, input.dims)
