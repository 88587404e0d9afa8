"""Time-major views, for recurrent modules built with ``batch_first=False``.

A ``MaskedBatch`` (or a ``PackedBatch``) is batch-major: dimension 0 is the
batch, and each example is ``(1, T, F)``.  An ``nn.RNN``/``nn.LSTM``/``nn.GRU`` built with
``batch_first=False`` reads dimension 1 of its input as the batch, so per-example
code written for it transposes first: ``lstm(x.transpose(0, 1))`` on a
``(T, 1, F)`` tensor.  A batch cannot move its batch dimension, so the same
code is written with two functions that mean exactly that on a tensor:

```python
out, h = lstm(time_major(x))   # tensor: x.transpose(0, 1); batch: a time-major view
out = batch_major(out)         # tensor: out.transpose(0, 1); view: its MaskedBatch
```

A ``TimeMajorBatch`` answers what the module asks before its ``_VF`` call
(``dim()``, ``size(1)`` = the batch size, ``size(-1)``, ``dtype``,
``device``) and routes the recurrent ops through the one registry (batch type
``"TimeMajorBatch"``); anything else says to convert back with ``batch_major``.
The module's output comes back as a ``TimeMajorBatch`` of the output batch, and
its final states are plain ``(L*D, B, H)`` tensors, as with ``batch_first=True``.

Modules built with ``batch_first=False`` for attention take the same view:
``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` /
``nn.TransformerDecoderLayer`` (``layer(time_major(x))``).  Besides attention,
those layers use ops that act on each position alone (pointwise ops,
``linear``, ``layer_norm``, ``dropout``): they commute with swapping the time
and batch dimensions, so on a view they run on its batch and give a view
back.  A plain tensor argument of such an op is time-major too, ``(T, 1, F)``,
and is transposed with the view.  Every other op asks to convert back with
``batch_major``.  ``batch.transpose(0, 1)`` gives the view too (that is what
``batch_first=True`` modules write inside their forward).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from matchbox import _registry
from matchbox.masked_batch import MaskedBatch, normalize_dim
from matchbox.ops.pointwise import pointwise_ops

__all__ = ["TimeMajorBatch", "time_major", "batch_major"]


class TimeMajorBatch:
    """A batch of ``(1, T, F)`` examples seen as ``(T, batch, F)``.

    The batch is a ``MaskedBatch`` or any other registered batch type
    (matchbox-packed's ``PackedBatch``): the recurrent ops run it through its
    own type's handler.
    """

    __slots__ = ("batch",)

    def __init__(self, batch: Any):
        if not isinstance(batch, _registry.batch_types()) or batch.dim() != 3:
            raise TypeError(
                "TimeMajorBatch: expected a batch (MaskedBatch, PackedBatch) of examples "
                f"(1, length, features), got {batch!r}"
            )
        self.batch = batch

    @property
    def dtype(self) -> torch.dtype:
        return self.batch.dtype

    @property
    def device(self) -> torch.device:
        return self.batch.device

    @property
    def requires_grad(self) -> bool:
        return self.batch.requires_grad

    def dim(self) -> int:
        return 3

    def size(self, dim: int | None = None) -> Any:
        """``size(1)`` is the batch size, ``size(2)`` the features; the time is dynamic."""
        if dim is None:
            return tuple(self.size(i) for i in range(3))
        i = normalize_dim(dim, 3, "TimeMajorBatch.size")
        if i == 0:
            if self.batch.dims[0]:
                raise ValueError(
                    "TimeMajorBatch.size(0): dimension 0 is the time, which differs between "
                    "examples; use batch_major(x) and maxsize(1) for the padded length"
                )
            return self.batch.size(1)
        return self.batch.size(0) if i == 1 else self.batch.size(2)

    @property
    def is_nested(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"TimeMajorBatch({self.batch!r})"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001
        handler = _registry.lookup(func, "TimeMajorBatch")
        if handler is None:
            raise NotImplementedError(
                f"{_registry.op_name(func)} is not implemented for TimeMajorBatch (a "
                "time-major view, for batch_first=False modules); convert back with "
                "matchbox.nn.batch_major(x) first"
            )
        return handler(func, *args, **(kwargs or {}))


@_registry.implements(torch.transpose, torch.Tensor.transpose, torch.swapaxes,
                      torch.Tensor.swapaxes, torch.swapdims, torch.Tensor.swapdims,
                      family="time_major", batch_type="TimeMajorBatch")
def transpose(func, input, dim0, dim1):
    """``transpose(0, 1)`` of the time-major view: the batch-major ``MaskedBatch`` again."""
    op = _registry.op_name(func)
    if {normalize_dim(dim0, 3, op), normalize_dim(dim1, 3, op)} != {0, 1}:
        raise ValueError(
            f"{op}({dim0}, {dim1}): a time-major view (T, batch, F) supports only "
            "transpose(0, 1), which gives the MaskedBatch back; convert with "
            "matchbox.nn.batch_major(x) first"
        )
    return input.batch


def time_major_view(op: str, batch: MaskedBatch) -> TimeMajorBatch:
    """``batch.transpose(0, 1)``: per example ``(1, T, F) -> (T, 1, F)``, a time-major view.

    Modules built with ``batch_first=True`` write this transpose inside their
    own forward (``nn.MultiheadAttention``) before calling a time-major
    functional; the view carries the batch to that functional's handler.
    """
    if batch.dim() != 3:
        raise ValueError(
            f"{op}(0, 1): swapping dimension 0 (each example's batch dimension) with "
            "dimension 1 gives a time-major view only for examples of rank 3 "
            f"(1, length, features); these examples have rank {batch.dim()}"
        )
    return TimeMajorBatch(batch)


def _batch_major_argument(op: str, x: Any) -> Any:
    if isinstance(x, TimeMajorBatch):
        return x.batch
    if isinstance(x, _registry.batch_types()):
        raise TypeError(f"{op}: cannot combine a time-major view with a batch-major "
                        f"{type(x).__name__}; convert one of them (time_major / batch_major)")
    if isinstance(x, torch.Tensor) and x.dim() == 3:
        return x.transpose(0, 1)  # time-major (T, 1, F), like the view
    if isinstance(x, torch.Tensor) and x.dim() == 2 and x.size(0) != 1:
        raise ValueError(
            f"{op}: a plain tensor of shape {tuple(x.shape)} would broadcast its first "
            "dimension against the batch dimension of a time-major example (size 1)"
        )
    return x


def _time_major_result(result: Any) -> Any:
    if isinstance(result, _registry.batch_types()):
        return TimeMajorBatch(result)
    if isinstance(result, tuple):
        return type(result)(_time_major_result(r) for r in result)
    return result


def _on_batches(func: Any, *args: Any, **kwargs: Any) -> Any:
    # The op's handler for the views' batch type (a Tensor method cannot be called on
    # a batch directly).
    batch_type = next(type(a).__name__ for a in (*args, *kwargs.values())
                      if isinstance(a, _registry.batch_types()))
    handler = _registry.lookup(func, batch_type)
    if handler is None:
        raise _registry.unsupported(func, batch_type)
    return _time_major_result(handler(func, *args, **kwargs))


def pointwise_on_view(func, *args, **kwargs):
    """A pointwise op on views: the same op on their batches (arguments transposed alike)."""
    op = _registry.op_name(func)
    args = tuple(_batch_major_argument(op, a) for a in args)
    kwargs = {k: _batch_major_argument(op, v) for k, v in kwargs.items()}
    return _on_batches(func, *args, **kwargs)


def rowwise_on_view(func, input, *args, **kwargs):
    """An op on each feature row with shared parameters (linear, layer_norm, dropout)."""
    return _on_batches(func, input.batch, *args, **kwargs)


_registry.register(pointwise_ops(), pointwise_on_view, family="time_major",
                   batch_type="TimeMajorBatch")
_registry.register([F.linear, F.layer_norm, torch.layer_norm, getattr(F, "rms_norm", None),
                    F.dropout, torch.dropout], rowwise_on_view, family="time_major",
                   batch_type="TimeMajorBatch")


def _install_methods() -> None:
    """Tensor methods for the view's ops (``x + y``, ``x.transpose(0, 1)``).

    The view is not a batch type (it is not registered as a host, so code that
    looks for batches does not take it for one); its methods are installed here.
    """
    for entry in _registry.entries("TimeMajorBatch"):
        for name in _registry.tensor_method_names(entry.func):
            if name not in TimeMajorBatch.__dict__:
                setattr(TimeMajorBatch, name, _method(entry.func, entry.handler, name))


def _method(func: Any, handler: Any, name: str) -> Any:
    def method(self: TimeMajorBatch, *args: Any, **kwargs: Any) -> Any:
        return handler(func, self, *args, **kwargs)

    method.__name__ = name
    method.__qualname__ = f"TimeMajorBatch.{name}"
    return method


_install_methods()
_registry.provide_batch_dim_view("MaskedBatch", time_major_view)


def time_major(x: Any) -> Any:
    """``x.transpose(0, 1)`` for a tensor; a ``TimeMajorBatch`` view for a batch."""
    if isinstance(x, _registry.batch_types()):
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
