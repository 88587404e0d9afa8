"""Joins: cat and stack of batches (and of a batch with plain tensors).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from matchbox import _capture, _lengths, _masking, _registry
from matchbox._layout import expanded_row, mark_zero_padding, zero_padding_along
from matchbox.masked_batch import (
    MaskedBatch,
    full_mask,
    mask_from_lengths,
)
from matchbox.ops.shape._dims import _batch_dim_view, _nonbatch_dim

# ------------------------------------------------------------------ joining


def _as_batches(op: str, tensors: Sequence[Any]) -> list[MaskedBatch]:
    """Batches for a cat/stack; a plain tensor is the same in every example."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty list of tensors")
    first = next(t for t in tensors if isinstance(t, MaskedBatch))
    batch = first.data.size(0)
    out = []
    for t in tensors:
        if isinstance(t, MaskedBatch):
            if t.data.size(0) != batch:
                raise ValueError(
                    f"{op}: the batches in the list have different batch sizes "
                    f"({batch} and {t.data.size(0)})"
                )
            out.append(t)
            continue
        # Expanded from size one to the batch size (``cls.expand(x.size(0), -1, -1)``):
        # its one row, as a pointwise op takes it (``_layout.expanded_row``).
        t = expanded_row(t, batch)
        if t.dim() != first.dim() or t.size(0) != 1:
            raise ValueError(
                f"{op}: a plain tensor in the list must look like one example (rank "
                f"{first.dim()}, size 1 in dimension 0, or expanded from size 1 to the "
                f"batch size there); got shape {tuple(t.shape)}"
            )
        # Real for every example (no mask); guarded like any argument real where
        # the result is padding (``_joined_data``).
        out.append(MaskedBatch._make(t.expand(batch, *t.shape[1:]), None, (False,) * (t.dim() - 1)))
    return out


def _check_joined_extents(op: str, tensors: Sequence[Any], parts: list[MaskedBatch],
                          skip: int | None, dynamic_stack: bool = False) -> None:
    """The parts of a cat/stack must have each example's size along every other dynamic dim.

    The loop's ``torch.cat``/``torch.stack`` raises when an example's parts differ
    there; the batch would silently keep only their overlap.  A plain tensor is
    the same for every example: as in pointwise ops, it must span the padded
    size (e.g. sliced with ``x.maxsize(dim)``), each example taking its own
    length of it.  A batch static in that dimension has its size in every
    example, which each running example's length must equal
    (``_masking.check_static_extents``); such a part is padded in place in
    ``parts`` to the others' padded size.  In a ``dynamic_stack`` an example may
    be absent from a part (a finished step).
    """
    for i in range(1, parts[0].dim()):
        if i == skip:
            continue
        dynamic = [p for t, p in zip(tensors, parts)
                   if isinstance(t, MaskedBatch) and t.dims[i - 1]]
        if not dynamic:
            _masking.check_static_join(op, parts, i)
            continue
        _masking.check_lengths_agree(op, [(p, i) for p in dynamic],
                                     absent_agrees=dynamic_stack)
        padded = max(p.data.size(i) for p in dynamic)
        static = [k for k, t in enumerate(tensors) if isinstance(t, MaskedBatch)
                  and not t.dims[i - 1]]
        if static:
            _masking.check_static_extents(op, [(p, i) for p in dynamic],
                                          [(parts[k], i) for k in static], exact=True,
                                          absent_agrees=dynamic_stack)
            for k in static:
                parts[k] = _masking.pad_to(parts[k], i, padded)
        for k, (t, p) in enumerate(zip(tensors, parts)):
            if not isinstance(t, MaskedBatch) and p.data.size(i) != padded:
                raise ValueError(
                    f"{op}: tensor {k} of the list is the same for every example (a plain "
                    f"tensor) and has size {p.data.size(i)} in dimension {i}, which is "
                    f"dynamic in the batches; it must span their padded size {padded} "
                    f"(e.g. sliced with x.maxsize({i}))"
                )


def _check_same_examples(op: str, parts: list[MaskedBatch], joined: str) -> None:
    """Refuse a join along a static dim of parts real for different examples.

    The steps of ``x.unbind(1)`` for examples of different lengths are real for
    an example only up to its length: the loop would join each example's own
    number of them, which a static dimension (one size for every example)
    cannot hold, and the *and* of the masks would silently drop the example.

    A part real for every example (no mask: a state kept by ``F.update``, a
    plain tensor) makes the join a step of such a loop (``torch.cat([x_t, h])``)
    where, as in a pointwise op, the result is padding for an example whose
    step has ended, and the loop does not run the step for it: the *and* is
    right there.  Otherwise every running example must be real in all parts or
    in none.  A part with a dynamic dimension empty for an example may hold
    that example's zero length rather than its absence (its extents are
    checked by ``_check_joined_extents``), so only parts static in every
    dimension count as absent.  Parts that share one mask (``same_mask``) or
    include an unmasked one cost nothing; otherwise one comparison (a sync).
    """
    differ = _with_other_parts(parts)
    if differ is not None:
        # Deferred to the end of a @batch call on an accelerator: the join goes on, its
        # mask the *and* of the parts', and nothing reads past an extent.
        _capture.check(differ, functools.partial(_differ_error, op, differ, len(parts), joined))


def _differ_error(op: str, differ: torch.Tensor, count: int, joined: str) -> ValueError:
    j = int(differ.nonzero()[0])
    return ValueError(
        f"{op}: example {j} is real in some of the {count} tensors {joined} and "
        "padding in others (as the steps of x.unbind(dim) are for examples of "
        "different lengths): the examples have different numbers of real parts, which "
        "a static dimension cannot hold; to stack per-step results into a new dynamic "
        "dimension use matchbox.functional.stack(tensors, dim, dynamic=True)" + (
            " (and flatten it into the next dimension to concatenate)"
            if joined == "concatenated" else "")
    )


def _items_differ(parts: list[MaskedBatch]) -> bool:
    """Whether some running example is real in some parts and absent from others (see
    ``_check_same_examples``).  While ``matchbox.compile`` captures a graph, which must
    not depend on values: whether that is possible at all (the stacked dimension is
    then dynamic, which holds equal numbers of items too)."""
    differ = _with_other_parts(parts)
    if differ is None:
        return False
    return _capture.some(differ)


def _with_other_parts(parts: list[MaskedBatch]) -> torch.Tensor | None:
    """Per running example, whether it is real in some parts and absent from others;
    ``None`` where no example can be (the parts share a mask, or one has none)."""
    masks = [p._mask for p in parts]
    batch = parts[0].data.size(0)
    if _recorded_items(parts):
        # Items of a list that only some examples have (matchbox-control records
        # them): an unmasked one is an item every example has, not a state.
        having = [_examples_having(p, batch) for p in parts]
    elif any(m is None for m in masks) or all(_masking.same_mask(m, masks[0])
                                              for m in masks[1:]):
        return None
    elif (len(parts) == 2 and not any(parts[0].dims) and not any(parts[1].dims)
          and masks[0].shape == masks[1].shape and masks[0].numel() == batch):
        # Two parts static in every dimension, one mask entry per example (the commonest
        # join: two halves of a state): they differ where one mask does.
        return _masking.running((masks[0] ^ masks[1]).reshape(batch))
    else:
        having = [m.reshape(batch, -1).any(1) for m in masks]
    absent = [~h for h, p in zip(having, parts) if not any(p.dims)]
    if not absent:
        return None
    differ = torch.stack(absent).any(0) & torch.stack(having).any(0)
    return _masking.running(differ)


def _recorded_items(tensors: Sequence[Any]) -> bool:
    """Whether some part is an item of a list that only some examples have
    (``MaskedBatch._present``, recorded by matchbox-control's ``@batch``)."""
    return any(type(t) is MaskedBatch and getattr(t, "_present", None) is not None
               for t in tensors)


def _examples_having(part: MaskedBatch, batch: int) -> torch.Tensor:
    """Which examples have ``part``, ``(batch,)`` bool."""
    present = getattr(part, "_present", None)
    if present is not None:
        return present
    if part._mask is None:
        return torch.ones(batch, dtype=torch.bool, device=part.data.device)
    return part._mask.reshape(batch, -1).any(1)


def _common_padding(batches: list[MaskedBatch], skip: int | None) -> list[MaskedBatch]:
    """Pad every dynamic dimension (but ``skip``) to the largest padded size."""
    rank = batches[0].dim()
    for i in range(1, rank):
        if i == skip:
            continue
        size = max(b.data.size(i) for b in batches)
        batches = [_masking.pad_to(b, i, size) if b.dims[i - 1] else b for b in batches]
    return batches


@_lengths.aware
@_registry.implements(torch.cat, torch.concat, torch.concatenate, family="shape")
def cat(func, tensors, dim=0, **kwargs):
    if not kwargs:
        joined = _cat_unpadded(tensors, dim)
        if joined is not None:
            return joined
    op = _registry.op_name(func)
    dim = kwargs.pop("axis", dim)
    tensors = list(tensors)
    parts = _as_batches(op, tensors)
    d = _nonbatch_dim(op, dim, parts[0].dim())
    if not any(p.dims[d - 1] for p in parts):
        _check_same_examples(op, parts, "concatenated")
    _check_joined_extents(op, tensors, parts, d)
    dims = tuple(any(p.dims[i] for p in parts) for i in range(len(parts[0].dims)))
    own = parts  # each with its own dims (the lengths are read from these)
    parts = [MaskedBatch._make(p.data, p.mask, dims) if p.dims != dims and not dims[d - 1]
             else p for p in parts]
    parts = _common_padding(parts, d)
    if not dims[d - 1]:
        mask = _masking.combine_masks([p._mask for p in parts])
        data = torch.cat(_joined_data(parts, mask, dims), d)
        mask = _masking.fit_mask(mask, data, dims)
        return MaskedBatch._make(data, _masking.combined_lengths(own, mask, dims), dims)
    return _cat_dynamic(parts, d, dims)


def _cat_unpadded(tensors: Any, dim: Any) -> MaskedBatch | None:
    """The commonest cat, without the general rule's checks: batches without padding, of
    one rank and static dimensions only, joined along a dimension after the batch's
    (``torch.cat([h_left, h_right], -1)`` in a tree's cell).  Each example's join is
    then the data's; ``None`` for any other call (and where torch refuses the shapes:
    the general rule names the dimension)."""
    if type(tensors) is not list and type(tensors) is not tuple or not tensors:
        return None
    first = tensors[0]
    if type(first) is not MaskedBatch or type(dim) is not int or any(first.dims):
        return None
    dims = first.dims
    rank = len(dims) + 1
    data = []
    for t in tensors:
        if (type(t) is not MaskedBatch or t._mask is not None or t.dims != dims
                or t._present is not None):
            return None
        # (The slot: cat lets a region's deferred guard through, the property would give
        # the same.  Another batch size or rank: torch's cat raises, below.)
        data.append(t._data)
    d = dim + rank if dim < 0 else dim
    if not 0 < d < rank:
        return None
    try:
        joined = torch.cat(data, d)
    except RuntimeError:
        return None
    out = MaskedBatch._make(joined, None, dims)
    if first._zero_padding is not None:
        # A join of zeros is zeros: pieces of a region's guarded batch joined again (a
        # tree cell's h_left and h_right) keep its record (the linear layer they go to
        # needs no where of its own).
        zeros = zero_padding_along(first, d)
        if zeros is not None and all(zero_padding_along(t, d) is zeros for t in tensors):
            mark_zero_padding(out, zeros)
    return out


def _joined_data(parts: list[MaskedBatch], mask: torch.Tensor | None,
                 dims: tuple[bool, ...]) -> list[torch.Tensor]:
    """The parts' data for a join along a static dimension, whose mask is their *and*.

    A part real where the result is padding (a state joined with the step of
    a sequence that has ended) gets no gradient from there (``guard_wider``).
    """
    # The mask has size one along the joined dimension: it broadcasts over each part.
    return _masking.guard_wider(parts, [p.data for p in parts], mask, dims)


def _cat_dynamic(parts: list[MaskedBatch], d: int, dims: tuple[bool, ...]) -> MaskedBatch:
    """Concatenate along dynamic dimension ``d``: each example's parts end to end (a part
    static in every dimension that an example does not have, an item of a list that only
    some examples have, is no part of that example's: ``[bos] + steps``)."""
    batch = parts[0].data.size(0)
    lengths = [_length_along(p, d, batch) for p in parts]
    padded = [p.data.size(d) for p in parts]
    total = torch.stack(lengths, 1).sum(1)
    if _capture.capturing() is not None:
        out_size = sum(padded)  # every example fits; the graph must not read the lengths
    else:
        out_size = int(total.max()) if total.numel() else 0
    starts = torch.stack(lengths, 1).cumsum(1) - torch.stack(lengths, 1)  # (B, parts)
    position = torch.arange(out_size, device=parts[0].device)
    # For every output position, which part it comes from and where in the
    # padded concatenation of all parts that element lies.
    source = torch.zeros(total.size(0), out_size, dtype=torch.long, device=position.device)
    offset = 0
    for j, length in enumerate(lengths):
        inside = (position >= starts[:, j:j + 1]) & (position < starts[:, j:j + 1] + length[:, None])
        source = torch.where(inside, position - starts[:, j:j + 1] + offset, source)
        offset += padded[j]
    data = torch.cat([p.data for p in parts], d)
    shape = [1] * data.dim()
    shape[0], shape[d] = source.size(0), out_size
    index = source.reshape(shape).expand(*data.shape[:d], out_size, *data.shape[d + 1:])
    data = data.gather(d, index)
    if _lengths.any_carried(parts) and sum(dims) > 1:
        # A part's example empty in part has an all-false mask: the mask comes from
        # the lengths (along d their sum; along the others they agree, an absent 0 wins).
        columns = [total if i == d else torch.stack(
            [_lengths.along(p, i) for p in parts if p.dims[i - 1]]).amin(0)
            for i, dynamic in enumerate(dims, start=1) if dynamic]
        new = torch.stack(columns, 1)
        return MaskedBatch._make(
            data, _lengths.carry(mask_from_lengths(new, data.shape, dims), new), dims)
    others = [p.mask.any(d, keepdim=True) | (length == 0).reshape(-1, *[1] * (data.dim() - 1))
              for p, length in zip(parts, lengths)]
    along = (position < total[:, None]).reshape(shape)
    mask = _masking.combine_masks(others) & along
    return MaskedBatch._make(data, _masking.fit_mask(mask, data, dims), dims)


def _length_along(part: MaskedBatch, d: int, batch: int) -> torch.Tensor:
    """Each example's length of ``part`` along ``d`` in a join along dynamic ``d``: a part
    static in every dimension has its size there only in the examples that have it."""
    if part.dims[d - 1]:
        return _masking.lengths_along(part, d)
    size = torch.full((batch,), part.data.size(d), device=part.device)
    if any(part.dims) or (part._mask is None and part._present is None):
        return size  # (every example has it)
    return size * _examples_having(part, batch)


def _present_steps_first(data: torch.Tensor, mask: torch.Tensor,
                         d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Move each example's present steps along ``d`` to the front, in order.

    A step is present for an example where its part is real (anywhere) for it.
    Steps that end for different examples at different times are already a
    prefix; items appended under a per-example condition are not (an example
    that skipped step 1 but appended at step 2 holds its items at 0 and 2),
    while in the loop each example's list holds only what it appended.  A
    batch's dynamic extent must be a prefix, so the present steps are gathered
    to the front (one gather for the batch, only when some example has a gap).
    """
    steps = mask.size(d)
    present = mask.movedim(d, 1).reshape(mask.size(0), steps, -1).any(-1)   # (batch, steps)
    if steps < 2 or (_capture.capturing() is None
                     and not bool((present[:, 1:] & ~present[:, :-1]).any())):
        return data, mask
    # A stable sort of "absent" keeps the present steps in order, first.
    order = torch.sort((~present).to(torch.uint8), dim=1, stable=True).indices

    def gather(t: torch.Tensor) -> torch.Tensor:
        shape = [1] * t.dim()
        shape[0], shape[d] = t.size(0), steps
        index = order.reshape(shape).expand(*t.shape[:d], steps, *t.shape[d + 1:])
        return t.gather(d, index)

    return gather(data), gather(mask)


@_lengths.aware
@_registry.implements(torch.stack, family="shape")
def stack(func, tensors, dim=0, **kwargs):
    """``torch.stack``: a new static dimension (every example stacks the same count), or a
    dynamic one for the items of a list that only some examples have (``@batch``)."""
    op = _registry.op_name(func)
    tensors = list(tensors)
    first = next((t for t in tensors if isinstance(t, MaskedBatch)), None)
    view = None if first is None else _batch_dim_view(dim, first.dim() + 1, first.dims)
    if view is not None:
        # Per example N tensors (1, *S) -> (N, 1, *S): a time-major view of the
        # batches stacked along 1.
        return view(op, stack_batches(op, tensors, 1, dynamic=False))
    # The items of a list that only some examples have (appended, or made by a
    # comprehension, under a per-example condition in @batch): where the running
    # examples have different numbers of them, each stacks its own items, as many
    # as it has, into a dynamic dimension.
    dynamic = _recorded_items(tensors) and _items_differ(_as_batches(op, list(tensors)))
    return stack_batches(op, tensors, dim, dynamic=dynamic)


def stack_batches(op: str, tensors: Sequence[Any], dim: int, dynamic: bool) -> MaskedBatch:
    """Stack into a new dimension; ``dynamic`` keeps each part's mask along it.

    A dynamic new dimension is what a loop produces when its steps stack
    per-example results: an example whose step is not real (it had finished)
    is padding there.
    """
    tensors = list(tensors)
    parts = _as_batches(op, tensors)
    d = _nonbatch_dim(op, dim, parts[0].dim() + 1, scalars=parts[0].dims == ())
    if not dynamic:
        _check_same_examples(op, parts, "stacked")
    _check_joined_extents(op, tensors, parts, None, dynamic_stack=dynamic)
    dims = tuple(any(p.dims[i] for p in parts) for i in range(len(parts[0].dims)))
    own = parts  # each with its own dims (the lengths are read from these)
    parts = _common_padding([MaskedBatch._make(p.data, p.mask, dims) for p in parts], None)
    new_dims = dims[: d - 1] + (dynamic,) + dims[d - 1:]
    if dynamic and _lengths.any_carried(own):
        return _stack_carried(own, parts, d, dims, new_dims)
    if dynamic:
        data = torch.stack([p.data for p in parts], d)
        masks = [p.mask for p in parts]
        common = torch.broadcast_shapes(*[m.shape for m in masks])
        mask = torch.stack([m.expand(common) for m in masks], d)
        data, mask = _present_steps_first(data, mask, d)
    else:
        mask = _masking.combine_masks([p._mask for p in parts])
        data = torch.stack(_joined_data(parts, mask, dims), d)
        mask = _masking.combined_lengths(own, mask, dims)
        mask = None if mask is None else _lengths.kept(mask.unsqueeze(d), mask)
    return MaskedBatch._make(data, _masking.fit_mask(mask, data, new_dims), new_dims)


def stack_run(op: str, items: Sequence[MaskedBatch], data: torch.Tensor,
              mask: torch.Tensor | None, dim: int) -> MaskedBatch | None:
    """``stack_batches(op, items + run, dim, dynamic=True)``, where the ``run`` of steps
    after ``items`` comes stacked along a new first dimension: ``data`` ``(steps, batch,
    *S)`` and ``mask`` (``None``: every step real for every example) are each step's
    data and mask, stacked (the per-step outputs of a loop captured as a ``scan``, whose
    number may be a symbol: taking them apart would fix it).

    For parts static in every dimension but the batch's, of one rank, with no lengths
    carried (else ``None``: stack the run's steps one by one), the stack is the dynamic
    branch of :func:`stack_batches` with the run's steps joined in whole: the same data,
    mask and order of each example's steps."""
    parts = _as_batches(op, items) if items else []
    if any(any(p.dims) or p.dim() != data.dim() - 1 for p in parts) or _lengths.any_carried(parts):
        return None
    dims = (False,) * (data.dim() - 2)
    step = MaskedBatch._make(data[0], None if mask is None else mask[0], dims)  # a view
    for i in range(1, data.dim() - 1):
        _masking.check_static_join(op, [*parts, step], i)
    d = _nonbatch_dim(op, dim, data.dim(), scalars=dims == ())
    new_dims = dims[: d - 1] + (True,) + dims[d - 1:]
    run_mask = full_mask(data[0], dims).unsqueeze(0) if mask is None else mask
    common = torch.broadcast_shapes(*[p.mask.shape for p in parts], run_mask.shape[1:])
    run_mask = run_mask.expand(data.size(0), *common)
    if parts:
        data = torch.cat([torch.stack([p.data for p in parts], d), data.movedim(0, d)], d)
        masks = [p.mask.expand(common) for p in parts]
        mask = torch.cat([torch.stack(masks, d), run_mask.movedim(0, d)], d)
    else:
        data, mask = data.movedim(0, d), run_mask.movedim(0, d)
    data, mask = _present_steps_first(data, mask, d)
    return MaskedBatch._make(data, _masking.fit_mask(mask, data, new_dims), new_dims)


def _stack_carried(own: list[MaskedBatch], parts: list[MaskedBatch], d: int,
                   dims: tuple[bool, ...], new_dims: tuple[bool, ...]) -> MaskedBatch:
    """A dynamic stack of steps some of whose masks carry lengths (see ``_lengths``).

    A step is present for an example where it has a real position or lengths
    that are not all zero (an example empty in part is present); each example's
    present steps move to the front, and its length along the new dimension is
    their number.  Along the other dimensions its lengths are those of its
    present steps (which agree; an absent step's zeros lose).
    """
    batch = parts[0].data.size(0)
    # Per step: is each example present, and its lengths along the result's dims.
    present = torch.stack([p.mask.reshape(batch, -1).any(1) | _lengths.of(p).ne(0).any(1)
                           for p in own], 1)                                # (batch, steps)
    lengths = [torch.stack([_lengths.along(p, i) if p.dims[i - 1] else
                            torch.full((batch,), p.data.size(i), device=p.device)
                            for i, dynamic in enumerate(dims, start=1) if dynamic], 1)
               * present[:, k:k + 1] for k, p in enumerate(own)]
    # A stable sort of "absent" keeps the present steps in order, first.
    order = torch.sort((~present).to(torch.uint8), dim=1, stable=True).indices
    data = torch.stack([p.data for p in parts], d)
    shape = [1] * data.dim()
    shape[0], shape[d] = batch, len(parts)
    data = data.gather(d, order.reshape(shape).expand_as(data))
    counts = present.sum(1, keepdim=True)
    others = torch.stack(lengths).amax(0)
    new = torch.cat([others[:, :_lengths.column(new_dims, d)], counts,
                     others[:, _lengths.column(new_dims, d):]], 1)
    new = new * counts.ne(0)
    mask = mask_from_lengths(new, data.shape, new_dims)
    return MaskedBatch._make(data, _lengths.rebuilt(mask, new, new_dims), new_dims)
