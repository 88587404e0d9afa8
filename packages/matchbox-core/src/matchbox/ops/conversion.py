"""Conversions: dtype casts keep the layout; device moves take it along.

One rule for every batch type (registered for ``"Batch"``): the op runs on
``data`` and the batch type rebuilds itself around the result
(``_with_data``: a ``MaskedBatch``'s mask, a ``PackedBatch``'s layout tensors
follow the data to its device).  Dtype queries (``torch.is_floating_point``)
answer for the data, as the methods do.  A jagged ``torch.nested`` tensor beside a
``MaskedBatch`` is refused, naming the conversions (``from_nested``/``to_nested``).
"""

from __future__ import annotations

import sys
from typing import Any

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
    _refuse_multihead_attn_mask(input)
    return func(input.data)


# How many frames above the handler nn.MultiheadAttention.forward can be: the
# handler, the dispatch's frames, __torch_function__, the module's forward.
_FRAMES = 12


def _refuse_multihead_attn_mask(input: Any) -> None:
    """``nn.MultiheadAttention.forward`` asks ``torch.is_floating_point(attn_mask)``
    first, then calls ``F._none_or_dtype(attn_mask)``, which accepts no batch and
    raises torch's own error ("input to _none_or_dtype() must be None or
    torch.Tensor"), before anything Matchbox could read: here, where the module asks
    of a batch as attn_mask, the refusal names the argument and what to write."""
    forward = torch.nn.MultiheadAttention.forward.__code__
    frame = sys._getframe(2)
    for _ in range(_FRAMES):
        if frame is None:
            return
        if frame.f_code is forward:
            if frame.f_locals.get("attn_mask") is input:
                raise TypeError(
                    "nn.MultiheadAttention: attn_mask must be a plain tensor of the padded "
                    "sizes (L, S) or (num_heads, L, S), shared by every example (each reads "
                    "its top-left corner, as a loop slicing it to its lengths would); a "
                    f"{type(input).__name__} of per-example masks is not supported. Hide "
                    "each example's own keys with key_padding_mask (a batch of (1, S) "
                    "masks), or call the module on each example")
            return
        frame = frame.f_back


if _jagged.NESTED is not None:
    _registry.register_conversion(_jagged.NESTED, MaskedBatch.__name__, _jagged.refuse_mixing)
