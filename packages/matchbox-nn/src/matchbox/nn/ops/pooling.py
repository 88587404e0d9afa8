"""Pooling over dynamic spatial dimensions: max, average, power-average and adaptive.

Semantics (per example, the loop is the oracle; windows as in ``_windows.py``):

| op                     | padding filled with | per example                                 |
|------------------------|---------------------|---------------------------------------------|
| ``max_pool1d/2d``      | -inf                | windows read real values and -inf only;     |
|                        |                     | ``return_indices`` gives the example's own  |
|                        |                     | flat positions (``h * W_i + w``)            |
| ``avg_pool1d/2d``      | 0                   | window sums divided by the example's own    |
|                        |                     | count (``count_include_pad``, ``ceil_mode``)|
| ``lp_pool1d/2d``       | (as avg / max)      | PyTorch's formula over the batched pools    |
| ``adaptive_*_pool1d/2d`` | (windows gathered)| windows from each example's own size; the   |
|                        |                     | pooled dimensions become static             |

Sliding pools run one PyTorch pooling call for the batch.  Average pooling
sums each window in that call (``divisor_override=1``) and divides by each
example's own window count, which depends on where the example ends.  An
example that is empty or shorter than the window gets an empty output (PyTorch
raises for it alone) and, as in the loop, no gradient.  Adaptive pooling has no
output for an empty example (its output size is fixed): that raises, naming the
example, as the loop does.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    BATCH_SIZES,
    MaskedBatch,
    fails,
    fill_padding,
    guard_gradient,
    implements,
    lengths_along,
    mask_from_lengths,
    op_name,
    size_as_a_number,
)
from matchbox.nn.ops._windows import Windows, as_tuple, check_input, example_sizes, pool_size

MAX_POOLS = {F.max_pool1d: 1, F.max_pool1d_with_indices: 1, torch.max_pool1d: 1,
             F.max_pool2d: 2, F.max_pool2d_with_indices: 2, torch.max_pool2d: 2}
AVG_POOLS = {torch.avg_pool1d: 1, F.avg_pool2d: 2}
LP_POOLS = {F.lp_pool1d: 1, F.lp_pool2d: 2}
ADAPTIVE_POOLS = {torch.adaptive_avg_pool1d: (1, "avg"), F.adaptive_avg_pool2d: (2, "avg"),
                  F.adaptive_max_pool1d: (1, "max"), F.adaptive_max_pool2d: (2, "max"),
                  F.adaptive_max_pool1d_with_indices: (1, "max"),
                  F.adaptive_max_pool2d_with_indices: (2, "max")}
WITH_INDICES = {F.max_pool1d_with_indices, F.max_pool2d_with_indices,
                F.adaptive_max_pool1d_with_indices, F.adaptive_max_pool2d_with_indices}


def _lowest(dtype: torch.dtype) -> float:
    return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min


def _stride(stride: Any, kernel: tuple[int, ...], n: int, op: str) -> tuple[int, ...]:
    # PyTorch reads a missing (None or empty) stride as the kernel size.
    if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0):
        return kernel
    return as_tuple(stride, n, op, "stride")


# ---------------------------------------------------------------- max


@implements(*MAX_POOLS, family="pooling")
def max_pool(func, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False):
    op = op_name(func)
    n = MAX_POOLS[func]
    check_input(op, input, n)
    kernel = as_tuple(kernel_size, n, op, "kernel_size")
    size_fns = [pool_size(k, s, p, d, ceil_mode) for k, s, p, d in zip(
        kernel, _stride(stride, kernel, n, op), as_tuple(padding, n, op, "padding"),
        as_tuple(dilation, n, op, "dilation"))]
    windows = Windows(input, size_fns)
    data = windows.data(_lowest(input.dtype))
    if func in (torch.max_pool1d, torch.max_pool2d):  # ATen's signature: no return_indices
        result = func(data, kernel_size, () if stride is None else stride, padding, dilation,
                      ceil_mode)
    else:
        result = func(data, kernel_size, stride, padding, dilation, ceil_mode=ceil_mode,
                      return_indices=return_indices)
    # A padding output's window may still hold real inputs of its example (the
    # one just past its last output), so the values are guarded like the others.
    if not isinstance(result, tuple):
        return windows.result(result)
    values, indices = result
    indices = _example_flat_indices(indices, windows, data.shape[2:])
    return windows.result(values), windows.result(indices)


def _example_flat_indices(indices: torch.Tensor, windows: Windows,
                          padded: Sequence[int]) -> torch.Tensor:
    """Flat positions in the padded spatial layout -> in each example's own layout.

    PyTorch's indices count positions of the input's flattened spatial
    dimensions: in an example of width ``W_i`` that is ``h * W_i + w``, in the
    padded batch ``h * W + w``.  Only the sizes after the first dimension matter.
    """
    if not any(i in windows.dynamic for i in range(1, len(padded))):
        return indices
    rest, coords = indices, []
    for size in reversed(padded[1:]):
        coords.append(rest % size)
        rest = rest // size
    coords.append(rest)
    coords.reverse()
    flat = coords[0]
    for i in range(1, len(padded)):
        own = windows.sizes(i).reshape(-1, *[1] * (indices.dim() - 1))
        flat = flat * own + coords[i]
    return flat


# ---------------------------------------------------------------- average


@implements(*AVG_POOLS, family="pooling")
def avg_pool(func, input, kernel_size, stride=None, padding=0, ceil_mode=False,
             count_include_pad=True, divisor_override=None):
    op = op_name(func)
    n = AVG_POOLS[func]
    check_input(op, input, n)
    kernel = as_tuple(kernel_size, n, op, "kernel_size")
    strides = _stride(stride, kernel, n, op)
    pads = as_tuple(padding, n, op, "padding")
    windows = Windows(input, [pool_size(k, s, p, 1, ceil_mode)
                              for k, s, p in zip(kernel, strides, pads)])
    data = windows.data(0.0)
    if divisor_override is not None or not windows.dynamic or input._mask is None:
        # One divisor for every window, or the same sizes in every example:
        # PyTorch's own division is the example's.
        extra = {} if divisor_override is None else {"divisor_override": divisor_override}
        return windows.result(func(data, kernel_size, stride, padding, ceil_mode,
                                   count_include_pad, **extra))
    # Window sums in one call (1D as 2D over a height of one, as ATen does it),
    # then each example's own divisor: it depends on where the example ends.
    lead = (1,) * (2 - n)
    sums = F.avg_pool2d(data.reshape(*data.shape[:2], *lead, *data.shape[2:]), lead + kernel,
                        lead + strides, (0,) * (2 - n) + pads, ceil_mode, True, 1)
    sums = sums.reshape(*sums.shape[:2], *sums.shape[4 - n:])
    counts = _window_counts(windows, sums.shape[2:], kernel, strides, pads, count_include_pad)
    return windows.result(sums / counts.to(sums.dtype))


def _window_counts(windows: Windows, out_sizes: Sequence[int], kernel: Sequence[int],
                   strides: Sequence[int], pads: Sequence[int],
                   count_include_pad: bool) -> torch.Tensor:
    """Each example's divisor for each window: ``(batch, 1, *out_sizes)``.

    ATen's rule per dimension: the window ``[start, start + k)`` is clipped to
    ``size + pad`` (the right padding); with ``count_include_pad`` that is the
    count, else it is clipped to ``[0, size)`` too.  The divisor is the product
    over dimensions.  Padding windows get at least 1 (never 0 / 0).
    """
    n = len(out_sizes)
    total = None
    for i in range(n):
        size = windows.sizes(i)  # (batch, 1)
        start = torch.arange(out_sizes[i], device=size.device) * strides[i] - pads[i]
        end = torch.minimum(start + kernel[i], size + pads[i])
        if count_include_pad:
            count = end - start
        else:
            count = torch.minimum(end, size) - start.clamp(min=0)
        view = [count.size(0), 1] + [1] * n
        view[2 + i] = out_sizes[i]
        count = count.reshape(view)
        total = count if total is None else total * count
    return total.clamp(min=1)


# ---------------------------------------------------------------- power-average


@functools.cache
def _torch_lp_pool_takes_inf() -> bool:
    # Newer PyTorch pools |x| with max for norm_type=+-inf; older computes the
    # formula below (whatever it gives).  Ask the installed version, so the
    # batch follows what its loop does.
    x = torch.tensor([[[-2.0, 1.0]]])
    return bool(F.lp_pool1d(x, float("inf"), 2).item() == 2.0)


@implements(*LP_POOLS, family="pooling")
def lp_pool(func, input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """PyTorch's own formula, on the batched pools above (so the loop's semantics)."""
    op = op_name(func)
    n = LP_POOLS[func]
    check_input(op, input, n)
    kernel = as_tuple(kernel_size, n, op, "kernel_size")
    max_pool_nd, avg_pool_nd = ((F.max_pool1d, F.avg_pool1d) if n == 1
                                else (F.max_pool2d, F.avg_pool2d))
    if norm_type in (float("inf"), float("-inf")) and _torch_lp_pool_takes_inf():
        sign = 1 if norm_type > 0 else -1
        return sign * max_pool_nd(sign * input.abs(), kernel_size, stride, 0, 1, ceil_mode)
    windows = Windows(input, [pool_size(k, s, 0, 1, ceil_mode) for k, s in zip(
        kernel, _stride(stride, kernel, n, op))])
    input = _cut_gradient_of_examples_without_output(input, windows)
    out = avg_pool_nd(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return (torch.sign(out) * F.relu(torch.abs(out))).mul(math.prod(kernel)).pow(
        1.0 / norm_type)


def _cut_gradient_of_examples_without_output(input: MaskedBatch,
                                             windows: Windows) -> MaskedBatch:
    """``input`` with the examples whose output is empty seen without gradient.

    The loop gives such an example (shorter than the window) no output, so nothing
    depends on it and its gradient is zero.  In the batch its values still go
    through the formula's ``pow`` beside the others' (its padding outputs get a
    zero gradient), and ``pow``'s backward multiplies that zero by
    ``p * x ** (p - 1)``: ``0 * inf`` is NaN for ``norm_type=inf`` (the formula
    PyTorch releases without an inf path use), and so is ``0 * nan`` for a
    negative value to a fractional power.
    """
    if not windows.dynamic or not (torch.is_grad_enabled() and input.data.requires_grad):
        return input
    has_output = None
    for i in windows.dynamic:
        nonempty = windows.output_sizes(i) > 0  # (batch, 1)
        has_output = nonempty if has_output is None else has_output & nonempty
    keep = has_output.reshape(-1, *[1] * (input.data.dim() - 1))
    data = torch.where(keep, input.data, input.data.detach())
    return MaskedBatch._make(data, input._mask, input.dims)


# ---------------------------------------------------------------- adaptive


@implements(*ADAPTIVE_POOLS, family="pooling")
def adaptive_pool(func, input, output_size, return_indices=False):
    op = op_name(func)
    n, kind = ADAPTIVE_POOLS[func]
    check_input(op, input, n)
    sizes = _adaptive_sizes(op, output_size, n)
    dims = (False,) + tuple(input.dims[1 + i] if s is None else False
                            for i, s in enumerate(sizes))
    if input._mask is None or not any(input.dims[1:]):
        # Every example has the batch's spatial sizes: PyTorch's own op serves.
        extra = {"return_indices": return_indices} if func in (
            F.adaptive_max_pool1d, F.adaptive_max_pool2d) else {}
        result = func(input.data, output_size, **extra)
        if isinstance(result, tuple):
            return tuple(MaskedBatch._make(r, input._mask, dims) for r in result)
        return MaskedBatch._make(result, input._mask, dims)
    if kind == "avg" and all(s == 1 for s in sizes):
        # PyTorch's op is then the mean over the spatial dimensions: an empty example
        # gives NaN, as it does alone, not an error.
        return torch.mean(input, tuple(range(2, 2 + n)), keepdim=True)
    _refuse_empty(op, input, n)
    windows = _AdaptiveWindows(input, sizes)
    fill = 0.0 if kind == "avg" else _lowest(input.dtype)
    gathered = windows.gather(fill_padding(input, fill))
    if kind == "avg":
        summed = torch.where(windows.valid, gathered, gathered.new_zeros(())).sum(-1)
        return windows.result(summed / windows.counts().to(summed.dtype), dims)
    values, picked = torch.where(windows.valid, gathered, gathered.new_full(
        (), fill)).max(-1)
    values = windows.result(values, dims)
    if not (return_indices or func in WITH_INDICES):
        return values
    return values, windows.result(windows.flat_indices(picked), dims)


def _adaptive_sizes(op: str, output_size: Any, n: int) -> tuple[int | None, ...]:
    sizes = (output_size,) * n if output_size is None or isinstance(output_size, int) else \
        tuple(output_size)
    if len(sizes) != n:
        raise ValueError(f"{op}: output_size must be an int or {n} values, got {output_size!r}")
    for size in sizes:
        if type(size) in BATCH_SIZES:  # x.maxsize(1): each example's own in the loop, where
            raise TypeError(  # a static input would otherwise silently pool to the longest's
                f"{op}: output_size must be the same int for every example (the loop's "
                f"would be each example's own): {size_as_a_number(size)}")
    return sizes


def _refuse_empty(op: str, input: MaskedBatch, n: int) -> None:
    """Adaptive pooling of an empty example is undefined (PyTorch raises, but for an
    average to size one, its mean) and its output size is fixed, so it cannot be empty
    either: raise, naming the example."""
    for dim in range(2, 2 + n):
        if input.dims[dim - 1]:
            empty = lengths_along(input, dim) == 0
            if fails(empty):
                empty = empty.nonzero()
                raise ValueError(
                    f"{op}: example {int(empty[0])} has size 0 in dynamic dimension {dim}; "
                    "adaptive pooling of an empty input is undefined (PyTorch raises for it "
                    "alone) and its output size is fixed, so it cannot be empty either")


class _AdaptiveWindows:
    """Each example's adaptive windows, gathered into one trailing window dimension.

    Along a dimension of size ``L`` pooled to ``s``, output ``j`` reads
    ``[floor(j L / s), ceil((j + 1) L / s))`` (ATen's ``start_index`` and
    ``end_index``), with ``L`` the example's own size.  Windows are at most
    ``ceil(L_max / s) + 1`` long; each is gathered at that length, positions past
    its end marked not ``valid``.  A dimension whose ``output_size`` is ``None``
    keeps its size: its window is the position itself (no gather).
    """

    def __init__(self, input: MaskedBatch, sizes: Sequence[int | None]):
        self.input = input
        self.sizes = sizes
        self.n = len(sizes)
        self.starts: list[torch.Tensor | None] = []
        self.lengths: list[torch.Tensor] = []
        self.spans: list[int] = []
        valid = None
        for i, out in enumerate(sizes):
            size = example_sizes(input, 2 + i)
            self.lengths.append(size)
            if out is None:
                self.starts.append(None)
                self.spans.append(1)
                continue
            padded = input.data.size(2 + i)
            span = min(padded, -(-padded // out) + 1)
            j = torch.arange(out, device=size.device)
            start = (j * size) // out  # (batch, out)
            end = ((j + 1) * size + out - 1) // out
            self.starts.append(start)
            self.spans.append(span)
            inside = (start.unsqueeze(-1) + torch.arange(span, device=size.device)
                      < end.unsqueeze(-1))  # (batch, out, span)
            inside = inside.reshape(inside.size(0), 1, *self._place(i, out, span))
            valid = inside if valid is None else valid & inside
        if valid is None:  # no dimension pooled: each window is its position
            valid = torch.ones([1] * (2 + 2 * self.n), dtype=torch.bool, device=input.device)
        self.valid = valid.flatten(2 + self.n)

    def _place(self, i: int, out: int, span: int) -> list[int]:
        """``out`` at output position ``i`` and ``span`` at window position ``i``."""
        shape = [1] * (2 * self.n)
        shape[i], shape[self.n + i] = out, span
        return shape

    def gather(self, data: torch.Tensor) -> torch.Tensor:
        """``(batch, C, *outputs, window)``: each output's window, in row-major order."""
        batch, channels = data.shape[:2]
        for i, (start, span) in enumerate(zip(self.starts, self.spans)):
            if start is None:
                continue
            dim = 2 + i
            positions = (start.unsqueeze(-1) + torch.arange(span, device=data.device)).clamp(
                max=data.size(dim) - 1).flatten(1)  # (batch, out * span)
            shape = [batch] + [1] * (data.dim() - 1)
            shape[dim] = positions.size(1)
            index = positions.reshape(shape).expand(
                *data.shape[:dim], positions.size(1), *data.shape[dim + 1:])
            data = data.gather(dim, index)
        # (batch, C, out_1, span_1, out_2, span_2) -> (batch, C, out_1, out_2, span_1 * span_2)
        outs = [data.size(2 + i) // span for i, span in enumerate(self.spans)]
        data = data.reshape(batch, channels, *[x for o, s in zip(outs, self.spans)
                                               for x in (o, s)])
        order = [0, 1] + [2 + 2 * i for i in range(self.n)] + [3 + 2 * i for i in range(self.n)]
        return data.permute(order).flatten(2 + self.n)

    def counts(self) -> torch.Tensor:
        return self.valid.sum(-1)

    def flat_indices(self, picked: torch.Tensor) -> torch.Tensor:
        """The window position ``picked`` as a flat index into the example's own input."""
        flat = None
        for i in range(self.n):
            offset = (picked // math.prod(self.spans[i + 1:])) % self.spans[i]
            outputs = picked.size(2 + i)
            if self.starts[i] is None:  # a kept dimension: the position is the output's
                first = torch.arange(outputs, device=picked.device).unsqueeze(0)
            else:
                first = self.starts[i]
            position = self._along(i, first) + offset
            flat = position if flat is None else flat * self._along(i, self.lengths[i]) \
                + position
        return flat

    def _along(self, i: int, values: torch.Tensor) -> torch.Tensor:
        """``(batch or 1, size)`` values laid along output dimension ``i`` (size 1 -> all)."""
        shape = [values.size(0), 1] + [1] * self.n
        if values.size(1) > 1:
            shape[2 + i] = values.size(1)
        return values.reshape(shape)

    def result(self, out: torch.Tensor, dims: tuple[bool, ...]) -> MaskedBatch:
        kept = [i for i, s in enumerate(self.sizes) if s is None and dims[1 + i]]
        if not kept:
            return MaskedBatch._make(out, None, dims)
        lengths = torch.cat([self.lengths[i] for i in kept], 1)
        mask = mask_from_lengths(lengths, out.shape, dims)
        return MaskedBatch._make(guard_gradient(out, mask), mask, dims)
