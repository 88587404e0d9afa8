"""Guards: padding filled before an op mixes positions, gradients dropped where they
must not arrive (the *mixing* rule of ``matchbox._masking``; the *boundary* rule,
``guard_wider``, is in ``matchbox._masking.alignment``, with the other rules on an op's
batch arguments).

Also :func:`combine_masks`, the *and* of masks that recognises one mask met twice.

Below ``MaskedBatch`` (whose rows and positions protocol is made of these): a batch
here is anything with ``data``, ``_mask`` and ``dims``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from matchbox._execution import EXECUTION_MASK, and_running, mask_and, same_mask
from matchbox._layout import has_zero_padding

if TYPE_CHECKING:
    from matchbox.masked_batch import MaskedBatch

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
        mask = and_running(mask, data.size(0), data.dim())
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
    mask = and_running(mask, data.size(0), data.dim())
    if mask is None:
        return data
    return torch.where(mask, data, _ZERO if data.is_floating_point() else data.new_zeros(()))


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
