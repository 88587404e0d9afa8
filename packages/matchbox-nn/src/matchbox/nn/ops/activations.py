"""Activations that are not pointwise: ``glu``, ``prelu``, ``normalize``.

The pointwise activations of ``torch.nn.functional`` (``relu``, ``gelu``,
``silu``, ``elu``, ``hardtanh``, ``threshold``, ``rrelu``, ... and their in-place
forms) carry PyTorch's ``pointwise`` tag and are served by matchbox-core's
pointwise rule; this module holds the rest.

| op          | semantics                                                          |
|-------------|--------------------------------------------------------------------|
| ``glu``     | halves of a static dimension (rows share a mask): data as is, mask |
|             | kept; a dynamic dimension (halves would differ per example) is     |
|             | refused                                                            |
| ``prelu``   | the weight is per channel (dimension 1) or one value; its gradient |
|             | sums over positions, so padding is zeroed when it needs one; a     |
|             | per-channel weight over a dynamic dimension 1 is refused           |
| ``normalize`` | over a static dimension: data as is; over a dynamic one: the     |
|             | norm of the real positions (core's masked norm), padding left out  |
|             | of the quotient's gradient                                         |
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from matchbox import _masking, _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.nn.ops._per_example import example_dim, only_input_batched


@_registry.implements(F.glu, family="activation")
def glu(func, input, dim=-1):
    op = _registry.op_name(func)
    only_input_batched(op, input)
    d = example_dim(op, dim, input.dim())
    if input.dims[d - 1]:
        raise ValueError(
            f"{op}: dim={dim} is dynamic; glu splits it in halves, which would be at a "
            "different position in every example (make it static, or split each example)")
    return MaskedBatch._make(func(input.data, d), input._mask, input.dims)


@_registry.implements(torch.prelu, torch.Tensor.prelu, family="activation")
def prelu(func, input, weight):
    op = _registry.op_name(func)
    only_input_batched(op, input, weight=weight)
    if weight.numel() != 1:
        if input.dim() < 2:
            raise ValueError(
                f"{op}: a weight of {weight.numel()} channels needs examples with a channel "
                "dimension (dimension 1); these examples are scalars")
        if input.dims[0]:
            raise ValueError(
                f"{op}: a weight of {weight.numel()} channels reads dimension 1 as the "
                "channels, but dimension 1 is dynamic (its size differs between examples)")
    mask = input._mask
    mixes = _masking.mixing_mask(mask, input.data) is not None and weight.requires_grad
    out = func(_masking.fill_padding(input, 0, running=True) if mixes else input.data, weight)
    if mixes:
        out = _masking.guard_gradient(out, mask)
    return MaskedBatch._make(out, mask, input.dims)


@_registry.implements(F.normalize, family="activation")
def normalize(func, input, p=2.0, dim=1, eps=1e-12, out=None):
    op = _registry.op_name(func)
    only_input_batched(op, input)
    _registry.refuse_out(op, out)
    d = example_dim(op, dim, input.dim())
    if input._mask is None or not input.dims[d - 1]:
        return MaskedBatch._make(func(input.data, p, d, eps), input._mask, input.dims)
    # Core's norm fills padding with each order's neutral value (and refuses
    # an empty example where the loop would, for orders without one).
    norm = torch.linalg.vector_norm(input, p, d, True).data
    numerator = _masking.fill_padding(input, 0)
    quotient = numerator / norm.clamp_min(eps).expand_as(numerator)
    return MaskedBatch._make(_masking.guard_gradient(quotient, input._mask), input._mask,
                             input.dims)
