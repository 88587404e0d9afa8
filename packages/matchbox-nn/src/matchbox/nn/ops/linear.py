"""``F.linear`` / ``nn.Linear`` and ``F.bilinear`` / ``nn.Bilinear``: products with a
shared weight and bias.

``linear`` is one rule for every batch type (registered for ``"Batch"``): the
feature dimension (the last) must be static, and the product runs on the real
rows only (``rows()`` / ``from_rows()``, the batch types' protocol): a
``MaskedBatch``'s real rows are gathered once and scattered back with zeros at
padding (``matchbox.rows``), so padding is never read, gets no
gradient, and costs no work; a ``PackedBatch``'s rows are its data.  The
weight's and the bias's gradients sum over the real rows only.

``bilinear`` (``MaskedBatch``) takes two batches of the same layout (up to the
feature sizes); a row is real where it is real in both; padding rows are zeroed
before the product and their gradient is dropped after it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from matchbox.extending import (
    Batch,
    MaskedBatch,
    check_lengths_agree,
    combine_masks,
    guard_gradient,
    implements,
    mixing_mask,
    only_input_batched,
    op_name,
    pad_to,
    static_trailing,
)


@implements(F.linear, family="linear", batch_type="Batch")
def linear(func, input, weight, bias=None):
    if not isinstance(input, Batch) or isinstance(weight, Batch) or isinstance(bias, Batch) or \
            not input.dims or input.dims[-1]:  # (checked inline first: a hot path)
        op = op_name(func)
        only_input_batched(op, input, weight=weight, bias=bias)
        static_trailing(op, input, 1, "the feature dimension (the last)")
    features = input.data.size(-1)
    if weight.dim() not in (1, 2) or features != weight.size(-1):
        # PyTorch would name the flattened padded batch ("(15x4 and 5x2)"), not the example.
        raise ValueError(
            f"{op_name(func)}: each example has {features} features (its last dimension) but "
            f"the weight of shape {tuple(weight.shape)} expects {weight.size(-1)}"
        )
    # A weight vector (features,) sums the last dimension away: one output feature, dropped.
    vector = weight.dim() == 1
    if vector:
        weight = weight.unsqueeze(0)
        bias = None if bias is None else bias.reshape(1)
    out = func(input.rows(1), weight, bias)
    return input.from_rows(out.squeeze(-1) if vector else out, 1)


@implements(F.bilinear, torch.bilinear, family="linear")
def bilinear(func, input1, input2, weight, bias=None, *args):
    op = op_name(func)
    if not isinstance(input1, MaskedBatch) or not isinstance(input2, MaskedBatch):
        raise NotImplementedError(f"{op}: input1 and input2 must both be batches (of the same "
                                  "examples); weight and bias are shared by every example")
    if isinstance(weight, MaskedBatch) or isinstance(bias, MaskedBatch):
        raise NotImplementedError(f"{op}: weight and bias must be plain tensors shared by every "
                                  "example")
    if input1.dims != input2.dims:
        raise ValueError(f"{op}: input1 has dims {input1.dims} but input2 has {input2.dims}; "
                         "the examples' shapes must agree except in the last dimension")
    if input1.dims[-1]:
        raise ValueError(f"{op}: the feature dimension (the last) of the inputs is dynamic; a "
                         "bilinear layer needs it static")
    for i, dynamic in enumerate(input1.dims[:-1], start=1):
        if dynamic:
            size = max(input1.data.size(i), input2.data.size(i))
            input1, input2 = pad_to(input1, i, size), pad_to(input2, i, size)
            check_lengths_agree(op, [(input1, i), (input2, i)])
    mask = combine_masks([input1._mask, input2._mask])
    fill = mixing_mask(mask, input1.data)
    zero = torch.zeros((), dtype=input1.dtype, device=input1.device)
    first, second = input1.data, input2.data
    if fill is not None:
        first, second = torch.where(fill, first, zero), torch.where(fill, second, zero)
    data = func(first, second, weight, bias, *args)
    return MaskedBatch._make(guard_gradient(data, mask), mask, input1.dims)
