"""Conversions: dtype casts keep the layout; device moves take it along.

One rule for every batch type (registered for ``"Batch"``): the op runs on
``data`` and the batch type rebuilds itself around the result
(``_with_data``: a ``MaskedBatch``'s mask, a ``PackedBatch``'s layout tensors
follow the data to its device).  Dtype queries (``torch.is_floating_point``)
answer for the data, as the methods do.  A jagged ``torch.nested`` tensor beside a
``MaskedBatch`` is refused, naming the conversions (``from_nested``/``to_nested``).
"""

from __future__ import annotations

import torch

from matchbox import _jagged, _lengths, _registry
from matchbox._batch import Batch
from matchbox.masked_batch import MaskedBatch

CASTS = ["float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte",
         "bool", "type_as", "type"]


@_lengths.aware
@_registry.implements(*[getattr(torch.Tensor, name) for name in CASTS], family="conversion",
                      batch_type="Batch")
def cast(func, input, *args, **kwargs):
    args = tuple(a.data if isinstance(a, Batch) else a for a in args)
    if not isinstance(input, Batch):
        # ``t.type_as(batch)``: the batch's dtype (and device), a plain tensor as in the loop.
        return func(input, *args, **kwargs)
    data = func(input.data, *args, **kwargs)
    if not isinstance(data, torch.Tensor):  # ``x.type()``: the name of the data's type
        return data
    return input._with_data(data)


@_lengths.aware
@_registry.implements(torch.Tensor.contiguous, family="conversion", batch_type="Batch")
def contiguous(func, input, *args, **kwargs):
    """The data in contiguous memory (it is, unless a view made it otherwise)."""
    return input._with_data(input.data.contiguous(*args, **kwargs))


@_lengths.aware
@_registry.implements(torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu, torch.Tensor.detach,
                      torch.detach, torch.Tensor.requires_grad_, torch.Tensor.detach_,
                      family="conversion", batch_type="Batch")
def method(func, input, *args, **kwargs):
    """Tensor methods the batch types implement themselves (``to``, ``cuda``, ``detach``, ...)."""
    # ``x.to(other_batch)`` means other's dtype and device: pass its data, or
    # Batch.to -> data.to(batch) would dispatch back here forever.
    args = tuple(a.data if isinstance(a, Batch) else a for a in args)
    if not isinstance(input, Batch):
        return func(input, *args, **kwargs)
    return getattr(type(input), func.__name__)(input, *args, **kwargs)


@_lengths.aware
@_registry.implements(torch.is_floating_point, torch.is_complex, family="conversion",
                      batch_type="Batch")
def dtype_query(func, input):
    # Modules ask this of their mask arguments (nn.MultiheadAttention's
    # key_padding_mask): the answer is the data's, the same for every example.
    return func(input.data)


if _jagged.NESTED is not None:
    _registry.register_conversion(_jagged.NESTED, MaskedBatch.__name__, _jagged.refuse_mixing)
