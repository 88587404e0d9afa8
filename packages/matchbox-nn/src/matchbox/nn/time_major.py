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

from collections.abc import Iterator
from typing import Any

import torch

from matchbox.extending import (
    Batch,
    BatchShape,
    batch_size_as_asked,
    batch_types,
    normalize_dim,
    provide_batch_dim_view,
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
        i = normalize_dim("TimeMajorBatch.size", dim, 3)
        if i == 0:
            if self.batch.dims[0]:
                raise ValueError(
                    "TimeMajorBatch.size(0): dimension 0 is the time, which differs between "
                    "examples; use batch_major(x) and maxsize(1) for the padded length"
                    f"{why_size_was_asked('TimeMajorBatch', 0)}"
                )
            return self.batch.size(1)
        # The batch size as torch's recurrent modules read it (see batch_size_as_asked).
        # (Not int(): a symbolic batch size would be fixed in a graph matchbox.compile captures.)
        return batch_size_as_asked(self.batch.size(0)) if i == 1 else self.batch.size(2)

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

    @staticmethod
    def held_example(value: torch.Tensor) -> torch.Tensor | None:
        """A plain ``(A, 1, F)`` example of the view (an ``h0`` shared by every example)
        as an example ``(1, A, F)`` of the batch it holds; ``None`` for other shapes
        (``matchbox._batch_views.BATCH_VIEWS``)."""
        if value.dim() != 3 or value.size(1) != 1:
            return None
        return value.transpose(0, 1)

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

    # == compares each example's (A, 1, F): the batch's (1, A, F), dimensions 0 and 1 swapped.
    def _example_dims(self) -> list[Any]:
        dims = BatchShape(self._batch.batch)._example_dims()
        return [dims[_TO_BATCH[i]] for i in range(3)]

    def _dynamic_size(self, i: int) -> Any:
        return BatchShape(self._batch.batch)._dynamic_size(_TO_BATCH[i])

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
            f"{batch.dim()}. Any other example layout cannot be held: a batch keeps each "
            f"example's size-one dimension 0 first. Keep it there and move the other "
            f"dimensions (x.transpose(1, 2), x.unsqueeze(-1) for a column), or stack "
            f"along dimension 1 (torch.stack(xs, 1))"
        )
    return TimeMajorBatch(batch)


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
