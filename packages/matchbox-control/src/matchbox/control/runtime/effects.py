"""Writes that outlive a region: attributes, subscripts, in-place updates, appends.

A local variable is merged when its region ends (see ``select``); an object
that other code can see (``self.h``, ``state[i]``, a list, a batch changed in
place) is written at once, and under a mask only for the examples that run:

| statement                    | under a batch mask                                   |
|------------------------------|------------------------------------------------------|
| ``obj.attr = v``             | ``obj.attr = where(mask, v, obj.attr)``              |
| ``obj[i] = v``               | ``obj[i] = where(mask, v, obj[i])``                  |
| ``x += v`` (and ``obj.a``,   | a batch is updated in place for the running examples; |
| ``obj[i]``)                  | an immutable value is rebound (and merged)           |
| ``items.append(v)``          | ``v`` is appended, padding for the other examples    |
| ``x.add_(v)`` (a statement)  | the in-place op on a copy, written back where running |

With no batch mask (``None``) each is exactly the Python statement.
"""

from __future__ import annotations

import operator
from typing import Any

from matchbox.control.runtime.select import Undefined, only_active, select
from matchbox.masked_batch import MaskedBatch

_MISSING = object()

# An augmented assignment's operator: (in-place form, out-of-place form).
_OPERATORS = {
    "+=": (operator.iadd, operator.add), "-=": (operator.isub, operator.sub),
    "*=": (operator.imul, operator.mul), "/=": (operator.itruediv, operator.truediv),
    "//=": (operator.ifloordiv, operator.floordiv), "%=": (operator.imod, operator.mod),
    "**=": (operator.ipow, operator.pow), "@=": (operator.imatmul, operator.matmul),
    "&=": (operator.iand, operator.and_), "|=": (operator.ior, operator.or_),
    "^=": (operator.ixor, operator.xor), "<<=": (operator.ilshift, operator.lshift),
    ">>=": (operator.irshift, operator.rshift),
}


def set_attr(mask: Any, obj: Any, name: str, value: Any) -> None:
    """``obj.name = value`` for the running examples."""
    if mask is None:
        setattr(obj, name, value)
        return
    old = getattr(obj, name, _MISSING)
    old = Undefined(name) if old is _MISSING else old
    setattr(obj, name, select(mask, value, old, f"attribute {name}"))


def set_item(mask: Any, obj: Any, index: Any, value: Any) -> None:
    """``obj[index] = value`` for the running examples."""
    if mask is None:
        obj[index] = value
        return
    try:
        old = obj[index]
    except (KeyError, IndexError):
        old = Undefined(f"[{index!r}]")
    obj[index] = select(mask, value, old, f"item [{index!r}]")


def aug_assign(mask: Any, op: str, target: Any, value: Any, name: str) -> Any:
    """``target op= value``; returns what the target name is bound to afterwards."""
    inplace, out_of_place = _OPERATORS[op]
    if mask is None or type(target) is not MaskedBatch:
        return inplace(target, value)
    result = select(mask, out_of_place(target, value), target, name)
    _write_back(target, result, name)
    return target


def aug_attr(mask: Any, op: str, obj: Any, name: str, value: Any) -> None:
    """``obj.name op= value``: get, update, set, as Python does."""
    set_attr(mask, obj, name, aug_assign(mask, op, getattr(obj, name), value, name))


def aug_item(mask: Any, op: str, obj: Any, index: Any, value: Any) -> None:
    """``obj[index] op= value``."""
    set_item(mask, obj, index, aug_assign(mask, op, obj[index], value, f"[{index!r}]"))


def call_method(mask: Any, obj: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """A statement ``obj.name(...)`` that may change ``obj`` in place."""
    method = getattr(obj, name)
    if mask is None:
        return method(*args, **kwargs)
    if name == "append" and type(obj) is list and len(args) == 1 and not kwargs:
        obj.append(only_active(mask, args[0], "the appended value"))
        return None
    if type(obj) is MaskedBatch and name.endswith("_") and not name.startswith("_"):
        copy = MaskedBatch._make(obj.data.clone(), obj._mask, obj.dims)
        getattr(copy, name)(*args, **kwargs)
        _write_back(obj, select(mask, copy, obj, name), name)
        return obj
    return method(*args, **kwargs)


def _write_back(target: MaskedBatch, result: MaskedBatch, name: str) -> None:
    """Make ``target`` hold ``result`` (an in-place update every alias sees)."""
    if result.dims != target.dims:
        raise ValueError(f"@batch: the in-place update of '{name}' would change its dims "
                         f"from {target.dims} to {result.dims}")
    target.data = result.data
    target._mask = result._mask
