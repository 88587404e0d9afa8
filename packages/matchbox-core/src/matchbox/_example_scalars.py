"""What a batch of one value per example (``dims == ()``) stands for in the loop.

Such a batch holds one value per example in ``data`` of shape ``(batch,)``, and the
loop over examples has two different values there:

- a Python number or a 0-d tensor: a ``@batch`` counter (``n = n + 1`` merged per
  example), a ``range`` over per-example counts, ``int(x)`` / ``x.item()`` under
  ``@batch``, ``len`` of a per-example list, ``x.size_as_tensor(d)``, a full reduction
  (``x.sum()``, ``x.argmax()``);
- a tensor of shape ``(1,)``: a reduction over one dimension of a ``(1, T)`` example
  (``s.argmax(1)``, ``s.max(1).indices``), ``x[:, k]`` of a ``(1, K)`` example, the
  examples given to ``fromlist``.

Most ops give the same per-example values for both; indexing does not: ``x[:, i]``
drops the dimension for an int (or 0-d) ``i`` and keeps it (advanced indexing) for a
``(1,)`` tensor.  So every batch records which one it is in its slot ``_scalar``:
``True`` (a number or 0-d), ``False`` (``(1,)``) or ``None`` (not known: ops other
than those below make a new batch with ``None``).  Whoever makes a batch of per-example
numbers marks it (:func:`mark`); pointwise ops, casts and ``@batch``'s merges pass it
on (:func:`combined`); an index that is ``None`` is refused (:func:`ambiguous_index`),
never guessed.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox._op_table import op_name

__all__ = ["ADDITIONS", "POWERS", "SCALAR", "VECTOR", "ambiguous_index", "combined", "mark",
           "reduced_over", "refuse_a_sum_of_booleans", "refuse_python_mismatches"]

# The batch type that records it: ``matchbox.masked_batch`` names it when it is defined
# (it imports this module).
_HOLDER: list[Any] = [None]


def bind_batch_type(cls: type) -> None:
    _HOLDER[0] = cls

SCALAR = True   # a Python number or a 0-d tensor in the loop
VECTOR = False  # a tensor of shape (1,) in the loop


def mark(batch: Any, kind: bool | None) -> Any:
    """``batch`` recorded as ``kind`` (``SCALAR``, ``VECTOR`` or ``None``); returns it."""
    batch._scalar = kind
    return batch


def reduced_over(batch: Any, dim: Any, keepdim: bool = False) -> Any:
    """``batch``, a reduction's result, marked as the loop's: over every dimension
    (``dim`` ``None`` or empty, without ``keepdim``) a 0-d tensor, over the dimensions
    given (an int, or a tuple of them as the user wrote it) one of rank one or more."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        batch._scalar = VECTOR if keepdim else SCALAR
    else:
        batch._scalar = VECTOR
    return batch


def combined(values: Any) -> bool | None:
    """What a pointwise op's result stands for, given its arguments (batches, tensors,
    numbers): a ``(1,)`` tensor if any argument is one (a batch so marked, or a plain
    tensor of rank one or more, which broadcasts the loop's 0-d value up to it), a
    number if every batch argument is one, else not known."""
    kind: bool | None = SCALAR
    holder = _HOLDER[0]
    for value in values:
        if type(value) is holder:  # a MaskedBatch
            if value.dims or value._scalar is VECTOR:
                return VECTOR
            if value._scalar is None:
                kind = None
        elif isinstance(value, torch.Tensor) and value.dim() > 0:
            return VECTOR
    return kind


def ambiguous_index(op: str, d: int) -> NotImplementedError:
    """The error for ``x[..., i]`` along dimension ``d`` with ``i`` a batch of per-example
    ints that may be a Python int (drops the dimension) or a ``(1,)`` tensor (keeps it)."""
    return NotImplementedError(
        f"{op}: the index along dimension {d} is a batch of one int per example that "
        "Matchbox cannot tell apart as a Python int or 0-d tensor (which drops the "
        "dimension) or a tensor of shape (1,) (which keeps it, as advanced indexing): it "
        "came from an op that does not record which one its result is; write "
        f"x.index_select({d}, i) to keep the dimension (the loop's (1,) index), or "
        f"x.index_select({d}, i).squeeze({d}) to drop it (the loop's int index), both of "
        "which mean the same for the loop and the batch"
    )


#: Additions, which Python's booleans and torch's differ on (``True + True``).
ADDITIONS = frozenset({torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__,
                       torch.Tensor.add_, torch.Tensor.__iadd__})


def refuse_a_sum_of_booleans(kind: bool | None, func: Any) -> None:
    """Refuse adding booleans of one value per example (``(n > 1) + (n > 3)`` of a per-example
    count ``n``): the loop's Python ``True + True`` is ``2``, where torch adds booleans as
    *or*, which the batch would silently give.  ``kind``: what the result stands for; only
    one number per example is refused (a boolean tensor of each example, added, is torch's
    in the loop too)."""
    if kind is SCALAR:
        raise TypeError(
            f"{op_name(func)}: adding booleans of one value per example (each a "
            "Python bool in the loop, or a 0-d tensor: a Python bool's sum is an int, "
            "True + True is 2, where torch "
            "adds booleans as 'or'); write int(a) + int(b) (or a.long() + b.long()) for a "
            "count, or a | b for 'or'")


#: Powers, which Python's ints and torch's integer tensors differ on (``2 ** -1``).
POWERS = frozenset({torch.pow, torch.Tensor.pow, torch.Tensor.__pow__, torch.Tensor.__rpow__})


def refuse_python_mismatches(result: Any, func: Any, args: Any) -> None:
    """Refuse a result of one number per example (``result._scalar`` already worked out)
    that the loop's Python numbers would give otherwise, silently: a sum of booleans
    (:func:`refuse_a_sum_of_booleans`), and an integer to a negative integer power (the
    loop's ``2 ** -k`` of a Python int ``k`` is a float, ``0.25``, where torch's integer
    power gives ``0``).  The power reads the exponent's values (one check, only for an
    integer power of per-example numbers)."""
    dtype = result._data.dtype
    if dtype == torch.bool and func in ADDITIONS:
        refuse_a_sum_of_booleans(result._scalar, func)
    elif (func in POWERS and result._scalar is SCALAR and not dtype.is_floating_point
          and not dtype.is_complex and len(args) == 2):
        exponent = args[0] if func is torch.Tensor.__rpow__ else args[1]
        if type(exponent) is _HOLDER[0]:
            negative = exponent._data < 0
            if exponent._mask is not None:
                negative = negative & exponent._mask.reshape(negative.shape)
        elif isinstance(exponent, torch.Tensor) and not exponent.is_floating_point():
            negative = (exponent < 0).reshape(-1).expand(result._data.size(0))
        else:
            return  # a Python int exponent: torch refuses a negative one itself
        from matchbox._capture import fails
        from matchbox._execution import running
        if fails(running(negative.reshape(-1))):
            raise TypeError(
                f"{op_name(func)}: an integer to a negative integer power, one number per "
                "example (a Python int in the loop, whose 2 ** -1 is 0.5, a float), where "
                "torch's integer power gives 0; make the base or the exponent a float "
                "(2.0 ** k, float(b) ** k)")
