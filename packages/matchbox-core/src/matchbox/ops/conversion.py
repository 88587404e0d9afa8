"""Conversions: dtype casts keep the mask; device moves take the mask along.

Dtype queries (``torch.is_floating_point``) answer for the data, as the methods do.
"""

from __future__ import annotations

import torch

from matchbox import _lengths, _registry
from matchbox.masked_batch import MaskedBatch

_CASTS = ["float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte",
          "bool", "type_as", "type"]


@_lengths.aware
@_registry.implements(*[getattr(torch.Tensor, name) for name in _CASTS], family="conversion")
def cast(func, input, *args, **kwargs):
    args = tuple(a.data if isinstance(a, MaskedBatch) else a for a in args)
    if not isinstance(input, MaskedBatch):
        # ``t.type_as(batch)``: the batch's dtype (and device), a plain tensor as in the loop.
        return func(input, *args, **kwargs)
    data = func(input.data, *args, **kwargs)
    if not isinstance(data, torch.Tensor):  # ``x.type()``: the name of the data's type
        return data
    return MaskedBatch._make(data, input._mask, input.dims)


@_lengths.aware
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


@_lengths.aware
@_registry.implements(torch.is_floating_point, torch.is_complex, family="conversion")
def dtype_query(func, input):
    # Modules ask this of their mask arguments (nn.MultiheadAttention's
    # key_padding_mask): the answer is the data's, the same for every example.
    return func(input.data)
