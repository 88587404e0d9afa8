"""Python lists whose items only some examples have.

In the loop over examples every example builds its own list.  Under ``@batch``
one list holds the items of every example: an item appended (``append``,
``extend``) or made by a comprehension step under a per-example condition is
padding for the examples that did not make it, and it records which examples
have it (``MaskedBatch._present``, a ``(batch,)`` bool tensor).  Items without
the record belong to every example.  From the records:

| written                    | gives, per example                                    |
|----------------------------|-------------------------------------------------------|
| ``len(items)``             | the number of its own items (a batch of ints)         |
| ``items[i]``, ``items[-1]``| its own ``i``-th (last) item; ``IndexError`` naming   |
|                            | the examples whose list is too short; ``i`` may be a  |
|                            | batch of per-example ints (a counter)                 |
| ``items[a:b:c]``           | a list of its own items ``a`` to ``b`` (recorded)     |
| ``a, b = items``,          | its own items; ``ValueError`` naming the examples     |
| ``a, *rest = items``       | whose list has the wrong length                       |
| ``if items:``, ``not items``| whether its own list is empty (``items and x``:     |
|                            | ``TypeError``, write ``len(items) > 0 and x``)        |
| ``items.pop()``, ``insert``,| ``NotImplementedError``: positions differ between    |
| ``remove``, ``sort``,      | examples                                              |
| ``items[i] = v``           |                                                       |
| ``items.reverse()``        | its own items reversed, as ``items[::-1]``            |

The steps of ``x.unbind(d)`` along a dynamic dimension record their examples too
(``runtime.unbinding``): ``len(x.unbind(1))`` and ``x.unbind(1)[-1]`` are each example's.

A list variable merged after a region (assigned under a per-example ``if``, or
carried by a loop that examples leave at different steps) keeps the records
(:func:`select_items`): position by position, an item is the new list's for the
examples that ran the region and the old list's for the others, and records
which examples have it.  So the two lists may differ in length (``row = row +
[v]``, ``window = window[-2:]``), and ``+`` (position by position, each
example's items in order) and ``+=`` keep each example's items.  An item that
only some examples have must be able to hold padding (a tensor, a number, a
tuple of them): a list of lists whose rows differ between examples is refused,
naming the list and the line.

A list none of whose items has a record is an ordinary Python list: each helper
is then the Python operation itself.  ``for`` loops, comprehensions and
``sum``/``max``/... read the same records (``iteration.example_real``).
"""

from __future__ import annotations

import builtins
import collections
import copy
import numbers
from typing import Any

import torch

from matchbox.control.runtime import module_choice
from matchbox.control.runtime.columns import Column, Columns
from matchbox.control.runtime.copies import stored
from matchbox.control.runtime.dict_keys import refuse_partial_keys
from matchbox.control.runtime.masks import _MASK
from matchbox.control.runtime.select import only_active, select, user_line
from matchbox.control.runtime.slice_bounds import own_ints, per_example_bound
from matchbox.extending import BATCH_VIEWS, capturing, combine_masks, fails, refuse
from matchbox.extending import EXAMPLE_SCALAR as SCALAR
from matchbox.extending import mark_example_scalar as mark
from matchbox.masked_batch import MaskedBatch


def per_example_item(mask: torch.Tensor, value: Any, name: str) -> Any:
    """``value`` as the item of a list that only the examples in ``mask`` have.

    ``None`` (what a comprehension run for its effects gives) stays ``None``: it
    cannot record the examples, and counts for every example.  A list or dict
    cannot record them either (a list of rows that only some examples have):
    refused, saying what to write.
    """
    if value is None:
        return None
    if type(value) is Column:  # a column of zip(*rows): its items keep their own records
        return Column(value, mask if value.present is None else mask & value.present)
    if isinstance(value, (list, dict)):
        _refuse_nested(value, name)
    own = presence(value)  # an item of another list only some examples have
    item = only_active(mask, value, name)
    _record(item, mask if own is None else mask & own)
    stored(mask, value, item, "a list item")  # a guard's copy: updates would miss it
    return item


def _record(item: Any, present: torch.Tensor) -> None:
    if type(item) is MaskedBatch:
        item._present = present
    elif type(item) in BATCH_VIEWS:
        _record(item.batch, present)
    elif type(item) is tuple or (isinstance(item, tuple) and hasattr(item, "_fields")):
        for part in item:
            _record(part, present)


def presence(item: Any) -> torch.Tensor | None:
    """Which examples have ``item`` by its record (``None``: every example)."""
    cls = type(item)
    if cls is MaskedBatch:
        return getattr(item, "_present", None)
    if cls in BATCH_VIEWS:
        return presence(item.batch)
    if cls is Column:  # a sequence of its own: where any of its items is (zip(*rows))
        return item.present
    if cls is tuple or (isinstance(item, tuple) and hasattr(item, "_fields")):
        return combine_masks([presence(part) for part in item])
    return None


def deep_copy(value: Any, memo: Any = None) -> Any:
    """``copy.deepcopy(value)``; of a list whose items only some examples have, a list of
    the items' copies, each keeping its item's record (the copy holds none of its own)."""
    result = copy.deepcopy(value, memo)
    if _sequence(value) and has_records(value):
        for item, twin in zip(value, result):
            present = presence(item)
            if present is not None:
                _record(twin, present)
    return result


def per_example_presence(items: Any) -> torch.Tensor | None:
    """``(len(items), batch)``: which examples have each item of a list or tuple;
    ``None`` when no item has a record (an ordinary list)."""
    records = [presence(item) for item in items]
    known = next((r for r in records if r is not None), None)
    if known is None:
        return None
    every = torch.ones_like(known)
    return torch.stack([every if r is None else r for r in records])


def select_items(mask: torch.Tensor, new: Any, old: Any, name: str) -> Any:
    """A list (or tuple) variable merged: ``new``'s items for the examples in ``mask``,
    ``old``'s for the others, each example keeping exactly its own items.

    The lists are merged position by position: each position's item records the
    examples that have it (``new``'s record for the examples in ``mask``, ``old``'s
    for the others, every example for an item without one).  An example's list is
    the items it has, in order, so the two lists may have different lengths
    (``row = row + [v]``, ``window = window[-2:]`` in a loop that examples leave at
    different steps, a list assigned in one branch of a per-example ``if``).  An
    item that only some examples have must be a tensor, a number or a tuple of
    them: a list of lists whose rows differ between examples is refused.
    """
    positions: list[tuple[Any, torch.Tensor | None, str]] = []
    for i in builtins.range(max(builtins.len(new), builtins.len(old))):
        label = f"{name}[{i}]"
        if i < builtins.len(new) and i < builtins.len(old):
            n, o = new[i], old[i]
            if n is o:
                positions.append((n, None, label))  # one object: its record holds for all
                continue
            present_new, present_old = presence(n), presence(o)
            item = select(mask, n, o, label)
            if present_new is None and present_old is None:
                positions.append((item, None, label))  # every example has both
                continue
            present = torch.where(mask, _or_every(present_new, mask), _or_every(present_old, mask))
        elif i < builtins.len(new):
            item = new[i]
            present_new = presence(item)
            present = mask if present_new is None else mask & present_new
        else:
            item = old[i]
            present_old = presence(item)
            present = ~mask if present_old is None else ~mask & present_old
        if not _recordable(item):
            _refuse_nested(item, label, name)
        positions.append((item, present, label))
    if builtins.len(new) != builtins.len(old) and capturing() is None:
        # Lists of two lengths: the positions no example has are dropped (one sync), or
        # a list carried by a loop would grow by the longer one at every step.
        recorded = [k for k, (_, present, _) in enumerate(positions) if present is not None]
        if recorded:
            had = torch.stack([positions[k][1] for k in recorded]).any(1).tolist()
            empty = {k for k, kept in zip(recorded, had) if not kept}
            positions = [p for k, p in enumerate(positions) if k not in empty]
    return type(new)(item if present is None else per_example_item(present, item, label)
                     for item, present, label in positions)


def _or_every(present: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(like) if present is None else present


def _recordable(value: Any) -> bool:
    """Whether a value can be an item that only some examples have (it can hold
    padding and record the examples: a batch, tensor, number or tuple of them)."""
    cls = type(value)
    if cls is MaskedBatch or cls in BATCH_VIEWS or isinstance(value, torch.Tensor):
        return True
    if isinstance(value, numbers.Number):
        return True
    if isinstance(value, tuple):
        return all(_recordable(part) for part in value)
    return False


def _refuse_nested(value: Any, label: str, name: str | None = None) -> None:
    what = f"the list '{name}'" if name is not None else "a list"
    type_name = type(value).__name__
    raise TypeError(
        f"@batch: {label} is a {type_name}, an item of {what} that only some examples have "
        f"({user_line()}): in the loop over examples each example's list holds its own "
        "items (appended under a per-example condition, or by a loop whose steps differ "
        f"between examples), and such an item must be a tensor, a number or a tuple of "
        f"them, which can hold padding for the others; a {type_name} cannot. Keep the row you "
        "need in a variable of its own (prev = row), or stack each row into a tensor "
        "first (torch.stack(row, 1)) and keep the tensors in the list")


def _sequence(obj: Any) -> bool:
    return type(obj) is list or type(obj) is tuple or type(obj) is Column


def length(obj: Any) -> Any:
    """``len(obj)``; of a list whose items only some examples have, each example's own."""
    if not _sequence(obj):
        if isinstance(obj, dict):
            refuse_partial_keys(obj, "len()")
        return builtins.len(obj)
    present = per_example_presence(obj)
    if present is None:
        return builtins.len(obj)
    return mark(MaskedBatch._make(present.sum(0), None, ()), SCALAR)


def get_item(obj: Any, index: Any) -> Any:
    """``obj[index]``; of a list whose items only some examples have, each example's own."""
    if type(index) is MaskedBatch and module_choice.is_module_list(obj):
        return module_choice.choose(obj, index)  # layers[k] of a per-example k
    if not _sequence(obj):
        if type(obj) is _DEFAULT_DICT and index not in obj:
            refuse_an_added_key(_MASK.get(), obj, index)
        return obj[index]
    if type(index) is MaskedBatch:
        present = per_example_presence(obj)
        if present is None:
            present = _every(obj, index)
        return _own_item(obj, present, index)
    if type(index) is not int and type(index) is not slice:
        return obj[index]
    present = per_example_presence(obj)
    per_bound = per_example_bound(index) if type(index) is slice else None
    if present is None and per_bound is not None:
        present = _every(obj, per_bound)  # items[:n] of a per-example n: each its own
    if present is None:
        return obj[index]
    if type(index) is slice:
        return _own_slice(obj, present, index)
    return _own_item(obj, present, index)


_DEFAULT_DICT = collections.defaultdict


def refuse_an_added_key(mask: Any, obj: Any, key: Any) -> None:
    """``d[key]`` of a ``defaultdict`` without the key, which the read adds: refused under a
    per-example condition (``mask``), where the loop adds it for the running examples only
    and a batch's one dict would have it for every example (``len``, ``in``, ``keys``)."""
    if mask is None or obj.default_factory is None:
        return
    raise NotImplementedError(
        f"@batch: defaultdict[{key!r}] adds the missing key {key!r} under a per-example "
        f"condition ({user_line()}): a Python defaultdict is shared by every example, so "
        "the key would be added for the examples that do not run this code too (len(d), "
        "k in d and d.keys() would count it for them). Give the key its value where every "
        f"example runs (d[{key!r}] = ... before the condition), or read it with d.get()")


def unpack(value: Any, count: int, star: int | None) -> Any:
    """The value of ``a, b = value`` (``count`` targets, a starred one at ``star``).

    A list whose items only some examples have is unpacked per example, as in the
    loop over examples: each target gets each example's own item (a starred one its
    own items, as a list); an example whose list has the wrong length raises the
    ``ValueError`` the loop raises.  Anything else is unpacked by Python itself.
    """
    if type(value) is Columns:
        value = tuple(value)  # zip(*rows): an example without rows has no column
    if not _sequence(value):
        return value
    present = per_example_presence(value)
    if present is None:
        return value
    counts = present.sum(0)
    need = count if star is None else count - 1
    wrong = _running(counts == need if star is None else counts >= need)
    if fails(wrong):
        examples = wrong.nonzero().flatten().tolist()
        have = counts[wrong].tolist()
        expected = f"{need} or more" if star is not None else f"{need}"
        raise ValueError(
            f"@batch: cannot unpack a list whose items only some examples have: examples "
            f"{examples} have {have} items, {expected} expected (in the loop over examples "
            "each example unpacks its own list, and Python raises ValueError there)")
    if star is None:
        return tuple(_own_item(value, present, k) for k in builtins.range(count))
    after = count - star - 1
    head = [_own_item(value, present, k) for k in builtins.range(star)]
    # Python gathers the starred target's items into a list itself.
    rest = _own_slice(value, present, slice(star, -after if after else None))
    tail = [_own_item(value, present, k - after) for k in builtins.range(after)]
    return (*head, *rest, *tail)


def truth(value: Any) -> Any:
    """``value`` as a condition (``if items:``, ``not items``): a list whose items only
    some examples have is true for the examples whose own list is not empty (a batch
    of per-example truth values); anything else as it is."""
    if _sequence(value) and value:
        present = per_example_presence(value)
        if present is not None:
            return MaskedBatch._make(present.any(0), None, ())
    elif isinstance(value, dict) and value:
        refuse_partial_keys(value, "a truth test")
    return value


def operand(value: Any) -> Any:
    """The left operand of ``and``/``or``, whose value is the result where it decides:
    a list whose items only some examples have is refused (each example's list may be
    empty or not, and one result cannot be a list for some and the other operand for
    the others)."""
    if _sequence(value) and value and per_example_presence(value) is not None:
        raise TypeError(
            f"@batch: a list whose items only some examples have as an operand of 'and' "
            f"or 'or' ({user_line()}): each example's own list may be empty or not, and "
            "the result would be the list for some examples and the other operand for "
            "the others. Test its length instead: len(items) > 0 and ...")
    return value


def has_records(obj: Any) -> bool:
    """Whether some item of a list or tuple only some examples have."""
    return any(presence(item) is not None for item in obj)


def refuse_positional_write(obj: Any, what: str) -> None:
    """A write by position (``pop``, ``insert``, ``items[i] = v``...) into a list whose
    items only some examples have: positions differ between examples."""
    if type(obj) is list and has_records(obj):
        raise NotImplementedError(
            f"@batch: {what} on a list whose items only some examples have (appended "
            "under a per-example condition, or made by a comprehension over steps that "
            "differ between examples): an item's position differs between examples. "
            "Read it per example (items[-1], len(items), items[a:b]) and build a new list, "
            "or stack it with matchbox.functional.stack(items, dim, dynamic=True)"
        )


def _every(obj: Any, index: MaskedBatch) -> torch.Tensor:
    batch = index.data.size(0)
    return torch.ones(builtins.len(obj), batch, dtype=torch.bool, device=index.data.device)


def _positions(present: torch.Tensor, index: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Each example's item for ``index``: ``(chosen, valid)`` with ``chosen`` the list
    position (``(batch,)``) and ``valid`` whether the example's list has one."""
    counts = present.sum(0)
    if type(index) is MaskedBatch:
        if index.dims and index.data.numel() != index.data.size(0) or (
                index.data.dtype.is_floating_point or index.data.dtype == torch.bool):
            raise TypeError(
                "list indices must be integers: a batch index must hold one int per example "
                f"(dims == ()), got dims {index.dims} and dtype {index.dtype}")
        wanted = index.data.reshape(-1).to(torch.int64)
        real = None if index._mask is None else index._mask.reshape(-1)
    else:
        wanted = torch.full_like(counts, index)
        real = None
    wanted = torch.where(wanted < 0, wanted + counts, wanted)
    valid = (wanted >= 0) & (wanted < counts)
    if real is not None:
        valid = valid & real
    rank = present.long().cumsum(0) - 1  # each item's position in its example's own list
    hit = present & (rank == wanted.unsqueeze(0))
    return hit.long().argmax(0), valid


def _running(valid: torch.Tensor) -> torch.Tensor:
    outer = _MASK.get()
    return ~valid if outer is None else outer & ~valid


def _own_item(obj: Any, present: torch.Tensor, index: Any) -> Any:
    if not builtins.len(obj):
        # No item to read (a per-example index into an empty list): every running
        # example's read is out of range, as in the loop.
        _empty_read(present, index)
    chosen, valid = _positions(present, index)
    short = _running(valid)
    if fails(short):
        examples = short.nonzero().flatten().tolist()
        raise IndexError(
            f"list index out of range for examples {examples}: in the loop over examples "
            "each example indexes its own list (here: the items it appended), which is "
            "shorter for them")
    outer = _MASK.get()
    if capturing() is not None:
        # No positions are read from values: a select for each position that the
        # index can reach (an int ``i >= 0`` is at position ``i`` or later, ``-i`` at
        # ``len - i`` or earlier).
        count = builtins.len(obj)
        if type(index) is int:
            reach = builtins.range(index, count) if index >= 0 else builtins.range(
                0, count + index + 1)
        else:
            reach = builtins.range(count)
        positions = list(reach) or [0]
    else:
        # The positions the running examples read (one sync); one select for each.
        positions = (chosen if outer is None else chosen[outer]).unique().tolist() or [0]
    result = obj[positions[0]]
    for position in positions[1:]:
        result = select(chosen == position, obj[position], result, "a list item")
    return result


def _empty_read(present: torch.Tensor, index: Any) -> None:
    """A per-example index into an empty list: ``IndexError`` for the running
    examples; while ``matchbox.compile`` captures a graph (which runs every step's
    code masked, also code no example runs there), the call runs eagerly."""
    running = _MASK.get()
    if running is None:
        running = torch.ones(present.size(1), dtype=torch.bool, device=present.device)
    refuse(f"a list read items[i] with a per-example index i where the list is empty "
           f"({user_line()}): a graph runs the code of every step, also where no example "
           "runs it, and an empty list has no item to read there. Read it where the list "
           "has items, e.g. under `if len(items) > 0:`, or with an index that is a plain "
           "int (enumerate over the steps of a dynamic dimension gives one)")
    examples = running.nonzero().flatten().tolist()
    raise IndexError(
        f"list index out of range for examples {examples}: in the loop over examples "
        "each example indexes its own list, which is empty")


def _own_slice(obj: Any, present: torch.Tensor, index: slice) -> list[Any]:
    """Each example's own ``items[a:b:c]``, as a list of items recorded again; a start
    or stop may be one int per example (``items[:n]``)."""
    for part, name in ((index.start, "start"), (index.stop, "stop"), (index.step, "step")):
        if part is not None and type(part) is not int and not (
                type(part) is MaskedBatch and name != "step"):
            raise TypeError(f"@batch: a slice of a list whose items only some examples have "
                            f"needs an int {name} (or None), got {type(part).__name__}")
    step = 1 if index.step is None else index.step
    if step == 0:
        raise ValueError("slice step cannot be zero")
    counts = present.sum(0)
    rank = present.long().cumsum(0) - 1

    def bound(value: Any, default: torch.Tensor, low: int, high: torch.Tensor):
        if value is None:
            return default
        b = own_ints(value, counts) if type(value) is MaskedBatch else torch.full_like(
            counts, value)
        b = torch.where(b < 0, b + counts, b)
        return torch.minimum(torch.clamp(b, min=low), high)

    if step > 0:
        start = bound(index.start, torch.zeros_like(counts), 0, counts)
        stop = bound(index.stop, counts, 0, counts)
        chosen = present & (rank >= start) & (rank < stop) & ((rank - start) % step == 0)
        order = builtins.range(builtins.len(obj))
    else:
        start = bound(index.start, counts - 1, -1, counts - 1)
        stop = bound(index.stop, torch.full_like(counts, -1), -1, counts - 1)
        chosen = present & (rank <= start) & (rank > stop) & ((start - rank) % -step == 0)
        order = builtins.range(builtins.len(obj) - 1, -1, -1)
    outer = _MASK.get()
    if outer is not None:
        chosen = chosen & outer  # what the others get is discarded (merged away)
    if capturing() is None:
        # Only the positions some running example takes (one sync): a list sliced
        # in a loop (``window = window[-2:]``) keeps its length, not the whole list's.
        taken = chosen.any(1).tolist()
        order = [k for k in order if taken[k]]
    return type(obj)(per_example_item(chosen[k], obj[k], "a list item") for k in order)
