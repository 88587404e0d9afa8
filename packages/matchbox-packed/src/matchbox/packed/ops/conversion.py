"""Conversions: dtype casts and device moves of a ``PackedBatch`` keep its layout.

Casts run on ``data``; device moves move ``data`` and the layout's device
tensors (``batch_sizes`` stays on the CPU, where PyTorch's packed ops read it).
"""

from __future__ import annotations

import torch

from matchbox.ops.conversion import _CASTS
from matchbox.packed import _dispatch
from matchbox.packed.packed_batch import PackedBatch


@_dispatch.implements(*[getattr(torch.Tensor, name) for name in _CASTS], family="conversion")
def cast(func, input, *args, **kwargs):
    args = tuple(a.data if isinstance(a, PackedBatch) else a for a in args)
    data = func(input.data, *args, **kwargs)
    if not isinstance(data, torch.Tensor):  # ``x.type()``: the name of the data's type
        return data
    return PackedBatch._make(data, input.layout)


@_dispatch.implements(torch.Tensor.contiguous, family="conversion")
def contiguous(func, input, *args, **kwargs):
    """The rows in contiguous memory (they are, unless a view made them otherwise)."""
    return PackedBatch._make(input.data.contiguous(*args, **kwargs), input.layout)


@_dispatch.implements(torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu, torch.Tensor.detach,
                      torch.detach, torch.Tensor.requires_grad_, torch.Tensor.detach_,
                      family="conversion")
def method(func, input, *args, **kwargs):
    """Tensor methods the class implements itself (``to``, ``cuda``, ``detach``, ...)."""
    args = tuple(a.data if isinstance(a, PackedBatch) else a for a in args)
    if not isinstance(input, PackedBatch):
        return func(input, *args, **kwargs)
    return getattr(PackedBatch, func.__name__)(input, *args, **kwargs)
