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
| ``items.append(v)``,         | ``v`` is appended, padding for the other examples,   |
| ``items.extend(vs)``         | recording which examples have it (``sequences``)     |
| ``d.update(...)``            | each key as ``d[k] = v``                             |
| ``d[k]``, ``d[k] += v`` of a | ``NotImplementedError`` where the read adds the key |
| ``defaultdict``              | (a present key: as a dict's)                         |
| ``del items[i]``, ``d[k]``   | ``NotImplementedError``, as ``items.pop()``          |
| ``items.pop()`` and the      | ``NotImplementedError``: a Python list or dict is    |
| other list/dict writes       | shared by every example                              |
| ``x.add_(v)``                | core's: the in-place op on a copy, written back where |
|                              | running (also when a plain helper or module does it) |

An in-place update of a batch reaches the object itself: inside a region a
local batch is seen through a gradient guard (``masks.guard``), a new batch
that records the one it stands for, and the update is written through to it.
A batch stored under a mask as a copy (a dict item or an attribute merged with
the old one, a list item over a guard's data) is recorded (``copies``): an
in-place update of it that the copy would miss is refused.

With no batch mask (``None``) each is exactly the Python statement.
"""

from __future__ import annotations

import collections
import operator
from typing import Any

import torch

from matchbox.control.runtime import dict_keys
from matchbox.control.runtime.copies import stored
from matchbox.control.runtime.copies import watch as watch_write
from matchbox.control.runtime.iterables import DEQUE_ADDS, deque_add
from matchbox.control.runtime.select import Undefined, select
from matchbox.control.runtime.sequences import (
    get_item,
    has_records,
    per_example_item,
    refuse_an_added_key,
    refuse_positional_write,
)
from matchbox.extending import write_running
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
    new = select(mask, value, old, f"attribute {name}")
    stored(mask, value, new, f"the attribute .{name}", old)
    setattr(obj, name, new)


def set_item(mask: Any, obj: Any, index: Any, value: Any, local: str | None = None) -> Any:
    """``obj[index] = value`` for the running examples; returns the object written.

    A batch written inside a region may be a gradient guard of the batch the
    name held before: the write reaches that batch too (as ``_update_running``).
    A plain tensor held by the local variable ``local`` becomes a batch (one
    copy for each example), which the variable then holds: the write differs
    between examples.
    """
    if type(obj) is list:
        refuse_positional_write(obj, "item assignment")
    if mask is None:
        obj = _copied_if_written_per_example(obj, index, value, local, "= ...")
        obj[index] = value
        if isinstance(obj, dict):
            dict_keys.written(None, obj, index, False)  # every example has it now
        return obj
    if isinstance(obj, torch.Tensor) and type(obj) is not MaskedBatch:
        obj = _per_example_copy(mask.size(0), mask.device, obj,
                                f"{local or '...'}[...] = ...", local)
    if type(obj) is MaskedBatch:
        # Core writes a batch under the execution mask (this region's) for the running
        # examples only, and through to the batch it guards (matchbox._masked_writes).
        obj[index] = value
        return obj
    added = isinstance(obj, dict) and _absent(obj, index)  # (before a defaultdict's read)
    try:
        old = obj[index]
    except (KeyError, IndexError):
        old = Undefined(f"[{index!r}]")
    new = select(mask, value, old, f"item [{index!r}]")
    stored(mask, value, new, f"the item [{index!r}]", old)
    obj[index] = new
    if isinstance(obj, dict):  # a key only the running examples add (``dict_keys``)
        dict_keys.written(mask, obj, index, added)
    return obj


def _absent(obj: dict[Any, Any], key: Any) -> bool:
    try:
        return key not in obj
    except TypeError:  # unhashable: Python's own error follows
        return False


def delete_item(mask: Any, obj: Any, index: Any) -> None:
    """``del obj[index]``: refused on a list whose items only some examples have
    (positions differ between examples), and on a list or dict under a per-example
    condition (shared by every example, the others would lose the item too)."""
    if type(obj) is list:
        refuse_positional_write(obj, "del items[i]")
    if mask is not None and isinstance(obj, SHARED_CONTAINERS):
        type_name = type(obj).__name__
        raise NotImplementedError(
            f"@batch: del {type_name}[...] under a per-example condition: a Python {type_name} is "
            "shared by every example, so the item would go for the examples that do not "
            "run this code too. Build a new one (items = items[:-1]), whose value is "
            "merged per example, or delete where every example runs it")
    del obj[index]


def _copied_if_written_per_example(obj: Any, index: Any, value: Any, local: str | None,
                                   what: str) -> Any:
    """With no batch mask, ``local[index] = value`` (or ``op= value``) where the value or
    the index is a batch: the write differs between examples, so the plain tensor the
    local variable holds becomes a batch of copies, as under a mask.  A plain tensor
    reached otherwise is left to core, which refuses the batch argument."""
    if local is None or not isinstance(obj, torch.Tensor) or type(obj) is MaskedBatch:
        return obj
    batch = next((v for v in (value, *(index if type(index) is tuple else (index,)))
                  if type(v) is MaskedBatch), None)
    if batch is None:
        return obj
    return _per_example_copy(batch.data.size(0), batch.device, obj, f"{local}[...] {what}",
                             local, "with a batch value or index")


def _per_example_copy(batch: int, device: torch.device, tensor: torch.Tensor, what: str,
                      local: str | None, why: str = "under a per-example condition"
                      ) -> MaskedBatch:
    """A plain tensor written under a per-example condition (or with a batch value or
    index), as a batch of copies."""
    if local is None:
        raise NotImplementedError(
            f"@batch: {what} writes into a plain tensor of shape {tuple(tensor.shape)} under "
            "a per-example condition: it would change for every example, also for those "
            "that do not run this code. Hold the tensor in a local variable (which then "
            "becomes a batch, one copy for each example), or make it a batch")
    if tensor.dim() and tensor.size(0) != 1:
        shape = tuple(tensor.shape)
        raise ValueError(
            f"@batch: {what} writes into the plain tensor '{local}' of shape {shape} {why}, "
            "so it differs between examples and becomes a batch, "
            "whose examples need a leading dimension of size one: create it as "
            f"torch.zeros(1, {', '.join(map(str, shape))}) and index past that dimension "
            f"({local}[:, i] = v), or compute it without item assignment (torch.where)")
    data = tensor.to(device).expand(batch, *tensor.shape[1:]).clone()
    return MaskedBatch._make(data, None, (False,) * max(tensor.dim() - 1, 0))


def aug_assign(mask: Any, op: str, target: Any, value: Any, name: str) -> Any:
    """``target op= value``; returns what the target name is bound to afterwards.

    Under a batch mask a plain tensor is not updated in place (every example
    would see it): the name gets the new value, merged per example; ``items +=
    values`` on a list extends it as ``extend`` does.
    """
    inplace, out_of_place = _OPERATORS[op]
    if mask is None:
        return inplace(target, value)
    if type(target) is MaskedBatch:
        # The out-of-place op may save ``target`` for its derivative (``x[:, 0] *= s``:
        # ``s``'s gradient reads the old ``x[:, 0]``), which the write below changes in
        # place: it reads a copy, as the loop's in-place op keeps the original.
        source = target.clone() if _records_grad(target, value) else target
        _update_running(mask, target, out_of_place(source, value), name)
        return target
    if isinstance(target, torch.Tensor):
        return select(mask, out_of_place(target, value), target, name)
    if type(target) is list and op == "+=":
        call_method(mask, target, "extend", value)
        return target
    if isinstance(target, SHARED_CONTAINERS):  # s |= {v}, d |= {k: v}, queue += [v]
        _refuse_shared_write(target, f" {op} ...")
    return inplace(target, value)


def aug_attr(mask: Any, op: str, obj: Any, name: str, value: Any) -> None:
    """``obj.name op= value``: get, update, set, as Python does."""
    set_attr(mask, obj, name, aug_assign(mask, op, getattr(obj, name), value, name))


def aug_item(mask: Any, op: str, obj: Any, index: Any, value: Any,
             local: str | None = None) -> Any:
    """``obj[index] op= value``; returns the object written (see ``set_item``)."""
    if mask is None:
        obj = _copied_if_written_per_example(obj, index, value, local, f"{op} ...")
    elif isinstance(obj, collections.defaultdict) and index not in obj:
        refuse_an_added_key(mask, obj, index)  # the read adds it (d[k] += 1)
    return set_item(mask, obj, index, aug_assign(mask, op, obj[index], value, f"[{index!r}]"),
                    local)


def call_method(mask: Any, obj: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """A statement ``obj.name(...)`` that may change ``obj`` in place."""
    if isinstance(obj, type) and issubclass(obj, SHARED_CONTAINERS) and args and isinstance(
            args[0], obj):  # list.append(items, v), set.add(seen, v)
        return call_method(mask, args[0], name, *args[1:], **kwargs)
    method = getattr(obj, name)
    if mask is None:
        if type(obj) is list and name == "reverse" and not args and has_records(obj):
            obj[:] = get_item(obj, slice(None, None, -1))  # each example's own, reversed
            return None
        if type(obj) is list and name in _POSITIONAL:
            refuse_positional_write(obj, f"list.{name}()")
        if isinstance(obj, collections.deque) and name in DEQUE_ADDS and not kwargs:
            args = deque_add(obj, name, args)  # an item only some examples have: refused
        return method(*args, **kwargs)
    if type(obj) is list and name in ("append", "extend") and len(args) == 1 and not kwargs:
        values = [args[0]] if name == "append" else list(args[0])
        obj.extend(per_example_item(mask, v, f"the {name}ed value") for v in values)
        return None
    if type(obj) is dict and name == "update":
        for key, value in dict(*args, **kwargs).items():
            set_item(mask, obj, key, value)
        return None
    if name in CONTAINER_WRITES and isinstance(obj, SHARED_CONTAINERS):
        # A set, a deque, a list or dict subclass (Counter, OrderedDict): none keeps which
        # examples wrote what (a user trial found sets and deques written for all).
        _refuse_shared_write(obj, f".{name}()")
    # An in-place method of a batch (x.add_(v)) is core's: under the execution mask
    # (this region's) it changes the running examples only (matchbox._masked_writes).
    if (isinstance(obj, torch.Tensor) and name.endswith("_") and not name.startswith("_")
            and name not in _NOT_VALUE_WRITES):
        raise NotImplementedError(
            f"@batch: Tensor.{name}() on a plain tensor under a per-example condition would "
            "change it for every example, also for those that do not run this code; write "
            f"it out of place (t = t.{name[:-1]}(...)), which the examples that run it take, "
            "or make the tensor a batch")
    return method(*args, **kwargs)


def _refuse_shared_write(obj: Any, what: str) -> None:
    kind = type(obj).__name__
    raise NotImplementedError(
        f"@batch: {kind}{what} under a per-example condition: a Python {kind} is shared by "
        "every example, so it would change for the examples that do not run this code too; "
        "per example, only a list's append/extend/+= and a dict's item writes and update are "
        "supported. Call it where every example runs it, or keep the per-example values in a "
        "list (items.append) or a tensor")


# In-place tensor methods that change no value (flags, storage).
_NOT_VALUE_WRITES = frozenset({"requires_grad_", "share_memory_", "detach_", "retain_grad_"})


# List methods that write by position: wrong on a list whose items only some
# examples have (see ``sequences``), where positions differ between examples.
_POSITIONAL = frozenset({"insert", "pop", "remove", "sort", "reverse"})

#: Methods that change a list or dict in place.  The rewrite routes every call of one
#: through :func:`call_method` (on other objects they are plain calls), which does
#: append, extend and dict update for the running examples and refuses the rest under a
#: per-example condition.
LIST_AND_DICT_WRITES = frozenset({"append", "extend", "update", "insert", "pop", "remove",
                                  "clear", "sort", "reverse", "setdefault", "popitem"})

#: ... and those of sets and deques too.  These the rewriting leaves to
#: ``runtime.calls.call``: a call ``obj.add(v)`` hands over ``obj``'s bound method, which
#: it recognises; on other objects (``meter.add(items)``, ``x.add(y)``) they are any call,
#: whose lists ``call`` checks.
CONTAINER_WRITES = LIST_AND_DICT_WRITES | {
    "add", "discard", "difference_update", "intersection_update",
    "symmetric_difference_update",  # set
    "appendleft", "extendleft", "popleft", "rotate",  # collections.deque
    "move_to_end",  # collections.OrderedDict
}

#: The Python containers whose writes :data:`CONTAINER_WRITES` names (subclasses too).
SHARED_CONTAINERS = (list, dict, set, collections.deque)

#: Their exact types, and those of the standard subclasses, for a lookup by ``type(x)``
#: (``runtime.calls``, on every call): ``od.move_to_end``'s owner, a ``Counter``.
SHARED_TYPES = frozenset({*SHARED_CONTAINERS, collections.OrderedDict,
                          collections.defaultdict, collections.Counter})


def _update_running(mask: Any, target: MaskedBatch, new: MaskedBatch, name: str) -> None:
    """Write ``new`` into ``target`` for the running examples, in place.

    Inside a region ``target`` may be a gradient guard of the batch the name
    held before (``masks.guard``): the update is written through to that batch,
    and to the one it guards in turn, as Python writes into the object itself
    (core's ``write_running``, which in-place ops under a mask use too).  A new
    value of another padded size (``acc += v``, ``v`` padded further) is merged
    as a variable is, and the batch takes the merged value.
    """
    if (type(new) is MaskedBatch and new.dims == target.dims
            and new.data.shape == target.data.shape):
        write_running(target, new, mask, f"'{name}'")
        return
    watch_write(target, mask, f"'{name}'")
    while target is not None:
        _write_back(target, select(mask, new, target, name), name)
        target = getattr(target, "_guards", None)


def _write_back(target: MaskedBatch, result: MaskedBatch, name: str) -> None:
    """Make ``target`` hold ``result`` (an in-place update every alias sees)."""
    if result.dims != target.dims:
        raise ValueError(f"@batch: the in-place update of '{name}' would change its dims "
                         f"from {target.dims} to {result.dims}")
    target.data = result.data
    target._mask = result._mask


def _records_grad(target: MaskedBatch, value: Any) -> bool:
    """Whether ``target op value`` records a gradient (so may save ``target``)."""
    return torch.is_grad_enabled() and (target.requires_grad or (
        isinstance(value, (torch.Tensor, MaskedBatch)) and value.requires_grad))
