"""What the ``gather`` family's ops share: an index (or input) as a batch, and the loop's
checks of an index against the input, which turn it into positions inside each example.

Also ``refuse_partly_empty``, the check of a result with several dynamic dimensions that
``x[:, idx]``, ``repeat`` and ``diagonal`` share.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from matchbox import _capture, _masking
from matchbox._layout import expanded_row
from matchbox.masked_batch import MaskedBatch

FAMILY = "gather"


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
    value = expanded_row(value, like.data.size(0))  # expanded from size one: its one row
    if value.dim() != like.dim() or value.size(0) != 1:
        raise ValueError(
            f"{op}: a plain {name} is the same for every example and must look like one "
            f"example: rank {like.dim()} with size 1 in dimension 0 (each example's batch "
            f"dimension), or expanded from size 1 to the batch size there; got shape "
            f"{tuple(value.shape)}")
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
    # The op goes on safely (the positions that fail read position 0): on an accelerator,
    # inside @batch, the check is read when the call ends.
    _capture.check(failing, functools.partial(_out_of_range, op, failing, bad, index.data,
                                              _capture.version_of(index.data), sizes, d))
    unsafe = outside if real is None else outside | ~real
    return values.masked_fill(unsafe, 0)


def _out_of_range(op: str, failing: torch.Tensor, bad: torch.Tensor, index: torch.Tensor,
                  version: int | None, sizes: torch.Tensor, d: int) -> IndexError:
    e = int(failing.nonzero()[0])
    size = int(sizes[e])
    if _capture.written_since(index, version):  # the check was deferred: its value is gone
        return IndexError(f"{op}: an index is out of range for example {e}, which has size "
                          f"{size} in dimension {d}")
    where = tuple(int(i) for i in bad[e].nonzero()[0])
    return IndexError(f"{op}: index {int(index[e][where])} is out of range for example {e}, "
                      f"which has size {size} in dimension {d}")


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
