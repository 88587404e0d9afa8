"""Convolutions over dynamic spatial dimensions: ``conv1d``/``conv2d``/``conv3d`` and
transposed.

Semantics (per example, the loop is the oracle; see ``_windows.py``):

| example input            | dims                         | output                        |
|--------------------------|------------------------------|-------------------------------|
| ``(1, C, L)``            | ``(False, True)``            | ``(1, C_out, L_out)``         |
| ``(1, C, H, W)``         | ``(False, True, True)``, or  | ``(1, C_out, H_out, W_out)``  |
|                          | one spatial dim static       |                               |
| ``(1, C, D, H, W)``      | any spatial dims dynamic     | ``(1, C_out, D_out, ...)``    |

Padding is filled with 0 (the example's own zero padding), the weight and
bias are shared by every example, and one ``conv`` call serves the batch.
Every argument PyTorch takes is honoured: integer or ``'same'``/``'valid'``
padding, stride, dilation, groups, bias, ``output_padding`` (transposed).
``nn.Conv1d``/``nn.Conv2d``/``nn.Conv3d`` with ``padding_mode`` ``'reflect'``,
``'replicate'`` or ``'circular'`` pad through ``F.pad`` (``padding.py``),
per example.  ``nn.ConvTranspose*d(output_size=...)`` would need the input's
single size, which a dynamic dimension has not: that raises.

An example that is empty, or shorter than the kernel (PyTorch raises for it
alone), gets an empty output: size 0 in its dynamic dimensions.
"""

from __future__ import annotations

import torch

from matchbox.extending import implements, op_name, refuse_size_number
from matchbox.nn.ops._windows import (
    Windows,
    as_tuple,
    check_input,
    conv_size,
    conv_transpose_size,
    same_size,
)

SPATIAL_DIMS = {torch.conv1d: 1, torch.conv2d: 2, torch.conv3d: 3,
                torch.conv_transpose1d: 1, torch.conv_transpose2d: 2, torch.conv_transpose3d: 3}


@implements(torch.conv1d, torch.conv2d, torch.conv3d, family="convolution")
def conv(func, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    op = op_name(func)
    n = SPATIAL_DIMS[func]
    check_input(op, input, n, weight=weight, bias=bias)
    refuse_size_number(op, "groups", groups)
    kernel = tuple(weight.shape[2:])
    strides, dilations = as_tuple(stride, n, op, "stride"), as_tuple(dilation, n, op, "dilation")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"{op}: padding must be 'same', 'valid' or ints, got {padding!r}")
        if padding == "same":
            size_fns = [same_size] * n
        else:
            size_fns = [conv_size(k, s, 0, d) for k, s, d in zip(kernel, strides, dilations)]
    else:
        pads = as_tuple(padding, n, op, "padding")
        size_fns = [conv_size(k, s, p, d)
                    for k, s, p, d in zip(kernel, strides, pads, dilations)]
    windows = Windows(input, size_fns)
    out = func(windows.data(0.0), weight, bias, stride, padding, dilation, groups)
    return windows.result(out)


@implements(torch.conv_transpose1d, torch.conv_transpose2d, torch.conv_transpose3d,
            family="convolution")
def conv_transpose(func, input, weight, bias=None, stride=1, padding=0, output_padding=0,
                   groups=1, dilation=1):
    op = op_name(func)
    n = SPATIAL_DIMS[func]
    check_input(op, input, n, weight=weight, bias=bias)
    refuse_size_number(op, "groups", groups)
    # Zero-filled padding positions scatter nothing, so each example's outputs
    # below its own output size hold exactly its own contributions.
    size_fns = [conv_transpose_size(k, s, p, d, o) for k, s, p, d, o in zip(
        weight.shape[2:], as_tuple(stride, n, op, "stride"), as_tuple(padding, n, op, "padding"),
        as_tuple(dilation, n, op, "dilation"), as_tuple(output_padding, n, op,
                                                        "output_padding"))]
    windows = Windows(input, size_fns)
    out = func(windows.data(0.0), weight, bias, stride, padding, output_padding, groups,
               dilation)
    return windows.result(out)
