"""``layer_norm`` / ``nn.LayerNorm`` and ``rms_norm`` / ``nn.RMSNorm`` over trailing dims.

Semantics: the normalised dimensions (the last ``len(normalized_shape)``) must
be static, so every row of them is all real or all padding (a mask has size
one there) and each row is normalised on its own: the op runs once on the
batch data and the result keeps the input's mask.  The affine weight's and
bias's gradients sum over rows, padding rows included, so when either needs a
gradient padding is zeroed first (a zero row normalises to finite values) and
the gradient at padding rows is dropped (core's mixing rule).

Normalising over a dynamic dimension is refused with an error naming the
dimension: in the loop ``normalized_shape`` would have to equal every
example's own size there, which is the static case.  ``F.rms_norm`` appeared
in torch 2.4; on older torch it is simply not registered.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from matchbox import _masking, _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.nn.ops._per_example import only_input_batched


def check_normalized_dims(op: str, input: Any, normalized_shape: Any) -> None:
    """Every normalised dimension is a static, non-batch dimension of ``input``."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    rank = input.dim()
    if len(shape) >= rank:
        raise ValueError(
            f"{op}: normalized_shape {list(shape)} covers all {rank} dimensions of each "
            "example, including dimension 0, the batch dimension of each example; normalise "
            "over the dimensions after it"
        )
    for i in range(rank - len(shape), rank):
        if input.dims[i - 1]:
            raise ValueError(
                f"{op}: normalized_shape {list(shape)} covers dimension {i}, which is dynamic "
                "(its size differs between examples); normalise over static dimensions only"
            )


def _rowwise(op: str, func: Any, input: MaskedBatch, normalized_shape: Any,
             params: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> MaskedBatch:
    """``func`` on the batch data; padding zeroed when a parameter gradient mixes rows."""
    only_input_batched(op, input, **params)
    check_normalized_dims(op, input, normalized_shape)
    mixes = _masking.mixing_mask(input._mask, input.data) is not None and any(
        isinstance(p, torch.Tensor) and p.requires_grad for p in params.values())
    data = _masking.fill_padding(input, 0, running=True) if mixes else input.data
    out = func(data, normalized_shape, *params.values(), *args, **kwargs)
    if mixes:
        out = _masking.guard_gradient(out, input._mask)
    return MaskedBatch._make(out, input._mask, input.dims)


@_registry.implements(F.layer_norm, torch.layer_norm, family="normalization")
def layer_norm(func, input, normalized_shape, weight=None, bias=None, *args, **kwargs):
    op = _registry.op_name(func)
    return _rowwise(op, func, input, normalized_shape, {"weight": weight, "bias": bias}, args,
                    kwargs)


@_registry.implements(getattr(F, "rms_norm", None), getattr(torch, "rms_norm", None),
                      family="normalization")
def rms_norm(func, input, normalized_shape, weight=None, *args, **kwargs):
    op = _registry.op_name(func)
    return _rowwise(op, func, input, normalized_shape, {"weight": weight}, args, kwargs)
