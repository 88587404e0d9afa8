"""``embedding`` / ``nn.Embedding``, ``one_hot`` (one rule each for every batch type,
registered for ``"Batch"``) and ``embedding_bag`` / ``nn.EmbeddingBag`` (``MaskedBatch``).

Semantics of ``embedding``: each id becomes a row of the shared weight; the
result is the ids' batch with a new static last dimension, real where the ids
are real.  The lookup runs on the real ids only (``rows(0)`` / ``from_rows``,
the batch types' protocol): the ids' padding, which may hold any integer (out of
range too), is never read, and the result's padding is zero and sends no
gradient to the weight.  ``padding_idx`` behaves as in the loop (its row gets no
gradient).  ``max_norm`` renormalises, in place as PyTorch does, exactly the
rows that real ids reference (the loop renormalises each example's rows before
its lookup; a renormalised row is left alone by a later renormalisation, so
doing all of them first gives the loop's rows); the ids of examples that do not run
the code at hand (under ``@batch``) are not real there, and reference no row
(``_renormalise``).  ``scale_grad_by_freq`` divides
each row's gradient by the id's count *within its example* (``row_examples``),
as the loop does (PyTorch alone would count over the whole batch).

Semantics of ``embedding_bag``: one bag per example (ids ``(1, T)``), reduced
over its real ids only: the real ids of the whole batch are flattened into one
1-D call with per-example offsets (``per_sample_weights`` likewise).  A
zero-length example is an empty bag (zeros, as PyTorch gives an empty bag
through offsets; PyTorch's own 2-D path cannot take ``T == 0``).  ``max_norm`` under
``@batch`` renormalises the rows of the running examples' ids only.
``scale_grad_by_freq`` would count over the batch and is refused.

Semantics of ``one_hot``: each class index becomes a row of the identity, as an
embedding with a fixed weight: a new static last dimension of ``num_classes``,
real where the indices are, computed on the real indices only; a real index
outside ``[0, num_classes)`` raises naming the example.  ``num_classes`` is
one number for every example: ``-1`` (PyTorch's "largest index + 1", which
differs between examples) and a batch of per-example counts are refused.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from matchbox.extending import (
    EXECUTION_MASK,
    Batch,
    MaskedBatch,
    and_running,
    capturing,
    check_lengths_agree,
    fails,
    implements,
    is_batch,
    only_input_batched,
    op_name,
    reduced_layout,
    refuse,
    refuse_size_number,
    running,
)


def _check_ids(op: str, input: Batch) -> None:
    if input.dtype.is_floating_point or input.dtype.is_complex or input.dtype == torch.bool:
        raise TypeError(f"{op}: the ids (input) must be an integer batch, got {input.dtype}")


def _real_ids(input: MaskedBatch) -> torch.Tensor:
    """The real ids of every example, flattened in order (one boolean index)."""
    if input._mask is None:
        return input.data.reshape(-1)
    return input.data[input.mask.expand_as(input.data)]


def _frequency_scale(ids: torch.Tensor, examples: torch.Tensor, rows: int,
                     dtype: torch.dtype) -> torch.Tensor:
    """``1 / count`` of each id within its own example (``examples``: each id's; -1, a row
    that is not real, gets 0)."""
    real = examples >= 0
    keys = torch.where(real, examples * rows + ids, -1)
    _, inverse, counts = torch.unique(keys, return_inverse=True, return_counts=True)
    return torch.where(real, 1.0 / counts[inverse].to(dtype), 0.0)


def _renormalise(input: Batch, ids: torch.Tensor, weight: torch.Tensor, max_norm: float,
                 norm_type: float) -> None:
    """``max_norm``'s renormalisation, in place, of the rows that the real ids of the running
    examples reference, as the loop does.  ``rows(0)`` holds 0 for the rows of an example
    that does not run the code at hand (and, while capturing, for padding): PyTorch's own
    ``max_norm`` would renormalise row 0 for them, a row the loop leaves alone."""
    refuse(f"{op_name(F.embedding)} with max_norm (the rows it renormalises depend on the "
           "ids' values)")
    examples = input.row_examples(0)
    every = torch.ones(input.batch_size, dtype=torch.bool, device=examples.device)
    real = (examples >= 0) & running(every)[examples.clamp(min=0)]
    _renorm(weight, ids[real], max_norm, norm_type)


def _renorm(weight: torch.Tensor, ids: torch.Tensor, max_norm: float, norm_type: float
            ) -> None:
    with torch.no_grad():  # what F.embedding does with max_norm
        torch.embedding_renorm_(weight, ids, max_norm, norm_type)


@implements(F.embedding, family="embedding", batch_type="Batch")
def embedding(func, input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    op = op_name(func)
    only_input_batched(op, input, weight=weight, padding_idx=padding_idx, max_norm=max_norm,
                       norm_type=norm_type)
    _check_ids(op, input)
    ids = input.rows(0)  # the real ids only: max_norm renormalises the rows they reference
    if max_norm is not None and (EXECUTION_MASK.get() is not None or capturing() is not None):
        _renormalise(input, ids, weight, max_norm, norm_type)
        max_norm = None
    out = func(ids, weight, padding_idx, max_norm, norm_type, False, sparse)
    if scale_grad_by_freq:
        scale = _frequency_scale(ids, input.row_examples(0), weight.size(0), out.dtype)
        # The same values, with the weight's gradient divided by the id's count.
        out = out.detach() + (out - out.detach()) * scale.unsqueeze(-1)
    return input.from_rows(out, 0)


@implements(F.embedding_bag, family="embedding")
def embedding_bag(func, input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    op = op_name(func)
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
            check_lengths_agree(op, [(input, 1), (per_sample_weights, 1)])
        weights = _real_ids(MaskedBatch._make(per_sample_weights.data, input._mask, input.dims))
    if max_norm is not None and EXECUTION_MASK.get() is not None:
        # Only the running examples' ids: the loop renormalises no row for the others.
        running_mask = and_running(input._mask, input.data.size(0), input.data.dim())
        _renorm(weight, _real_ids(MaskedBatch._make(input.data, running_mask, input.dims)),
                max_norm, norm_type)
        max_norm = None
    lengths = (input.mask.expand_as(input.data).sum(1) if input._mask is not None
               else torch.full((input.data.size(0),), input.data.size(1), device=ids.device))
    starts = torch.cumsum(lengths, 0) - lengths
    out = func(ids, weight, starts, max_norm, norm_type, False, mode, sparse, weights, False,
               padding_idx)
    mask, dims = reduced_layout(input, (1,), keepdim=False)
    return MaskedBatch._make(out, None if mask is None else mask.unsqueeze(-1), dims + (False,))


@implements(F.one_hot, family="embedding", batch_type="Batch")
def one_hot(func, input, num_classes=-1):
    op = op_name(func)
    if is_batch(num_classes) or not is_batch(input):
        raise ValueError(
            f"{op}: num_classes must be one int for every example; a dynamic number of "
            "classes (one per example) would give examples of different sizes in the new "
            "class dimension, with the classes of the others beyond them: pass the largest "
            "(e.g. int(x.maxsize(d)) of the class dimension d), the same for every example")
    refuse_size_number(op, "num_classes", num_classes)
    if num_classes == -1:
        raise ValueError(
            f"{op}: num_classes=-1 infers the number of classes from each example's largest "
            "index, which differs between examples (a dynamic number of classes); pass "
            "num_classes, the same for every example")
    _check_ids(op, input)
    ids = input.rows(0)
    examples = input.row_examples(0)
    bad = ((ids < 0) | (ids >= num_classes)) & (examples >= 0)
    per_example = torch.zeros(input.batch_size, dtype=torch.long, device=ids.device)
    failing = running(per_example.index_add_(0, examples.clamp(min=0), bad.long()) > 0)
    if fails(failing):
        e = int(failing.nonzero()[0])
        value = int(ids[bad & (examples == e)][0])
        raise RuntimeError(f"{op}: class values must be in [0, num_classes={num_classes}): "
                           f"example {e} has {value}")
    return input.from_rows(func(ids, num_classes), 0)
