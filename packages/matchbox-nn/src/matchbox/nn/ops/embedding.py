"""``embedding`` / ``nn.Embedding`` and ``embedding_bag`` / ``nn.EmbeddingBag``.

Semantics of ``embedding``: each id becomes a row of the shared weight; the
result is the ids' batch with a new static last dimension, real where the ids
are real.  The ids' padding may hold any integer (out of range too), so it is
replaced by a valid id (0) before the one lookup, and the gradient that padding
positions would send to that row is dropped (core's mixing rule).
``padding_idx`` behaves as in the loop (its row gets no gradient).
``max_norm`` renormalises, in place as PyTorch does, exactly the rows that real
ids reference (the loop renormalises each example's rows before its lookup; a
renormalised row is left alone by a later renormalisation, so doing all of
them first gives the loop's rows).  ``scale_grad_by_freq`` divides each row's
gradient by the id's count *within its example*, as the loop does (PyTorch
alone would count over the whole batch).

Semantics of ``embedding_bag``: one bag per example (ids ``(1, T)``), reduced
over its real ids only: the real ids of the whole batch are flattened into one
1-D call with per-example offsets (``per_sample_weights`` likewise).  A
zero-length example is an empty bag (zeros, as PyTorch gives an empty bag
through offsets; PyTorch's own 2-D path cannot take ``T == 0``).
``scale_grad_by_freq`` would count over the batch and is refused.

Semantics of ``one_hot``: each class index becomes a row of the identity, as an
embedding with a fixed weight: a new static last dimension of ``num_classes``,
real where the indices are.  Padding indices (any integer) become 0 first; a real
index outside ``[0, num_classes)`` raises naming the example.  ``num_classes`` is
one number for every example: ``-1`` (PyTorch's "largest index + 1", which
differs between examples) and a batch of per-example counts are refused.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from matchbox import _lengths, _masking, _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.nn.ops._per_example import only_input_batched
from matchbox.ops.reductions import reduced_layout


def _check_ids(op: str, input: MaskedBatch) -> None:
    if input.dtype.is_floating_point or input.dtype.is_complex or input.dtype == torch.bool:
        raise TypeError(f"{op}: the ids (input) must be an integer batch, got {input.dtype}")


def _real_ids(input: MaskedBatch) -> torch.Tensor:
    """The real ids of every example, flattened in order (one boolean index)."""
    if input._mask is None:
        return input.data.reshape(-1)
    return input.data[input.mask.expand_as(input.data)]


def _frequency_scale(ids: torch.Tensor, mask: torch.Tensor | None, rows: int,
                     dtype: torch.dtype) -> torch.Tensor:
    """``1 / count`` of each position's id within its own example (0 at padding)."""
    example = torch.arange(ids.size(0), device=ids.device).reshape(-1, *[1] * (ids.dim() - 1))
    keys = example * rows + ids
    if mask is not None:
        keys = torch.where(mask, keys, -1)  # padding: one key of its own, scaled to 0 below
    _, inverse, counts = torch.unique(keys, return_inverse=True, return_counts=True)
    scale = 1.0 / counts[inverse].to(dtype)
    return scale if mask is None else torch.where(mask, scale, 0.0)


@_registry.implements(F.embedding, family="embedding")
def embedding(func, input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    op = _registry.op_name(func)
    only_input_batched(op, input, weight=weight)
    _check_ids(op, input)
    mask = input._mask
    ids = input.data if mask is None else torch.where(mask, input.data, 0)
    if max_norm is not None:
        with torch.no_grad():
            torch.embedding_renorm_(weight, _real_ids(input), max_norm, norm_type)
    out = func(ids, weight, padding_idx, None, norm_type, False, sparse)
    if scale_grad_by_freq:
        scale = _frequency_scale(ids, mask, weight.size(0), out.dtype).unsqueeze(-1)
        # The same values, with the weight's gradient divided by the id's count.
        out = out.detach() + (out - out.detach()) * scale
    out_mask = None if mask is None else _lengths.kept(mask.unsqueeze(-1), mask)
    return MaskedBatch._make(_masking.guard_gradient(out, out_mask), out_mask,
                             input.dims + (False,))


@_registry.implements(F.embedding_bag, family="embedding")
def embedding_bag(func, input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    op = _registry.op_name(func)
    only_input_batched(op, input, weight=weight, offsets=offsets)
    _check_ids(op, input)
    if input.dim() != 2:
        raise ValueError(f"{op}: each example's ids must be (1, length) (one bag per example); "
                         f"got examples of rank {input.dim()}")
    if offsets is not None:
        raise ValueError(f"{op}: offsets must be None for a batch: each example is one bag")
    if scale_grad_by_freq:
        raise NotImplementedError(
            f"{op}: scale_grad_by_freq=True is not supported for batches (PyTorch would count "
            "ids over the whole batch, not per example as the loop does)")
    if per_sample_weights is not None and not isinstance(per_sample_weights, MaskedBatch):
        raise TypeError(f"{op}: per_sample_weights must be a MaskedBatch with the ids' layout")
    ids = _real_ids(input)
    weights = None
    if per_sample_weights is not None:
        if (per_sample_weights.data.shape != input.data.shape
                or per_sample_weights.dims != input.dims):
            raise ValueError(f"{op}: per_sample_weights must have the ids' layout "
                             f"({tuple(input.data.shape)}, dims {input.dims}), got "
                             f"{tuple(per_sample_weights.data.shape)}, dims "
                             f"{per_sample_weights.dims}")
        if input.dims[0]:
            _masking.check_lengths_agree(op, [(input, 1), (per_sample_weights, 1)])
        weights = _real_ids(MaskedBatch._make(per_sample_weights.data, input._mask, input.dims))
    lengths = (input.mask.expand_as(input.data).sum(1) if input._mask is not None
               else torch.full((input.data.size(0),), input.data.size(1), device=ids.device))
    starts = torch.cumsum(lengths, 0) - lengths
    out = func(ids, weight, starts, max_norm, norm_type, False, mode, sparse, weights, False,
               padding_idx)
    mask, dims = reduced_layout(input, (1,), keepdim=False)
    return MaskedBatch._make(out, None if mask is None else mask.unsqueeze(-1), dims + (False,))


@_registry.implements(F.one_hot, family="embedding")
def one_hot(func, input, num_classes=-1):
    op = _registry.op_name(func)
    if isinstance(num_classes, MaskedBatch) or not isinstance(input, MaskedBatch):
        raise ValueError(
            f"{op}: num_classes must be one int for every example; a dynamic number of "
            "classes (one per example) would give examples of different sizes in the new "
            "class dimension, with the classes of the others beyond them: pass the largest "
            "(e.g. maxsize of the class dimension), the same for every example")
    if num_classes == -1:
        raise ValueError(
            f"{op}: num_classes=-1 infers the number of classes from each example's largest "
            "index, which differs between examples (a dynamic number of classes); pass "
            "num_classes, the same for every example")
    _check_ids(op, input)
    ids = _masking.fill_padding(input, 0)
    bad = (ids < 0) | (ids >= num_classes)
    failing = _masking.running(bad.reshape(bad.size(0), -1).any(1)).nonzero()
    if failing.numel():
        e = int(failing[0])
        value = int(ids[e][bad[e]][0])
        raise RuntimeError(f"{op}: class values must be in [0, num_classes={num_classes}): "
                           f"example {e} has {value}")
    mask = None if input._mask is None else input._mask.unsqueeze(-1)
    return MaskedBatch._make(func(ids, num_classes), mask, input.dims + (False,))
