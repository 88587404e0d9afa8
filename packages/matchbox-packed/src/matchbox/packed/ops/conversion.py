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
    return PackedBatch._make(func(input.data, *args, **kwargs), input.layout)


@_dispatch.implements(torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu, torch.Tensor.detach,
                      torch.detach, torch.Tensor.requires_grad_, torch.Tensor.detach_,
                      family="conversion")
def method(func, input, *args, **kwargs):
    """Tensor methods the class implements itself (``to``, ``cuda``, ``detach``, ...)."""
    args = tuple(a.data if isinstance(a, PackedBatch) else a for a in args)
    if not isinstance(input, PackedBatch):
        return func(input, *args, **kwargs)
    return getattr(PackedBatch, func.__name__)(input, *args, **kwargs)
