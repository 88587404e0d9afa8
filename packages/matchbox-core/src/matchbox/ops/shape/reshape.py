"""Reshapes: view/reshape/flatten/unflatten and expand.

A reshape keeps every dynamic dimension (written -1) and may split or merge the
static dimensions between them (see the package docstring).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from matchbox import _capture, _lengths, _masking, _registry
from matchbox._execution import running
from matchbox._layout import expanded_row
from matchbox._padded_sizes import is_padded, own_sizes
from matchbox._sizes import BatchShape, plain_size, refuse_later_batch_size
from matchbox.masked_batch import (
    MaskedBatch,
    normalize_dim,
)
from matchbox.ops.shape._dims import _nonbatch_dim, _sizes

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
            # The split goes on (the padded size rounded up): on an accelerator, inside
            # @batch, the check is read when the call ends.
            _capture.check(_masking.running(lengths % factor != 0), functools.partial(
                _not_divisible, op, k, factor, lengths))
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
    given = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    shape = _sizes(shape)
    refuse_later_batch_size(_registry.op_name(func), shape)
    _registry.refuse_per_example(_registry.op_name(func), "size", shape, _OWN_SIZE)
    result = reshape_batch(_registry.op_name(func), input, shape)
    return _check_padded_sizes(_registry.op_name(func), input, given, 0, result)


def _check_padded_sizes(op: str, input: MaskedBatch, given: Sequence, start: int,
                        result: MaskedBatch) -> MaskedBatch:
    """``result``, a reshape of ``input`` to sizes ``given`` from its dimension ``start``
    on; refused where one is ``T = y.maxsize(d)`` of a dynamic dimension (in the loop, each
    example's own size there, ``T``'s source's) and the result is static there, or dynamic
    with other sizes (the loop's examples would not reshape)."""
    for k, size in enumerate(given):
        if not is_padded(size):
            continue
        p = start + k
        label = f"{op} (size {p}, x.maxsize({size.dim}))"
        if p == 0 or not result.dims[p - 1]:
            # Static there: as the loop only where every example's own size is T.
            own = own_sizes(label, f"size {p}", size, result.data.size(0))
            error = functools.partial(_static_there, label, p)
            if p == 0:
                raise error()
            _capture.check(running(own.to(result.device) != plain_size(size)), error)
            continue
        source = size.source
        if source is None or (p < input.dim() and input.dims[p - 1]
                              and input.data.size(p) == result.data.size(p)
                              and _keeps(size, input, p)):
            continue  # the input's own dimension p (its sizes), kept
        if hasattr(type(source), "to_masked"):
            source = source.to_masked()
        _masking.check_lengths_agree(
            label, [(source, normalize_dim(op, size.dim, source.dim())), (result, p)])
    return result


# What to write for a size of each example's own (``x.view(1, n, 3)``, ``n`` per example).
_OWN_SIZE = "write -1 for a dynamic dimension, which keeps each example's own size"



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
    start = normalize_dim(op, start_dim, input.dim())
    end = normalize_dim(op, end_dim, input.dim())
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
    refuse_later_batch_size(op, sizes, d)
    _registry.refuse_per_example(op, "size", sizes, _OWN_SIZE)
    if -1 in sizes and not input.dims[d - 1]:
        # A static size is known: infer the -1 here, since reshape_batch reads
        # every -1 as a dynamic dimension.
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = input.data.size(d) // known if known else 0
    result = reshape_batch(op, input, old[:d] + [plain_size(s) for s in sizes] + old[d + 1:])
    return _check_padded_sizes(op, input, sizes, d, result)


@_lengths.aware
@_registry.implements(torch.Tensor.expand, torch.broadcast_to, torch.Tensor.broadcast_to,
                      family="shape")
def expand(func, input, *sizes, implicit=False):
    op = _registry.op_name(func)
    if len(sizes) == 1 and isinstance(sizes[0], BatchShape):
        # x.expand(y.shape) of a batch y: each example to y's example's shape, as torch's
        # x.expand_as(y) is x.expand(y.size()); another batch type's shape gives its sizes
        # (its size() raising for a dynamic one).
        like = sizes[0]._batch
        if isinstance(like, MaskedBatch):
            return expand_as(func, input, like)
        sizes = tuple(sizes[0])
    given = sizes[0] if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    sizes = _sizes(sizes)
    refuse_later_batch_size(op, sizes)
    _registry.refuse_per_example(op, "size", sizes, "a dimension each example expands to its "
                                 "own size is x.expand_as(y) of a batch y of those sizes")
    extra = len(sizes) - input.dim()
    if extra < 0:
        raise ValueError(f"{op}: {len(sizes)} sizes given for examples of rank {input.dim()}")
    x = _masking.raise_rank(input, len(sizes)) if extra else input
    if sizes[0] not in (1, -1, x.data.size(0)):
        raise ValueError(f"{op}: the size of dimension 0 (each example's batch dimension) "
                         f"must stay 1 (or be the batch size {x.data.size(0)} as x.size(0) "
                         f"gives it), got {sizes[0]}")
    if any(is_padded(size) and not _keeps(size, input, i - extra)
           for i, size in enumerate(given[1:], start=1)):
        return _expand_to_own_sizes(func, op, x, list(given))
    target = [x.data.size(0)]
    for i, size in enumerate(sizes[1:], start=1):
        if x.dims[i - 1] and size not in (-1, x.data.size(i)):
            raise ValueError(f"{op}: dimension {i} is dynamic; pass -1 to keep it")
        target.append(x.data.size(i) if size == -1 else size)
    return MaskedBatch._make(x.data.expand(target), x.mask, x.dims)


def _static_there(label: str, p: int) -> ValueError:
    return ValueError(
        f"{label}: the padded size of a dynamic dimension stands for each example's own "
        "size there (as in the loop over examples), but the examples reshaped here are "
        f"static in dimension {p}, the same in every example; write -1 to keep a dynamic "
        "dimension of the input, or build a batch of those sizes (x.new_zeros(x.size(0), "
        "T, ...))")


def _keeps(size, input: MaskedBatch, i: int) -> bool:
    """Whether padded ``size`` in position ``i`` (of the input of rank raised by
    ``extra``, input dimension ``i``) is the input's own dynamic dimension, kept."""
    source = size.source
    return (source is input or (getattr(source, "_mask", None) is not None
                                and source._mask is getattr(input, "_mask", None)
                                and source.dims == input.dims)) \
        and normalize_dim("expand", size.dim, input.dim()) == i


def _expand_to_own_sizes(func, op: str, x: MaskedBatch, sizes: list) -> MaskedBatch:
    """``h.expand(B, T, H)`` with ``T = y.maxsize(d)`` of a dynamic dimension: in the loop
    each example expands to its own size there (``T``'s source's), so ``h`` is expanded
    as a batch of those sizes (:func:`expand_as`: the result is dynamic there)."""
    from matchbox._size_tensors import size_as_tensor
    from matchbox.ops.constructors import new_batch

    shape: list = [x.data.size(0)]
    for i, size in enumerate(sizes[1:], start=1):
        if is_padded(size):
            if not x.dims[i - 1] and x.data.size(i) != 1:
                raise ValueError(
                    f"{op}: size {i} is x.maxsize({size.dim}), each example's own size "
                    f"there in the loop over examples, but dimension {i} has size "
                    f"{x.data.size(i)}: only a dimension of size one expands to it")
            shape.append(size)
        elif x.dims[i - 1]:
            if plain_size(size) not in (-1, x.data.size(i)):
                raise ValueError(f"{op}: dimension {i} is dynamic; pass -1 to keep it")
            shape.append(size_as_tensor(x, i))
        else:
            shape.append(x.data.size(i) if size == -1 else size)
    # The sizes as a batch (no values: a stride-0 view of one), expanded as.
    like = new_batch(op, x, shape, lambda full: x.data.new_empty(()).expand(full))
    return expand_as(func, x, like)


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


@_lengths.aware
@_registry.implements(torch.broadcast_tensors, family="shape")
def broadcast_tensors(func, *tensors):
    """``torch.broadcast_tensors(x, y, ...)``: each argument expanded the way the loop's
    examples broadcast (``_masking.align``, as a pointwise op of them would), a batch each,
    real where every batch argument is.  A plain tensor (the same for every example) or a
    batch broadcast over a longer dynamic dimension gets no gradient from the result's
    padding (``_masking.guard_wider``)."""
    op = _registry.op_name(func)
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    values, mask, dims = _masking.align(op, list(tensors))
    values = _masking.guard_wider(list(tensors), values, mask, dims)
    return tuple(MaskedBatch._make(v, _masking.fit_mask(mask, v, dims), dims)
                 for v in torch.broadcast_tensors(*values))


def _plain_as_batch(op: str, t: torch.Tensor, like: MaskedBatch) -> MaskedBatch:
    """A plain tensor (the same for every example) as a batch of ``like``'s batch size."""
    t = expanded_row(t, like.data.size(0))  # expanded from size one: its one row
    if t.dim() > like.dim() or (t.dim() == like.dim() and t.size(0) != 1):
        raise ValueError(
            f"{op}: the plain tensor of shape {tuple(t.shape)} is the same for every example "
            f"of the batch argument, so it must look like one example (rank at most "
            f"{like.dim()}, size 1 in dimension 0, each example's batch dimension, or "
            f"expanded from size 1 to the batch size there)")
    t = t.reshape((1,) * (like.dim() - t.dim()) + tuple(t.shape))
    return MaskedBatch._make(t.expand(like.data.size(0), *t.shape[1:]), None,
                             (False,) * (t.dim() - 1))


def _not_divisible(op: str, k: int, factor: int, lengths: torch.Tensor) -> ValueError:
    return ValueError(f"{op}: cannot split dynamic dimension {k} into groups of {factor}: "
                      f"the examples have sizes {lengths.tolist()} there, not all divisible")
