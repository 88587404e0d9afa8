"""Metric and margin losses per example: ``triplet_margin_loss`` (``_with_distance_loss``
too: any ``distance_function`` that runs on batches), ``cosine_embedding_loss``,
``margin_ranking_loss``, ``hinge_embedding_loss``, ``multilabel_soft_margin_loss``,
``multi_margin_loss``, ``multilabel_margin_loss`` and ``gaussian_nll_loss``; and the
``torch.*`` spellings of the first four (``torch.triplet_margin_loss``,
``torch.cosine_embedding_loss``, ``torch.margin_ranking_loss``,
``torch.hinge_embedding_loss``: ATen's, which ``F.*`` calls, ``reduction`` an int).

Semantics: those of ``losses.py`` — the batch of the per-example results, each what the
unbatched call on that example gives with the same ``reduction=`` (``'none'``: the
per-position losses; ``'mean'``/``'sum'``: each example's own mean/sum over its real
positions, a per-example scalar).

How: one rule for the family.  Each loss is written as PyTorch writes it (ATen's
``Loss.cpp`` for the first four, ``torch.nn.functional`` for
``multilabel_soft_margin_loss`` and ``gaussian_nll_loss``): the same ops in the same
order, each run by its batch rule (``pairwise_distance``, pointwise ops, ``where``,
reductions over each example's real positions), so values and gradients are the loop's
and padding reaches neither.  Then ``reduce_per_example`` reduces each example, as for
the other losses.  ``multi_margin_loss`` and ``multilabel_margin_loss``, whose
per-sample kernels have no composition, run PyTorch's kernel once on the rows (one row
per example, its classes static).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    MaskedBatch,
    fails,
    fill_padding,
    implements,
    is_batch,
    op_name,
    running,
)
from matchbox.nn.ops.losses import _arguments, _reduction_of, reduce_per_example

# ATen's EPSILON of cosine_embedding_loss.
COSINE_EPSILON = 1e-12


def _triplet(op: str, a: dict[str, Any]) -> Any:
    anchor, positive, negative = a["anchor"], a["positive"], a["negative"]
    if a["margin"] <= 0:
        raise ValueError(f"{op}: margin must be greater than 0, got {a['margin']}")
    if not anchor.dim() == positive.dim() == negative.dim():
        raise RuntimeError(
            f"{op}: the anchor, positive, and negative tensors are expected to have the same "
            f"number of dimensions, but got: anchor {anchor.dim()}D, positive "
            f"{positive.dim()}D, and negative {negative.dim()}D inputs (per example)")
    if "distance_function" in a:  # triplet_margin_with_distance_loss
        distance = a["distance_function"] or torch.pairwise_distance
    else:
        p, eps = a["p"], a["eps"]

        def distance(x: Any, y: Any) -> Any:
            return torch.pairwise_distance(x, y, p, eps)
    dist_pos = distance(anchor, positive)
    dist_neg = distance(anchor, negative)
    if a["swap"]:
        dist_neg = torch.minimum(dist_neg, distance(positive, negative))
    return torch.clamp_min(a["margin"] + dist_pos - dist_neg, 0)


def _cosine_embedding(op: str, a: dict[str, Any]) -> Any:
    input1, input2, target = a["input1"], a["input2"], a["target"]
    if target.dim() != 1:
        raise RuntimeError(
            f"{op}: each example's target must be one label, (1,) (a batch of scalars or a "
            f"plain (1,) tensor); got {target.dim()} dimensions (the inputs (1, D))")
    if input1.dim() != 2 or input2.dim() != 2:
        raise RuntimeError(
            f"{op}: 1D target tensor expects 2D input tensors, but found inputs with "
            f"{input1.dim()} and {input2.dim()} dimensions (per example)")
    prod_sum = (input1 * input2).sum(1)
    mag_square1 = (input1 * input1).sum(1) + COSINE_EPSILON
    mag_square2 = (input2 * input2).sum(1) + COSINE_EPSILON
    cos = prod_sum / (mag_square1 * mag_square2).sqrt()
    zeros = torch.zeros_like(cos)
    pos = 1 - cos
    neg = (cos - a["margin"]).clamp_min(0)
    return torch.where(target == 1, pos, zeros) + torch.where(target == -1, neg, zeros)


def _margin_ranking(op: str, a: dict[str, Any]) -> Any:
    input1, input2, target = a["input1"], a["input2"], a["target"]
    if not input1.dim() == input2.dim() == target.dim():
        raise RuntimeError(
            f"{op}: all input tensors should have the same dimension but got (per example) "
            f"input1: {input1.dim()}D, input2: {input2.dim()}D, target: {target.dim()}D")
    return (-target * (input1 - input2) + a["margin"]).clamp_min(0)


def _hinge_embedding(op: str, a: dict[str, Any]) -> Any:
    input, target = a["input"], a["target"]
    zeros = torch.zeros_like(input)
    margin_clamp = (a["margin"] - input).clamp_min(0)
    return (torch.where(target != 1, margin_clamp, zeros)
            + torch.where(target != -1, input, zeros))


def _multilabel_soft_margin(op: str, a: dict[str, Any]) -> Any:
    input, target, weight = a["input"], a["target"], a["weight"]
    loss = -(target * F.logsigmoid(input) + (1 - target) * F.logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.dim() - 1
    if class_dim == 0:
        raise ValueError(f"{op}: the examples are scalars (dims ()); their classes would be "
                         "the batch dimension (give each example its classes: (1, C))")
    if is_batch(input) and input.dims[class_dim - 1]:
        # Each example's own number of classes: its sum over them by that count.
        return loss.mean(class_dim)
    return loss.sum(dim=class_dim) / input.size(class_dim)


def _multi_margin(op: str, a: dict[str, Any]) -> Any:
    input, target, weight, p = a["input"], a["target"], a["weight"], a["p"]
    if p != 1 and p != 2:
        raise ValueError(f"{op}: only p == 1 and p == 2 supported")
    if weight is not None and (is_batch(weight) or weight.dim() != 1):
        raise ValueError(f"{op}: weight must be a one-dimensional plain tensor, shared by "
                         "every example")
    if not is_batch(input) or not is_batch(target):
        raise TypeError(f"{op}: the input and the target must both be batches (one target "
                        "per example)")
    if input.dim() != 2 or input.dims[0]:
        raise ValueError(f"{op}: each example's input must be (1, C) with C static (the same "
                         f"number of classes in every example); got dims {input.dims}")
    if target.dims != () or target.is_floating_point():
        raise ValueError(f"{op}: each example's target must be one class index, (1,) (a "
                         f"batch of integers with dims ()); got dims {target.dims} of "
                         f"{target.dtype}")
    t = target.data.reshape(-1)
    real = torch.ones_like(t, dtype=torch.bool)
    if input._mask is not None:
        real = real & input._mask.reshape(t.size(0), -1).all(1)
    if target._mask is not None:
        real = real & target._mask.reshape(-1)
    classes = input.data.size(1)
    bad = running(real & ((t < 0) | (t >= classes)))
    if fails(bad):
        j = int(bad.nonzero()[0])
        raise IndexError(f"{op}: target {int(t[j])} of example {j} is out of range for "
                         f"{classes} classes")
    # Examples that do not run this code (their result is discarded) read class 0.
    safe = torch.where(real & (t >= 0) & (t < classes), t, 0)
    x = torch.where(real.unsqueeze(1), input.data, 0.0)
    losses = F.multi_margin_loss(x, safe, p, a["margin"], weight, reduction="none")
    mask = None if input._mask is None and target._mask is None else real
    return MaskedBatch._make(losses, mask, ())


def _multilabel_margin(op: str, a: dict[str, Any]) -> Any:
    input, target = a["input"], a["target"]
    if not is_batch(input) or not is_batch(target):
        raise TypeError(f"{op}: the input and the target must both be batches (each "
                        "example's own labels)")
    if input.dim() != 2 or input.dims[0] or target.dims != input.dims:
        raise ValueError(
            f"{op}: each example's input and target must be (1, C) with C static (the same "
            f"number of classes in every example); got dims {input.dims} and {target.dims} "
            "(for a different number of classes per example, pad the classes to one C: "
            "input with any value, target with -1 after each example's labels)")
    if target.dtype != torch.long:
        raise ValueError(f"{op}: each example's target must hold class indices (int64); "
                         f"got {target.dtype}")
    rows = input.data.size(0)
    t = target.data
    real = torch.ones(rows, dtype=torch.bool, device=t.device)
    for m in (input._mask, target._mask):
        if m is not None:
            real = real & m.reshape(rows, -1).all(1)
    classes = input.data.size(1)
    outside = ((t < -1) | (t >= classes)).any(1)
    bad = running(real & outside)
    if fails(bad):
        j = int(bad.nonzero()[0])
        raise IndexError(f"{op}: the target of example {j} holds a class index out of range "
                         f"[-1, {classes}) (torch: argument #2 'target' is out of range)")
    # Examples whose result is discarded (not running this code, or padding) read the
    # target -1 (no label, a loss of 0) and an input of 0.
    safe = torch.where((real & ~outside).unsqueeze(1), t, -1)
    x = torch.where(real.unsqueeze(1), input.data, 0.0)
    losses = F.multilabel_margin_loss(x, safe, reduction="none")
    mask = None if input._mask is None and target._mask is None else real
    return MaskedBatch._make(losses, mask, ())


def _gaussian_nll(op: str, a: dict[str, Any]) -> Any:
    input, target, var = a["input"], a["target"], a["var"]
    if isinstance(var, (int, float)):
        if var < 0:
            raise ValueError(f"{op}: var has negative entry/entries")
        var = var * torch.ones_like(input)
    elif is_batch(var):
        negative = fill_padding(var, 1.0) < 0
        bad = running(negative.reshape(negative.size(0), -1).any(1))
        if fails(bad):
            raise ValueError(f"{op}: var has negative entry/entries (example "
                             f"{int(bad.nonzero()[0])})")
    elif torch.any(var < 0):
        raise ValueError(f"{op}: var has negative entry/entries")
    if var.dim() == input.dim() - 1:
        var = var.unsqueeze(-1)  # homoscedastic: one variance for the last dimension
    elif var.dim() != input.dim() or _mismatched(input, var) > 1:
        raise ValueError(f"{op}: var is of incorrect size (each example's must be the "
                         "input's, the input's without its last dimension, or the input's "
                         "with one dimension of size 1)")
    var = var.clone()
    with torch.no_grad():
        var.clamp_(min=a["eps"])
    loss = 0.5 * (torch.log(var) + (input - target) ** 2 / var)
    if a["full"]:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return loss


def _mismatched(input: Any, var: Any) -> int:
    """The dimensions where ``var`` has size 1 and the input another size (dynamic in the
    input counts: an example of length 1 there would match it, the others not)."""
    count = 0
    for i in range(1, input.dim()):
        dynamic = is_batch(input) and input.dims[i - 1]
        var_dynamic = is_batch(var) and var.dims[i - 1]
        if var_dynamic:
            continue
        size = var.data.size(i) if is_batch(var) else var.size(i)
        if size == 1 and (dynamic or (input.data if is_batch(input) else input).size(i) != 1):
            count += 1
    return count


COMPOSED: dict[Any, Callable[[str, dict[str, Any]], Any]] = {
    F.triplet_margin_loss: _triplet,
    F.triplet_margin_with_distance_loss: _triplet,
    F.cosine_embedding_loss: _cosine_embedding,
    F.margin_ranking_loss: _margin_ranking,
    F.hinge_embedding_loss: _hinge_embedding,
    F.multilabel_soft_margin_loss: _multilabel_soft_margin,
    F.multi_margin_loss: _multi_margin,
    F.multilabel_margin_loss: _multilabel_margin,
    F.gaussian_nll_loss: _gaussian_nll,
}


@implements(*COMPOSED, family="loss")
def metric_loss(func, *args, **kwargs):
    op = op_name(func)
    arguments = _arguments(func, args, kwargs)
    reduction = _reduction_of(op, arguments)
    return reduce_per_example(COMPOSED[func](op, arguments), reduction)


# ATen's spellings, which F.* calls with reduction as torch.nn._reduction's number.
ATEN_REDUCTIONS = ("none", "mean", "sum")


def _aten_reduction(op: str, reduction: Any) -> str:
    if isinstance(reduction, bool) or not isinstance(reduction, int) \
            or not 0 <= reduction < len(ATEN_REDUCTIONS):
        # (torch itself refuses a name here, before the batch's rule is called)
        raise ValueError(f"{op}: reduction must be 0 ('none'), 1 ('mean') or 2 ('sum'), as "
                         f"torch's own spelling takes it; got {reduction!r} "
                         "(torch.nn.functional's spelling takes the name)")
    return ATEN_REDUCTIONS[reduction]


@implements(torch.cosine_embedding_loss, torch.margin_ranking_loss, family="loss")
def aten_pair_loss(func, input1, input2, target, margin=0.0, reduction=1):
    op = op_name(func)
    reduction = _aten_reduction(op, reduction)
    rule = _cosine_embedding if func is torch.cosine_embedding_loss else _margin_ranking
    arguments = {"input1": input1, "input2": input2, "target": target, "margin": margin}
    return reduce_per_example(rule(op, arguments), reduction)


@implements(torch.hinge_embedding_loss, family="loss")
def aten_hinge_embedding_loss(func, input, target, margin=1.0, reduction=1):
    op = op_name(func)
    reduction = _aten_reduction(op, reduction)
    arguments = {"input": input, "target": target, "margin": margin}
    return reduce_per_example(_hinge_embedding(op, arguments), reduction)


@implements(torch.triplet_margin_loss, family="loss")
def aten_triplet_margin_loss(func, anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6,
                             swap=False, reduction=1):
    op = op_name(func)
    reduction = _aten_reduction(op, reduction)
    arguments = {"anchor": anchor, "positive": positive, "negative": negative,
                 "margin": margin, "p": p, "eps": eps, "swap": swap}
    return reduce_per_example(_triplet(op, arguments), reduction)
