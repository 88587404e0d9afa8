"""Losses per example: ``cross_entropy``, ``nll_loss`` and the elementwise losses
(``mse_loss``, ``l1_loss``, ``smooth_l1_loss``, ``huber_loss``,
``binary_cross_entropy``, ``binary_cross_entropy_with_logits``, ``kl_div``,
``poisson_nll_loss``, ``soft_margin_loss``), and their ``nn`` modules.

Semantics: the result is the batch of the per-example results, each what the
unbatched call on that example gives with the same ``reduction=``:

- ``'none'``: a batch with the layout of the per-position loss (the target's
  layout for class indices, the input's otherwise), real where the input and
  target are;
- ``'sum'``: a batch of per-example scalars (``dims == ()``), the sum over each
  example's real positions;
- ``'mean'``: the sum divided by what PyTorch divides by, counted per example
  over its real positions: the number of elements (the number of positions
  for class-probability targets), the summed ``weight[target]`` of the
  non-ignored targets for ``cross_entropy``/``nll_loss``, the summed
  ``weight`` for ``mse_loss``/``l1_loss`` with ``weight=`` (torch >= 2.6);
  ``kl_div``'s ``'batchmean'`` divides by each example's size in dimension 0,
  which is 1: it is the per-example sum.

So ``loss.backward()`` on the batch (core's ``MaskedBatch.backward`` sums the
examples' scalars) equals the loop's accumulated gradients.  An example whose
targets are all ignored has ``'mean'`` NaN (0/0) and zero gradients, exactly
as PyTorch gives it per example.

How: the loss runs once on the whole batch with ``reduction='none'`` (padding
first replaced by harmless values: class targets by ``ignore_index``, inputs
and targets by values every loss accepts, so no padding can fail PyTorch's
value checks or make a NaN), its padding gradient is dropped (core's mixing
rule, which protects shared ``weight``/``pos_weight`` arguments), and core's
masked reductions (``sum``/``mean`` over a batch) reduce each example.

``ctc_loss``: per-example code calls it as on one example of ``(1, T, C)``
log-probabilities, ``F.ctc_loss(lp.transpose(0, 1), targets, input_lengths,
target_lengths)``: on a batch ``lp.transpose(0, 1)`` is the time-major view
(``matchbox.nn.time_major``), ``targets`` a batch of ``(1, S)`` class indices (or a
plain ``(1, S)`` tensor shared by every example), and the lengths a batch of one int per
example (``x.size_as_tensor(1)`` in per-example code, or ints/tensors the same for
every example).  One ``ctc_loss`` call serves the batch (padding filled: log-probability
0 and class 0, never read); each example's loss is its own, with ``reduction=``
per example ('mean' divides by its own target length, as PyTorch does for N = 1).  A
length beyond an example's own time steps or targets, or an example without time steps
(PyTorch refuses an empty ``log_probs``), raises naming the example.

A dynamic class dimension (a different number of classes per example, e.g.
a pointer network's candidates) works for class-index targets: padding
classes get logit ``-inf`` (probability 0) and every real target is checked
against its own example's number of classes.  ``weight``, ``label_smoothing``
and class-probability targets need one number of classes and are refused
there, naming the argument.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn import _reduction

from matchbox.extending import (
    MaskedBatch,
    align,
    check_lengths_agree,
    combine_masks,
    fails,
    fill_padding,
    fit_mask,
    guard_gradient,
    implements,
    lengths_along,
    mask_lengths,
    only_input_batched,
    op_name,
    pad_to,
    running,
    sizes_along,
)
from matchbox.nn.time_major import TimeMajorBatch

REDUCTIONS = ("none", "mean", "sum")


@dataclasses.dataclass(frozen=True)
class Elementwise:
    """How an elementwise loss is batched: safe padding values and its 'mean'."""

    input_fill: float = 0.0
    target_fill: float = 0.0
    # 'mean' divides by the summed weight= (mse/l1 in torch >= 2.6), not the count.
    mean_by_weight: bool = False


ELEMENTWISE = {
    F.mse_loss: Elementwise(mean_by_weight=True),
    F.l1_loss: Elementwise(mean_by_weight=True),
    F.smooth_l1_loss: Elementwise(),
    F.huber_loss: Elementwise(),
    # Probabilities: PyTorch checks that the input is in [0, 1].
    F.binary_cross_entropy: Elementwise(input_fill=0.5, target_fill=0.5),
    F.binary_cross_entropy_with_logits: Elementwise(),
    # target 1: 1 * (log 1 - 0) = 0 with finite gradients (log_target: exp(0) = 1).
    F.kl_div: Elementwise(target_fill=1.0),
    F.poisson_nll_loss: Elementwise(),
    F.soft_margin_loss: Elementwise(),
}
# Tensor arguments that may be batches (per-example weights) or shared tensors.
TENSOR_ARGUMENTS = ("input", "target", "weight", "pos_weight")

_SIGNATURES: dict[Any, inspect.Signature] = {}


def _arguments(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Every argument of ``func`` by name, defaults filled in (signatures differ by torch)."""
    signature = _SIGNATURES.get(func)
    if signature is None:
        signature = _SIGNATURES.setdefault(func, inspect.signature(func))
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _recover_dropped_weight(func: Any, arguments: dict[str, Any]) -> None:
    """Read ``weight=`` that ``F.l1_loss`` does not pass on to ``__torch_function__``.

    PyTorch's ``F.l1_loss`` (torch >= 2.6) calls ``handle_torch_function``
    without ``weight=weight``, so the handler would silently compute an
    unweighted loss.  Its frame is on the stack (it is our caller's caller):
    the weight is read from there, nothing in torch is changed.
    """
    if func is not F.l1_loss or "weight" not in arguments or arguments["weight"] is not None:
        return
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is F.l1_loss.__code__:
            arguments["weight"] = frame.f_locals.get("weight")
            return
        frame = frame.f_back


def _reduction_of(op: str, arguments: dict[str, Any], allowed=REDUCTIONS) -> str:
    """``reduction=``, or what the deprecated ``size_average``/``reduce`` say; checked."""
    size_average = arguments.pop("size_average", None)
    reduce = arguments.pop("reduce", None)
    reduction = arguments["reduction"]
    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce, emit_warning=False)
    if reduction not in allowed:
        raise ValueError(f"{op}: reduction={reduction!r} is not one of {list(allowed)}")
    return reduction


def reduce_per_example(none: MaskedBatch, reduction: str,
                       denominator: MaskedBatch | None = None) -> MaskedBatch:
    """Each example's loss from its per-position losses (core's masked reductions)."""
    if reduction == "none":
        return none
    total = torch.sum(none)
    if reduction != "mean":
        return total
    return torch.mean(none) if denominator is None else total / torch.sum(denominator)


def _positions_with_lengths(mask: torch.Tensor | None, input: MaskedBatch,
                            target: MaskedBatch) -> torch.Tensor | None:
    """The mask of the per-position losses, carrying the positions' lengths where a mask
    of the arguments carries some (an example empty in one of several dynamic position
    dimensions): the target's, or the input's without its class dimension."""
    if mask is None or not mask_lengths.any_carried((input, target)):
        return mask
    if mask_lengths.carried_by(target) is not None or not input.dims[0]:
        lengths = mask_lengths.of(target if mask_lengths.carried_by(target) is not None else input)
    else:
        lengths = mask_lengths.of(input)[:, 1:]  # the class dimension is dynamic: its column goes
    return mask_lengths.rebuilt(mask, lengths, target.dims if target.dims == input.dims[1:]
                            else input.dims[1:])


def _per_position(data: torch.Tensor, mask: torch.Tensor | None,
                  dims: tuple[bool, ...]) -> MaskedBatch:
    """Per-position losses as a batch; the gradient padding would receive is dropped."""
    mask = fit_mask(mask, data, dims)
    return MaskedBatch._make(guard_gradient(data, mask), mask, dims)


# ---------------------------------------------------------------------------- elementwise


@implements(*ELEMENTWISE, family="loss")
def elementwise_loss(func, *args, **kwargs):
    op = op_name(func)
    spec = ELEMENTWISE[func]
    arguments = _arguments(func, args, kwargs)
    _recover_dropped_weight(func, arguments)
    reduction = _reduction_of(op, arguments, REDUCTIONS + (("batchmean",) if func is F.kl_div
                                                            else ()))
    names = [n for n in TENSOR_ARGUMENTS if arguments.get(n) is not None]
    given = [arguments[n] for n in names]
    if not isinstance(arguments["input"], MaskedBatch) and not isinstance(
            arguments["target"], MaskedBatch):
        raise TypeError(f"{op}: the input or the target must be a MaskedBatch")
    values, mask, dims = align(op, given)
    fills = {"input": spec.input_fill, "target": spec.target_fill, "weight": 0.0,
             "pos_weight": 0.0}
    if func is F.kl_div and arguments.get("log_target"):
        fills["target"] = 0.0  # log 1
    for name, original, value in zip(names, given, values):
        if isinstance(original, MaskedBatch) and mask is not None:
            value = torch.where(mask, value, torch.full((), fills[name], dtype=value.dtype,
                                                         device=value.device))
        arguments[name] = value
    arguments["reduction"] = "none"
    none = _per_position(func(**arguments), mask, dims)
    denominator = None
    if spec.mean_by_weight and arguments.get("weight") is not None:
        denominator = _per_position(arguments["weight"].expand_as(none.data), mask, dims)
    return reduce_per_example(none, "sum" if reduction == "batchmean" else reduction,
                              denominator)


# ---------------------------------------------------------------------------- classes


@implements(F.cross_entropy, F.nll_loss, family="loss")
def class_loss(func, *args, **kwargs):
    op = op_name(func)
    arguments = _arguments(func, args, kwargs)
    reduction = _reduction_of(op, arguments)
    input, target, weight = arguments["input"], arguments["target"], arguments["weight"]
    only_input_batched(op, input, weight=weight, ignore_index=arguments.get("ignore_index"),
                       label_smoothing=arguments.get("label_smoothing"))
    if not isinstance(target, MaskedBatch):
        raise TypeError(f"{op}: the target must be a MaskedBatch (one target per example) when "
                        f"the input is one; got {type(target).__name__}")
    if input.dim() < 2:
        raise ValueError(f"{op}: each example's input must have a class dimension (dimension "
                         f"1 of (1, C, ...)); these examples are scalars")
    if target.is_floating_point():
        return _probability_targets(op, func, arguments, reduction)
    return _index_targets(op, func, arguments, reduction)


def _align_positions(op: str, input: MaskedBatch, target: MaskedBatch,
                     offset: int) -> tuple[MaskedBatch, MaskedBatch]:
    """Pad the two to one size along each dynamic position dim; check lengths agree.

    Position dimension ``j`` of the target is dimension ``j + offset`` of the
    input (offset 1: the class dimension is left out of class-index targets).
    """
    for j in range(1, target.dim()):
        i = j + offset
        if not target.dims[j - 1]:
            continue
        size = max(input.data.size(i), target.data.size(j))
        input, target = pad_to(input, i, size), pad_to(target, j, size)
        check_lengths_agree(op, [(input, i), (target, j)])
    return input, target


def _index_targets(op: str, func: Any, arguments: dict[str, Any], reduction: str):
    input, target, weight = arguments["input"], arguments["target"], arguments["weight"]
    ignore_index = arguments["ignore_index"]
    expected = input.dims[1:]
    if target.dims != expected:
        raise ValueError(
            f"{op}: class-index targets must have the input's layout without the class "
            f"dimension (dims {expected}); got dims {target.dims}")
    dynamic_classes = input.dims[0]
    if dynamic_classes:
        _refuse_for_dynamic_classes(op, weight=weight is not None,
                                    label_smoothing=arguments.get("label_smoothing", 0.0) > 0)
    input, target = _align_positions(op, input, target, offset=1)
    position_mask = _positions_with_lengths(combine_masks([
        target._mask,
        None if input._mask is None else input._mask.any(1),
    ]), input, target)
    t = target.data
    if position_mask is not None:
        t = torch.where(position_mask, t, ignore_index)
    if dynamic_classes:
        _check_targets_per_example(op, input, t, ignore_index)
        # Padding classes get probability 0 (cross_entropy's logits); nll_loss only
        # reads the target's class, which is real.
        fill = -math.inf if func is F.cross_entropy else 0.0
        x = fill_padding(input, fill)
    else:
        x = fill_padding(input, 0.0)
    arguments.update(input=x, target=t, reduction="none")
    none = _per_position(func(**arguments), position_mask, target.dims)
    denominator = None
    if reduction == "mean":
        valid = t != ignore_index
        counted = (valid.to(none.dtype) if weight is None else
                   torch.where(valid, weight.detach()[torch.where(valid, t, 0)], 0.0))
        denominator = _per_position(counted, position_mask, target.dims)
    return reduce_per_example(none, reduction, denominator)


def _probability_targets(op: str, func: Any, arguments: dict[str, Any], reduction: str):
    input, target = arguments["input"], arguments["target"]
    if func is not F.cross_entropy:
        raise TypeError(f"{op}: the target must hold class indices (an integer batch); got "
                        f"{target.dtype}")
    if target.dims != input.dims:
        raise ValueError(f"{op}: class-probability targets must have the input's layout (dims "
                         f"{input.dims}); got dims {target.dims}")
    if input.dims[0]:
        raise NotImplementedError(
            f"{op}: class-probability targets over a dynamic class dimension (dimension 1) are "
            "not supported; use class-index targets")
    input, target = _align_positions(op, input, target, offset=0)
    mask = combine_masks([input._mask, target._mask])
    zero = torch.zeros((), dtype=input.dtype, device=input.device)
    x, t = input.data, target.data
    if mask is not None:
        x, t = torch.where(mask, x, zero), torch.where(mask, t, zero)
    arguments.update(input=x, target=t, reduction="none")
    dims = input.dims[1:]
    position_mask = None if mask is None else _positions_with_lengths(mask.all(1), input, target)
    none = _per_position(func(**arguments), position_mask, dims)
    # PyTorch's 'mean' divides by the number of positions (numel / classes).
    return reduce_per_example(none, reduction)


def _refuse_for_dynamic_classes(op: str, **given: bool) -> None:
    for name, present in given.items():
        if present:
            raise NotImplementedError(
                f"{op}: {name} is not supported with a dynamic class dimension (dimension 1): "
                "it needs the same number of classes in every example (make the dimension "
                "static)")


def _check_targets_per_example(op: str, input: MaskedBatch, t: torch.Tensor,
                               ignore_index: int) -> None:
    """Each real target below its own example's number of classes (one device sync)."""
    classes = lengths_along(input, 1).reshape(-1, *[1] * (t.dim() - 1))
    bad = (t != ignore_index) & (t >= classes)
    if fails(bad.reshape(bad.size(0), -1).any(1)):
        where = bad.nonzero()[0]
        example = int(where[0])
        raise IndexError(
            f"{op}: target {int(t[tuple(where)])} is out of bounds for example {example}, "
            f"which has {int(classes.reshape(-1)[example])} classes (dynamic dimension 1)")


# ---------------------------------------------------------------------------- ctc


@implements(F.ctc_loss, family="loss", batch_type="TimeMajorBatch")
@implements(F.ctc_loss, family="loss")
def ctc_loss(func, log_probs, targets, input_lengths, target_lengths, blank=0,
             reduction="mean", zero_infinity=False):
    op = op_name(func)
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction={reduction!r} is not one of {list(REDUCTIONS)}")
    if not isinstance(log_probs, TimeMajorBatch):
        raise TypeError(
            f"{op}: log_probs must be each example's (T, 1, C) log-probabilities, time first: "
            "on a batch of (1, T, C) examples, x.transpose(0, 1) (matchbox.nn.time_major(x)); "
            f"got {type(log_probs).__name__}")
    lp = log_probs.batch
    if not isinstance(lp, MaskedBatch):
        lp = lp.to_masked()  # a PackedBatch's view: its padded form
    if lp.dims[1]:
        raise ValueError(f"{op}: the classes (dimension 2 of log_probs) are dynamic; every "
                         "example must have the same number of classes")
    batch = lp.data.size(0)
    steps = sizes_along(lp, 1)
    if isinstance(targets, MaskedBatch):
        if targets.dims != (True,) and targets.dims != (False,):
            raise ValueError(f"{op}: targets must be (1, S) class indices per example, got dims "
                             f"{targets.dims}")
        target_data = fill_padding(targets, 0)
        available = sizes_along(targets, 1)
    elif isinstance(targets, torch.Tensor) and targets.dim() == 2 and targets.size(0) == 1:
        target_data = targets.expand(batch, targets.size(1))
        available = torch.full((batch,), targets.size(1), device=targets.device)
    else:
        raise TypeError(f"{op}: targets must be a batch of (1, S) class indices, or a plain "
                        "(1, S) tensor shared by every example")
    lengths = _per_example_ints(op, "input_lengths", input_lengths, batch, lp.device)
    wanted = _per_example_ints(op, "target_lengths", target_lengths, batch, lp.device)
    for what, have, need in (("time steps", steps, lengths), ("targets", available, wanted)):
        bad = running((need > have) | (need < 0))
        if fails(bad):
            e = int(bad.nonzero()[0])
            raise ValueError(f"{op}: example {e} has {int(have[e])} {what} but a length of "
                             f"{int(need[e])} (input_lengths / target_lengths count within "
                             "each example)")
    empty = running(steps == 0)
    if fails(empty):
        empty = empty.nonzero()
        raise ValueError(f"{op}: example {int(empty[0])} has no time steps; PyTorch refuses an "
                         "empty log_probs for it")
    # Examples that do not run this code: lengths that index their own data.
    lengths = torch.minimum(lengths.clamp(min=0), steps)
    wanted = torch.minimum(wanted.clamp(min=0), available)
    data = fill_padding(lp, 0).transpose(0, 1)
    if data.size(0) == 0:
        data = data.new_zeros(1, *data.shape[1:])  # no example runs: one step of nothing
    losses = func(data, target_data, lengths, wanted, blank, "none", zero_infinity)
    if reduction == "mean":
        losses = losses / wanted.clamp(min=1).to(losses.dtype)
    return MaskedBatch._make(losses, None, ())


def _per_example_ints(op: str, name: str, value: Any, batch: int,
                      device: torch.device) -> torch.Tensor:
    """A length argument as one int64 per example: a batch of per-example ints, or one
    value (an int, a one-element tuple, list or tensor) the same for every example."""
    if isinstance(value, MaskedBatch):
        if value.dims != () or value.dtype.is_floating_point:
            raise ValueError(f"{op}: {name} must hold one int per example (a batch with dims "
                             f"()), got dims {value.dims} of {value.dtype}")
        return value.data.reshape(batch).long()
    values = torch.as_tensor(value, device=device).reshape(-1)
    if values.numel() != 1:
        raise ValueError(f"{op}: a plain {name} is the same for every example and must be one "
                         f"value (the length of one example), got {values.numel()}")
    return values.long().expand(batch)
