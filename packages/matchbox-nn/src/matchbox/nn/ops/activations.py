"""Activations that are not pointwise: ``glu``, ``prelu``, ``normalize``, one rule each
for every batch type (registered for ``"Batch"``).

The pointwise activations of ``torch.nn.functional`` (``relu``, ``gelu``,
``silu``, ``elu``, ``hardtanh``, ``threshold``, ``rrelu``, ... and their in-place
forms) carry PyTorch's ``pointwise`` tag and are served by each batch type's
pointwise rule; this module holds the rest.  Each runs on the batch's values in
its own layout (``positions()`` / ``from_positions()``, the batch types'
protocol: a ``MaskedBatch``'s padded data, a ``PackedBatch``'s rows).

| op          | semantics                                                          |
|-------------|--------------------------------------------------------------------|
| ``glu``     | halves of a static dimension (rows share a mask): data as is, the  |
|             | layout kept; a dynamic dimension (halves would differ per example) |
|             | is refused                                                         |
| ``prelu``   | the weight is per channel (dimension 1) or one value; its gradient |
|             | sums over positions, so padding is zeroed when it needs one; a     |
|             | per-channel weight over a dynamic dimension 1 is refused           |
| ``normalize`` | over a static dimension: data as is; over a dynamic one: the     |
|             | norm of the real positions (the batch type's own                   |
|             | ``linalg.vector_norm``), padding left out of the quotient's        |
|             | gradient (its pointwise rule)                                      |
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from matchbox.extending import (
    example_dim,
    implements,
    only_input_batched,
    op_name,
    refuse_out,
    static_dim,
)


@implements(F.glu, family="activation", batch_type="Batch")
def glu(func, input, dim=-1):
    op = op_name(func)
    only_input_batched(op, input)
    d = static_dim(op, input, dim, why="glu splits it in halves, which would be at a "
                                      "different position in every example (make it static, "
                                      "or split each example)")
    return input.from_positions(func(input.positions(), input._data_dim(d)))


@implements(torch.prelu, torch.Tensor.prelu, family="activation", batch_type="Batch")
def prelu(func, input, weight):
    op = op_name(func)
    only_input_batched(op, input, weight=weight)
    if weight.numel() != 1:
        if input.dim() < 2:
            raise ValueError(
                f"{op}: a weight of {weight.numel()} channels needs examples with a channel "
                "dimension (dimension 1); these examples are scalars")
        if input.dims[0]:
            raise ValueError(
                f"{op}: a weight of {weight.numel()} channels reads dimension 1 of each "
                "example as the channels, but dimension 1 is dynamic (its size differs "
                "between examples); use one weight (nn.PReLU()) or put the channels there")
    shared = weight.requires_grad  # its gradient sums over every position
    return input.from_positions(func(input.positions(shared), weight), shared)


@implements(F.normalize, family="activation", batch_type="Batch")
def normalize(func, input, p=2.0, dim=1, eps=1e-12, out=None):
    op = op_name(func)
    only_input_batched(op, input, p=p, eps=eps)
    refuse_out(op, out)
    d = example_dim(op, dim, input.dim())
    if not input.dims[d - 1]:
        return input.from_positions(func(input.positions(), p, input._data_dim(d), eps))
    # Over a dynamic dimension, through the batch type's own ops: its norm fills padding
    # with each order's neutral value (and refuses an empty example where the loop would,
    # for orders without one); its division keeps padding out of the norm's gradient.
    return input / torch.linalg.vector_norm(input, p, d, True).clamp_min(eps)
