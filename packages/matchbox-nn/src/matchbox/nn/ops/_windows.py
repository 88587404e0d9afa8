"""Sliding windows over dynamic spatial dimensions: what convolution and pooling share.

An example is ``(1, channels, *spatial)``; channels are static, each spatial
dimension may be dynamic.  The batch runs the op ONCE on the padded data,
after filling padding with the value of the example's own implicit padding
(0 for convolution and average pooling, -inf for max pooling).  A window of an
example then reads exactly what it reads alone: its real values, then the fill,
which equals what PyTorch pads it with.  (A window that fits the example's
output size never reaches beyond its own right padding; pooling windows that
overhang with ``ceil_mode`` are clipped by PyTorch and read only fill.)

Each example's output size comes from PyTorch's own formula applied to its
own input size (:func:`output_size`); output positions past it are padding
in the result's mask.  The result is guarded (:func:`guard_gradient`) so a
gradient arriving at a padding position never reaches a weight or a real input.

Empty outputs: PyTorch raises for an example that is empty in a spatial
dimension or whose output size would be below 1 (an input shorter than the
kernel).  In a batch such an example gets an empty output: size 0 in every
dynamic dimension (a mask cannot hold an extent in one dynamic dimension when
another is empty).  When every example is that short, the padded data is
grown (with fill) just enough for PyTorch to accept the batched call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    MaskedBatch,
    fill_padding,
    guard_gradient,
    lengths_along,
    mask_from_lengths,
    mixing_mask,
    refuse_size_number,
)

# An example's output size along one dimension, from its input size (int64 tensor).
SizeFn = Callable[[torch.Tensor], torch.Tensor]

LAYOUTS = {1: "(1, channels, length)", 2: "(1, channels, height, width)",
           3: "(1, channels, depth, height, width)"}


def as_tuple(value: Any, n: int, op: str, argument: str) -> tuple[int, ...]:
    """An int or a sequence of ``n`` ints as an ``n``-tuple (PyTorch's broadcasting lists);
    a batch's size among them is refused (each example's own in the loop)."""
    refuse_size_number(op, argument, value)
    if isinstance(value, int):
        return (value,) * n
    values = tuple(value)
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise ValueError(f"{op}: {argument} must be an int or a sequence of {n}, got {value!r}")
    return values


def check_input(op: str, input: Any, n: int, **shared: Any) -> None:
    """The input must be a batch of ``(1, channels, *spatial)`` with static channels.

    ``shared`` are the other tensor arguments (weight, bias): one value for
    every example, so they may not be batches.
    """
    for name, value in shared.items():
        if isinstance(value, MaskedBatch):
            raise NotImplementedError(
                f"{op}: the {name} is a MaskedBatch; only the input may be a batch (the "
                f"{name} is shared by every example)")
    if not isinstance(input, MaskedBatch):
        raise TypeError(f"{op}: the input must be the MaskedBatch, got {type(input).__name__}")
    if input.dim() != n + 2:
        raise ValueError(
            f"{op}: each example must be {LAYOUTS[n]} (rank {n + 2}), got rank {input.dim()}; "
            f"a rank-{n + 1} example would be read by PyTorch as unbatched, channels first")
    if input.dims[0]:
        raise ValueError(
            f"{op}: dimension 1 of the input (the channels) is dynamic; the channels must be "
            "static (every example has the same number), as the weight fixes them")


def example_sizes(input: MaskedBatch, dim: int) -> torch.Tensor:
    """Each example's size in dimension ``dim``: ``(batch, 1)`` int64.

    A static dimension, or a batch without padding, has the padded size everywhere.
    """
    if input.dims[dim - 1] and input._mask is not None:
        return lengths_along(input, dim).unsqueeze(1)
    return torch.full((input.data.size(0), 1), input.data.size(dim), device=input.device)


class Windows:
    """One sliding-window op over a batch: fills and grows its input, masks its output.

    ``size_fns[i]`` is PyTorch's output-size formula for spatial dimension ``i``
    (``input.dim() - n + i``), applied to int64 tensors of input sizes.
    """

    def __init__(self, input: MaskedBatch, size_fns: Sequence[SizeFn]):
        self.input = input
        self.size_fns = list(size_fns)
        self.n = len(self.size_fns)
        self.dynamic = [i for i in range(self.n) if input.dims[i + 1]]
        self.grown = False
        self._sizes: dict[int, torch.Tensor] = {}

    def sizes(self, i: int) -> torch.Tensor:
        """Each example's input size in spatial dimension ``i``: ``(batch, 1)`` int64."""
        if i not in self._sizes:
            self._sizes[i] = example_sizes(self.input, 2 + i)
        return self._sizes[i]

    def output_sizes(self, i: int) -> torch.Tensor:
        """Each example's output size in spatial dimension ``i``: ``(batch, 1)`` int64."""
        return output_size(self.sizes(i), self.size_fns[i])

    def data(self, fill: float) -> torch.Tensor:
        """The padded data with padding replaced by ``fill``, grown if every example is short.

        Growing is only needed when every example is empty or too short in a
        dynamic dimension: no output position is real then, and the batch still
        gets its one batched call.
        """
        data = self.input.data
        if mixing_mask(self.input._mask, self.input.data) is not None:
            data = fill_padding(self.input, fill, running=True)
        pads: list[int] = []
        for i in reversed(range(self.n)):
            current = data.size(2 + i)
            needed = current
            if i in self.dynamic and (current == 0 or int(self.size_fns[i](
                    torch.tensor(current))) < 1):
                needed = _smallest_accepted(self.size_fns[i], current)
            pads += [0, needed - current]
        if any(pads):
            self.grown = True
            data = F.pad(data, pads, value=fill)
        return data

    def result(self, out: torch.Tensor, *, guard: bool = True) -> MaskedBatch:
        """The batch of ``out`` with each example's own output sizes as its mask.

        ``guard`` drops gradients arriving at padding positions: needed when the
        op mixes positions into a shared parameter or into neighbouring inputs.
        """
        dims = self.input.dims
        if not self.dynamic:
            mask = self.input._mask  # static spatial dims: a per-example mask carries over
        elif self.input._mask is None and not self.grown:
            mask = None  # every example has the padded size, so the padded output size
        else:
            lengths = torch.cat([self.output_sizes(i) for i in self.dynamic], 1)
            mask = mask_from_lengths(lengths, out.shape, dims)
        if guard:
            out = guard_gradient(out, mask)
        return MaskedBatch._make(out, mask, dims)


def _smallest_accepted(fn: SizeFn, current: int) -> int:
    """The smallest input size from ``current`` up whose output has a position."""
    start = max(current, 1)
    for limit in (64, 4096, 1 << 20):  # the formulas grow by one per stride
        candidates = torch.arange(start, start + limit)
        accepted = (fn(candidates) >= 1).nonzero()
        if accepted.numel():
            return int(candidates[accepted[0, 0]])
    return current  # no size is accepted: PyTorch's own call reports the arguments


def output_size(size: torch.Tensor, fn: SizeFn) -> torch.Tensor:
    """``fn(size)`` where PyTorch defines the output; 0 for an empty input or an output
    below 1 (where PyTorch raises for a single example)."""
    out = fn(size)
    return torch.where((size > 0) & (out > 0), out, torch.zeros_like(out))


# ---------------------------------------------------------------- PyTorch's size formulas


def conv_size(kernel: int, stride: int, padding: int, dilation: int) -> SizeFn:
    return lambda size: (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def conv_transpose_size(kernel: int, stride: int, padding: int, dilation: int,
                        output_padding: int) -> SizeFn:
    return lambda size: ((size - 1) * stride - 2 * padding + dilation * (kernel - 1)
                         + output_padding + 1)


def pool_size(kernel: int, stride: int, padding: int, dilation: int,
              ceil_mode: bool) -> SizeFn:
    """``pooling_output_shape`` of ATen: a ceil-mode window may not start in the right padding."""

    def fn(size: torch.Tensor) -> torch.Tensor:
        span = size + 2 * padding - dilation * (kernel - 1) - 1
        if not ceil_mode:
            return span // stride + 1
        out = (span + stride - 1) // stride + 1
        return torch.where((out - 1) * stride >= size + padding, out - 1, out)

    return fn


def same_size(size: torch.Tensor) -> torch.Tensor:
    return size
