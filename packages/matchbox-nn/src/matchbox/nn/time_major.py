"""Time-major views: a batch seen with its batch dimension in position 1.

A ``MaskedBatch`` (or a ``PackedBatch``) is batch-major: dimension 0 is the
batch, and each example is ``(1, A, F)``.  Some per-example tensors have their
batch dimension of size one in position 1 instead, ``(A, 1, F)``:

- the input and output of an ``nn.RNN``/``nn.LSTM``/``nn.GRU`` built with
  ``batch_first=False`` (and of ``nn.MultiheadAttention`` / the Transformer
  layers), ``(T, 1, F)``;
- the final states of every recurrent module, ``(L*D, 1, H)`` (layers times
  directions), whatever ``batch_first`` says;
- what ``x.transpose(0, 1)``, ``x.unsqueeze(0)`` (examples ``(1, H)``) and
  ``torch.stack(xs)`` (examples ``(1, H)``) give per example.

A batch cannot move its batch dimension, so such values are a
``TimeMajorBatch``: a view of the batch of ``(1, A, F)`` examples as
``(A, batch, F)``.  Per-example code runs on it unchanged:

```python
out, h = lstm(time_major(x))   # tensor: x.transpose(0, 1); batch: a time-major view
out = batch_major(out)         # tensor: out.transpose(0, 1); view: its MaskedBatch
_, (h, c) = lstm(x)            # h: (L*D, 1, H) per example; a view on a batch
logits = fc(h[-1])             # h[-1]: (1, H) per example; a MaskedBatch on a batch
```

What the view answers and does (``A`` is dimension 0, ``F`` dimension 2; a
view op's dimension numbers are those of one example, as for batches):

| on the view ``v``                      | on its batch ``b`` (examples ``(1, A, F)``) | result |
|----------------------------------------|----------------------------------------------|--------|
| ``dim()``, ``size()``, ``shape``, ``len`` | ``(A, batch size, F)``; ``size(0)`` of a dynamic ``A`` raises | |
| ``examples()``                         | each example transposed, ``(A, 1, F)``        | tensors |
| ``v[i]``, ``v[i, :, j]``                | ``b[:, i]``, ``b[:, i, j]``                   | batch  |
| ``v[a:b]``, ``v[a:b, :, j:k]``           | ``b[:, a:b]``, ``b[:, a:b, j:k]``             | view   |
| ``unbind(0)``, ``iter(v)``              | ``b.unbind(1)``                              | batches |
| ``transpose``, ``permute``              | the same permutation of ``b``                | batch if the batch dimension comes first, view if second |
| ``squeeze(0)`` (``A == 1``)             | ``b.squeeze(1)``                             | batch  |
| ``view``/``reshape(A', 1, F')``         | ``b.reshape(1, A', F')``                     | view   |
| ``expand(A', -1, F')``                  | ``b.expand(-1, A', F')``                     | view   |
| ``torch.cat(views, 0 or 2)``            | ``torch.cat`` of the batches along 1 or 2     | view   |
| ``sum``/``mean``/``amax``/... over 0, 2, all | the same over 1, 2, all                 | batch; view with ``keepdim`` |
| pointwise ops, ``linear``, ``layer_norm``, ``dropout`` | the same op on ``b``          | view   |
| ``detach``, ``to``, casts, ``contiguous``, ``zeros_like`` | the same on ``b``          | view   |
| an ``nn.RNN``/``LSTM``/``GRU`` (input or initial states) | the packed call on ``b``    | see ``ops/recurrent_modules.py`` |

A plain tensor argument of an op on views is per-example time-major too,
``(A, 1, F)``, and is transposed with the view.  An op whose result would
have the batch dimension somewhere else (``v.view(L, D, 1, H)``,
``v.transpose(1, 2)``, ``v.squeeze(1)``, ``cat`` along dimension 1), or
whose result would not be of rank 3 with the batch in position 1
(``v.sum(2)``), raises an error naming the op and the dimension that says to
convert first: ``batch_major(v)`` (examples ``(1, A, F)``), where every batch
op applies.  Any other op raises ``NotImplementedError`` saying the same.

A ``TimeMajorBatch`` answers what a module asks before its ``_VF`` call
(``dim()``, ``size(1)`` = the batch size, ``size(-1)``, ``dtype``,
``device``); the recurrent ops and ``F.multi_head_attention_forward`` route
through the one registry (batch type ``"TimeMajorBatch"``).  The view is a
subclass of ``matchbox.extending.Batch`` declared a view (``view=True``): it
has the dispatch and the methods of a batch type, runs only its own handlers
(not the rules shared by batch types), and is not counted among the batch
types (code that looks for batches must not take it for one).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from matchbox.extending import (
    Batch,
    BatchShape,
    batch_size_as_asked,
    batch_types,
    dispatch,
    implements,
    normalize_dim,
    op_name,
    pointwise_ops,
    provide_batch_dim_view,
    register,
    why_size_was_asked,
)

__all__ = ["TimeMajorBatch", "time_major", "batch_major"]

# The batch's dimension for each dimension of the view: 0 and 1 swap places.
_TO_BATCH = {0: 1, 1: 0, 2: 2}


class TimeMajorBatch(Batch, view=True):
    """A batch of ``(1, A, F)`` examples seen as ``(A, batch, F)``.

    The batch is a ``MaskedBatch`` or any other registered batch type
    (matchbox-packed's ``PackedBatch``): ops on the view run through its own
    type's handlers.
    """

    __slots__ = ("batch",)
    _unsupported_hint = (" (a time-major view, for batch_first=False modules and the states "
                         "of recurrent modules); convert back with matchbox.nn.batch_major(x) "
                         "first")

    def __init__(self, batch: Any):
        if not isinstance(batch, batch_types()) or batch.dim() != 3:
            raise TypeError(
                "TimeMajorBatch: expected a batch (MaskedBatch, PackedBatch) of examples "
                f"of rank 3 (1, A, F), got {batch!r}"
            )
        self.batch = batch

    @property
    def data(self) -> torch.Tensor:
        """The data of the batch the view holds (batch-major)."""
        return self.batch.data

    @property
    def batch_size(self) -> int:
        return self.batch.batch_size

    def _with_data(self, data: torch.Tensor) -> TimeMajorBatch:
        return TimeMajorBatch(self.batch._with_data(data))

    def dim(self) -> int:
        return 3

    @property
    def ndim(self) -> int:
        return 3

    def size(self, dim: int | None = None) -> Any:
        """``size(1)`` is the batch size; ``size(0)`` raises if dimension 0 is dynamic."""
        if dim is None:
            return torch.Size(self.size(i) for i in range(3))
        i = normalize_dim(dim, 3, "TimeMajorBatch.size")
        if i == 0:
            if self.batch.dims[0]:
                raise ValueError(
                    "TimeMajorBatch.size(0): dimension 0 is the time, which differs between "
                    "examples; use batch_major(x) and maxsize(1) for the padded length"
                    f"{why_size_was_asked(0, 'TimeMajorBatch')}"
                )
            return self.batch.size(1)
        # The batch size as torch's recurrent modules read it (see batch_size_as_asked).
        return batch_size_as_asked(int(self.batch.size(0))) if i == 1 else self.batch.size(2)

    @property
    def shape(self) -> Any:
        """``torch.Size`` when every size is known; otherwise indexable like it."""
        if self.batch.dims[0]:
            return _ViewShape(self)
        return self.size()

    def __len__(self) -> int:
        return self.size(0)

    def __iter__(self) -> Iterator[Any]:
        # Per example, iterating over (A, 1, F) gives its A rows (1, F).
        return iter(self.unbind(0))

    def examples(self) -> Iterator[torch.Tensor]:
        """Each example as a tensor ``(A, 1, F)``: what the loop has (views of the data)."""
        return (example.transpose(0, 1) for example in self.batch.examples())

    def __repr__(self) -> str:
        return f"TimeMajorBatch({self.batch!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TimeMajorBatch, (self.batch,))

    # PyTorch's tools see the batch the view holds (a pytree node and a dataclass
    # field; its constructor's one argument).
    _tree_fields = ("batch",)
    _tree_children = ("batch",)

    def _tree_flatten(self) -> tuple[list[Any], None]:
        return [self.batch], None

    @staticmethod
    def _tree_unflatten(children: list[Any], context: None) -> TimeMajorBatch:
        return TimeMajorBatch(children[0])


class _ViewShape(BatchShape):
    """``shape`` of a view whose dimension 0 is dynamic (``shape[0]`` raises, as ``size(0)``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        sizes = ["*" if i == 0 else str(self._batch.size(i)) for i in range(3)]
        return f"TimeMajorShape({', '.join(sizes)})  # * = dynamic"


def time_major_view(op: str, batch: Any) -> TimeMajorBatch:
    """Per example ``(1, A, F) -> (A, 1, F)``: the view of ``batch`` (examples ``(1, A, F)``).

    Core asks this of ``batch.transpose(0, 1)``, ``x.unsqueeze(0)`` and
    ``torch.stack(xs)`` (modules built with ``batch_first=True`` write the
    transpose inside their own forward), passing the batch with dimension 0
    and 1 of the result swapped.
    """
    if batch.dim() != 3:
        raise ValueError(
            f"{op}: dimension 0 is the batch dimension of each example; moving it to "
            "position 1 gives a time-major view only for results of rank 3 ((1, length, "
            f"features) seen as (length, 1, features)), and this result would have rank "
            f"{batch.dim()}"
        )
    return TimeMajorBatch(batch)


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
    d = normalize_dim(dim, 3, op)
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
    a, b = normalize_dim(dim0, 3, op), normalize_dim(dim1, 3, op)
    order[a], order[b] = order[b], order[a]
    return _permuted(f"{op}({dim0}, {dim1})", input, order)


@implements(torch.permute, torch.Tensor.permute, family="time_major_shape",
                      batch_type="TimeMajorBatch")
def permute(func, input, *order):
    op = op_name(func)
    order = [normalize_dim(d, 3, op) for d in _sizes(order)]
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
    if items.count(Ellipsis) > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis")
    if Ellipsis in items:
        at = items.index(Ellipsis)
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
    if normalize_dim(dim, 3, op) != 0:
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
    wanted = {normalize_dim(d, 3, op) for d in (dim if isinstance(dim, (tuple, list))
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


provide_batch_dim_view("MaskedBatch", time_major_view)


def time_major(x: Any) -> Any:
    """``x.transpose(0, 1)`` for a tensor; a ``TimeMajorBatch`` view for a batch."""
    if isinstance(x, batch_types()):
        return TimeMajorBatch(x)
    if isinstance(x, torch.Tensor):
        return x.transpose(0, 1)
    raise TypeError(f"time_major: expected a tensor or a MaskedBatch (or another batch type), "
                    f"got {type(x).__name__}")


def batch_major(x: Any) -> Any:
    """The inverse of :func:`time_major`."""
    if isinstance(x, TimeMajorBatch):
        return x.batch
    if isinstance(x, torch.Tensor):
        return x.transpose(0, 1)
    raise TypeError(
        f"batch_major: expected a tensor or a TimeMajorBatch, got {type(x).__name__}"
    )
