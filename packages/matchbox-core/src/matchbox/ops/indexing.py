"""Indexing: ``batch[:, ...]``.

Semantics: the first index is ``:`` (or an ``...`` that covers dimension 0):
every example keeps its batch dimension.  An index along a static dimension
applies to data as is.  Along a dynamic dimension indices are each example's
own: ``x[:, -1]`` is every example's last element, ``x[:, 1:-1]`` drops each
example's first and last.  An int index that some example does not reach
raises ``IndexError`` naming the example, as the loop would; a slice gives
each example what it has (possibly nothing; with several dynamic dimensions, the
result's mask then carries the example's other sizes, see ``matchbox._lengths``).
A batch of per-example ints (``dims == ()``, an integer dtype: a counter that
examples advance at their own pace in a ``@batch`` loop) is each example's own
int index, and as a slice's start or stop along a dynamic dimension each example's own
bound (``x[:, start:end + 1]``, ``ops/index_size_bounds.py``).  A tensor index (a plain tensor or list of positions, the same for every
example, or a batch of per-example index tensors; ``ops/gather/tensor_indices.py``)
replaces the dimension it indexes by the index's shape, each example reading its own
positions; one tensor index per subscript, bool (mask) indices are refused.

Only running examples (see ``_masking.EXECUTION_MASK``) must reach an int
index; for the others the result is padding.

Assignment ``x[index] = value`` writes into the positions ``x[index]`` views
(``copy_`` on the view, broadcasting ``value`` as in the loop; under an execution
mask for the running examples only, ``matchbox._masked_writes``), for an index
that is the same position in every example: static positions, and ints and
slices counted from the start along a dynamic dimension.  One position per example
(a per-example int, or an int counted from each example's end) is written at each
example's own place (``ops/one_position_writes.py``, which also writes an in-place op
on such a read back into the batch read).  Slices counted from each example's end
are at different places in different examples; such an assignment is refused.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _capture, _copies, _lengths, _masking, _registry
from matchbox._example_scalars import VECTOR, ambiguous_index
from matchbox._masked_writes import WRITE_WATCH, in_place_copy, write_into
from matchbox.masked_batch import MaskedBatch, normalize_dim
from matchbox.ops.gather import is_tensor_index, table_lookup, tensor_index
from matchbox.ops.index_size_bounds import padded_bound as _padded_bound
from matchbox.ops.index_size_bounds import size_bounds as _size_bounds
from matchbox.ops.one_position import (
    fast_getitem,
    getitem_fast_path,
    is_per_example_int,
    nowhere,
    refuse_absent,
    remember_source,
    select_per_example,
    selected_lengths,
)
from matchbox.ops.one_position_writes import (
    SETITEM,
    from_each_end,
    has_per_example_int,
    write_per_example,
    writes_back,
)
from matchbox.ops.pointwise import _pointwise_inplace


def _expand_index(op: str, index: Any, x: MaskedBatch) -> list[Any]:
    rank = x.dim()
    items = list(index) if isinstance(index, tuple) else [index]
    tensor_indices = vectors = 0
    for item in items:
        if is_per_example_int(item):
            if item._scalar is VECTOR:
                vectors = 1  # the loop's (1,) tensor: an advanced index
                tensor_indices += 1
            continue
        if is_tensor_index(item):
            tensor_indices += 1
        if isinstance(item, bool):
            raise NotImplementedError(
                f"{op}: bool indices are not supported for batches; use ints, slices, "
                "None, ..., tensors of positions and batches of per-example ints"
            )
        if isinstance(item, MaskedBatch) and (item.dtype.is_floating_point
                                              or item.dtype.is_complex):
            raise NotImplementedError(
                f"{op}: a batch used as an index must hold integers (per-example ints, or "
                f"per-example index tensors), got {item.dtype}"
            )
    if vectors and any(
            (type(i) is int or (is_per_example_int(i) and i._scalar is not VECTOR))
            for i in items):
        # torch takes ints beside a tensor index as tensor indices too (and moves the
        # result's dimensions to the front when a slice separates them).
        tensor_indices += 1
    if tensor_indices > 1:
        raise NotImplementedError(
            f"{op}: more than one tensor index in one subscript (or a tensor index beside an "
            "int; a batch of one int per example that is a (1,) tensor in the loop, such as "
            "s.argmax(1), is a tensor index) is not supported for batches (torch would "
            "broadcast them together, and may move the result's dimensions in front of "
            "each example's batch dimension); index one dimension at a time"
        )
    consuming = sum(1 for i in items if i is not None and i is not Ellipsis)
    # By identity: ``list.count`` and ``in`` compare a tensor item with ``==`` (an op).
    ellipses = [at for at, i in enumerate(items) if i is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis")
    if ellipses:
        at = ellipses[0]
        items[at: at + 1] = [slice(None)] * (rank - consuming)
    if consuming > rank:
        raise IndexError(f"{op}: too many indices for examples of rank {rank}")
    first = items[0] if items else slice(None)
    if _whole(first):
        pass
    elif isinstance(first, slice) and not any(isinstance(b, (torch.Tensor, MaskedBatch)) for b in (
            first.start, first.stop, first.step)) and range(1)[first] == range(1):
        items[0] = slice(None)  # x[0:1], x[-1:]: each example's dimension 0, whole
    else:
        raise IndexError(
            f"{op}: the first index must be ':' (every example keeps its batch "
            f"dimension 0), got {first!r}; " + _first_index_hint(first, items)
        )
    items = _size_bounds(op, items, x)
    return items


def _whole(item: Any) -> bool:
    """Whether ``item`` is ``:`` (compared by identity: a bound may be a batch)."""
    return isinstance(item, slice) and item.start is None and item.stop is None \
        and item.step is None


def _first_index_hint(first: Any, items: list[Any]) -> str:
    """What ``x[first, ...]`` is in the loop, and what to write instead."""
    rest = items[1:]
    if type(first) is int and first in (0, -1):
        kept = _format_index(tuple([slice(None)] + rest)) if rest else ":"
        return (f"in the loop it drops each example's dimension 0 (of size one), which a "
                f"batch cannot do (its examples keep it); write x[{kept}] for the same "
                "values with dimension 0 kept" + (" (x itself)" if not rest else ""))
    if type(first) is int:
        return (f"each example's dimension 0 has size one, so index {first} is out of range "
                "for it, in the loop too")
    if first is None:
        return ("in the loop it adds a dimension in front of each example's dimension 0, "
                "which a batch cannot hold; add a size-one dimension after it instead "
                "(x[:, None], x.unsqueeze(1))")
    if isinstance(first, slice):
        return ("in the loop it leaves each example's dimension 0 empty, which a batch "
                "cannot hold; slice the dimensions after it (x[:, a:b])")
    if is_per_example_int(first):
        return ("a batch of per-example ints there indexes each example's dimension 0 in the "
                "loop, of size one (0 and -1 its only positions, which drop it); for each "
                "example's own position along the dimension after it write x[:, j]")
    return "index the dimensions after it (x[:, i])"


def _with_length(x: MaskedBatch, d: int, data: torch.Tensor, length: torch.Tensor,
                 old_length: torch.Tensor) -> MaskedBatch:
    """A result along dynamic dim ``d`` whose examples have ``length`` elements."""
    rank = data.dim()
    others = x.mask.any(d, keepdim=True) | (old_length == 0).reshape(-1, *[1] * (rank - 1))
    shape = [1] * rank
    shape[0], shape[d] = length.size(0), data.size(d)
    along = torch.arange(data.size(d), device=data.device) < length[:, None]
    mask = others & along.reshape(shape)
    if sum(x.dims) > 1:
        # An example left empty along d keeps its other sizes in lengths.
        lengths = x.lengths().clone()
        lengths[:, _lengths.column(x.dims, d)] = length
        mask = (_lengths.carry(mask, lengths) if _lengths.carried_by(x) is not None
                else _lengths.settle(mask, lengths))
    return MaskedBatch._make(data, mask, x.dims)


def _slice_dynamic(op: str, x: MaskedBatch, d: int, item: slice) -> MaskedBatch:
    """``x[..., item]`` along dynamic ``d``: each example's own positions; a bound may be
    a ``(batch,)`` tensor of each example's own (:func:`_padded_bound`, never negative)."""
    start, stop, step = item.start, item.stop, 1 if item.step is None else item.step
    if step <= 0:
        # As torch: a zero step is an error, and tensors have no negative steps.
        raise ValueError(f"{op}: slice step must be positive, got {step}")
    n = _masking.lengths_along(x, d)
    per_start = isinstance(start, torch.Tensor)
    first = torch.zeros_like(n) if start is None else start if per_start else (
        torch.full_like(n, start) if start >= 0 else (n + start).clamp(min=0))
    first = torch.minimum(first, n)
    last = n if stop is None else torch.minimum(stop, n) if isinstance(stop, torch.Tensor) \
        else (torch.minimum(torch.full_like(n, stop), n) if stop >= 0
              else (n + stop).clamp(min=0))
    length = ((last - first + step - 1) // step).clamp(min=0)
    if isinstance(stop, torch.Tensor):
        stop = None  # (the data's own end: no example's holds more)
    if not per_start and (start is None or start >= 0):
        # A stop that is the same for every example bounds the data too, so the
        # result is a view of exactly the positions it holds (an in-place op on
        # it reaches only those, as in the loop).
        end = stop if stop is not None and stop >= 0 else None
        data = x.data[(slice(None),) * d + (slice(start, end, step),)]
    else:
        size = (x.data.size(d) + step - 1) // step
        if start is not None and not per_start:
            # No example holds more than -start positions from its end: ``x[:, -1:]`` is of
            # padded size one, and broadcasts as ``x[:, :1]`` does.
            bound = -start if stop is None or stop >= 0 else max(stop - start, 0)
            size = min(size, (bound + step - 1) // step)
        positions = first[:, None] + step * torch.arange(size, device=n.device)
        shape = [1] * x.data.dim()
        shape[0], shape[d] = n.size(0), size
        index = positions.clamp(max=max(x.data.size(d) - 1, 0)).reshape(shape)
        data = x.data.gather(d, index.expand(*x.data.shape[:d], size, *x.data.shape[d + 1:]))
    return _with_length(x, d, data, length, n)


def _select_dynamic(x: MaskedBatch, d: int, item: int) -> MaskedBatch:
    """``x[..., item]`` along dynamic dim ``d``: each example's own element ``item``.

    An example that does not reach ``item`` raises, as in the loop, if it is
    running (see ``_masking.EXECUTION_MASK``); otherwise its result is padding.
    """
    dims = x.dims[: d - 1] + x.dims[d:]
    n = _masking.lengths_along(x, d)
    present = (n > item) if item >= 0 else (n >= -item)
    refuse_absent(present, item, n, f"dynamic dimension {d}")
    if not -x.data.size(d) <= item < x.data.size(d):
        # Past the padded size: no example has the position. A capture gets here, in a
        # step no example takes (a loop over range(x.size_as_tensor(d)) unrolled to the
        # capture's step bound; eager stops at the longest example); so does eager code
        # whose examples here do not run, or whose check above is deferred to the end of
        # the @batch call (``_capture.fails``). The result is padding.
        return nowhere(x, d, present, dims)
    if item >= 0:
        # Past an example's end the mask is already false: padding.
        mask = selected_lengths(x.mask.select(d, item), x, d, present, dims)
        return MaskedBatch._make(x.data.select(d, item), mask, dims)
    # One advanced index (its backward keeps the positions only: a gather's keeps the data,
    # which a write into the batch afterwards, x[:, -1] = v, would then fail).
    at = (n + item).clamp(min=0)
    data = x.data[(torch.arange(at.size(0), device=at.device),) + (slice(None),) * (d - 1)
                  + (at,)]
    real = x.mask.any(d)
    real = real & present.reshape(-1, *[1] * (real.dim() - 1))
    real = selected_lengths(real, x, d, present, dims)
    return MaskedBatch._make(data, _masking.fit_mask(real, data, dims), dims)


@_registry.implements(torch.Tensor.__getitem__, family="indexing",
                      fast_path=getitem_fast_path)
@_lengths.aware  # first: the fast path's method is made when registered
def getitem(func, input, index):
    fast = fast_getitem(func, input, (index,))  # also when called here (a deferred guard)
    if fast is not None:
        return fast
    op = _registry.op_name(func)
    if not isinstance(input, MaskedBatch):  # a plain table, a batch among its indices
        return table_lookup(op, input, index)
    items = _expand_index(op, index, input)
    x, d = input, 1
    # Whether the result is a view of each example's positions, as in the loop
    # (an index of a copy is a view of the copy only).
    view = not _copies.is_copy(input)
    copied = False  # a copy in the loop too (a (1,) index: advanced indexing)
    for item in items[1:]:
        if item is None:
            x = MaskedBatch._make(x.data.unsqueeze(d), _lengths.kept(x.mask.unsqueeze(d), x.mask),
                                  x.dims[: d - 1] + (False,) + x.dims[d - 1:])
            d += 1
        elif isinstance(item, slice):
            if x.dims[d - 1] and not _whole(item):
                item = slice(_padded_bound(op, x, item.start, d),
                             _padded_bound(op, x, item.stop, d), item.step)
                x = _slice_dynamic(op, x, d, item)
                # (A bound per example, or from each example's end: other positions in
                # each example, which in-place ops on the result do not reach alike.)
                view = view and not any(
                    isinstance(bound, torch.Tensor) or (bound is not None and bound < 0)
                    for bound in (item.start, item.stop))
            else:
                x = MaskedBatch._make(x.data[(slice(None),) * d + (item,)], x.mask, x.dims)
            d += 1
        elif is_per_example_int(item):
            kind = item._scalar
            if kind is None:
                raise ambiguous_index(op, d)
            x = select_per_example(x, d, item)
            view = False
            copied = copied or kind is VECTOR
            if not copied:
                _copies.remember(x._data)  # (a new tensor: before the view of it below)
            if kind is VECTOR:
                # The loop's index is a (1,) tensor: advanced indexing keeps the dimension.
                mask = None if x._mask is None else _lengths.kept(x._mask.unsqueeze(d), x._mask)
                x = MaskedBatch._make(x.data.unsqueeze(d), mask,
                                      x.dims[: d - 1] + (False,) + x.dims[d - 1:])
                d += 1
        elif isinstance(item, int):
            if not -x.data.size(d) <= item < x.data.size(d) and not x.dims[d - 1]:
                raise IndexError(
                    f"{op}: index {item} is out of range for dimension {d} of size "
                    f"{x.data.size(d)}"
                )
            if x.dims[d - 1]:
                x = _select_dynamic(x, d, item)
                view = view and item >= 0
            else:
                dims = x.dims[: d - 1] + x.dims[d:]
                mask = _lengths.kept(x.mask.select(d, 0), x.mask)
                x = MaskedBatch._make(x.data.select(d, item), mask, dims)
        elif is_tensor_index(item):
            # A copy, in the loop too (advanced indexing): in-place ops on it are the
            # loop's, which do not reach the indexed tensor either.
            x, added = tensor_index(op, x, d, item)
            d += added
        else:
            raise NotImplementedError(f"{op}: index {item!r} is not supported for batches")
        if not view and not copied:  # (the copy, whose views the items after this may take)
            _copies.remember(x._data, source=input._data)
    if not view and not copied:
        _copies.mark(x)
        if writes_back(input, items):  # an in-place op on it reaches input, as the loop's
            remember_source(x, input, index)
    if x is not input and not x.dims:
        x._scalar = VECTOR  # x[:, k] of a (1, K) example is (1,) in the loop
    return x


@_lengths.aware  # (built from indexing, which keeps the lengths)
@_registry.implements(torch.select, torch.Tensor.select, family="indexing")
def select(func, input, dim, index):
    """``x.select(d, i)``: ``x[:, ..., i]`` with ``i`` at dimension ``d`` (along a dynamic
    dimension each example's own position ``i``, a negative one from its own end)."""
    op = _registry.op_name(func)
    _registry.refuse_size_number(op, "index", index)
    d = normalize_dim(op, dim, input.dim())
    if d == 0:
        raise ValueError(
            f"{op}: dim=0 is each example's own batch dimension (size one): selecting along "
            "it would drop it, which no example of a batch can; select along another "
            "dimension")
    return input[(slice(None),) * d + (index,)]


@_lengths.aware
@_registry.implements(torch.Tensor.copy_, family="indexing")
def copy_(func, input, src, non_blocking=False):
    """``x.copy_(src)``: ``src`` broadcast into every example, as each example's ``copy_``."""
    if not isinstance(src, (torch.Tensor, MaskedBatch)):
        raise TypeError(f"Tensor.copy_: src must be a tensor or a batch, got "
                        f"{type(src).__name__}")
    _check_value_covers(func, input, src)
    return _pointwise_inplace(func, (input, src), {"non_blocking": non_blocking}
                              if non_blocking else {})


@_lengths.aware
@_registry.implements(torch.Tensor.__setitem__, family="indexing")
def setitem(func, input, index, value):
    """``x[index] = value``: ``copy_`` into the view ``x[index]`` (see the module docstring)."""
    if not isinstance(input, MaskedBatch):
        # A batch value or index: the plain tensor would have to hold every example.
        sizes = ", ".join(map(str, input.shape[1:])) if input.dim() else ""
        raise ValueError(
            f"Tensor.__setitem__: x[{_format_index(index)}] = value is an in-place op on a "
            f"plain tensor of shape {tuple(input.shape)}, which cannot take a batch argument "
            "(the tensor would have to hold every example); create x from a batch "
            f"(b.batch_zeros({sizes}), zeros of shape (1, {sizes}) for each example of b), "
            "or build the result out of place (torch.where on positions, torch.cat of the "
            "parts); under @matchbox.batch a plain tensor held by a local variable becomes "
            "a batch of per-example copies when so written"
        )
    if any(is_tensor_index(item) for item in (index if isinstance(index, tuple) else (index,))):
        # x[:, idx] is a copy: writing into it would silently leave x as it was.
        raise NotImplementedError(
            f"Tensor.__setitem__: x[{_format_index(index)}] = value with a tensor index is not "
            "supported for batches; write the positions with x.scatter(dim, index, src) "
            "(or scatter_), which take per-example indices"
        )
    # Each example's own position (``ops/one_position_writes``): given per example, or
    # counted from each example's own end along a dynamic dimension.
    items = (_expand_index("Tensor.__setitem__", index, input)
             if has_per_example_int(index) else None)
    if items is None and input.dims and any(type(i) is int and i < 0 for i in (
            index if isinstance(index, tuple) else (index,))):
        items = from_each_end(input, _expand_index("Tensor.__setitem__", index, input))
    if items is not None:
        write_per_example(input, items, value, _format_index(index), getitem, copy_,
                          _without_leading_ones)
        return
    target = getitem(torch.Tensor.__getitem__, input, index)
    if _copies.is_copy(target):
        raise NotImplementedError(
            f"Tensor.__setitem__: x[{_format_index(index)}] selects positions that differ between "
            "examples (counted from each example's end, or per example), which the batch "
            "cannot write in place; build the new batch instead, e.g. torch.where with a "
            "condition on positions, or torch.cat / matchbox.functional.stack of the parts"
        )
    if not isinstance(value, (torch.Tensor, MaskedBatch)):
        value = torch.as_tensor(value, dtype=input.dtype, device=input.device)
    value = _without_leading_ones(value, target.dim())
    mask = _masking.EXECUTION_MASK.get()
    if WRITE_WATCH[0] is not None:  # written here, not through write_running
        WRITE_WATCH[0](input, mask, f"x[{_format_index(index)}] = value")
    if mask is None:
        copy_(torch.Tensor.copy_, target, value)
        return
    # Under a per-example condition: the positions as each example would hold them after
    # the write, taken by the running examples only, in ``input`` and the batches it
    # stands for in a @batch region (see ``matchbox._masked_writes``).
    new = in_place_copy(target)
    copy_(torch.Tensor.copy_, new, value)
    written, done = input, []
    while written is not None:
        view = target if written is input else getitem(torch.Tensor.__getitem__, written, index)
        write_into(view, new, mask, f"x[{_format_index(index)}]", done)
        written = getattr(written, "_guards", None)


SETITEM[0] = setitem  # (an in-place op on x[:, j] writes back with it)


def _without_leading_ones(value: Any, rank: int) -> Any:
    """``value`` without the leading size-one dimensions that make it rank above ``rank``,
    as torch's ``x[i] = v`` drops them (``v`` of shape ``(1, 1, D)`` into a ``(1, D)``
    slot); a batch's own dimension 0 stays."""
    if isinstance(value, MaskedBatch):
        while value.dim() > rank and not value.dims[0] and value.size(1) == 1:
            value = value.squeeze(1)
    else:
        while value.dim() > rank and value.size(0) == 1:
            value = value[0]
    return value


def _format_index(index: Any) -> str:
    def one(item: Any) -> str:
        if isinstance(item, slice):
            text = ":".join("" if b is None else str(b) for b in (item.start, item.stop))
            return text + ("" if item.step is None else f":{item.step}")
        return "..." if item is Ellipsis else repr(item)

    return ", ".join(one(i) for i in (index if isinstance(index, tuple) else (index,)))


def _check_value_covers(op: Any, target: MaskedBatch, value: Any) -> None:
    """A value that is padding where ``target`` is real would leave padding's arbitrary
    values at real positions: refused (in the loop that example has no such value)."""
    if (not isinstance(value, MaskedBatch) or value._mask is None or target._mask is value._mask
            or any(value.dims)):  # lengths along dynamic dims: the op's own check
        return
    lacking = (target.mask & ~value.mask).reshape(target.data.size(0), -1).any(1)
    failing = _masking.running(lacking)
    if _capture.fails(failing):
        raise ValueError(
            f"{_registry.op_name(op)}: example {int(failing.nonzero()[0])} of the value is padding at "
            "positions where the batch written to is real (the value lacks them in that "
            "example)"
        )
