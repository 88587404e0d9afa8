"""``F.linear`` / ``nn.Linear`` and ``F.bilinear`` / ``nn.Bilinear``: products with a
shared weight and bias.

Semantics: rows keep their mask (the feature dimension, the last, is static).
The weight's and the bias's gradients sum over every row, so padding must not
take part: ``linear`` runs on the real rows only (gathered once, scattered
back with zeros at padding, see ``matchbox._masking.real_rows``), so padding is
never read, gets no gradient, and costs no work.  ``bilinear`` takes two
batches of the same layout (up to the feature sizes); a row is real where it
is real in both; padding rows are zeroed before the product and their
gradient is dropped after it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from matchbox import _lengths, _masking, _registry
from matchbox.masked_batch import MaskedBatch


@_registry.implements(F.linear, family="linear")
def linear(func, input, weight, bias=None):
    op = _registry.op_name(func)
    if not isinstance(input, MaskedBatch) or isinstance(weight, MaskedBatch) or isinstance(
        bias, MaskedBatch
    ):
        raise NotImplementedError(f"{op}: only the input may be a batch (weight and bias are "
                                  "shared by every example)")
    if input.dim() < 2:
        raise ValueError(f"{op}: each example must be (1, ..., features); these examples are "
                         "scalars (rank 1), with no feature dimension after dimension 0")
    if input.dims[-1]:
        raise ValueError(f"{op}: the feature dimension (the last) of the input is dynamic; "
                         "a linear layer needs it static")
    if weight.dim() not in (1, 2) or input.data.size(-1) != weight.size(-1):
        # PyTorch would name the flattened padded batch ("(15x4 and 5x2)"), not the example.
        raise ValueError(
            f"{op}: each example has {input.data.size(-1)} features (its last dimension) but "
            f"the weight of shape {tuple(weight.shape)} expects {weight.size(-1)}"
        )
    # A weight vector (features,) sums the last dimension away: one output feature, dropped.
    vector = weight.dim() == 1
    if vector:
        weight = weight.unsqueeze(0)
        bias = None if bias is None else bias.reshape(1)
    rows = _masking.real_rows(input)
    data = func(_masking.pack_rows(_masking.weight_input_data(input), rows), weight, bias)
    data = _masking.unpack_rows(data, rows, input.data.shape[:-1])
    # Padding is zero and gets no gradient already; under @batch, the rows of examples
    # that do not run the region get none either (their gradient would reach the weight).
    data = _masking.guard_gradient(data, None)
    if vector:
        mask = None if input._mask is None else _lengths.kept(input._mask.squeeze(-1),
                                                              input._mask)
        return MaskedBatch._make(data.squeeze(-1), mask, input.dims[:-1])
    return MaskedBatch._make(data, input._mask, input.dims)


@_registry.implements(F.bilinear, torch.bilinear, family="linear")
def bilinear(func, input1, input2, weight, bias=None, *args):
    op = _registry.op_name(func)
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
            input1, input2 = _masking.pad_to(input1, i, size), _masking.pad_to(input2, i, size)
            _masking.check_lengths_agree(op, [(input1, i), (input2, i)])
    mask = _masking.combine_masks([input1._mask, input2._mask])
    fill = _masking.mixing_mask(mask, input1.data)
    zero = torch.zeros((), dtype=input1.dtype, device=input1.device)
    first, second = input1.data, input2.data
    if fill is not None:
        first, second = torch.where(fill, first, zero), torch.where(fill, second, zero)
    data = func(first, second, weight, bias, *args)
    return MaskedBatch._make(_masking.guard_gradient(data, mask), mask, input1.dims)
