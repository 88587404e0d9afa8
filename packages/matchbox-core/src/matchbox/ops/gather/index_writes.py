"""Writing whole slices by a 1-D index: ``index_add``, ``index_copy`` and ``index_fill``,
and their in-place forms.

The input is the batch; ``index`` a plain 1-D (or 0-d) tensor of positions along
``dim``, the same for every example, each checked inside every running example's own
size there (``index_fill`` also takes negative positions, counted from each example's
end, as torch does).  ``index_add``/``index_copy`` run as the ``scatter_add``/``scatter``
they are (``scattering.py``: the source's padding positions write into a slot past the
data, dropped), the index expanded to the source's layout; the source must have the
input's size in every dimension but ``dim`` (each example's own along a dynamic one) and
the index's length along ``dim``.  ``index_fill`` writes ``value`` (a number, a 0-d
tensor, or one number per example) where each example's positions are selected.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _capture, _copies, _masking, _registry
from matchbox.masked_batch import MaskedBatch, normalize_dim
from matchbox.ops.gather._indices import FAMILY, _with_dim_one, as_batch, checked_positions
from matchbox.ops.gather.scattering import _scatter

_METHODS = {
    torch.index_add: "scatter_add_", torch.Tensor.index_add: "scatter_add_",
    torch.Tensor.index_add_: "scatter_add_",
    torch.index_copy: "scatter_", torch.Tensor.index_copy: "scatter_",
    torch.Tensor.index_copy_: "scatter_",
}
_IN_PLACE = {torch.Tensor.index_add_, torch.Tensor.index_copy_, torch.Tensor.index_fill_}


def _plain_index(op: str, index: Any) -> torch.Tensor:
    if isinstance(index, MaskedBatch):
        raise NotImplementedError(f"{op}: an index that differs between examples (a batch) is "
                                  "not supported; pass a plain 1-D tensor of positions")
    if not isinstance(index, torch.Tensor) or index.dim() > 1:
        raise IndexError(f"{op}: the index must be a 1-D tensor of positions, got "
                         f"{getattr(index, 'shape', type(index).__name__)}")
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"{op}: the index must hold int32 or int64, got {index.dtype}")
    return index.reshape(-1)


def _input_batch(op: str, func: Any, input: Any) -> MaskedBatch:
    if not isinstance(input, MaskedBatch):
        raise ValueError(f"{op}: the input must be the batch: a plain input would have to "
                         "hold every example")
    if func in _IN_PLACE:
        _copies.refuse_in_place(op, input)
    return input


def _result(func: Any, input: MaskedBatch, data: torch.Tensor) -> MaskedBatch:
    if func in _IN_PLACE:
        input.data.copy_(data)
        return input
    return MaskedBatch._make(data, input._mask, input.dims)


@_registry.implements(*_METHODS, family=FAMILY)
def index_add_copy(func, input, dim, index, source, *, alpha=1, out=None):
    op = _registry.op_name(func)
    _registry.refuse_out(op, out)
    _registry.refuse_size_number(op, "alpha", alpha)
    x = _input_batch(op, func, input)
    index = _plain_index(op, index)
    source = as_batch(op, source, x, "source")
    if source.dim() != x.dim():
        raise RuntimeError(f"{op}: the source (rank {source.dim()}) and the input (rank "
                           f"{x.dim()}) must have the same number of dimensions")
    d = normalize_dim(op, dim, x.dim())
    _check_source(op, x, source, d, index.numel())
    if alpha != 1:
        source = source * alpha
    shape = [1] * source.data.dim()
    shape[d] = -1
    positions = MaskedBatch._make(index.to(x.device).view(shape).expand(source.data.shape),
                                  source._mask, source.dims)
    method = _METHODS[func]
    if d == 0:
        data = _scatter(op, method, _with_dim_one(x), 1, _with_dim_one(positions),
                        _with_dim_one(source), (), {}).squeeze(1)
    else:
        data = _scatter(op, method, x, d, positions, source, (), {})
    return _result(func, input, data)


def _check_source(op: str, x: MaskedBatch, source: MaskedBatch, d: int, count: int) -> None:
    """The loop's: the source has the input's size in every dimension but ``d``, and the
    index's length along ``d``, in each running example."""
    if d == 0 and count != 1:
        raise RuntimeError(f"{op}: the index has {count} positions along dimension 0, each "
                           "example's own batch dimension (of size one): the source would "
                           "not be one example")
    for j in range(1, x.dim()):
        dynamic = (x.dims[j - 1] and x._mask is not None) or (
            source.dims[j - 1] and source._mask is not None)
        if not dynamic:
            want = count if j == d else x.data.size(j)
            if source.data.size(j) != want:
                raise RuntimeError(f"{op}: the source has size {source.data.size(j)} in "
                                   f"dimension {j} but {_wanted(j == d)} is {want}; "
                                   f"{_RULE}")
            continue
        have = _masking.sizes_along(source, j)
        limit = torch.full_like(have, count) if j == d else _masking.sizes_along(x, j)
        failing = _masking.running(have != limit)
        if _capture.fails(failing):
            e = int(failing.nonzero()[0])
            raise RuntimeError(f"{op}: example {e} has size {int(have[e])} in dimension {j} "
                               f"of the source but {_wanted(j == d)} is {int(limit[e])}; "
                               f"{_RULE}")


_RULE = ("the source must match the input in every dimension but dim, and have the index's "
         "length along dim")


def _wanted(along_dim: bool) -> str:
    return "the index's length" if along_dim else "the input's size"


@_registry.implements(torch.index_fill, torch.Tensor.index_fill, torch.Tensor.index_fill_,
                      family=FAMILY)
def index_fill(func, input, dim, index, value):
    op = _registry.op_name(func)
    _registry.refuse_size_number(op, "value", value)
    x = _input_batch(op, func, input)
    index = _plain_index(op, index)
    d = normalize_dim(op, dim, x.dim())
    rank = x.data.dim()
    batch = x.data.size(0)
    sizes = _masking.sizes_along(x, d)
    wanted = MaskedBatch._make(index.to(x.device).view(1, -1).expand(batch, -1), None,
                               (False,))
    positions = checked_positions(op, wanted, sizes, d, negative=True)
    selected = torch.zeros(batch, x.data.size(d) if d else 1, dtype=torch.bool,
                           device=x.device).scatter_(1, positions, True)
    shape = [batch] + [1] * (rank - 1)
    if d:
        shape[d] = -1
    selected = selected.view(shape)
    if isinstance(value, MaskedBatch):
        if value.dims != ():
            raise RuntimeError(f"{op}: value must be one number per example (dims ()), got "
                               f"examples of dims {value.dims}")
        value = value.data.view(batch, *[1] * (rank - 1))
    elif isinstance(value, torch.Tensor) and value.dim() != 0:
        raise RuntimeError(f"{op}: only supports a 0-dimensional value tensor, but got tensor "
                           f"with {value.dim()} dimension(s)")
    else:
        value = torch.as_tensor(value, dtype=x.dtype, device=x.device)
    data = torch.where(selected, value.to(x.dtype), x.data)
    return _result(func, input, data)
