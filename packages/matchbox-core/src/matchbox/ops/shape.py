"""Shape ops: views, permutations, splitting, joining, stacking.

Semantics: the same view or permutation is applied to data and mask, and the
dims follow their dimensions.  Dimension 0 is each example's own size-one
batch dimension and stays in place; a new shape gives it as 1, -1 or the batch
size (what ``x.size(0)`` returns, so ``x.view(x.size(0), -1)`` runs unchanged).  A reshape keeps every dynamic dimension
(written -1) and may split or merge the static dimensions between them; the
static dimensions after the last dynamic one may also be merged into it (real
values stay first) or split back out of it.  Anything that would interleave
padding with real values raises an error naming the op and the dimension.
``cat`` along a dynamic dimension moves each example's parts together (a
gather), so each example's result is exactly the concatenation of its parts.
Along every other dynamic dimension the parts of a ``cat``/``stack`` must have
each example's size (the loop would raise otherwise); a plain tensor part spans
the padded size.  A join along a static (or new static) dimension of parts real
for different examples (the steps of ``x.unbind(1)`` for examples of different
lengths) is refused: the loop joins each example's own number of parts.  With
a part real for every example (a state, a plain tensor) it is a step of a loop,
padding for an example whose step has ended, as in a pointwise op.
``x.expand_as(y)`` with ``y`` a batch gives each size-one dimension each
example's own size of ``y``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from matchbox import _capture, _lengths, _masking, _registry
from matchbox.masked_batch import (
    MaskedBatch,
    has_zero_padding,
    mark_zero_padding,
    mask_from_lengths,
    normalize_dim,
)


def _nonbatch_dim(op: str, dim: int, rank: int, scalars: bool = False) -> int:
    """``dim`` normalised; dimension 0 raises.  ``scalars``: the batch holds per-example
    scalars, which the loop sees as 0-d tensors (losses) with no dimension 0 to keep."""
    d = normalize_dim(dim, rank, op)
    if d == 0:
        hint = ("; these are per-example scalars (a loss, say), 0-d in the loop but (1,) "
                "in a batch, so a new dimension 0 cannot go in front of them: combine "
                "them with + or sum([...]) instead" if scalars else "")
        raise ValueError(
            f"{op}: dimension 0 is the batch dimension of each example and cannot be "
            f"moved, split or removed on a batch{hint}"
        )
    return d


def _sizes(args: tuple[Any, ...]) -> list[int]:
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return list(args[0])
    return list(args)


# ------------------------------------------------------------------ permutations


@_lengths.aware
@_registry.implements(torch.transpose, torch.Tensor.transpose, torch.swapaxes,
                      torch.Tensor.swapaxes, torch.swapdims, torch.Tensor.swapdims,
                      family="shape")
def transpose(func, input, dim0, dim1):
    op = _registry.op_name(func)
    swapped = {normalize_dim(dim0, input.dim(), op), normalize_dim(dim1, input.dim(), op)}
    view = _registry.batch_dim_view("MaskedBatch") if swapped == {0, 1} else None
    if view is not None:
        # Per example (1, T, F) -> (T, 1, F): a time-major view (see _registry).
        return view(op, input)
    a = _nonbatch_dim(op, dim0, input.dim())
    b = _nonbatch_dim(op, dim1, input.dim())
    dims = list(input.dims)
    dims[a - 1], dims[b - 1] = dims[b - 1], dims[a - 1]
    order = list(range(input.dim()))
    order[a], order[b] = b, a
    mask = _lengths.reordered(input.mask.transpose(a, b), input.mask, input.dims, order)
    return MaskedBatch._make(input.data.transpose(a, b), mask, tuple(dims))


@_lengths.aware
@_registry.implements(torch.permute, torch.Tensor.permute, family="shape")
def permute(func, input, *order):
    op = _registry.op_name(func)
    order = [normalize_dim(d, input.dim(), op) for d in _sizes(order)]
    if sorted(order) != list(range(input.dim())):
        raise ValueError(f"{op}: {order} is not a permutation of the {input.dim()} dimensions")
    if order[0] != 0:
        raise ValueError(f"{op}: dimension 0 (the batch dimension) must stay first, got {order}")
    dims = tuple(input.dims[d - 1] for d in order[1:])
    mask = _lengths.reordered(input.mask.permute(order), input.mask, input.dims, order)
    return MaskedBatch._make(input.data.permute(order), mask, dims)


# ------------------------------------------------------------------ size-one dimensions


def _batch_dim_view(dim: Any, rank: int, dims: tuple[bool, ...]) -> Any:
    """The view provider if a new dimension 0 (``dim``, in a result of ``rank``) is asked.

    A new dimension 0 in front of each example's batch dimension puts the batch
    dimension in position 1, which a view (``_registry.batch_dim_view``) holds;
    per-example scalars (``dims == ()``) have no dimension 0 in the loop.
    """
    if dims == () or not isinstance(dim, int) or dim % rank != 0 or not -rank <= dim < rank:
        return None
    return _registry.batch_dim_view("MaskedBatch")


@_lengths.aware
@_registry.implements(torch.unsqueeze, torch.Tensor.unsqueeze, family="shape")
def unsqueeze(func, input, dim):
    op = _registry.op_name(func)
    view = _batch_dim_view(dim, input.dim() + 1, input.dims)
    if view is not None:
        # Per example (1, *S) -> (1, 1, *S), whose dimension 1 is the batch's: a
        # time-major view of the batch unsqueezed at 1 (see _registry).
        return view(op, unsqueeze(func, input, 1))
    d = _nonbatch_dim(op, dim, input.dim() + 1, scalars=input.dims == ())
    dims = input.dims[: d - 1] + (False,) + input.dims[d - 1:]
    mask = _lengths.kept(input.mask.unsqueeze(d), input.mask)
    return MaskedBatch._make(input.data.unsqueeze(d), mask, dims)


@_lengths.aware
@_registry.implements(torch.squeeze, torch.Tensor.squeeze, family="shape")
def squeeze(func, input, dim=None):
    op = _registry.op_name(func)
    if dim is None:
        raise ValueError(
            f"{op}: squeeze() without a dimension would remove dimension 0, the batch "
            "dimension of size one; pass the dimensions to squeeze"
        )
    wanted = dim if isinstance(dim, (tuple, list)) else (dim,)
    drop = []
    for w in wanted:
        d = _nonbatch_dim(op, w, input.dim())
        if input.dims[d - 1]:
            raise ValueError(
                f"{op}: dimension {d} is dynamic; its size differs between examples, so "
                "whether it can be squeezed differs too"
            )
        if input.data.size(d) == 1:
            drop.append(d)
    if not drop:
        return input
    dims = tuple(x for i, x in enumerate(input.dims, start=1) if i not in drop)
    mask = _lengths.kept(input.mask.squeeze(drop), input.mask)
    return MaskedBatch._make(input.data.squeeze(drop), mask, dims)


# ------------------------------------------------------------------ reshaping


def reshape_batch(op: str, x: MaskedBatch, shape: Sequence[int]) -> MaskedBatch:
    """Reshape each example to ``shape`` (with its leading 1); see the module rules.

    Each dynamic dimension stays a dimension of its own, written -1 (or its
    padded size, ``x.maxsize(d)``).  The static dimensions before the first
    dynamic one may be split or merged among themselves.  Those after a
    dynamic dimension may also be merged into it (``(1, n, 2, 3) -> (1, -1, 3)``:
    real values stay first) or split back out of it (``(1, 2n) -> (1, -1, 2)``,
    when every example's size divides).
    """
    shape = list(shape)
    batch = x.data.size(0)
    if not shape or shape[0] not in (1, -1, batch):
        raise ValueError(
            f"{op}: the new shape {tuple(shape)} must start with 1 (or -1, or the batch size "
            f"{batch} as x.size(0) gives it), the size of dimension 0 of each example"
        )
    dynamic = [i for i, d in enumerate(x.dims, start=1) if d]
    if (shape[0] == -1 and dynamic and -1 not in shape[1:]
            and math.prod(shape[1:]) != math.prod(x.data.shape[1:])):
        # view(-1, C): on one example -1 infers the positions into dimension 0.
        raise ValueError(
            f"{op}: the new shape {tuple(shape)} would infer dimension 0 (-1) from each "
            f"example's size, merging dynamic dimension {dynamic[0]} into it; dimension 0 is "
            "each example's batch dimension and stays 1 on a batch: keep the positions as "
            "their own dimension, written -1 (a per-position loss takes them as they are, "
            "e.g. F.cross_entropy(logits.transpose(1, 2), targets))"
        )
    shape[0] = 1
    if not dynamic:
        data = x.data.reshape(batch, *shape[1:])
        mask = x.mask.reshape(batch, *[1] * (data.dim() - 1))
        return MaskedBatch._make(data, mask, (False,) * (data.dim() - 1))
    old = list(x.data.shape)

    def refuse() -> ValueError:
        return ValueError(
            f"{op}: cannot reshape examples of padded shape {tuple([1] + old[1:])} "
            f"(dynamic dims {dynamic}) to {tuple(shape)}: each dynamic dimension must stay "
            "(written -1), static dimensions may be split or merged only among those "
            "between the same dynamic dimensions, or merged into (split out of) the "
            "dynamic dimension before them; anything else would put padding between "
            "real values"
        )

    # The static runs of the old shape (before the first dynamic dim, between
    # two, after the last) and the new static sizes standing for each.
    bounds = [0, *dynamic, len(old)]
    runs = [math.prod(old[a + 1: b]) for a, b in zip(bounds, bounds[1:])]
    plan = next(_plans(shape, old, dynamic, runs), None)
    if plan is None:
        raise refuse()
    written, groups = plan

    # Each dynamic dim keeps its size, grows by the factor merged into it, or
    # shrinks by the factor split out of it (padded first so that it divides);
    # _fit_groups has checked that one of the three applies.
    carried = _lengths.carried_by(x)
    mask = x.mask.reshape(batch, *[old[k] for k in dynamic])
    sizes, dims = [batch, *groups[0]], [False] * len(groups[0])
    for i, k in enumerate(dynamic):
        run, group = runs[i + 1], math.prod(groups[i + 1])
        if run == group:
            size = old[k]
        elif run % group == 0:
            factor = run // group
            size = old[k] * factor
            mask = mask.repeat_interleave(factor, dim=i + 1)
            if carried is not None:
                carried = carried * torch.tensor([factor if c == i else 1 for c in
                                                  range(len(dynamic))], device=carried.device)
        else:
            factor = group // run
            lengths = x.lengths()[:, i]
            if bool((lengths % factor != 0).any()):
                raise ValueError(
                    f"{op}: cannot split dynamic dimension {k} into groups of {factor}: the "
                    f"examples have sizes {lengths.tolist()} there, not all divisible"
                )
            size = math.ceil(old[k] / factor)
            if carried is not None:
                carried = carried // torch.tensor([factor if c == i else 1 for c in
                                                   range(len(dynamic))], device=carried.device)
            x = _masking.pad_to(x, k, size * factor)
            mask = F.pad(mask.movedim(i + 1, -1), [0, size * factor - mask.size(i + 1)])
            mask = mask.unflatten(-1, (size, factor))[..., 0].movedim(-1, i + 1)
        sizes += [size, *groups[i + 1]]
        dims += [True] + [False] * len(groups[i + 1])
    data = x.data.reshape(sizes)
    mask = mask.reshape([s if d else 1 for s, d in zip(sizes, [True, *dims])])
    # The dynamic dimensions stay in order, each its lengths times (divided by) a factor.
    return MaskedBatch._make(data, _lengths.rebuilt(mask, carried, dims), tuple(dims))


def _plans(shape: list[int], old: list[int], dynamic: list[int], runs: list[int]):
    """Readings of the new ``shape``: which entries are the dynamic dims.

    Yields ``(written, groups)`` for each way of placing the dynamic dims on
    entries that are -1 (first) or their padded size (then) where the static
    sizes fit: whether each dynamic dim was given by its padded size, and the
    new static sizes before, between and after them.  Within each, readings
    that merge or split nothing come first (a padded size may equal a static
    size, and ``(1, 1, -1)`` then has more than one reading).
    """
    for minus_one_only in (True, False):
        plans = []
        for positions in itertools.combinations(range(1, len(shape)), len(dynamic)):
            if all(shape[j] == -1 or not minus_one_only and shape[j] == old[k]
                   for j, k in zip(positions, dynamic)):
                plan = _fit_groups(shape, list(positions), runs)
                if plan is not None:
                    plans.append(plan)
        yield from sorted(plans, key=lambda plan: sum(
            math.prod(group) != run for group, run in zip(plan[1], runs)))


def _fit_groups(shape: list[int], positions: list[int], runs: list[int]):
    """``(written, groups)`` if the static sizes between ``positions`` fit ``runs``."""
    written = [shape[j] != -1 for j in positions]
    groups = [shape[a + 1: b] for a, b in zip([0, *positions], [*positions, len(shape)])]
    if written[-1] and groups[-1].count(-1) == 1:
        # After a dynamic dim given by its padded size, a -1 is a static size.
        known = math.prod(s for s in groups[-1] if s != -1)
        if not known or runs[-1] % known:
            return None
        groups[-1][groups[-1].index(-1)] = runs[-1] // known
    if any(s < 0 for g in groups for s in g) or math.prod(groups[0]) != runs[0]:
        return None
    for i, group in enumerate(groups[1:]):
        size, run = math.prod(group), runs[i + 1]
        # A -1 dynamic dim absorbs a merge (run a multiple of size) or a split.
        if size != run and (written[i] or not size or not run
                            or run % size and size % run):
            return None
    return written, groups


@_lengths.aware
@_registry.implements(torch.reshape, torch.Tensor.reshape, torch.Tensor.view,
                      family="shape")
def reshape(func, input, *shape):
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        raise NotImplementedError(f"{_registry.op_name(func)}(dtype) is not supported")
    return reshape_batch(_registry.op_name(func), input, _sizes(shape))


@_lengths.aware
@_registry.implements(torch.Tensor.view_as, torch.Tensor.reshape_as, family="shape")
def reshape_as(func, input, other):
    """``x.view_as(y)``: with ``y`` a batch, each example takes the shape of ``y``'s own.

    A dynamic dimension of ``y`` is one of ``x`` kept (written -1): each
    example's size there must be ``y``'s, as the loop's ``view_as`` needs the
    same number of elements.  A plain ``x`` is the same for every example and
    has one size: it can take the shape of examples that all have one shape
    (``y`` static in every dimension) only.
    """
    op = _registry.op_name(func)
    if not isinstance(other, MaskedBatch):
        return reshape_batch(op, input, list(other.shape))
    dynamic = [i for i, d in enumerate(other.dims, start=1) if d]
    if not isinstance(input, MaskedBatch):
        if dynamic:
            raise ValueError(
                f"{op}: the plain tensor is the same for every example, but the batch "
                f"argument is dynamic in dimension(s) {dynamic}, so its examples differ in "
                "shape; view a batch of the right sizes instead (built with new_zeros and "
                "size_as_tensor, or expand_as for a size-one dimension)")
        shape = [1] + [other.data.size(i) for i in range(1, other.dim())]
        t = input.view(shape) if func is torch.Tensor.view_as else input.reshape(shape)
        return MaskedBatch._make(t.expand(other.data.size(0), *shape[1:]), None, other.dims)
    result = reshape_batch(op, input, [1] + [
        -1 if d else other.data.size(i) for i, d in enumerate(other.dims, start=1)])
    for i in dynamic:
        _masking.check_lengths_agree(op, [(other, i), (result, i)])
    return result


@_lengths.aware
@_registry.implements(torch.flatten, torch.Tensor.flatten, family="shape")
def flatten(func, input, start_dim=0, end_dim=-1):
    op = _registry.op_name(func)
    start = normalize_dim(start_dim, input.dim(), op)
    end = normalize_dim(end_dim, input.dim(), op)
    if start == 0:
        raise ValueError(
            f"{op}: start_dim=0 would merge dimension 0, the batch dimension of each "
            "example; use start_dim=1"
        )
    if start >= end:
        return input
    group = input.dims[start - 1: end]
    if any(group[1:]):
        raise ValueError(
            f"{op}: cannot merge dimensions {start}..{end}: only the first of the merged "
            "dimensions may be dynamic (padding would fall between real values)"
        )
    old = [1] + [-1 if d else input.data.size(i) for i, d in enumerate(input.dims, start=1)]
    merged = -1 if group[0] else math.prod(old[start: end + 1])
    return reshape_batch(op, input, old[:start] + [merged] + old[end + 1:])


@_lengths.aware
@_registry.implements(torch.unflatten, torch.Tensor.unflatten, family="shape")
def unflatten(func, input, dim, sizes):
    op = _registry.op_name(func)
    d = _nonbatch_dim(op, dim, input.dim())
    old = [1] + [-1 if dyn else input.data.size(i) for i, dyn in enumerate(input.dims, 1)]
    sizes = list(sizes)
    if -1 in sizes and not input.dims[d - 1]:
        # A static size is known: infer the -1 here, since reshape_batch reads
        # every -1 as a dynamic dimension.
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = input.data.size(d) // known if known else 0
    return reshape_batch(op, input, old[:d] + sizes + old[d + 1:])


@_lengths.aware
@_registry.implements(torch.Tensor.expand, torch.broadcast_to, torch.Tensor.broadcast_to,
                      family="shape")
def expand(func, input, *sizes, implicit=False):
    op = _registry.op_name(func)
    sizes = _sizes(sizes)
    extra = len(sizes) - input.dim()
    if extra < 0:
        raise ValueError(f"{op}: {len(sizes)} sizes given for examples of rank {input.dim()}")
    x = _masking.raise_rank(input, len(sizes)) if extra else input
    if sizes[0] not in (1, -1, x.data.size(0)):
        raise ValueError(f"{op}: the size of dimension 0 (each example's batch dimension) "
                         f"must stay 1 (or be the batch size {x.data.size(0)} as x.size(0) "
                         f"gives it), got {sizes[0]}")
    target = [x.data.size(0)]
    for i, size in enumerate(sizes[1:], start=1):
        if x.dims[i - 1] and size not in (-1, x.data.size(i)):
            raise ValueError(f"{op}: dimension {i} is dynamic; pass -1 to keep it")
        target.append(x.data.size(i) if size == -1 else size)
    return MaskedBatch._make(x.data.expand(target), x.mask, x.dims)


@_lengths.aware
@_registry.implements(torch.Tensor.expand_as, family="shape")
def expand_as(func, input, other):
    """``x.expand_as(y)``: each example of ``x`` expanded to the shape of ``y``'s.

    With ``y`` a batch, a dimension of size one in ``x`` takes each example's
    own size of ``y`` there (``x.sum(1, keepdim=True).expand_as(x)``): the
    result takes ``y``'s dims, and its mask is the *and* of both, as a
    pointwise op of the two would give.  A plain ``x`` (the same for every
    example) expanded as a batch gives a batch.
    """
    op = _registry.op_name(func)
    if not isinstance(other, MaskedBatch):
        return expand(func, input, *other.shape)
    if not isinstance(input, MaskedBatch):
        input = _plain_as_batch(op, input, other)
    rank = other.dim()
    if input.dim() > rank:
        raise ValueError(f"{op}: examples of rank {input.dim()} cannot be expanded as "
                         f"examples of rank {rank}")
    x = _masking.raise_rank(input, rank)
    for i in range(1, rank):
        size, target = x.data.size(i), other.data.size(i)
        if x.dims[i - 1] and not other.dims[i - 1]:
            raise ValueError(
                f"{op}: dimension {i} is dynamic in the batch but static (size {target}) in "
                "the batch it is expanded as; expand its examples with expand(...) instead")
        if not x.dims[i - 1] and size != 1 and (other.dims[i - 1] or size != target):
            where = ("dynamic there (each example's own size)" if other.dims[i - 1]
                     else f"of size {target} there")
            raise ValueError(
                f"{op}: dimension {i} has size {size}, and the batch it is expanded as is "
                f"{where}; only a dimension of size one expands")
    values, mask, dims = _masking.align(op, [x, other])
    values = _masking.guard_wider([x, other], values, mask, dims)
    data = values[0].expand(values[1].shape)
    return MaskedBatch._make(data, _masking.fit_mask(mask, data, dims), dims)


def _plain_as_batch(op: str, t: torch.Tensor, like: MaskedBatch) -> MaskedBatch:
    """A plain tensor (the same for every example) as a batch of ``like``'s batch size."""
    if t.dim() > like.dim() or (t.dim() == like.dim() and t.size(0) != 1):
        raise ValueError(
            f"{op}: the plain tensor of shape {tuple(t.shape)} is the same for every example "
            f"of the batch argument, so it must look like one example (rank at most "
            f"{like.dim()}, size 1 in dimension 0, each example's batch dimension)")
    t = t.reshape((1,) * (like.dim() - t.dim()) + tuple(t.shape))
    return MaskedBatch._make(t.expand(like.data.size(0), *t.shape[1:]), None,
                             (False,) * (t.dim() - 1))


# ------------------------------------------------------------------ slicing


@_lengths.aware
@_registry.implements(torch.narrow, torch.Tensor.narrow, family="shape")
def narrow(func, input, dim, start, length):
    op = _registry.op_name(func)
    for name, value in (("start", start), ("length", length)):
        if isinstance(value, MaskedBatch):
            raise NotImplementedError(
                f"{op}: the {name} argument is a batch (one value per example, e.g. from "
                "size_as_tensor); per-example starts and lengths are not implemented: "
                "narrow takes one int for every example (a dynamic dimension keeps each "
                "example's own length), or keep the positions and mask them with "
                "torch.where, or take one element per example with x[:, n]")
    d = _nonbatch_dim(op, dim, input.dim())
    if input.dims[d - 1] and start < 0:
        raise NotImplementedError(f"{op}: a negative start along dynamic dimension {d}")
    if input.dims[d - 1] and input._mask is not None:
        # Unlike a slice, narrow raises (in the loop) for an example that is too short.
        sizes = _masking.lengths_along(input, d)
        short = _masking.running(sizes < start + length)
        if _capture.fails(short):
            j = int(short.nonzero()[0])
            raise RuntimeError(
                f"{op}: start ({start}) + length ({length}) exceeds the size of example {j}, "
                f"{int(sizes[j])}, in dynamic dimension {d}"
            )
    if not input.dims[d - 1]:
        return MaskedBatch._make(input.data.narrow(d, start, length), input.mask, input.dims)
    mask = input.mask.narrow(d, start, length)
    if sum(input.dims) > 1 and (length == 0 or _lengths.carried_by(input) is not None):
        # Every example now has ``length`` positions along d; with a length of 0, an
        # example that is not empty in another dynamic dimension is empty in part.
        lengths = input.lengths().clone()
        lengths[:, _lengths.column(input.dims, d)] = length  # (a shorter one raised above)
        mask = (_lengths.rebuilt(mask, lengths, input.dims)
                if _lengths.carried_by(input) is not None else _lengths.settle(mask, lengths))
    return MaskedBatch._make(input.data.narrow(d, start, length), mask, input.dims)


def _static_pieces(op: str, x: MaskedBatch, dim: int) -> int:
    d = _nonbatch_dim(op, dim, x.dim())
    if x.dims[d - 1]:
        raise ValueError(
            f"{op}: dimension {d} is dynamic; splitting it would give each example "
            "different pieces (use unbind, or narrow/indexing)"
        )
    return d


@_lengths.aware
@_registry.implements(torch.split, torch.Tensor.split, family="shape")
def split(func, input, split_size_or_sections, dim=0):
    d = _static_pieces(_registry.op_name(func), input, dim)
    return tuple(MaskedBatch._make(part, input._mask, input.dims)
                 for part in input.data.split(split_size_or_sections, d))


@_lengths.aware
@_registry.implements(torch.chunk, torch.Tensor.chunk, family="shape")
def chunk(func, input, chunks, dim=0):
    d = _static_pieces(_registry.op_name(func), input, dim)
    return tuple(MaskedBatch._make(part, input._mask, input.dims)
                 for part in input.data.chunk(chunks, d))


@_lengths.aware
@_registry.implements(torch.unbind, torch.Tensor.unbind, family="shape")
def unbind(func, input, dim=0):
    """Per-position slices; along a dynamic dimension an example past its end is not real."""
    op = _registry.op_name(func)
    d = _nonbatch_dim(op, dim, input.dim())
    dims = input.dims[: d - 1] + input.dims[d:]
    data = input.data.unbind(d)
    if input.dims[d - 1]:
        masks = input.mask.unbind(d)
        carried = _lengths.carried_by(input)
        if carried is not None and sum(dims) > 1:
            # Step t of an example holds its other lengths while t is below its length
            # along d; past its end the example is absent (zeros, as its mask).
            c = _lengths.column(input.dims, d)
            others = torch.cat([carried[:, :c], carried[:, c + 1:]], 1)
            masks = tuple(_lengths.carry(m, others * (carried[:, c:c + 1] > t))
                          for t, m in enumerate(masks))
    else:
        masks = (None if input._mask is None
                 else _lengths.kept(input._mask.squeeze(d), input._mask),) * len(data)
    steps = tuple(MaskedBatch._make(x, m, dims) for x, m in zip(data, masks))
    if has_zero_padding(input):
        # Views of zero padding are zero padding (the loop's steps are filled for free).
        for step in steps:
            mark_zero_padding(step)
    return steps


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
        if t.dim() != first.dim() or t.size(0) != 1:
            raise ValueError(
                f"{op}: a plain tensor in the list must look like one example (rank "
                f"{first.dim()}, size 1 in dimension 0); got shape {tuple(t.shape)}"
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
    if differ is not None and _capture.fails(differ):
        j = int(differ.nonzero()[0])
        raise ValueError(
            f"{op}: example {j} is real in some of the {len(parts)} tensors {joined} and "
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
        rows = [_item_rows(p, batch) for p in parts]
    elif any(m is None for m in masks) or all(_masking.same_mask(m, masks[0])
                                              for m in masks[1:]):
        return None
    else:
        rows = [m.reshape(batch, -1).any(1) for m in masks]
    absent = [~r for r, p in zip(rows, parts) if not any(p.dims)]
    if not absent:
        return None
    differ = torch.stack(absent).any(0) & torch.stack(rows).any(0)
    return _masking.running(differ)


def _recorded_items(tensors: Sequence[Any]) -> bool:
    """Whether some part is an item of a list that only some examples have
    (``MaskedBatch._present``, recorded by matchbox-control's ``@batch``)."""
    return any(type(t) is MaskedBatch and getattr(t, "_present", None) is not None
               for t in tensors)


def _item_rows(part: MaskedBatch, batch: int) -> torch.Tensor:
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


def _joined_data(parts: list[MaskedBatch], mask: torch.Tensor | None,
                 dims: tuple[bool, ...]) -> list[torch.Tensor]:
    """The parts' data for a join along a static dimension, whose mask is their *and*.

    A part real where the result is padding (a state joined with the step of
    a sequence that has ended) gets no gradient from there (``guard_wider``).
    """
    # The mask has size one along the joined dimension: it broadcasts over each part.
    return _masking.guard_wider(parts, [p.data for p in parts], mask, dims)


def _cat_dynamic(parts: list[MaskedBatch], d: int, dims: tuple[bool, ...]) -> MaskedBatch:
    """Concatenate along dynamic dimension ``d``: each example's parts end to end."""
    lengths = [_masking.lengths_along(p, d) if p.dims[d - 1] else
               torch.full((p.data.size(0),), p.data.size(d), device=p.device)
               for p in parts]
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
