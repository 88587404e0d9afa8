"""Per-example lengths that a mask cannot tell: where they live and how they travel.

A batch's mask is, per example, the product of one prefix per dynamic
dimension: a position is real when it is below the example's length in every
dynamic dimension.  The lengths can be read back from such a mask
(``mask.any(other dims).sum(dim)``) -- except for an example that is empty in
one dynamic dimension and not in another ("empty in part"): ``(1, 3, 0)`` has
an all-false mask, as ``(1, 0, 0)`` has, and its 3 is lost.  Cross-attention
onto an empty source gives such an example (``q @ k.transpose(1, 2)`` with no
keys: scores of shape ``(1, n_q, 0)``).

Where the lengths live.  A mask that cannot tell its lengths carries them: a
``(batch, n_dynamic)`` int64 tensor, one column per dynamic dimension in
order, held as an attribute of the mask tensor (:data:`ATTRIBUTE`).  The mask
stays what every op reads; the lengths are exactly the mask's (an example that
is absent -- a step past its end, an example that does not run the code at
hand under ``@batch`` -- has a row of zeros, as its mask is all false), so that
the mask equals :func:`matchbox.masked_batch.mask_from_lengths` of them.  Only
masks with two or more dynamic dimensions carry lengths, and only where some
example may be empty in part; every other mask tells its lengths itself.

Why on the mask.  Most ops hand their input's mask on to their result
unchanged (pointwise ops, softmax, linear layers, dropout, ...): the lengths go
along for free, and the common case, where no mask carries lengths, costs
nothing.  Ops that build a new mask from a mask carrying lengths build the new
lengths with the helpers below; ops that can make an example empty in part out
of batches whose masks carry none (products and outer broadcasts of two
batches' dynamic dimensions, slices and ``narrow`` to length 0, constructors
with per-example sizes, ``fromlist``) check once whether it happened
(:func:`settle`) and attach lengths only then.

The net.  An op handler that has not been written for lengths (not marked
:func:`aware`) and that makes a new mask from a mask carrying lengths would
lose them; the dispatch calls :func:`check_call` after every op while such a
mask is alive (:data:`LIVE`), and it refuses the op with an error naming it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from matchbox._capture import capturing
from matchbox._op_table import op_name

#: The attribute of a mask tensor that holds its lengths.
ATTRIBUTE = "_matchbox_lengths"

#: ``[n]``: how many masks carrying lengths are alive.  Read on the dispatch's hot
#: path (``LIVE[0]``), so that nothing is checked while there are none.
LIVE = [0]
_COUNTING = threading.Lock()


def carried(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The lengths a mask carries, or ``None`` (then the mask tells them itself)."""
    if not LIVE[0] or mask is None:
        return None
    return getattr(mask, ATTRIBUTE, None)


def carried_by(batch: Any) -> torch.Tensor | None:
    """The lengths ``batch``'s mask carries, or ``None``.

    A batch without a mask (every example has the padded size) has them when
    a dynamic dimension's padded size is 0 and another's is not; its ``mask``
    property builds a mask carrying them.
    """
    mask = batch._mask
    if mask is not None:
        return carried(mask)
    data = batch.data
    if data.numel():
        return None
    sizes = [data.size(i) for i, d in enumerate(batch.dims, start=1) if d]
    if 0 in sizes and any(sizes):
        return torch.tensor([sizes] * data.size(0), device=data.device)
    return None


def _released() -> None:
    with _COUNTING:
        LIVE[0] -= 1


def carry(mask: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """``mask`` carrying ``lengths`` (``None``: ``mask`` as it is).

    The lengths go on a new alias of ``mask`` (a view of the same memory), so
    that a mask another batch holds is never changed.
    """
    if lengths is None:
        return mask
    alias = mask.view(mask.shape)
    setattr(alias, ATTRIBUTE, lengths)
    with _COUNTING:
        LIVE[0] += 1
    weakref.finalize(alias, _released)
    return alias


def empty_in_part(lengths: torch.Tensor) -> torch.Tensor:
    """Per example (``(batch,)`` bool): empty in some dynamic dimension and not in another."""
    return (lengths == 0).any(1) & (lengths != 0).any(1)


def settle(mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``mask``, carrying ``lengths`` if some example is empty in part (one device sync).

    For ops whose inputs carry no lengths but whose result may need them.  While
    ``matchbox.compile`` captures a graph (which must not depend on values), the
    lengths are carried whenever there are several dynamic dimensions.
    """
    if lengths.size(1) > 1 and (capturing() is not None
                                or bool(empty_in_part(lengths).any())):
        return carry(mask, lengths)
    return mask


def column(dims: Sequence[bool], dim: int) -> int:
    """The column of dynamic dimension ``dim`` (1-based, as in an example) in a lengths tensor."""
    return sum(dims[: dim - 1])


def of(batch: Any) -> torch.Tensor:
    """Each example's size along each dynamic dimension: int64 ``(batch, n_dynamic)``."""
    mask, dims, data = batch._mask, batch.dims, batch.data
    dynamic = [i for i, d in enumerate(dims, start=1) if d]
    if not dynamic:
        return torch.zeros(data.size(0), 0, dtype=torch.long, device=data.device)
    lengths = carried(mask)
    if lengths is not None:
        return lengths
    return torch.stack([along(batch, i) for i in dynamic], 1)


def along(batch: Any, dim: int) -> torch.Tensor:
    """Each example's size along dynamic dimension ``dim``: int64 ``(batch,)``."""
    mask = batch._mask
    if mask is None:
        data = batch.data
        return torch.full((data.size(0),), data.size(dim), dtype=torch.long, device=data.device)
    lengths = carried(mask)
    if lengths is not None:
        return lengths[:, column(batch.dims, dim)]
    others = [j for j in range(1, mask.dim()) if j != dim and mask.size(j) != 1]
    if others:
        mask = mask.any(dim=others, keepdim=True)
    return mask.sum(dim).reshape(-1)


def kept(new: torch.Tensor | None, old: torch.Tensor | None) -> torch.Tensor | None:
    """``new`` (a mask made from ``old`` with the same dynamic dimensions, in order:
    a reshape of static dimensions, a squeeze, a device move) carrying ``old``'s lengths."""
    lengths = carried(old)
    if lengths is None or new is None or new is old:
        return new
    return carry(new, lengths.to(new.device))


def reordered(new: torch.Tensor | None, old: torch.Tensor | None, old_dims: Sequence[bool],
              order: Sequence[int]) -> torch.Tensor | None:
    """``new``, the mask ``old`` with its dimensions permuted (``order[k]``: the old
    dimension at new position ``k``, 0 the batch), carrying ``old``'s lengths reordered."""
    lengths = carried(old)
    if lengths is None or new is None:
        return new
    columns = [column(old_dims, o) for o in order[1:] if old_dims[o - 1]]
    return carry(new, lengths[:, columns])


def rebuilt(mask: torch.Tensor | None, lengths: torch.Tensor | None,
            dims: Sequence[bool]) -> torch.Tensor | None:
    """``mask`` (a result's, of ``dims``) carrying ``lengths`` if it has two or more
    dynamic dimensions (with fewer, the mask tells them itself)."""
    if lengths is None or mask is None or sum(dims) < 2:
        return mask
    return carry(mask, lengths)


def restricted(mask: torch.Tensor | None, batch: Any, examples: torch.Tensor
               ) -> torch.Tensor | None:
    """``mask``, ``batch``'s mask made padding outside the examples in ``examples``
    (``(batch,)`` bool: under ``@batch``, those that run), carrying its lengths with
    the other examples' zeroed (absent)."""
    lengths = carried_by(batch)
    if lengths is None or mask is None:
        return mask
    return carry(mask, lengths * examples.reshape(-1, 1))


def selected(mask: torch.Tensor | None, examples: torch.Tensor, new: Any, old: Any
             ) -> torch.Tensor | None:
    """``mask``, ``new``'s mask for the examples in ``examples`` and ``old``'s for the others
    (a merge under ``@batch``), carrying the lengths chosen the same way."""
    if mask is None or not any_carried((new, old)):
        return mask
    return carry(mask, torch.where(examples.reshape(-1, 1), of(new), of(old)))


def any_carried(batches: Sequence[Any]) -> bool:
    """Whether any of ``batches`` (batches or other values) has a mask carrying lengths."""
    return any(carried_by(b) is not None for b in batches if hasattr(b, "_mask"))


# ------------------------------------------------------------------ the net

#: Op handlers written for masks carrying lengths (see :func:`aware`).
AWARE: set[Callable[..., Any]] = set()


def aware(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Mark an op handler as written for masks carrying lengths: it builds its result's
    lengths itself, and :func:`check_call` lets it be."""
    AWARE.add(handler)
    return handler


def _masks(values: Any) -> list[torch.Tensor]:
    masks = []
    for value in values:
        if isinstance(value, (list, tuple)):
            masks += [m for m in (getattr(v, "_mask", None) for v in value) if m is not None]
        else:
            mask = getattr(value, "_mask", None)
            if mask is not None:
                masks.append(mask)
    return [m for m in masks if isinstance(m, torch.Tensor)]


def check_call(handler: Any, func: Any, args: Sequence[Any], kwargs: dict[str, Any] | None,
               result: Any) -> None:
    """Refuse an op that made a new mask from a mask carrying lengths without building
    the new lengths (a handler not marked :func:`aware`): the result would have lost an
    example's sizes.  A result that keeps an argument's mask keeps its lengths."""
    if handler in AWARE:
        return
    inputs = _masks(list(args) + list((kwargs or {}).values()))
    carrying = [m for m in inputs if carried(m) is not None]
    if not carrying:
        return
    results = result if isinstance(result, (list, tuple)) else (result,)
    for mask in _masks(results):
        if any(mask is m for m in inputs) or carried(mask) is not None:
            continue  # an argument's mask, or one that was given lengths
        lengths = carried(carrying[0])
        j = int(empty_in_part(lengths).nonzero()[0]) if empty_in_part(lengths).any() else 0
        raise NotImplementedError(
            f"{op_name(func)} does not support a batch holding an example that is empty in "
            f"one dynamic dimension and not in another (example {j} has sizes "
            f"{tuple(lengths[j].tolist())} along the dynamic dimensions)"
        )
