"""The ops of the time-major view (``matchbox.nn.time_major``): each runs the same op on
the view's batch, its dimension numbers those of one ``(A, 1, F)`` example, and sees a
batch result as a view again where its dimension 1 is still each example's batch.

The view itself (``TimeMajorBatch``, ``time_major``, ``batch_major``) and its table of
what each op does are in ``matchbox/nn/time_major.py``.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    batch_types,
    dispatch,
    implements,
    normalize_dim,
    op_name,
    pointwise_ops,
    register,
)
from matchbox.nn.time_major import _TO_BATCH, TimeMajorBatch

# ---------------------------------------------------------------------------- arguments


def _batch_major_argument(op: str, x: Any) -> Any:
    if isinstance(x, TimeMajorBatch):
        return x.batch
    if isinstance(x, batch_types()):
        raise TypeError(f"{op}: cannot combine a time-major view with a batch-major "
                        f"{type(x).__name__}; convert one of them (time_major / batch_major)")
    if isinstance(x, torch.Tensor) and x.dim() == 3:
        return x.transpose(0, 1)  # time-major (A, 1, F), like the view
    if isinstance(x, torch.Tensor) and x.dim() == 2 and x.size(0) != 1:
        raise ValueError(
            f"{op}: a plain tensor of shape {tuple(x.shape)} would broadcast its first "
            "dimension against the batch dimension of a time-major example (size 1)"
        )
    return x


def _time_major_result(result: Any) -> Any:
    if isinstance(result, batch_types()):
        return TimeMajorBatch(result)
    if isinstance(result, tuple):
        return type(result)(_time_major_result(r) for r in result)
    return result


def _on_batch(func: Any, *args: Any, **kwargs: Any) -> Any:
    """``func`` on the views' batches, through their type's dispatch (a Tensor method
    cannot be called on a batch directly)."""
    return dispatch(func, args, kwargs)


def _on_batches(func: Any, *args: Any, **kwargs: Any) -> Any:
    """``func`` on the views' batches; a batch result is seen as a view again."""
    return _time_major_result(_on_batch(func, *args, **kwargs))


def _sizes(args: tuple[Any, ...]) -> list[Any]:
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return list(args[0])
    return list(args)


def _convert_first(op: str, why: str) -> ValueError:
    return ValueError(
        f"{op}: {why}; a time-major view (A, batch, F) keeps each example's batch "
        "dimension in position 1 at rank 3: convert with matchbox.nn.batch_major(x) "
        "(examples (1, A, F)) and apply the op there"
    )


def _batch_dim(op: str, dim: Any, what: str = "dim") -> int:
    """A view dimension as the batch's; dimension 1 (each example's batch) raises."""
    d = normalize_dim(op, dim, 3)
    if d == 1:
        raise _convert_first(op, f"{what}={dim} is dimension 1, the batch dimension of "
                                 "each example (size one)")
    return _TO_BATCH[d]


# ---------------------------------------------------------------------------- position-wise


def pointwise_on_view(func, *args, **kwargs):
    """A pointwise op on views: the same op on their batches (arguments transposed alike)."""
    op = op_name(func)
    args = tuple(_batch_major_argument(op, a) for a in args)
    kwargs = {k: _batch_major_argument(op, v) for k, v in kwargs.items()}
    return _on_batches(func, *args, **kwargs)


def rowwise_on_view(func, input, *args, **kwargs):
    """An op on each feature row with shared parameters (linear, layer_norm, dropout)."""
    return _on_batches(func, input.batch, *args, **kwargs)


register(pointwise_ops(), pointwise_on_view, family="time_major",
         batch_type="TimeMajorBatch")
register([F.linear, F.layer_norm, torch.layer_norm, getattr(F, "rms_norm", None),
          F.dropout, torch.dropout], rowwise_on_view, family="time_major",
         batch_type="TimeMajorBatch")


# ---------------------------------------------------------------------------- permutations


@implements(torch.transpose, torch.Tensor.transpose, torch.swapaxes,
            torch.Tensor.swapaxes, torch.swapdims, torch.Tensor.swapdims,
            family="time_major", batch_type="TimeMajorBatch")
def transpose(func, input, dim0, dim1):
    """``transpose(0, 1)`` gives the batch back; other swaps as :func:`permute`."""
    op = op_name(func)
    order = [0, 1, 2]
    a, b = normalize_dim(op, dim0, 3), normalize_dim(op, dim1, 3)
    order[a], order[b] = order[b], order[a]
    return _permuted(f"{op}({dim0}, {dim1})", input, order)


@implements(torch.permute, torch.Tensor.permute, family="time_major_shape",
            batch_type="TimeMajorBatch")
def permute(func, input, *order):
    op = op_name(func)
    order = [normalize_dim(op, d, 3) for d in _sizes(order)]
    if sorted(order) != [0, 1, 2]:
        raise ValueError(f"{op}: {order} is not a permutation of the 3 dimensions")
    return _permuted(f"{op}{tuple(order)}", input, order)


def _permuted(op: str, view: TimeMajorBatch, order: list[int]) -> Any:
    """The view's dimensions in ``order``: a batch if the batch dimension (1) comes first,
    a view if it stays second."""
    if order[0] == 1:
        rest = [_TO_BATCH[d] for d in order[1:]]
        return view.batch if rest == [1, 2] else view.batch.permute(0, *rest)
    if order[1] == 1:
        rest = [_TO_BATCH[order[0]], _TO_BATCH[order[2]]]
        return view if rest == [1, 2] else TimeMajorBatch(view.batch.permute(0, *rest))
    raise _convert_first(op, f"each example's batch dimension would move to position "
                             f"{order.index(1)}")


# ---------------------------------------------------------------------------- indexing


def _removes_dimension(item: Any) -> bool:
    """Whether an index entry selects one position (an int, or a batch of per-example ints)."""
    if isinstance(item, batch_types()):
        return True
    if isinstance(item, (bool, slice, torch.Tensor, list)) or item is None or item is Ellipsis:
        return False
    try:
        operator.index(item)
    except TypeError:
        return False
    return True


@implements(torch.Tensor.__getitem__, family="time_major_shape",
            batch_type="TimeMajorBatch")
def getitem(func, input, index):
    """``v[i]`` -> the batch's ``b[:, i]`` (dimension 0 gone: a batch); ``v[a:b]`` -> a view."""
    op = op_name(func)
    items = list(index) if isinstance(index, tuple) else [index]
    if any(item is None for item in items):
        raise _convert_first(op, "None (a new dimension) in the index would move each "
                                 "example's batch dimension")
    ellipses = [at for at, i in enumerate(items) if i is Ellipsis]  # not ==: tensors
    if len(ellipses) > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis")
    if ellipses:
        at = ellipses[0]
        items[at:at + 1] = [slice(None)] * (4 - len(items))
    if len(items) > 3:
        raise IndexError(f"{op}: too many indices for a view of rank 3")
    if len(items) > 1 and items[1] != slice(None):
        raise _convert_first(op, f"index {items[1]!r} in dimension 1, the batch dimension of "
                                 "each example (size one), which takes ':' only")
    result = input.batch[(slice(None), items[0], *items[2:])]
    if _removes_dimension(items[0]):
        return result  # (1, ...) per example: the batch dimension is first again
    if result.dim() != 3:
        raise _convert_first(op, f"index {index!r} would leave each example's batch dimension "
                                 f"in position 1 of a result of rank {result.dim()}")
    return TimeMajorBatch(result)


@implements(torch.unbind, torch.Tensor.unbind, family="time_major_shape",
            batch_type="TimeMajorBatch")
def unbind(func, input, dim=0):
    """``unbind(0)``: each position along dimension 0, a batch of ``(1, F)`` examples."""
    op = op_name(func)
    if normalize_dim(op, dim, 3) != 0:
        raise _convert_first(op, f"unbind({dim}) would leave each example's batch dimension "
                                 "in position 1 of results of rank 2")
    if input.batch.dims[0]:
        input.size(0)  # raises: the count differs between examples
    return input.batch.unbind(1)


# ---------------------------------------------------------------------------- shape


@implements(torch.squeeze, torch.Tensor.squeeze, family="time_major_shape",
            batch_type="TimeMajorBatch")
def squeeze(func, input, dim=None):
    """``squeeze(0)`` of a one-row view (``A == 1``): a batch of ``(1, F)`` examples."""
    op = op_name(func)
    if dim is None:
        raise _convert_first(op, "squeeze() without a dimension would remove dimension 1, "
                                 "each example's batch dimension (size one); pass the "
                                 "dimension (squeeze(0) for a one-layer state)")
    wanted = {normalize_dim(op, d, 3) for d in (dim if isinstance(dim, (tuple, list))
                                                else (dim,))}
    batch_dims = sorted(_batch_dim(op, d) for d in wanted)
    if 1 in batch_dims and input.batch.dims[0]:
        raise ValueError(f"{op}: dimension 0 of the view is dynamic; its size differs "
                         "between examples, so whether it can be squeezed differs too")
    drop = [d for d in batch_dims if input.batch.maxsize(d) == 1]
    if not drop:
        return input
    if drop == [2]:
        raise _convert_first(op, "squeezing dimension 2 would leave each example's batch "
                                 "dimension in position 1 of a result of rank 2")
    return input.batch.squeeze(tuple(drop))  # dimension 0 gone: batch-major


@implements(torch.reshape, torch.Tensor.reshape, torch.Tensor.view,
            family="time_major_shape", batch_type="TimeMajorBatch")
def reshape(func, input, *shape):
    """``(A, batch, F) -> (A', batch, F')``: the batch's examples to ``(1, A', F')``."""
    op = op_name(func)
    shape = _sizes(shape)
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        raise NotImplementedError(f"{op}(dtype) is not supported for a TimeMajorBatch")
    batch_size = input.batch.size(0)
    if len(shape) != 3 or shape[1] not in (1, -1, batch_size):
        raise _convert_first(op, f"the new shape {tuple(shape)} does not keep each "
                                 "example's batch dimension in position 1 of a result of "
                                 "rank 3 (written 1, -1 or x.size(1))")
    if shape[1] == -1:
        # Per example -1 infers 1 only if the other sizes hold every element.
        static = not input.batch.dims[0] and -1 not in (shape[0], shape[2])
        if not static or shape[0] * shape[2] != input.batch.size(1) * input.batch.size(2):
            raise _convert_first(op, f"the new shape {tuple(shape)} would infer dimension 1 "
                                     "(each example's batch dimension) from the other sizes; "
                                     "write it as 1 or x.size(1)")
    return TimeMajorBatch(input.batch.reshape(1, shape[0], shape[2]))


@implements(torch.Tensor.expand, family="time_major_shape",
            batch_type="TimeMajorBatch")
def expand(func, input, *sizes, implicit=False):
    op = op_name(func)
    sizes = _sizes(sizes)
    if len(sizes) != 3 or sizes[1] not in (1, -1, input.batch.size(0)):
        raise _convert_first(op, f"the sizes {tuple(sizes)} do not keep each example's batch "
                                 "dimension in position 1 of a result of rank 3")
    return TimeMajorBatch(input.batch.expand(-1, sizes[0], sizes[2]))


@implements(torch.cat, torch.concat, torch.concatenate, family="time_major_shape",
            batch_type="TimeMajorBatch")
def cat(func, tensors, dim=0, **kwargs):
    """Views joined along dimension 0 or 2: their batches joined along 1 or 2."""
    op = op_name(func)
    dim = kwargs.pop("axis", dim)
    parts = [_batch_major_argument(op, t) for t in tensors]
    return TimeMajorBatch(func(parts, _batch_dim(op, dim)))


# ---------------------------------------------------------------------------- reductions


_REDUCTIONS = [torch.sum, torch.Tensor.sum, torch.nansum, torch.Tensor.nansum, torch.mean,
               torch.Tensor.mean, torch.prod, torch.Tensor.prod, torch.amax, torch.Tensor.amax,
               torch.amin, torch.Tensor.amin, torch.logsumexp, torch.Tensor.logsumexp,
               torch.any, torch.Tensor.any, torch.all, torch.Tensor.all, torch.argmax,
               torch.Tensor.argmax, torch.argmin, torch.Tensor.argmin]


@implements(*_REDUCTIONS, family="time_major_reduction", batch_type="TimeMajorBatch")
def reduction(func, input, dim=None, keepdim=False, **kwargs):
    """Over every element (a per-example scalar), or over dimension 0 and/or 2.

    Each example is the batch's ``(1, A, F)`` example with its size-one
    dimension moved: the same elements in the same order, so a reduction over
    every element (``argmax`` included) is the batch's.
    """
    op = op_name(func)
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):
        result = _on_batch(func, input.batch, dim, keepdim, **kwargs) if keepdim \
            else _on_batch(func, input.batch, **kwargs)
        return TimeMajorBatch(result) if keepdim else result
    many = isinstance(dim, (tuple, list))
    dims = [_batch_dim(op, d) for d in (dim if many else (dim,))]
    result = _on_batch(func, input.batch, tuple(dims) if many else dims[0], keepdim, **kwargs)
    if keepdim:
        return TimeMajorBatch(result)
    if 1 not in dims:
        raise _convert_first(op, f"reducing dimension {dim} alone would leave each "
                                 "example's batch dimension in position 1 of a result of "
                                 "rank 2; pass keepdim=True")
    return result  # dimension 0 reduced: batch-major


# ---------------------------------------------------------------------------- same shape


_SAME_SHAPE = [torch.Tensor.detach, torch.detach, torch.Tensor.detach_,
               torch.Tensor.requires_grad_, torch.Tensor.to, torch.Tensor.cuda,
               torch.Tensor.cpu, torch.Tensor.contiguous, torch.zeros_like, torch.ones_like,
               torch.full_like, torch.empty_like, torch.rand_like, torch.randn_like,
               *[getattr(torch.Tensor, name) for name in (
                   "float", "double", "half", "bfloat16", "long", "int", "bool", "type_as")]]


@implements(*_SAME_SHAPE, family="time_major_conversion",
            batch_type="TimeMajorBatch")
def same_shape(func, input, *args, **kwargs):
    """Conversions and constructors that keep the shape: the same on the view's batch."""
    args = tuple(a.batch if isinstance(a, TimeMajorBatch) else a for a in args)
    return _on_batches(func, input.batch, *args, **kwargs)
