"""Layers that treat every row alike: ``linear``, ``embedding``, ``dropout``, norms,
and the activations that are not pointwise (``glu``, ``prelu``, ``normalize``).

Semantics: each runs once on the packed rows (``data``), which are exactly
the real rows, so there is nothing to mask and no work on padding; the
result keeps the input's layout.  Shared arguments (weights, biases) must be
plain tensors.  An op that would treat the packed dimension 1 as a feature
(a ``linear`` on examples ``(1, T)``, a ``layer_norm`` whose
``normalized_shape`` reaches dimension 1) is refused: it would mix the
positions of one example, which rows alone cannot do.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from matchbox import _registry
from matchbox.masked_batch import normalize_dim
from matchbox.packed import _dispatch
from matchbox.packed.packed_batch import PackedBatch


def _shared(op: str, **arguments: Any) -> None:
    for name, value in arguments.items():
        if isinstance(value, PackedBatch):
            raise NotImplementedError(f"{op}: only the input may be a batch; {name} is shared "
                                      "by every example and must be a plain tensor")


def _static_features(op: str, input: PackedBatch, what: str) -> None:
    if input.dim() < 3:
        raise ValueError(
            f"{op}: the {what} is the last dimension of each example, which is dimension 1, "
            f"the packed dimension, for examples of rank {input.dim()}; add a static feature "
            "dimension (examples (1, length, features))"
        )


@_dispatch.implements(F.linear, family="layers")
def linear(func, input, weight, bias=None):
    op = _registry.op_name(func)
    _shared(op, weight=weight, bias=bias)
    _static_features(op, input, "feature dimension")
    return PackedBatch._make(func(input.data, weight, bias), input.layout)


@_dispatch.implements(F.embedding, family="layers")
def embedding(func, input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    op = _registry.op_name(func)
    _shared(op, weight=weight)
    if scale_grad_by_freq:
        # The loop scales each example's gradient by the frequencies in that
        # example; one call over the batch would count over the whole batch.
        raise NotImplementedError(
            f"{op}: scale_grad_by_freq=True counts frequencies per call, so one call over the "
            "batch would not equal the loop over examples; it is not supported for batches"
        )
    data = func(input.data, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq,
                sparse)
    return PackedBatch._make(data, input.layout)


@_dispatch.implements(F.dropout, F.alpha_dropout, torch.dropout, torch.alpha_dropout,
                      family="layers")
def dropout(func, input, p=0.5, training=True, inplace=False):
    # Every real row draws its own mask (the loop's random numbers differ, as
    # for any batched dropout); nothing is drawn for padding, which does not exist.
    if func in (torch.dropout, torch.alpha_dropout):
        return PackedBatch._make(func(input.data, p, training), input.layout)
    result = func(input.data, p, training, inplace)
    return input if inplace else PackedBatch._make(result, input.layout)


def _norm_over_static(op: str, input: PackedBatch, normalized_shape: Any) -> None:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) > input.dim() - 2:
        raise ValueError(
            f"{op}: normalized_shape {shape} covers dimension 1 of examples of rank "
            f"{input.dim()}, the packed dimension; a PackedBatch normalises over its static "
            "trailing dimensions only (use as_masked(x) for the other)"
        )


@_dispatch.implements(F.layer_norm, family="layers")
def layer_norm(func, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    op = _registry.op_name(func)
    _shared(op, weight=weight, bias=bias)
    _norm_over_static(op, input, normalized_shape)
    return PackedBatch._make(func(input.data, normalized_shape, weight, bias, eps),
                             input.layout)


if hasattr(F, "rms_norm"):  # torch >= 2.4

    @_dispatch.implements(F.rms_norm, family="layers")
    def rms_norm(func, input, normalized_shape, weight=None, eps=None):
        op = _registry.op_name(func)
        _shared(op, weight=weight)
        _norm_over_static(op, input, normalized_shape)
        return PackedBatch._make(func(input.data, normalized_shape, weight, eps), input.layout)


def _static_dim(op: str, input: PackedBatch, dim: int, what: str) -> int:
    """Example dimension ``dim`` as a dimension of the rows; refused unless static."""
    d = normalize_dim(dim, input.dim(), op)
    if d < 2:
        which = "the batch dimension (size one)" if d == 0 else "the packed dimension"
        raise ValueError(
            f"{op}: dim={dim} is {which} of each example; a PackedBatch {what} over its static "
            "trailing dimensions only (use as_masked(x) for the other)")
    return d - 1


@_dispatch.implements(F.glu, family="activation")
def glu(func, input, dim=-1):
    op = _registry.op_name(func)
    return PackedBatch._make(func(input.data, _static_dim(op, input, dim, "splits")),
                             input.layout)


@_dispatch.implements(torch.prelu, torch.Tensor.prelu, family="activation")
def prelu(func, input, weight):
    op = _registry.op_name(func)
    _shared(op, weight=weight)
    if weight.numel() != 1:
        # torch reads dimension 1 of each example as the channels.
        raise ValueError(
            f"{op}: a weight of {weight.numel()} channels reads dimension 1 of each example "
            "as the channels, but dimension 1 is the packed dimension (its size differs "
            "between examples); use one weight (nn.PReLU()) or put the channels there")
    return PackedBatch._make(func(input.data, weight), input.layout)


@_dispatch.implements(F.normalize, family="activation")
def normalize(func, input, p=2.0, dim=1, eps=1e-12, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    d = _static_dim(op, input, dim, "normalizes")
    return PackedBatch._make(func(input.data, p, d, eps), input.layout)
