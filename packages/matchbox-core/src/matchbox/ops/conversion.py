"""Conversions: dtype casts keep the mask; device moves take the mask along."""

from __future__ import annotations

import torch

from matchbox import _registry
from matchbox.masked_batch import MaskedBatch

_CASTS = ["float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte",
          "bool", "type_as"]


@_registry.implements(*[getattr(torch.Tensor, name) for name in _CASTS], family="conversion")
def cast(func, input, *args, **kwargs):
    args = tuple(a.data if isinstance(a, MaskedBatch) else a for a in args)
    return MaskedBatch._make(func(input.data, *args, **kwargs), input.mask, input.dims)


@_registry.implements(torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu, torch.Tensor.detach,
                      torch.detach, torch.Tensor.requires_grad_, torch.Tensor.detach_,
                      family="conversion")
def method(func, input, *args, **kwargs):
    """Tensor methods the class implements itself (``to``, ``cuda``, ``detach``, ...)."""
    # ``x.to(other_batch)`` means other's dtype and device: pass its data, or
    # MaskedBatch.to -> data.to(batch) would dispatch back here forever.
    args = tuple(a.data if isinstance(a, MaskedBatch) else a for a in args)
    if not isinstance(input, MaskedBatch):
        return func(input, *args, **kwargs)
    return getattr(MaskedBatch, func.__name__)(input, *args, **kwargs)
