"""Normalisation layers: ``layer_norm``/``rms_norm`` over trailing dims, and
``group_norm``/``instance_norm``/``batch_norm`` over channels (and their ``nn`` modules).

``layer_norm`` / ``nn.LayerNorm`` and ``rms_norm`` / ``nn.RMSNorm``, one rule for every
batch type (registered for ``"Batch"``):

Semantics: the normalised dimensions (the last ``len(normalized_shape)``) must
be static, so every row of them is all real or all padding (a mask has size
one there) and each row is normalised on its own: the op runs once on the
real rows (``rows()`` / ``from_rows()``, the batch types' protocol) and the
result keeps the input's layout.  Padding is never read and gets no gradient,
so the affine weight's and bias's gradients sum over the real rows only.

Normalising over a dynamic dimension is refused with an error naming the
dimension: in the loop ``normalized_shape`` would have to equal every
example's own size there, which is the static case.  ``F.rms_norm`` appeared
in torch 2.4; on older torch it is simply not registered.

``group_norm`` / ``nn.GroupNorm`` and ``instance_norm`` / ``nn.InstanceNorm*d`` on
examples ``(1, C, *spatial)`` (channels static, spatial dimensions static or dynamic):
each example's statistics, per group (instance: per channel), over its real positions
only, as the loop computes them.  Without padding in a spatial dimension torch's own
op runs on the data; with it, a masked computation (padding filled with 0, the counts
each example's own).  ``instance_norm`` with running statistics in training (and
``track_running_stats=True``) normalises each example as the loop does, but the loop
would update the running statistics once per example: the batch updates them once,
with the mean over its (non-empty) examples of their statistics (unbiased variance),
as PyTorch's own call on a batch does.  With ``use_input_stats=False`` (eval) it is the
loop exactly.

``batch_norm`` / ``nn.BatchNorm*d``: in eval mode (running statistics) each position is
normalised on its own, the loop exactly.  In training the statistics mix the examples,
so no loop is the oracle; Matchbox defines them as PyTorch's ``batch_norm`` over the
real positions of the whole batch (every example's real positions of a channel
together, as if the examples were concatenated along a spatial dimension): the real
rows are packed, torch's own ``batch_norm`` runs on them (its values, gradients and
running-statistics update, unbiased with the number of real positions) and the
result is unpacked; padding is never read.  Under ``@batch`` only the running
examples count.  Fewer than two real values per channel raise, as PyTorch does for one.
A module built with ``track_running_stats=False`` has no running statistics, so in eval
mode too it calls ``batch_norm`` with ``training=True``; there eval mode means what it
means in the loop: each example normalised with its own statistics over its real
positions (``_eval_without_running_statistics``), never its batch-mates'.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    MaskedBatch,
    and_running,
    fails,
    fill_padding,
    guard_gradient,
    implements,
    mixing_mask,
    normalized_dims,
    only_input_batched,
    op_name,
    pack_rows,
    real_rows,
    refuse_size_number,
    running,
    sizes_along,
    unpack_rows,
)


@implements(F.layer_norm, torch.layer_norm, family="normalization", batch_type="Batch")
def layer_norm(func, input, normalized_shape, weight=None, bias=None, eps=1e-5,
               cudnn_enable=True):
    op = op_name(func)
    only_input_batched(op, input, weight=weight, bias=bias)
    static = normalized_dims(op, input, normalized_shape)
    extra = () if func is F.layer_norm else (cudnn_enable,)  # torch.layer_norm's own
    return input.from_rows(func(input.rows(static), normalized_shape, weight, bias, eps,
                                *extra), static)


@implements(getattr(F, "rms_norm", None), getattr(torch, "rms_norm", None),
            family="normalization", batch_type="Batch")
def rms_norm(func, input, normalized_shape, weight=None, eps=None):
    op = op_name(func)
    only_input_batched(op, input, weight=weight)
    static = normalized_dims(op, input, normalized_shape)
    return input.from_rows(func(input.rows(static), normalized_shape, weight, eps), static)


# ------------------------------------------------------------------ group, instance, batch


def _per_position(func: Any, input: MaskedBatch, params: dict[str, Any], *args: Any
                  ) -> MaskedBatch:
    """``func(data, *args)`` of an op that normalises each example (or position) on its own:
    padding zeroed, and gradients at padding dropped, when a parameter gradient sums over
    positions (core's mixing rule)."""
    mixes = mixing_mask(input._mask, input.data) is not None and any(
        isinstance(p, torch.Tensor) and p.requires_grad for p in params.values())
    data = fill_padding(input, 0, running=True) if mixes else input.data
    out = func(data, *args)
    if mixes:
        out = guard_gradient(out, input._mask)
    return MaskedBatch._make(out, input._mask, input.dims)


def _check_channels(op: str, input: Any, **params: Any) -> None:
    only_input_batched(op, input, **params)
    if input.dim() < 2:
        raise ValueError(f"{op}: each example must be (1, channels, ...), got rank {input.dim()}")
    if input.dims[0]:
        raise ValueError(f"{op}: dimension 1 (the channels) is dynamic; the channels must be "
                         "static (every example has the same number)")


def _spatial_sizes(input: MaskedBatch) -> torch.Tensor:
    """Each example's number of spatial positions (the dimensions after the channels)."""
    count = torch.ones(input.data.size(0), dtype=torch.long, device=input.device)
    for j in range(2, input.dim()):
        count = count * sizes_along(input, j)
    return count


def _refuse_single_values(op: str, input: MaskedBatch, per_group: int, what: str) -> None:
    """Raise where PyTorch raises for one example alone: a single value to normalise over."""
    single = running(_spatial_sizes(input) * per_group == 1)
    if fails(single):
        single = single.nonzero()
        raise ValueError(f"{op}: expected more than 1 {what}, but example {int(single[0])} "
                         "has 1 (PyTorch raises for it alone)")


def _padded_spatially(input: MaskedBatch) -> bool:
    return input._mask is not None and any(input.dims[1:])


def _masked_group_moments(input: MaskedBatch, groups: int, eps: float
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each example's normalised data per group of channels over its real positions, and
    the groups' means and biased variances, ``(B, groups)``.  Padding reads as 0."""
    x = input.data
    batch, channels, spatial = x.size(0), x.size(1), x.shape[2:]
    grouped = x.reshape(batch, groups, channels // groups, *spatial)
    real = input._mask.reshape(batch, 1, 1, *input._mask.shape[2:])
    over = tuple(range(2, grouped.dim()))
    count = real.expand_as(grouped).sum(over, keepdim=True)
    count = count.clamp(min=1).to(x.dtype)  # an empty example normalises nothing
    mean = torch.where(real, grouped, 0).sum(over, keepdim=True) / count
    centred = torch.where(real, grouped - mean, 0)
    variance = (centred * centred).sum(over, keepdim=True) / count
    normalised = (centred * torch.rsqrt(variance + eps)).reshape(x.shape)
    return normalised, mean.reshape(batch, groups), variance.reshape(batch, groups)


def _affine(data: torch.Tensor, weight: Any, bias: Any) -> torch.Tensor:
    shape = [1, data.size(1)] + [1] * (data.dim() - 2)
    if weight is not None:
        data = data * weight.reshape(shape)
    if bias is not None:
        data = data + bias.reshape(shape)
    return data


@implements(F.group_norm, family="normalization")
def group_norm(func, input, num_groups, weight=None, bias=None, eps=1e-5):
    op = op_name(func)
    _check_channels(op, input, weight=weight, bias=bias)
    refuse_size_number(op, "num_groups", num_groups)
    channels = input.data.size(1)
    if channels % num_groups:
        raise RuntimeError(f"{op}: expected the number of channels ({channels}) to be "
                           f"divisible by num_groups ({num_groups})")
    _refuse_single_values(op, input, channels // num_groups, "value per group")
    if not _padded_spatially(input):
        return _per_position(func, input, {"weight": weight, "bias": bias}, num_groups,
                             weight, bias, eps)
    normalised, _, _ = _masked_group_moments(input, num_groups, eps)
    out = guard_gradient(_affine(normalised, weight, bias), input._mask)
    return MaskedBatch._make(out, input._mask, input.dims)


@implements(F.instance_norm, family="normalization")
def instance_norm(func, input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    op = op_name(func)
    _check_channels(op, input, running_mean=running_mean, running_var=running_var,
                    weight=weight, bias=bias)
    params = {"weight": weight, "bias": bias}
    if not use_input_stats:  # running statistics: each position on its own
        return _per_position(func, input, params, running_mean, running_var, weight, bias,
                             False, momentum, eps)
    _refuse_single_values(op, input, 1, "spatial element when training")
    channels = input.data.size(1)
    if not _padded_spatially(input):
        if running_mean is None and running_var is None:
            return _per_position(func, input, params, None, None, weight, bias, True,
                                 momentum, eps)
        normalised, mean, variance = _plain_instance_moments(input, eps)
    else:
        normalised, mean, variance = _masked_group_moments(input, channels, eps)
    if running_mean is not None or running_var is not None:
        _update_instance_statistics(input, mean, variance, running_mean, running_var, momentum)
    out = _affine(normalised, weight, bias)
    if input._mask is not None:
        out = guard_gradient(out, input._mask)
    return MaskedBatch._make(out, input._mask, input.dims)


def _plain_instance_moments(input: MaskedBatch, eps: float
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same as :func:`_masked_group_moments` for a batch without spatial padding."""
    x = input.data
    over = tuple(range(2, x.dim()))
    mean = x.mean(over, keepdim=True)
    variance = x.var(over, correction=0, keepdim=True)
    normalised = (x - mean) * torch.rsqrt(variance + eps)
    return normalised, mean.reshape(x.shape[:2]), variance.reshape(x.shape[:2])


def _update_instance_statistics(input: MaskedBatch, mean: torch.Tensor, variance: torch.Tensor,
                                running_mean: Any, running_var: Any, momentum: float) -> None:
    """One update for the batch: the mean over its non-empty examples of their statistics
    (the variance unbiased with each example's own count), as torch's batched call."""
    sizes = _spatial_sizes(input)
    if input._mask is not None:  # an example that is not real (a finished step) counts as empty
        sizes = sizes * input._mask.reshape(sizes.size(0), -1).any(1)
    count = sizes.to(mean.dtype).unsqueeze(1)
    present = running(sizes > 0).unsqueeze(1)
    examples = present.sum()
    if not bool(examples):
        return  # an empty batch leaves them as they are, as torch does
    with torch.no_grad():
        if running_mean is not None:
            batch_mean = torch.where(present, mean, 0).sum(0) / examples
            running_mean.mul_(1 - momentum).add_(momentum * batch_mean.to(running_mean.dtype))
        if running_var is not None:
            unbiased = variance * count / (count - 1)
            batch_var = torch.where(present, unbiased, 0).sum(0) / examples
            running_var.mul_(1 - momentum).add_(momentum * batch_var.to(running_var.dtype))


@implements(F.batch_norm, family="normalization")
def batch_norm(func, input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    op = op_name(func)
    _check_channels(op, input, running_mean=running_mean, running_var=running_var,
                    weight=weight, bias=bias)
    if not training:  # running statistics: each position on its own, the loop exactly
        return _per_position(func, input, {"weight": weight, "bias": bias}, running_mean,
                             running_var, weight, bias, False, momentum, eps)
    if running_mean is None and running_var is None and _module_in_eval_mode():
        return _each_example_alone(op, input, weight, bias, eps)
    # Training: torch's batch_norm over the real positions of every (running) example,
    # packed as the rows of a (1, channels, rows) batch (see the module docstring).
    batch, rank = input.data.size(0), input.data.dim()
    mask = and_running(input._mask, batch, rank)
    rows_first = MaskedBatch._make(input.data.movedim(1, -1),
                                   None if mask is None else mask.movedim(1, -1), input.dims)
    rows = real_rows(rows_first, each_row_alone=False)
    values = pack_rows(rows_first.data, rows)
    if values.size(0) < 2:
        raise ValueError(
            f"{op}: expected more than 1 value per channel when training, but the batch has "
            f"{values.size(0)} real position(s) (batch_norm's statistics are over every "
            "example's real positions together)")
    out = func(values.t().unsqueeze(0), running_mean, running_var, weight, bias, True,
               momentum, eps)
    out = unpack_rows(out.squeeze(0).t(), rows, rows_first.data.shape[:-1])
    return MaskedBatch._make(out.movedim(-1, 1), input._mask, input.dims)


_BATCH_NORM_FORWARDS = (torch.nn.modules.batchnorm._BatchNorm.forward.__code__,
                        torch.nn.SyncBatchNorm.forward.__code__)


def _module_in_eval_mode() -> bool:
    """Whether this ``batch_norm`` call comes from an ``nn.BatchNorm*d`` in eval mode.

    Without running statistics (``track_running_stats=False``) the module passes
    ``training=True`` in eval mode too, so the call alone cannot tell; the module's
    ``forward`` is on the stack (our caller's caller's ...): its ``self.training`` is read
    from there, nothing in torch is changed (as ``losses._recover_dropped_weight``)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code in _BATCH_NORM_FORWARDS:
            module = frame.f_locals.get("self")
            return isinstance(module, torch.nn.Module) and not module.training
        frame = frame.f_back
    return False


def _each_example_alone(op: str, input: MaskedBatch, weight: Any, bias: Any, eps: float
                        ) -> MaskedBatch:
    """What the loop computes for ``nn.BatchNorm*d(track_running_stats=False)`` in eval
    mode: each example, a batch of one, normalised with its own statistics per channel over
    its real positions (instance norm's), then the module's affine parameters."""
    _refuse_single_values(op, input, 1, "value per channel when training")
    if _padded_spatially(input):
        normalised, _, _ = _masked_group_moments(input, input.data.size(1), eps)
    else:
        normalised, _, _ = _plain_instance_moments(input, eps)
    out = _affine(normalised, weight, bias)
    if input._mask is not None:
        out = guard_gradient(out, input._mask)
    return MaskedBatch._make(out, input._mask, input.dims)
