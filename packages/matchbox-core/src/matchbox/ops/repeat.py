"""Repetition: ``repeat``, ``tile`` and ``repeat_interleave``.

Dimension numbers and sizes are those of one example.  What happens to padding and mask:

| op                  | along a static dim            | along a dynamic dim                        |
|---------------------|-------------------------------|--------------------------------------------|
| repeat, tile        | the data repeated, mask kept  | each example's real values repeated end to |
|                     |                               | end (length r * n); one gather             |
| repeat_interleave   | the data's rows repeated,     | each real value repeated in place (length  |
| (int repeats)       | mask kept                     | r * n), the mask alike                     |
| repeat_interleave   | a 1-D plain tensor: the data  | a 1-D plain tensor needs every example's   |
| (tensor repeats)    | as torch does it; one int per | length to be its length (the result is     |
| example (a batch of |  example: dynamic (r_e * n)   | static); one int per example: r_e * n_e    |
| per-example ints)   |                               |                                            |

Each example's dimension 0 is its batch dimension, of size one: ``repeat`` must leave
it at size one (a factor 1 there, or in front of it where ``repeat`` adds dimensions:
those become static dimensions after it).  ``repeat_interleave`` without ``dim``
flattens each example into one dimension, which a batch cannot hold: refused.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _capture, _lengths, _masking, _registry
from matchbox._padded_sizes import is_padded, own_sizes
from matchbox._sizes import plain_size
from matchbox.masked_batch import MaskedBatch, mask_from_lengths, normalize_dim
from matchbox.ops.gather import refuse_partly_empty

FAMILY = "repeat"


def _sizes(args: tuple[Any, ...]) -> list[Any]:
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return list(args[0])
    return list(args)


def _positions(size: int, device: torch.device, d: int, rank: int) -> torch.Tensor:
    shape = [1] * rank
    shape[d] = size
    return torch.arange(size, device=device).view(shape)


def _lines_along(x: MaskedBatch, d: int, old: torch.Tensor, length: torch.Tensor,
                 size: int) -> torch.Tensor:
    """The mask of a result along dynamic ``d`` of padded ``size`` whose examples have
    ``length`` there (``old`` in ``x``), the other dimensions as in ``x`` (an example
    empty along ``d`` keeps its other sizes)."""
    rank = x.data.dim()
    per_example = [-1] + [1] * (rank - 1)
    others = x.mask.any(d, keepdim=True) | (old == 0).view(per_example)
    return others & (_positions(size, x.device, d, rank) < length.view(per_example))


def _gather_along(x: MaskedBatch, d: int, source: torch.Tensor, old: torch.Tensor,
                  length: torch.Tensor, dims: tuple[bool, ...]) -> MaskedBatch:
    """``x`` gathered along ``d`` at per-line ``source`` positions ``(batch, ..., size,
    ...)``: a dynamic dimension whose examples are ``length`` long (``old`` in ``x``).
    Padding positions may read real values: their gradient is dropped."""
    size = source.size(d)
    full = list(x.data.shape)
    full[d] = size
    data = x.data.gather(d, source.clamp(0, max(x.data.size(d) - 1, 0)).expand(full))
    mask = _masking.fit_mask(_lines_along(x, d, old, length, size), data, dims)
    return MaskedBatch._make(_masking.guard_gradient(data, mask), mask, dims)


# ------------------------------------------------------------------ repeat, tile


_ONE_COUNT = "repeat_interleave takes one count per example"


@_registry.implements(torch.Tensor.repeat, family=FAMILY)
def repeat(func, input, *sizes):
    op = _registry.op_name(func)
    counts = _sizes(sizes)
    if any(is_padded(c) for c in counts):
        return _repeat_own_sizes(op, input, counts)
    return _repeat(op, input, [_registry.int_argument(op, "count", s, _ONE_COUNT)
                               for s in counts])


@_registry.implements(torch.tile, torch.Tensor.tile, family=FAMILY)
def tile(func, input, *dims):
    op = _registry.op_name(func)
    counts = _sizes(dims)  # x.tile(1, n) as x.tile((1, n)), as torch takes both
    # tile pads its factors with ones in front up to the input's rank, then repeats.
    counts = [1] * (input.dim() - len(counts)) + counts
    if any(is_padded(c) for c in counts):
        return _repeat_own_sizes(op, input, counts)
    return _repeat(op, input, [_registry.int_argument(op, "count", s, _ONE_COUNT)
                               for s in counts])


def _repeat_own_sizes(op: str, x: MaskedBatch, counts: list[Any]) -> MaskedBatch:
    """``h.repeat(1, T, 1)`` with ``T = y.maxsize(d)`` of a dynamic dimension: in the loop
    each example repeats its static dimension ``k`` by its own size there (``T``'s
    source's), so the result is dynamic there, ``k`` times those sizes."""
    if is_padded(counts[0]):
        raise ValueError(
            f"{op}: count 0 is x.maxsize({counts[0].dim}), the padded size of a dynamic "
            "dimension; the first count repeats each example's batch dimension and must be 1")
    x = _masking.raise_rank(x, len(counts))
    own = {}
    for j, c in enumerate(counts[1:], 1):
        if not is_padded(c):
            continue
        if x.dims[j - 1]:
            raise ValueError(
                f"{op}: count {j} is x.maxsize({c.dim}), each example's own size in the loop "
                f"over examples, and dimension {j} is dynamic: repeating each example's "
                "values by its own count there is not supported; repeat by an int count")
        own[j] = own_sizes(op, f"count {j}", c, x.data.size(0)) * x.data.size(j)
    # (A symbolic padded size stays one while matchbox.compile captures: not int() of it.)
    r = _repeat(op, x, [plain_size(c) if is_padded(c) else
                        _registry.int_argument(op, "count", c, _ONE_COUNT) for c in counts])
    dims = tuple(d or j in own for j, d in enumerate(r.dims, 1))
    old = iter(r.lengths().unbind(1))
    lengths = torch.stack([own[j].to(r.device) if j in own else next(old)
                           for j, d in enumerate(dims, 1) if d], 1)
    mask = _lengths.settle(mask_from_lengths(lengths, list(r.data.shape), dims), lengths)
    # The positions past an example's own size hold its values repeated: no gradient.
    return MaskedBatch._make(_masking.guard_gradient(r.data, mask), mask, dims)


def _repeat(op: str, x: MaskedBatch, factors: list[int]) -> MaskedBatch:
    rank = x.dim()
    if len(factors) < rank:
        raise RuntimeError(
            f"{op}: number of dimensions of repeat dims ({len(factors)}) can not be smaller "
            f"than number of dimensions of tensor ({rank})")
    if any(f < 0 for f in factors):
        raise RuntimeError(f"{op}: repeats can not be negative, got {factors}")
    if factors[0] != 1:
        raise ValueError(
            f"{op}: the first factor ({factors[0]}) repeats dimension 0 of the result, each "
            "example's batch dimension (size one); it must be 1 (new dimensions after it "
            "may have any factor)")
    # Dimensions repeat adds go in front of each example's dimension 0: inserted after
    # the batch's dimension 0, they are static dimensions of size one, as in the loop.
    x = _masking.raise_rank(x, len(factors))
    static = [1] + [f if not x.dims[j - 1] else 1 for j, f in enumerate(factors[1:], 1)]
    data = x.data.repeat(static) if any(f != 1 for f in static) else x.data
    x = MaskedBatch._make(data, x._mask, x.dims)
    dynamic = [j for j in range(1, len(factors)) if x.dims[j - 1]]
    if any(factors[j] == 0 for j in dynamic):
        refuse_partly_empty(op, [factors[j] * _masking.sizes_along(x, j) for j in dynamic])
    for j, f in enumerate(factors[1:], 1):
        if x.dims[j - 1] and f != 1:
            x = _repeat_dynamic(x, j, f)
    return x


def _repeat_dynamic(x: MaskedBatch, d: int, factor: int) -> MaskedBatch:
    """Each example's real values along dynamic ``d`` repeated ``factor`` times end to end."""
    n = _masking.sizes_along(x, d)
    rank = x.data.dim()
    positions = _positions(factor * x.data.size(d), x.device, d, rank)
    source = positions.remainder(n.clamp(min=1).view(-1, *[1] * (rank - 1)))
    return _gather_along(x, d, source, n, factor * n, x.dims)


# ------------------------------------------------------------------ repeat_interleave


@_registry.implements(torch.repeat_interleave, torch.Tensor.repeat_interleave, family=FAMILY)
def repeat_interleave(func, input, repeats=None, dim=None, *, output_size=None):
    op = _registry.op_name(func)
    if repeats is None:
        raise ValueError(f"{op}(repeats) gives the indices of a 1-D tensor of counts, which a "
                         "batch (each example keeps its dimension 0) cannot hold")
    if dim is None:
        raise ValueError(f"{op}: dim=None flattens each example, its batch dimension 0 "
                         "included, into a 1-D result, which a batch cannot hold; pass dim")
    if not isinstance(input, MaskedBatch):
        raise TypeError(f"{op}: the input must be the batch; per-example repeats of a plain "
                        "tensor are not supported")
    d = normalize_dim(op, dim, input.dim())
    _registry.refuse_size_number(op, "output_size", output_size)
    if isinstance(repeats, MaskedBatch):
        return _interleave_per_example(op, input, d, repeats, output_size)
    _registry.refuse_size_number(op, "repeats", repeats)
    if isinstance(repeats, torch.Tensor) and repeats.numel() == 1:
        repeats = int(repeats)
    if isinstance(repeats, int):
        if repeats < 0:
            raise RuntimeError(f"{op}: repeats can not be negative, got {repeats}")
        if d == 0:
            if repeats != 1:
                raise ValueError(f"{op}: repeating dimension 0, each example's batch dimension "
                                 f"(size one), {repeats} times would change its size")
            _check_output_size(op, output_size, 1, d)
            return input
        _check_output_size(op, output_size, repeats * (
            _masking.sizes_along(input, d) if input.dims[d - 1] else input.data.size(d)), d)
        if repeats == 0 and input.dims[d - 1] and sum(input.dims) > 1:
            refuse_partly_empty(op, [0 * _masking.sizes_along(input, j) if j == d else
                                     _masking.sizes_along(input, j)
                                     for j in range(1, input.dim()) if input.dims[j - 1]])
        data = input.data.repeat_interleave(repeats, d)
        mask = input._mask
        if mask is not None and input.dims[d - 1]:
            mask = mask.repeat_interleave(repeats, d)
        return MaskedBatch._make(data, mask, input.dims)
    return _interleave_tensor(op, input, d, repeats, output_size)


def _check_output_size(op: str, output_size: Any, length: Any, d: int) -> None:
    """``output_size``, where given, must be the result's size along ``d`` (``length``: an
    int, or one per example), as the loop's torch requires of each example."""
    if output_size is None:
        return
    if not isinstance(length, torch.Tensor):
        if length != output_size:
            raise RuntimeError(f"{op}: invalid output_size, expected {length} but got "
                               f"{output_size}")
        return
    bad = _masking.running(length != output_size)
    _capture.check(bad, lambda: RuntimeError(
        f"{op}: invalid output_size: example {int(bad.nonzero()[0])}'s result has size "
        f"{int(length[bad][0])} along dimension {d}, not {output_size}"))


def _interleave_tensor(op: str, x: MaskedBatch, d: int, repeats: torch.Tensor,
                       output_size: Any) -> MaskedBatch:
    """A 1-D plain tensor of counts: the same for every example, whose length it must be."""
    if not isinstance(repeats, torch.Tensor) or repeats.dim() != 1:
        raise TypeError(f"{op}: repeats must be an int, a 1-D tensor or a batch of one int per "
                        f"example, got {repeats!r}")
    if d == 0:
        raise ValueError(f"{op}: dim=0 is each example's batch dimension (size one); "
                         "repeating along it would change its size")
    count = repeats.numel()
    data = x.data
    if x.dims[d - 1]:
        # Every running example's length must be the number of counts (the loop raises
        # otherwise); the result has their sum in every example: a static dimension.
        _masking.check_static_extents(op, [(x, d)], [(repeats.view(count), 0)], exact=True,
                                      label=f"dimension {d} (the number of repeats)")
        data = data.narrow(d, 0, min(count, data.size(d)))
    if output_size is not None:
        total = repeats.sum().view(1)
        _capture.check(total != output_size, lambda: RuntimeError(
            f"{op}: invalid output_size: the repeats sum to {int(total)}, not {output_size}"))
    out = torch.repeat_interleave(data, repeats.to(data.device), d, output_size=output_size)
    dims = x.dims[:d - 1] + (False,) + x.dims[d:]
    mask = x._mask
    if mask is not None and x.dims[d - 1]:
        mask = mask.any(d, keepdim=True)
    return MaskedBatch._make(out, _masking.fit_mask(mask, out, dims), dims)


def _interleave_per_example(op: str, x: MaskedBatch, d: int, repeats: MaskedBatch,
                            output_size: Any) -> MaskedBatch:
    """One count per example: example e's values along ``d`` each repeated ``r_e`` times."""
    if repeats.dims != () or repeats.dtype.is_floating_point or repeats.dtype == torch.bool:
        raise ValueError(f"{op}: a batch of repeats must hold one int per example (dims ()), "
                         f"got dims {repeats.dims} of {repeats.dtype}")
    if d == 0:
        raise ValueError(f"{op}: dim=0 is each example's batch dimension (size one); "
                         "repeating along it would change its size")
    r = repeats.data.long()
    real = torch.ones_like(r, dtype=torch.bool) if repeats._mask is None \
        else repeats._mask.reshape(-1)
    negative = _masking.running((r < 0) & real)
    if _capture.fails(negative):
        e = int(negative.nonzero()[0])
        raise RuntimeError(f"{op}: repeats can not be negative: example {e} has {int(r[e])}")
    r = torch.where(real, r.clamp(min=0), 0)
    n = _masking.sizes_along(x, d)
    length = r * n
    _check_output_size(op, output_size, torch.where(real, length, output_size or 0), d)
    size = int(length.max()) if length.numel() else 0
    rank = x.data.dim()
    per_example = [-1] + [1] * (rank - 1)
    dims = x.dims[:d - 1] + (True,) + x.dims[d:]
    refuse_partly_empty(op, [length] + [_masking.sizes_along(x, j) for j in range(1, rank)
                                        if j != d and dims[j - 1]])
    source = _positions(size, x.device, d, rank) // r.clamp(min=1).view(per_example)
    return _gather_along(x, d, source, n, length, dims)
