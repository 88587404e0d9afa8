"""Guards: padding filled before an op mixes positions, gradients dropped where they
must not arrive (the *mixing* and *boundary* rules of ``matchbox._masking``).

Also :func:`combine_masks`, the *and* of masks that recognises one mask met twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from matchbox._masking.execution import EXECUTION_MASK, and_running, mask_and, same_mask
from matchbox.masked_batch import MaskedBatch, has_zero_padding

# A zero for ``where`` to put at padding: a 0-d CPU tensor takes the dtype and
# device of the other operand (of the same kind, floating point), and reusing it
# spares an allocation per call.  It is never written to.
_ZERO = torch.zeros(())


def fill_padding(batch: MaskedBatch, value: float = 0.0, *, running: bool = False
                 ) -> torch.Tensor:
    """``batch.data`` with every padding position replaced by ``value``.

    ``running=True`` is for ops that sum gradients over the examples into a
    shared tensor (a product with a weight): while gradients are recorded
    under ``@batch``, the rows of examples that do not run the code at hand are
    filled too (:func:`mixing_mask`).
    """
    mask = mixing_mask(batch._mask, batch.data) if running else batch._mask
    if mask is None:
        return batch.data
    data = batch.data
    if value == 0:
        if has_zero_padding(batch, mask):
            return data
        if data.is_floating_point():
            return torch.where(mask, data, _ZERO)
    return torch.where(mask, data, torch.full((), value, dtype=data.dtype, device=data.device))


def mixing_mask(mask: torch.Tensor | None, data: torch.Tensor) -> torch.Tensor | None:
    """The positions of a batch (``mask`` over ``data``) that an op summing gradients
    over the examples into a shared tensor reads as real: the real positions and,
    while gradients are recorded under ``@batch``, only those of the running
    examples.

    What the code at hand computed for an example that does not run it may be
    anything (``x.log()`` under ``if x > 0``); it is discarded, but a weight's
    gradient multiplies it by the zero gradient arriving there, and ``0 * nan``
    is NaN.  Such rows are filled and their gradients dropped, as padding is.
    """
    if torch.is_grad_enabled():
        mask = and_running(mask, data.dim(), data.size(0))
    return mask


def weight_input_data(batch: MaskedBatch) -> torch.Tensor:
    """The data an op multiplies by a shared weight on its real rows only (a linear
    layer, a packed RNN): ``batch.data``, and under ``@batch`` (while gradients
    are recorded) with padding and the rows of non-running examples zeroed.

    Such an op never reads padding; what the code at hand computed for an
    example that does not run it, it reads, and that must not reach the weight's
    gradient (see :func:`mixing_mask`).
    """
    if EXECUTION_MASK.get() is None:
        return batch.data
    return fill_padding(batch, 0, running=True)


def guard_gradient(data: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``data`` unchanged at real positions, with gradients at padding dropped.

    Gradients at the rows of examples that are not running (:func:`and_running`)
    are dropped too.  The values there become zero (padding may hold anything;
    a non-running example's values are discarded).
    """
    if not data.requires_grad or not torch.is_grad_enabled():
        return data
    mask = and_running(mask, data.dim(), data.size(0))
    if mask is None:
        return data
    return torch.where(mask, data, _ZERO if data.is_floating_point() else data.new_zeros(()))


def guard_wider(
    batches: Sequence[Any], values: list[Any], mask: torch.Tensor | None,
    dims: tuple[bool, ...],
) -> list[Any]:
    """Guard the arguments of an op that combines masks with *and*.

    Such an op's result is padding wherever one batch argument is: there an
    argument that is real (a state next to the step of a sequence that has
    ended for an example, a plain tensor shared by every example, a batch of
    size one along a dynamic dimension broadcast over padding) sits next to
    padding, whose values are arbitrary.  The result is discarded there, but
    the backward pass would multiply the zero gradient arriving there by a
    derivative computed from padding (``0 * nan``) and send it to the real
    argument.  Seen through :func:`guard_gradient` with the result's mask, such
    an argument gets gradient only from positions the result calls real, as in
    the loop over examples.

    ``batches[i]`` is the argument that became ``values[i]`` (the data of a
    batch, a plain tensor, or anything else); an argument needs no guard when
    its own mask is the result's (``same_mask``) and it is not broadcast along
    a dynamic dimension.  Under ``@batch``, a plain tensor (a weight) is also
    guarded at the rows of examples that do not run the region
    (:func:`and_running`); a batch read from outside a region is guarded by the
    region itself.
    """
    if not torch.is_grad_enabled():
        return values
    shared_mask = mask  # for plain tensors: padding, and the examples not running
    if EXECUTION_MASK.get() is not None:
        batch = next((b.data.size(0) for b in batches if isinstance(b, MaskedBatch)), None)
        if batch is not None:
            shared_mask = and_running(mask, len(dims) + 1, batch)
    if shared_mask is None:
        return values
    out = values
    for i, value in enumerate(values):
        if not isinstance(value, torch.Tensor) or not value.requires_grad:
            continue
        arg = batches[i]
        if isinstance(arg, MaskedBatch):
            if mask is None or _padding_wherever(arg._mask, mask, value, dims):
                continue
            guard = mask
        else:
            guard = shared_mask
        if out is values:
            out = list(values)
        out[i] = torch.where(guard, value, _ZERO if value.is_floating_point()
                             else value.new_zeros(()))
    return out


def _padding_wherever(own: torch.Tensor | None, mask: torch.Tensor, value: torch.Tensor,
                      dims: tuple[bool, ...]) -> bool:
    """Whether a batch argument (mask ``own``, data ``value``) is padding wherever the
    result (``mask``) is, so that no gradient from the result's padding reaches it."""
    return own is not None and (own is mask or same_mask(own, mask)) and not (
        any(dims) and _broadcast_dynamic(value, mask, dims))


def _broadcast_dynamic(value: torch.Tensor, mask: torch.Tensor, dims: tuple[bool, ...]) -> bool:
    """Whether ``value`` has size one along a dynamic dimension where ``mask`` does not."""
    return any(d and value.size(j) == 1 and mask.size(j) != 1 for j, d in enumerate(dims, 1))


def combine_masks(masks: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    """True where every mask is true (broadcasting); ``None`` (all real) drops out.

    A mask met twice (the same tensor, or a view of the same memory with the
    same layout, as two ``unbind`` steps of one batch) is combined once, and a
    single distinct mask is returned as it is, so that later ops can tell by
    identity that their arguments share it.
    """
    mask = None
    for other in masks:
        if other is None or other is mask:
            continue
        if mask is None:
            mask = other
        elif not same_mask(mask, other):
            mask = mask_and(mask, other)
    return mask


def masked_positions(batch: MaskedBatch, shared: bool) -> torch.Tensor:
    """``MaskedBatch.positions(shared)``: the data, with padding (and, under ``@batch``,
    the rows of examples that do not run the code at hand) zeroed when ``shared``: the
    op's parameter gradient sums over positions (the mixing rule)."""
    if shared and mixing_mask(batch._mask, batch.data) is not None:
        return fill_padding(batch, 0, running=True)
    return batch.data


def masked_from_positions(batch: MaskedBatch, values: torch.Tensor, shared: bool
                          ) -> MaskedBatch:
    """``MaskedBatch.from_positions``: ``values`` in ``batch``'s layout; when ``shared``,
    with the gradient at padding (and non-running rows) dropped."""
    if shared and mixing_mask(batch._mask, batch.data) is not None:
        values = guard_gradient(values, batch._mask)
    return MaskedBatch._make(values, batch._mask, batch.dims)
