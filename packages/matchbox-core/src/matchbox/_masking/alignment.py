"""Alignment: batch arguments broadcast the way their examples would, and the checks
that the examples suit an op, as the loop over examples would check them.

:func:`align` is the general rule of n-ary ops (pointwise ops, joins): batches
raised to one rank, dimensions padded to one size, the examples' sizes compared
where they must agree (:func:`check_lengths_agree`, :func:`check_static_extents`),
and the masks combined, with their lengths (:func:`combined_lengths`); and
:func:`guard_wider`, the *boundary* rule on such an op's arguments.

Above ``MaskedBatch`` (it builds batches), unlike the rest of ``matchbox._masking``, whose
modules (``matchbox._execution``, ``matchbox._padding``, ``matchbox._real_rows``) lie below.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from matchbox import _lengths
from matchbox._capture import check, fails
from matchbox._execution import EXECUTION_MASK, and_running, running, same_mask
from matchbox._layout import constant_pad, distinct_sizes
from matchbox._masking.plain_tensors import check_plain_batch_dim
from matchbox._op_table import op_name
from matchbox._padding import _ZERO, combine_masks
from matchbox._sizes import BATCH_SIZES, refuse_batch_size_number
from matchbox.masked_batch import MaskedBatch


def example_rank(*args: Any) -> int:
    """The largest rank among batch and tensor arguments."""
    return max(a.dim() for a in args if isinstance(a, (MaskedBatch, torch.Tensor)))


def raise_rank(batch: MaskedBatch, rank: int) -> MaskedBatch:
    """Insert static size-one dimensions after dimension 0 up to ``rank``.

    Per example this is what broadcasting does (new leading dimensions of size
    one); inserting them after the batch dimension keeps dimension 0 the batch.
    """
    extra = rank - batch.dim()
    if extra <= 0:
        return batch
    shape = batch.data.shape
    data = batch.data.reshape(shape[0], *[1] * extra, *shape[1:])
    mask = batch._mask
    if mask is not None:
        mask = _lengths.kept(mask.reshape(mask.size(0), *[1] * extra, *mask.shape[1:]), mask)
    return MaskedBatch._make(data, mask, (False,) * extra + batch.dims)


def pad_to(batch: MaskedBatch, dim: int, size: int) -> MaskedBatch:
    """Grow dimension ``dim`` to ``size`` with new padding.

    A static dimension becomes dynamic: every example is real along its old
    size (a batch static where another is dynamic, once
    :func:`check_static_extents` has found that the running examples' lengths
    there are that size).
    """
    extent = batch.data.size(dim)
    extra = size - extent
    if extra <= 0:
        return batch
    pads = [0, 0] * (batch.data.dim() - 1 - dim) + [0, extra]
    data = constant_pad(batch.data, pads)
    mask = batch.mask
    dims = batch.dims
    lengths = _lengths.carried_by(batch)
    if not dims[dim - 1]:  # static there: real along the whole extent
        mask = mask.expand(*mask.shape[:dim], extent, *mask.shape[dim + 1:])
        dims = dims[:dim - 1] + (True,) + dims[dim:]
        if lengths is not None:
            # A new column: the extent, for every example that is present at all.
            new = extent * lengths.ne(0).any(1, keepdim=True).long()
            at = _lengths.column(dims, dim)
            lengths = torch.cat([lengths[:, :at], new, lengths[:, at:]], 1)
    mask = constant_pad(mask, pads, False)
    return MaskedBatch._make(data, _lengths.rebuilt(mask, lengths, dims), dims)


def align(
    op: str, args: Sequence[Any], inplace_target: MaskedBatch | None = None
) -> tuple[list[Any], torch.Tensor, tuple[bool, ...]]:
    """Make batch arguments broadcast the way their examples would: the arguments with
    batches replaced by aligned data tensors (``x.size(0)`` of a batch as a scalar
    argument raises: 1 in each example, the batch size here), the combined mask (true
    where every batch argument is real) and the dims of the result.  Plain tensors are the
    same for every example: they broadcast against each example, never across the batch."""
    batches = [a for a in args if isinstance(a, MaskedBatch)]
    rank = example_rank(*args)
    batch_size = batches[0].data.size(0)
    args = check_plain_batch_dim(op, args, rank, batch_size)
    for b in batches:
        if b.data.size(0) != batch_size:
            raise ValueError(
                f"{op}: batch arguments have different batch sizes "
                f"({batch_size} and {b.data.size(0)})"
            )
    if inplace_target is not None and inplace_target.dim() < rank:
        raise ValueError(
            f"{op}: in-place op on a batch of rank {inplace_target.dim()} with an "
            f"argument of rank {rank} would change its shape"
        )
    raised = {id(b): raise_rank(b, rank) for b in batches}
    lifted = dict(raised)
    dims = tuple(
        any(lifted[id(b)].dims[i] for b in batches) for i in range(rank - 1)
    )
    for i in range(1, rank):
        sizes = distinct_sizes(lifted[id(b)].data.size(i) for b in batches)
        _check_plain_tensors(op, args, i, rank, dims[i - 1], sizes)
        if dims[i - 1]:
            # A batch static here (its size the same in every example) beside one
            # dynamic here: rare, and the only case that pays a device sync.
            static = [(b, i) for b in raised.values() if not b.dims[i - 1]]
            if static:
                check_static_extents(
                    op, [(b, i) for b in raised.values() if b.dims[i - 1]], static)
        if len(sizes) <= 1:
            continue
        if not dims[i - 1]:
            raise ValueError(
                f"{op}: static dimension {i} has different sizes in the batch "
                f"arguments: {sorted(sizes)}"
            )
        target = max(sizes)
        if inplace_target is not None:
            target = inplace_target.data.size(i)
        for key, b in lifted.items():
            size = b.data.size(i)
            if size != 1 and size != target:
                if size < target:
                    lifted[key] = pad_to(b, i, target)
                else:
                    mask = b.mask
                    if mask.size(i) != 1:
                        mask = mask.narrow(i, 0, target)
                    lifted[key] = MaskedBatch._make(b.data.narrow(i, 0, target), mask, b.dims)
    for i, dynamic in enumerate(dims, start=1):
        if dynamic:
            # Batches dynamic here of their own (one static here, padded above,
            # was checked against them already).
            check_broadcast_lengths(op, [(lifted[id(b)], i) for b in batches
                                         if raised[id(b)].dims[i - 1]])
    aligned = [lifted[id(a)].data if isinstance(a, MaskedBatch) else  # x.size(0): raises
               refuse_batch_size_number(a) if type(a) in BATCH_SIZES else a for a in args]
    mask = combine_masks([lifted[id(b)]._mask for b in batches])
    if sum(dims) > 1 or _lengths.any_carried(batches):
        mask = combined_lengths(list(raised.values()), mask, dims)
    return aligned, mask, dims


def combined_lengths(batches: Sequence[MaskedBatch], mask: torch.Tensor | None,
                     dims: tuple[bool, ...]) -> torch.Tensor | None:
    """``mask`` (the *and* of the masks of ``batches``, raised to the result's rank, of
    result dims ``dims``) carrying the result's lengths where it needs them.

    Along each dynamic dimension of the result an example's size is that of the
    batches dynamic there (they agree; an absent example's 0 wins); an example
    absent from a batch static in every dimension is absent from the result.
    With two or more dynamic dimensions of the result, no batch dynamic in all of
    them, and no mask carrying lengths (``a.unsqueeze(2) + b.unsqueeze(1)``),
    an example empty in one of them only is empty in part: checked once (a
    device sync), the one case that pays it.
    """
    if mask is None:
        return None
    carrying = _lengths.any_carried(batches)
    if not carrying and (sum(dims) < 2 or any(b.dims == dims for b in batches)):
        return mask  # one batch has every dynamic dimension: it says what is empty
    columns = []
    for i, dynamic in enumerate(dims, start=1):
        if dynamic:
            sizes = [_lengths.along(b, i) for b in batches if b.dims[i - 1]]
            if len(sizes) == 1:
                columns.append(sizes[0])
                continue
            # Sizes that broadcast (:func:`check_broadcast_lengths`): an empty one wins,
            # else the longest (a size one broadcast against it).
            stacked = torch.stack(sizes)
            low = stacked.amin(0)
            columns.append(torch.where(low == 0, low, stacked.amax(0)))
    lengths = torch.stack(columns, 1)
    for b in batches:
        if b._mask is not None and not any(b.dims):
            lengths = lengths * b._mask.reshape(lengths.size(0), -1).any(1, keepdim=True)
    if not carrying:
        return _lengths.settle(mask, lengths)
    # Every mask is its examples' prefixes, so their *and* is that of these lengths.
    return _lengths.carry(mask, lengths)


def check_broadcast_lengths(op: Any, pairs: Sequence[tuple[MaskedBatch, int]]) -> None:
    """:func:`check_lengths_agree` for the arguments of a broadcasting op, where a batch of
    padded size one along a dynamic dimension (``x[:, :1]``, ``x[:, -1:]``) broadcasts
    against the longer ones as each example does in the loop: its examples of size one
    broadcast, one of size zero (empty) needs the others' example of size zero or one
    (torch's rule; the result is empty there, as :func:`combined_lengths` and the *and* of
    the masks say)."""
    wide = [(b, d) for b, d in pairs if b.data.size(d) != 1]
    if not wide:
        return  # every example of size zero or one: they broadcast, an empty one wins
    if len(wide) == len(pairs):
        check_lengths_agree(op, pairs)
        return
    check_lengths_agree(op, wide)
    reference, dim = wide[0]
    expected = _example_sizes(reference, dim)
    for other, _ in pairs:
        if other.data.size(dim) != 1 or other._mask is None:
            continue  # wide (checked above), or of size one in every example
        sizes = _example_sizes(other, dim)
        differ = running((sizes != 1) & (expected > 1))
        check(differ, functools.partial(_lengths_differ, op, differ, expected, sizes, dim))


def lengths_along(batch: MaskedBatch, dim: int) -> torch.Tensor:
    """Each example's size along dynamic dimension ``dim``: int64 ``(batch,)``."""
    return _lengths.along(batch, dim)


def sizes_along(batch: MaskedBatch, dim: int) -> torch.Tensor:
    """Each example's size along any dimension ``dim``: int64 ``(batch,)``.

    A static dimension (or a batch without padding) has its padded size in
    every example; dimension 0 has size one.
    """
    if dim > 0 and batch.dims[dim - 1] and batch._mask is not None:
        return lengths_along(batch, dim)
    size = batch.data.size(dim) if dim > 0 else 1
    return torch.full((batch.data.size(0),), size, dtype=torch.long, device=batch.data.device)


def check_lengths_agree(
    op: Any, pairs: Sequence[tuple[MaskedBatch, int]], *, absent_agrees: bool = False
) -> None:
    """Raise, as the loop over examples would, if examples differ in size along a dim.

    ``pairs`` are (batch, dimension) that must hold the same per-example
    sizes: two arguments of an elementwise op along a dynamic dimension, or
    the two sides of a contraction.  A batch without a mask (every example
    real) has its padded size in every example.  Batches that share a mask agree
    by construction; the others cost one comparison (and a device sync, which a
    ``@batch`` call on an accelerator makes once for all its checks, at its end).
    ``absent_agrees``: a size 0 (an example absent from that argument, as a
    finished step stacked by ``F.stack(dynamic=True)``) agrees with any size.
    """
    if len(pairs) < 2:
        return
    reference, ref_dim = pairs[0]

    def shares_reference_mask(other: MaskedBatch, dim: int) -> bool:
        return (dim == ref_dim and other._mask is not None and reference._mask is not None
                and same_mask(other._mask, reference._mask))

    if all(shares_reference_mask(b, d) for b, d in pairs[1:]):
        return
    if all(b._mask is None for b, _ in pairs):
        if len({b.data.size(d) for b, d in pairs}) == 1:
            return
    expected = _example_sizes(reference, ref_dim)
    for other, dim in pairs[1:]:
        if shares_reference_mask(other, dim):
            continue
        sizes = _example_sizes(other, dim)
        differ = sizes != expected
        if absent_agrees:
            differ &= (sizes != 0) & (expected != 0)
            expected = torch.where(expected == 0, sizes, expected)
        differ = running(differ)
        check(differ, functools.partial(_lengths_differ, op, differ, expected, sizes, dim))


def _lengths_differ(op: Any, differ: torch.Tensor, expected: Any, sizes: Any, dim: int) -> Any:
    j = int(differ.nonzero()[0])
    a, b = int(expected[j]), int(sizes[j])
    why = ("broadcasting one example's size-one extent against another's longer "
           "one along a dynamic dimension is not supported" if 1 in (a, b) else
           "the examples would not combine in a loop either")
    return ValueError(f"{op if isinstance(op, str) else op_name(op)}: example {j} has size {a} "
                      f"in one argument and {b} in another along dynamic dimension {dim}; {why}")


def check_static_extents(
    op: Any, dynamic: Sequence[tuple[MaskedBatch, int]], static: Sequence[tuple[Any, int]],
    *, exact: bool = False, absent_agrees: bool = False, label: str | None = None,
) -> None:
    """Raise, as the loop over examples would, unless an argument static along a
    dimension that is dynamic in another has each running example's size there.

    ``dynamic`` are (batch, dimension) pairs dynamic there, ``static`` pairs
    static there (a plain tensor may stand in a static pair: it is the same for
    every example).  A static size is every example's size, so each running
    example's length in every dynamic pair must be that size, and the static
    sizes must agree.  Unless ``exact`` (a join: ``torch.cat``/``stack`` do not
    broadcast) a static size of one broadcasts against anything; an example's
    length of one against a longer static size would broadcast in the loop and
    is refused, as between two dynamic arguments (:func:`check_lengths_agree`).
    ``absent_agrees``: an example absent from an argument (length 0, or not
    real in a static one, as a finished step stacked by
    ``F.stack(dynamic=True)``) agrees with any size.  ``label`` names the
    dimension in the message (default: ``dimension`` and the first pair's).

    Costs a comparison of lengths (a device sync) unless every dynamic batch is
    without padding; callers call it only where layouts differ, which is rare.
    """
    sized = [(x, d, x.size(d) if isinstance(x, torch.Tensor) else x.data.size(d))
             for x, d in static]
    sized = [e for e in sized if exact or e[2] != 1]
    if not sized or (not dynamic and len({e[2] for e in sized}) == 1):
        return
    target = sized[0][2]
    if all(e[2] == target for e in sized) and all(
            b._mask is None and b.data.size(d) == target for b, d in dynamic):
        return
    reference = (dynamic or static)[0]
    batch = reference[0].data.size(0)
    device = reference[0].data.device
    extents, present = [], []
    for b, d in dynamic:
        sizes = _example_sizes(b, d)
        extents.append(sizes)
        present.append(sizes != 0 if absent_agrees else torch.ones_like(sizes, dtype=torch.bool))
    for x, _, size in sized:
        extents.append(torch.full((batch,), size, device=device))
        real = torch.ones(batch, dtype=torch.bool, device=device)
        if absent_agrees and isinstance(x, MaskedBatch) and x._mask is not None:
            real = x._mask.reshape(batch, -1).any(1)
        present.append(real)
    extents_t, present_t = torch.stack(extents), torch.stack(present)
    high = torch.where(present_t, extents_t, -1).amax(0)
    low = torch.where(present_t, extents_t, torch.iinfo(extents_t.dtype).max).amin(0)
    failing = running((high != low) & present_t.any(0))
    if not fails(failing):
        return
    j = int(failing.nonzero()[0])
    values = [int(v) for v in extents_t[:, j].tolist()]
    real = [bool(v) for v in present_t[:, j].tolist()]
    kinds = ["dynamic"] * len(dynamic) + ["static"] * len(sized)
    first = real.index(True)
    second = next(k for k in range(first + 1, len(values)) if real[k] and values[k] != values[first])
    a, b = values[first], values[second]
    name = op if isinstance(op, str) else op_name(op)
    where = label or f"dimension {(dynamic or static)[0][1]}"
    if kinds[first] == "dynamic":
        how = "dynamic in the first and static in the second"
    else:
        how = "static in both"
    why = ("broadcasting one example's size-one extent against a static size along a "
           "dynamic dimension is not supported" if not exact and a == 1 and kinds[first] ==
           "dynamic" else "the examples would not combine in a loop either")
    raise ValueError(
        f"{name}: example {j} has size {a} in one argument and {b} in another along "
        f"{where}, {how}; {why}"
    )


def check_static_join(op: str, parts: Sequence[MaskedBatch], dim: int) -> None:
    """The parts of a ``torch.cat``/``stack`` must have one size along a dimension that
    is static in all of them (ints only; torch's own error shows the batched shapes)."""
    size = parts[0].data.size(dim)
    for k, part in enumerate(parts):
        if part.data.size(dim) != size:
            raise ValueError(
                f"{op}: tensor {k} of the list has size {part.data.size(dim)} in dimension "
                f"{dim} and tensor 0 has {size}, the same in every example; the tensors "
                f"must have equal sizes in every dimension but the one they are joined along"
            )


def _example_sizes(batch: MaskedBatch, dim: int) -> torch.Tensor:
    """Each example's size along ``dim``; without a mask, the padded size for all."""
    return _lengths.along(batch, dim)


def combine_layouts(batches: Sequence[MaskedBatch]) -> torch.Tensor | None:
    """The *and* of the masks of batches of one layout (the same dims and padded
    shape), carrying their lengths where a mask among them carries some."""
    mask = combine_masks([b._mask for b in batches])
    if (mask is not None and _lengths.any_carried(batches)
            and not any(mask is b._mask for b in batches)):
        # An absent example's zeros win, as the mask's false does.
        lengths = torch.stack([_lengths.of(b) for b in batches]).amin(0)
        mask = _lengths.carry(mask, lengths)
    return mask


def fit_mask(
    mask: torch.Tensor | None, data: torch.Tensor, dims: tuple[bool, ...]
) -> torch.Tensor | None:
    """Give ``mask`` the layout of a result: data's size in dynamic dims, 1 in static."""
    if mask is None:
        return None
    shape = [data.size(0)] + [
        data.size(i + 1) if d else 1 for i, d in enumerate(dims)
    ]
    if list(mask.shape) == shape:
        return mask
    # A static result dimension keeps size one; reduce it out of the mask.
    fitted = mask
    for i, d in enumerate(dims, start=1):
        if not d and fitted.size(i) != 1:
            fitted = fitted.all(i, keepdim=True)
    return _lengths.kept(fitted.expand(shape), mask)


def _check_plain_tensors(
    op: str, args: Sequence[Any], i: int, rank: int, dynamic: bool, sizes: list[int]
) -> None:
    for a in args:
        if not isinstance(a, torch.Tensor):
            continue
        position = i - (rank - a.dim())
        if position < 0:
            continue
        size = a.size(position)
        if dynamic and size != 1 and size not in sizes:
            raise ValueError(
                f"{op}: a plain tensor argument has size {size} in dimension {i}, which is "
                "dynamic in the batch; a tensor shared by all examples can broadcast (size "
                "1) along a dynamic dimension or span its padded size (e.g. positional "
                "encodings sliced with x.maxsize(dim))"
            )


# ---------------------------------------------------------------------------- the boundary rule


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
    out, shared = values, False  # plain tensors' guard (padding, rows of examples not running)
    for i, value in enumerate(values):
        if not isinstance(value, torch.Tensor) or not value.requires_grad:
            continue
        if isinstance(batches[i], MaskedBatch):
            if mask is None or _padding_wherever(batches[i]._mask, mask, value, dims):
                continue
            guard = mask
        else:
            guard = shared = _shared_mask(batches, mask, dims) if shared is False else shared
            if guard is None:
                continue
        if out is values:
            out = list(values)
        out[i] = torch.where(guard, value, _ZERO if value.is_floating_point()
                             else value.new_zeros(()))
    return out


def _shared_mask(batches: Sequence[Any], mask: Any, dims: tuple[bool, ...]) -> Any:
    batch = next((b.data.size(0) for b in batches if isinstance(b, MaskedBatch)), None)
    running = EXECUTION_MASK.get() is not None and batch is not None
    return and_running(mask, batch, len(dims) + 1) if running else mask


def _padding_wherever(own: torch.Tensor | None, mask: torch.Tensor, value: torch.Tensor,
                      dims: tuple[bool, ...]) -> bool:
    """Whether a batch argument (mask ``own``, data ``value``) is padding wherever the
    result (``mask``) is, so that no gradient from the result's padding reaches it."""
    return own is not None and (own is mask or same_mask(own, mask)) and not (
        any(dims) and _broadcast_dynamic(value, mask, dims))


def _broadcast_dynamic(value: torch.Tensor, mask: torch.Tensor, dims: tuple[bool, ...]) -> bool:
    """Whether ``value`` has size one along a dynamic dimension where ``mask`` does not."""
    return any(d and value.size(j) == 1 and mask.size(j) != 1 for j, d in enumerate(dims, 1))
