"""Gathering and scattering by index: ``gather``, ``take_along_dim``, ``index_select``,
``scatter`` / ``scatter_add`` / ``scatter_reduce`` (and their in-place forms), and the
tensor (advanced) indices of ``x[:, idx]``.

Indices are positions inside each example, as in the loop.  An index is a batch (one
index tensor per example, its own layout) or a plain tensor (the same index for every
example); so is the input of ``gather``/``take_along_dim`` (a table shared by every
example, indexed per example).  What happens to padding and mask:

| ops                         | result layout                | padding                                   |
|-----------------------------|------------------------------|-------------------------------------------|
| gather, take_along_dim,     | the index's (a plain index:  | a padding index position reads position 0 |
| x[:, idx]                   | static); x[:, idx] puts the  | and its gradient is dropped; a real one   |
|                             | index's dims in place of the | must be inside its example's real extent  |
|                             | indexed dim                  | (else IndexError naming the example)      |
| index_select                | the input's, the selected    | as gather; a 1-D plain index or one int   |
|                             | dim static (size k)          | per example (a 0-d index: size 1)         |
| scatter, scatter_add,       | the input's                  | a padding index position writes into a    |
| scatter_reduce (and _)      |                              | slot past the data, dropped afterwards;   |
|                             |                              | real ones must be inside the example      |

Checks are the loop's: in every dimension but ``dim`` the index may not be larger
than the input (nor, for scatter, than ``src`` in any dimension), counted per example;
a real index value outside ``[0, size)`` of its own example along ``dim`` (negative
values count from the example's end in ``x[:, idx]``, and in ``take_along_dim`` where the
installed torch's does: torch 2.3's raises for them, as ``gather`` does) raises, naming
the example, where the loop would raise for it.  Only running examples
(``_masking.EXECUTION_MASK``) are checked.  Along dimension 0 (each example's own
size-one batch dimension) the only position is 0.  ``out=`` is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from matchbox import _capture, _masking, _registry
from matchbox.masked_batch import MaskedBatch, constant_pad, normalize_dim

FAMILY = "gather"


def _take_along_dim_counts_from_the_end() -> bool:
    """Whether ``torch.take_along_dim`` reads a negative index from the end of ``dim``
    (newer torch does, pytorch/pytorch#146211; torch 2.3 raises "out of bounds" for it,
    as ``gather`` does)."""
    try:
        torch.take_along_dim(torch.zeros(1, 1), torch.tensor([[-1]]), 1)
    except RuntimeError:
        return False
    return True


#: The loop's ``take_along_dim`` takes negative indices: so does the batch's.
TAKE_ALONG_DIM_COUNTS_FROM_THE_END = _take_along_dim_counts_from_the_end()


# ------------------------------------------------------------------ arguments


def as_batch(op: str, value: Any, like: MaskedBatch, name: str) -> MaskedBatch:
    """``value`` as a batch of ``like``'s size: a plain tensor is the same in every example."""
    if isinstance(value, MaskedBatch):
        if value.data.size(0) != like.data.size(0):
            raise ValueError(f"{op}: the {name} holds {value.data.size(0)} examples but the "
                             f"batch has {like.data.size(0)}")
        return value
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: the {name} must be a tensor or a batch, got "
                        f"{type(value).__name__}")
    if value.dim() != like.dim() or value.size(0) != 1:
        raise ValueError(
            f"{op}: a plain {name} is the same for every example and must look like one "
            f"example: rank {like.dim()} with size 1 in dimension 0 (each example's batch "
            f"dimension); got shape {tuple(value.shape)}")
    batch = like.data.size(0)
    return MaskedBatch._make(value.expand(batch, *value.shape[1:]), None,
                             (False,) * (value.dim() - 1))


def _check_same_rank(op: str, x: MaskedBatch, idx: MaskedBatch, name: str) -> None:
    """An index that names a position of ``x`` for each position of its own (gather,
    take_along_dim, scatter) has ``x``'s rank."""
    if x.dim() != idx.dim():
        raise RuntimeError(f"{op}: the {name} (rank {idx.dim()}) and the input (rank "
                           f"{x.dim()}) must have the same number of dimensions")


def _first_batch(*values: Any) -> MaskedBatch:
    return next(v for v in values if isinstance(v, MaskedBatch))


def _with_dim_one(x: MaskedBatch) -> MaskedBatch:
    """``x`` with a static size-one dimension inserted at 1: dimension 0 of each
    example (its batch dimension, size one) becomes a dimension ops can work along."""
    mask = None if x._mask is None else x._mask.unsqueeze(1)
    return MaskedBatch._make(x.data.unsqueeze(1), mask, (False,) + x.dims)


def _without_dim_one(x: MaskedBatch) -> MaskedBatch:
    mask = None if x._mask is None else x._mask.squeeze(1)
    return MaskedBatch._make(x.data.squeeze(1), mask, x.dims[1:])


def check_not_larger(op: str, small: MaskedBatch, big: MaskedBatch, skip: int | None,
                     small_name: str, big_name: str) -> None:
    """Per example, ``small`` is no larger than ``big`` in every dimension but ``skip``.

    The loop's gather/scatter require it; along a dynamic dimension it compares each
    running example's sizes (a device sync), elsewhere the padded sizes.
    """
    for j in range(1, small.dim()):
        if j == skip:
            continue
        varies = [b.dims[j - 1] and b._mask is not None for b in (small, big)]
        if not any(varies):
            a, b = small.data.size(j), big.data.size(j)
            if a > b:
                raise RuntimeError(
                    f"{op}: the {small_name} has size {a} in dimension {j} but the {big_name} "
                    f"has {b}; the {small_name} may not be larger than the {big_name} there")
            continue
        sizes, limits = _masking.sizes_along(small, j), _masking.sizes_along(big, j)
        failing = _masking.running(sizes > limits)
        if _capture.fails(failing):
            e = int(failing.nonzero()[0])
            raise RuntimeError(
                f"{op}: example {e} has size {int(sizes[e])} in dimension {j} of the "
                f"{small_name} but {int(limits[e])} in the {big_name}; the {small_name} may "
                f"not be larger than the {big_name} there")


def checked_positions(op: str, index: MaskedBatch, sizes: torch.Tensor, d: int, *,
                      negative: bool) -> torch.Tensor:
    """``index.data`` as positions inside each example along ``d`` (of ``sizes``).

    A real position of a running example outside ``[0, size)`` raises ``IndexError``
    naming the example (``negative``: from ``-size`` on, counted from its end), as the
    loop raises for it: it would point into the example's padding or beyond.  Padding
    positions, and those of examples that are not running, become 0.
    """
    values = index.data
    if values.dtype == torch.bool or values.dtype.is_floating_point or values.dtype.is_complex:
        raise TypeError(f"{op}: the index must hold integers, got {values.dtype}")
    n = sizes.view(-1, *[1] * (values.dim() - 1))
    if negative:
        values = torch.where(values < 0, values + n, values)
    outside = (values < 0) | (values >= n)
    real = index._mask
    bad = outside if real is None else outside & real
    failing = _masking.running(bad.reshape(bad.size(0), -1).any(1))
    if _capture.fails(failing):
        e = int(failing.nonzero()[0])
        where = tuple(int(i) for i in bad[e].nonzero()[0])
        value = int(index.data[e][where])
        raise IndexError(
            f"{op}: index {value} is out of range for example {e}, which has size "
            f"{int(sizes[e])} in dimension {d}")
    unsafe = outside if real is None else outside | ~real
    return values.masked_fill(unsafe, 0)


def _narrow_to(t: torch.Tensor | None, sizes: list[int | None]) -> torch.Tensor | None:
    """``t`` cut to at most ``sizes[j]`` in each dimension ``j`` (``None``: as it is)."""
    if t is None:
        return None
    for j, size in enumerate(sizes):
        if size is not None and t.size(j) > size:
            t = t.narrow(j, 0, size)
    return t


def _example_real(x: MaskedBatch) -> torch.Tensor | None:
    """The mask of a batch static in every dimension (whole examples real or not)."""
    return x._mask if x._mask is not None and not any(x.dims) else None


# ------------------------------------------------------------------ gather


def _gather_positions(x: MaskedBatch, d: int, index: MaskedBatch, positions: torch.Tensor,
                     sparse_grad: bool = False) -> MaskedBatch:
    """``x`` gathered along ``d`` at checked ``positions`` (the data of ``index``).

    The result has the index's layout; where the index is padding it is padding, and
    its gradient (which would reach position 0 of the example) is dropped.
    """
    data = x.data
    limits = [None] + [data.size(j) if j != d else None for j in range(1, data.dim())]
    positions = _narrow_to(positions, limits)
    mask = index._mask
    if mask is not None:
        mask = _narrow_to(mask, [None if n == 1 else limit
                                 for n, limit in zip(mask.shape, limits)])
    if data.size(d) == 0 and positions.numel():
        # No example has a position there (an index would have been refused): read
        # from one slot of fill, which only padding positions reach.
        pads = [0, 0] * (data.dim() - 1 - d) + [0, 1]
        data = constant_pad(data, pads)
    out = torch.gather(data, d, positions, sparse_grad=sparse_grad)
    mask = _masking.fit_mask(_masking.combine_masks([mask, _example_real(x)]), out, index.dims)
    return MaskedBatch._make(_masking.guard_gradient(out, mask), mask, index.dims)


@_registry.implements(torch.gather, torch.Tensor.gather, family=FAMILY)
def gather(func, input, dim, index, *, sparse_grad=False, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    like = _first_batch(input, index)
    x, idx = as_batch(op, input, like, "input"), as_batch(op, index, like, "index")
    _check_same_rank(op, x, idx, "index")
    d = normalize_dim(dim, x.dim(), op)
    return _along(d, x, idx, lambda x, d, idx: _gather(op, x, d, idx, sparse_grad, False))


def _gather(op: str, x: MaskedBatch, d: int, idx: MaskedBatch, sparse_grad: bool,
            negative: bool) -> MaskedBatch:
    check_not_larger(op, idx, x, d, "index", "input")
    positions = checked_positions(op, idx, _masking.sizes_along(x, d), d, negative=negative)
    return _gather_positions(x, d, idx, positions, sparse_grad)


def _along(d: int, x: MaskedBatch, idx: MaskedBatch,
           run: Callable[[MaskedBatch, int, MaskedBatch], MaskedBatch]) -> MaskedBatch:
    """``run(x, d, idx)``; along dimension 0 on a size-one dimension 1 put in its place."""
    if d:
        return run(x, d, idx)
    return _without_dim_one(run(_with_dim_one(x), 1, _with_dim_one(idx)))


@_registry.implements(torch.take_along_dim, torch.Tensor.take_along_dim, family=FAMILY)
def take_along_dim(func, input, indices, dim=None, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if dim is None:
        raise ValueError(
            f"{op}: dim=None flattens each example, its batch dimension 0 included, into a "
            "1-D result, which a batch (each example keeps its dimension 0) cannot hold; "
            "pass dim")
    like = _first_batch(input, indices)
    x, idx = as_batch(op, input, like, "input"), as_batch(op, indices, like, "indices")
    _check_same_rank(op, x, idx, "indices")
    d = normalize_dim(dim, x.dim(), op)

    def run(x: MaskedBatch, d: int, idx: MaskedBatch) -> MaskedBatch:
        x, idx = _broadcast_except(op, x, idx, d)
        return _gather(op, x, d, idx, False, TAKE_ALONG_DIM_COUNTS_FROM_THE_END)

    return _along(d, x, idx, run)


def _broadcast_except(op: str, x: MaskedBatch, idx: MaskedBatch,
                      d: int) -> tuple[MaskedBatch, MaskedBatch]:
    """Broadcast input and indices against each other in every dimension but ``d``, as
    each example's ``take_along_dim`` does.

    A size-one dimension takes the other's size; where the other is dynamic, each
    example's own size (the expanded index is real up to the input's length there).
    """
    for j in range(1, x.dim()):
        if j == d:
            continue
        a, b = x.data.size(j), idx.data.size(j)
        x_dynamic, idx_dynamic = x.dims[j - 1], idx.dims[j - 1]
        if not x_dynamic and not idx_dynamic:
            if a == b:
                continue
            if a != 1 and b != 1:
                raise RuntimeError(
                    f"{op}: the input has size {a} and the indices {b} in dimension {j}; "
                    "they must be equal or one of them 1 (they broadcast in every dimension "
                    "but dim)")
        if not idx_dynamic and b == 1:
            idx = _expand_to(idx, j, x)
        elif not x_dynamic and a == 1:
            x = _expand_to(x, j, idx)
        elif x_dynamic and idx_dynamic:
            _masking.check_lengths_agree(op, [(x, j), (idx, j)])
        elif x_dynamic:
            _masking.check_static_extents(op, [(x, j)], [(idx, j)])
        else:
            _masking.check_static_extents(op, [(idx, j)], [(x, j)])
    return x, idx


def _expand_to(x: MaskedBatch, j: int, other: MaskedBatch) -> MaskedBatch:
    """``x`` (size one in static dimension ``j``) expanded to ``other``'s size there: each
    example's own size where ``other`` is dynamic."""
    size = other.data.size(j)
    shape = list(x.data.shape)
    shape[j] = size
    data = x.data.expand(shape)
    if not other.dims[j - 1]:
        return MaskedBatch._make(data, x._mask, x.dims)
    view = [-1] + [1] * (x.dim() - 1)
    view[j] = size
    along = (torch.arange(size, device=x.device)
             < _masking.sizes_along(other, j).unsqueeze(1)).view(view)
    mask = along if x._mask is None else x._mask & along
    dims = x.dims[:j - 1] + (True,) + x.dims[j:]
    return MaskedBatch._make(data, _masking.fit_mask(mask, data, dims), dims)


@_registry.implements(torch.index_select, torch.Tensor.index_select, family=FAMILY)
def index_select(func, input, dim, index, *, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    like = _first_batch(input, index)
    x = as_batch(op, input, like, "input")
    d = normalize_dim(dim, x.dim(), op)
    if d == 0:
        raise ValueError(
            f"{op}: dim=0 is the batch dimension of each example (size one); selecting "
            "along it would change that size, which a batch cannot hold")
    if isinstance(index, MaskedBatch):
        if index.dims != ():
            raise ValueError(
                f"{op}: a batch index must hold one int per example (a batch of per-example "
                f"scalars, dims ()); this one has dims {index.dims}. index_select takes a 1-D "
                "index, which a batch (each example keeps a leading dimension of size one) "
                "cannot hold per example: use gather, take_along_dim or x[:, idx] for "
                "per-example index tensors")
        # The loop's 0-d index keeps the dimension, with size one.
        shape = [-1] + [1] * (x.dim() - 1)
        positions = index.data.reshape(shape)
        idx = MaskedBatch._make(positions, None if index._mask is None
                                else index._mask.reshape(shape), (False,) * (x.dim() - 1))
    else:
        if not isinstance(index, torch.Tensor) or index.dim() > 1:
            raise IndexError(f"{op}: the index must be a 1-D tensor (or a batch of one int "
                             f"per example), got {_describe(index)}")
        shape = [1] * x.dim()
        shape[d] = -1
        idx = MaskedBatch._make(index.reshape(shape).expand(x.data.size(0), *shape[1:]),
                                None, (False,) * (x.dim() - 1))
    sizes = _masking.sizes_along(x, d)
    positions = checked_positions(op, idx, sizes, d, negative=False).long()  # int32 too
    full = list(x.data.shape)
    full[d] = positions.size(d)
    positions = positions.expand(full)
    data = x.data
    if data.size(d) == 0 and positions.numel():
        data = constant_pad(data, [0, 0] * (data.dim() - 1 - d) + [0, 1])
    out = torch.gather(data, d, positions)
    dims = x.dims[:d - 1] + (False,) + x.dims[d:]
    mask = x._mask
    if mask is not None and x.dims[d - 1]:
        mask = mask.any(d, keepdim=True)
    mask = _masking.fit_mask(_masking.combine_masks([mask, idx._mask]), out, dims)
    return MaskedBatch._make(_masking.guard_gradient(out, mask), mask, dims)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return type(value).__name__


# ------------------------------------------------------------------ tensor indices


def is_tensor_index(item: Any) -> bool:
    """A tensor (advanced) index of ``__getitem__``: a tensor, a list, or a batch of index
    tensors (a batch of one int per example is an int index, as before)."""
    if isinstance(item, MaskedBatch):
        return item.dims != ()
    return isinstance(item, (torch.Tensor, list))


def tensor_index(op: str, x: MaskedBatch, d: int, item: Any) -> tuple[MaskedBatch, int]:
    """``x[..., item]`` with ``item`` a tensor index at dimension ``d``.

    A plain index (a tensor or a list) is the same for every example: its shape
    replaces dimension ``d``, static.  A batch index holds each example's own index
    tensor ``(1, *J)``: dimension ``d`` is replaced by ``(1, *J)`` with the index's dims.
    Returns the result and the number of dimensions that replaced ``d``.
    """
    if isinstance(item, list):
        item = torch.tensor(item, device=x.device)
    batch = x.data.size(0)
    if isinstance(item, MaskedBatch):
        if item.data.size(0) != batch:
            raise ValueError(f"{op}: the index holds {item.data.size(0)} examples but the "
                             f"batch has {batch}")
        values = item.data.unsqueeze(1)
        index_mask = None if item._mask is None else item._mask.unsqueeze(1)
        index_dims = (False,) + item.dims
    else:
        values = item.to(x.device).expand(batch, *item.shape)
        index_mask, index_dims = None, (False,) * item.dim()
    if values.dtype in (torch.bool, torch.uint8):  # torch reads a uint8 index as a mask
        raise NotImplementedError(
            f"{op}: bool (mask) indices are not supported for batches (each example would "
            "keep its own number of positions); use torch.where, or sort the kept positions "
            "first")
    idx = MaskedBatch._make(values, index_mask, index_dims)
    positions = checked_positions(op, idx, _masking.sizes_along(x, d), d, negative=True).long()
    # Gather along d at the flattened index positions, every other dimension kept.
    count = positions[0].numel()
    rank = x.data.dim()
    view = [batch] + [1] * (rank - 1)
    view[d] = count
    full = list(x.data.shape)
    full[d] = count
    data = x.data
    if data.size(d) == 0 and count:
        data = constant_pad(data, [0, 0] * (rank - 1 - d) + [0, 1])
    out = torch.gather(data, d, positions.reshape(view).expand(full))
    index_shape = list(values.shape[1:])
    out = out.reshape(*full[:d], *index_shape, *full[d + 1:])
    k = len(index_shape)
    mask = x._mask
    if mask is not None:
        if x.dims[d - 1]:
            # Real along the other dimensions; an example empty along d has no
            # position an index may point at (it was refused unless its index is empty).
            mask = mask.any(d, keepdim=True)
        mask = mask.reshape(*mask.shape[:d], *[1] * k, *mask.shape[d + 1:])
    if index_mask is not None:
        index_mask = index_mask.reshape(batch, *[1] * (d - 1), *index_mask.shape[1:],
                                        *[1] * (rank - 1 - d))
    dims = x.dims[:d - 1] + index_dims + x.dims[d:]
    if sum(dims) > 1:
        refuse_partly_empty(op, [_masking.sizes_along(b, j) for b, skip in ((x, d), (idx, None))
                                 for j in range(1, b.dim()) if j != skip and b.dims[j - 1]])
    mask = _masking.fit_mask(_masking.combine_masks([mask, index_mask]), out, dims)
    return MaskedBatch._make(_masking.guard_gradient(out, mask), mask, dims), k


def refuse_partly_empty(op: str, sizes: list[torch.Tensor]) -> None:
    """A result with several dynamic dimensions cannot hold an example empty in only some
    of them (its mask would lose the other sizes): refused, as ``fromlist`` refuses it.

    ``sizes``: each example's size in each dynamic dimension of the result, ``(batch,)``.
    """
    if len(sizes) < 2:
        return
    table = torch.stack(sizes, 1)
    partly = _masking.running((table == 0).any(1) & (table != 0).any(1))
    if _capture.fails(partly):
        e = int(partly.nonzero()[0])
        raise ValueError(
            f"{op}: example {e} would be empty in some but not all of the result's dynamic "
            f"dimensions (sizes {table[e].tolist()}), which a batch with several dynamic "
            "dimensions cannot hold")


# ------------------------------------------------------------------ scatter

_SCATTER = {
    torch.scatter: "scatter_", torch.Tensor.scatter: "scatter_", torch.Tensor.scatter_: "scatter_",
    torch.scatter_add: "scatter_add_", torch.Tensor.scatter_add: "scatter_add_",
    torch.Tensor.scatter_add_: "scatter_add_",
    torch.scatter_reduce: "scatter_reduce_", torch.Tensor.scatter_reduce: "scatter_reduce_",
    torch.Tensor.scatter_reduce_: "scatter_reduce_",
}
_IN_PLACE = {torch.Tensor.scatter_, torch.Tensor.scatter_add_, torch.Tensor.scatter_reduce_}


@_registry.implements(*_SCATTER, family=FAMILY)
def scatter(func, input, dim, index, *args, out=None, **kwargs):
    """``scatter(input, dim, index, src or value, *, reduce)``, ``scatter_add(input, dim,
    index, src)``, ``scatter_reduce(input, dim, index, src, reduce, *, include_self)``."""
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    if args:
        src, args = args[0], args[1:]
    else:
        src = kwargs.pop("src", kwargs.pop("value", None))
    inplace = func in _IN_PLACE
    if inplace:
        if not isinstance(input, MaskedBatch):
            raise ValueError(f"{op}: an in-place op on a plain tensor cannot take a batch "
                             "argument (the tensor would have to hold every example); use "
                             "the out-of-place op")
        if getattr(input, "_not_a_view", False):
            raise NotImplementedError(
                f"{op}: the batch was indexed along a dynamic dimension at positions that "
                "differ between examples (a negative index or bound, or per-example indices): "
                "each example's result is a view in the loop, but the batch's is not, so an "
                "in-place op would not reach the indexed batch; use the out-of-place op")
    like = _first_batch(input, index, src)
    x = as_batch(op, input, like, "input")
    idx = as_batch(op, index, like, "index")
    source = as_batch(op, src, like, "src") if isinstance(src, (torch.Tensor, MaskedBatch)) \
        else src
    _check_same_rank(op, x, idx, "index")
    d = normalize_dim(dim, x.dim(), op)
    method = _SCATTER[func]
    if d == 0:
        source = _with_dim_one(source) if isinstance(source, MaskedBatch) else source
        data = _scatter(op, method, _with_dim_one(x), 1, _with_dim_one(idx), source, args,
                        kwargs).squeeze(1)
    else:
        data = _scatter(op, method, x, d, idx, source, args, kwargs)
    if inplace:
        input.data.copy_(data)
        return input
    return MaskedBatch._make(data, x._mask, x.dims)


def _scatter(op: str, method: str, x: MaskedBatch, d: int, idx: MaskedBatch, source: Any,
             args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    """The scattered data of ``x``: one slot past the data along ``d`` takes what the
    index's padding positions write, and is dropped."""
    check_not_larger(op, idx, x, d, "index", "input")
    if isinstance(source, MaskedBatch):
        if source.dim() != idx.dim():
            raise RuntimeError(f"{op}: the src has rank {source.dim()} but the index has rank "
                               f"{idx.dim()}; they must have the same number of dimensions")
        check_not_larger(op, idx, source, None, "index", "src")
    positions = checked_positions(op, idx, _masking.sizes_along(x, d), d, negative=False)
    size = x.data.size(d)
    if idx._mask is not None:
        positions = torch.where(idx._mask, positions, size)
    # The loop's sizes fit (checked above): cut the index's padding to the data's.
    limits: list[int | None] = [None]
    for j in range(1, x.dim()):
        bounds = [] if j == d else [x.data.size(j)]
        if isinstance(source, MaskedBatch):
            bounds.append(source.data.size(j))
        limits.append(min(bounds) if bounds else None)
    value = source.data if isinstance(source, MaskedBatch) else source
    positions = _narrow_to(positions, limits)
    slot = list(x.data.shape)
    slot[d] = 1
    extended = torch.cat([x.data, x.data.new_zeros(slot)], d)
    return getattr(extended, method)(d, positions, value, *args, **kwargs).narrow(d, 0, size)
