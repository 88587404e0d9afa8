"""Pointwise ops on a ``PackedBatch``: core's family, found by core's rule, one handler.

The family is matchbox-core's (``matchbox.ops.pointwise.pointwise_ops()``:
every op PyTorch tags ``pointwise``, operators and in-place variants
included), registered here for ``PackedBatch`` with one handler.

Semantics: the op runs once on the packed rows (``data``): there is no
padding, so nothing is masked and no work is spent on padding.

- Batch arguments must hold examples of the same lengths (else the loop would
  fail too: ``ValueError`` naming the example); one whose rows are in another
  order (equal lengths, another tie order) is brought into the first batch
  argument's order.  They must have the same rank: a ``PackedBatch`` keeps its
  packed dimension in position 1.
- A plain tensor is the same for every example and broadcasts against each
  example ``(1, T_e, *S)`` as in the loop: over the static dimensions as it
  is; along the packed dimension with size 1, or spanning the longest example
  (``x.maxsize(1)`` steps, e.g. positional encodings), in which case each row
  takes its own step's entry.
- In-place variants write into the first argument's data and return it.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox.extending import (
    check_inplace_derivative,
    check_plain_batch_dim,
    implements,
    lengths_aware,
    op_name,
    pointwise_ops,
    refuse_out,
    writes_first_argument,
)
from matchbox.nn.extending import relayout
from matchbox.packed.packed_batch import PackedBatch

# func -> whether it writes into its first argument; computed once per op (the hot path).
_INPLACE: dict[Any, bool] = {}


def pointwise(func: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a pointwise op once on the packed rows."""
    if "out" in kwargs:
        refuse_out(func, kwargs.pop("out"))
    first = _first_batch(args, kwargs)
    values = [row_argument(func, a, first) for a in args]
    named = {k: row_argument(func, v, first) for k, v in kwargs.items()}
    inplace = _INPLACE.get(func)
    if inplace is None:
        inplace = _INPLACE.setdefault(func, writes_first_argument(func))
    if inplace or kwargs.get("inplace"):
        target = args[0] if args else kwargs.get("input")
        if not isinstance(target, PackedBatch):
            raise ValueError(
                f"{name(func)}: an in-place op on a plain tensor cannot take a batch argument "
                "(the tensor would have to hold every example); use the out-of-place op"
            )
        check_inplace_derivative(func, [*values, *named.values()])
        func(*values, **named)
        return target
    return _wrap(func(*values, **named), first)


def name(op: Any) -> str:
    """The op's name for a message (ops are passed around as callables: naming costs time)."""
    return op_name(op)


def row_argument(op: Any, value: Any, first: PackedBatch) -> Any:
    """``value`` as an argument of the op on ``first.data`` (see the module docstring).

    ``op`` is the op or its name, for error messages.
    """
    if isinstance(value, PackedBatch):
        if value is first or value.layout is first.layout:
            return value.data
        if value.dim() != first.dim():
            raise ValueError(
                f"{name(op)}: batch arguments have examples of rank {first.dim()} and "
                f"{value.dim()}; a PackedBatch keeps its packed dimension in position 1, so they "
                "must have the same rank"
            )
        check_same_lengths(op, first, value)
        return relayout(value.data, value.layout, first.layout)
    if isinstance(value, torch.Tensor):
        return plain_rows(op, value, first)
    return value


def check_same_lengths(op: Any, a: PackedBatch, b: PackedBatch) -> None:
    """Raise, as the loop would, if two batches' examples differ in length."""
    la, lb = a.layout.lengths, b.layout.lengths
    if la.numel() != lb.numel():
        raise ValueError(f"{name(op)}: batch arguments have different batch sizes "
                         f"({la.numel()} and {lb.numel()})")
    differ = (la != lb).nonzero()
    if differ.numel():
        j = int(differ[0])
        raise ValueError(
            f"{name(op)}: example {j} has length {int(la[j])} in one argument and "
            f"{int(lb[j])} in another along the packed dimension 1; the examples would not "
            "combine in a loop either"
        )


def plain_rows(op: Any, tensor: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """A plain tensor shared by every example, made to broadcast against ``batch.data``."""
    rank = batch.dim()
    if tensor.dim() > rank:
        raise ValueError(
            f"{name(op)}: a plain tensor argument has rank {tensor.dim()}, more than the "
            f"examples' rank {rank}; it would move the packed dimension out of position 1"
        )
    if tensor.dim() == rank:
        # Core's rule (one row, or one expanded to the batch size; else refused with the
        # hint of what to build instead), shared by every batch type.
        (tensor,) = check_plain_batch_dim(name(op), [tensor], rank, batch.batch_size)
        tensor = tensor[0]
    if tensor.dim() == rank - 1:  # it spans the packed dimension
        steps = tensor.size(0)
        if steps == 1:
            return tensor[0]
        longest = batch.layout.max_length
        if steps != longest:
            raise ValueError(
                f"{name(op)}: a plain tensor argument has size {steps} in dimension 1, the "
                "packed dimension; a tensor shared by all examples can broadcast (size 1) along "
                f"it or span the longest example ({longest} steps, e.g. positional encodings "
                "sliced with x.maxsize(1))"
            )
        return tensor.index_select(0, batch.layout.row_steps)
    return tensor


def _first_batch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> PackedBatch:
    for value in (*args, *kwargs.values()):
        if isinstance(value, PackedBatch):
            return value
    raise TypeError("no PackedBatch argument")  # unreachable through dispatch


def _wrap(result: Any, first: PackedBatch) -> Any:
    if isinstance(result, torch.Tensor):
        return PackedBatch._make(result, first.layout)
    if isinstance(result, tuple):
        return type(result)(_wrap(r, first) for r in result)
    return result


def _fast(func: Any) -> Any:
    """The fast path of a Tensor method of the family (see matchbox-core's
    ``matchbox._methods``): ``x.tanh()``, ``x * 2``, ``x + y`` of one layout inlined;
    ``None`` for every other call, which goes through the dispatch (which applies the
    mixing rule)."""
    if writes_first_argument(func):
        return None
    make = PackedBatch._make

    def fast(func: Any, self: PackedBatch, args: tuple[Any, ...]) -> Any:
        if not args:
            return make(func(self.data), self.layout)
        if len(args) == 1:
            other = args[0]
            if isinstance(other, (int, float, bool)):
                return make(func(self.data, other), self.layout)
            if type(other) is PackedBatch and other.layout is self.layout:
                return make(func(self.data, other.data), self.layout)
        return None

    return fast


# A PackedBatch has no mask, so no lengths to lose (and its methods skip that check).
implements(*pointwise_ops(), family="pointwise", batch_type="PackedBatch", fast_path=_fast)(
    lengths_aware(pointwise))
