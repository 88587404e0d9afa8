"""``zip(*rows)`` and ``f(*items)`` of a list whose items only some examples have.

In the loop over examples ``*items`` spreads each example's own items: the
number of arguments differs between examples.  Under ``@batch`` one list holds
every example's items (``runtime.sequences``), so a plain spread would hand the
callee every example's items, and ``zip(*rows)`` would zip every example's rows
by position.  The rewriting (``converters.builtin_calls``) sends:

| written                 | becomes                     | per example                  |
|-------------------------|-----------------------------|------------------------------|
| ``zip(*rows)``          | ``mb__.zip_rows(zip, rows)``| its own columns (``columns``)|
| ``f(a, *items)``        | ``f(a, *mb__.spread(f,      | ``items`` as they are where  |
|                         | items))``                   | every running example has    |
|                         |                             | every item; each example's   |
|                         |                             | own where every running one  |
|                         |                             | has as many (``*outs[-2:]``);|
|                         |                             | else refused                 |

A function ``@batch`` rewrote that takes only ``*args`` (``def f(*items)``) keeps
each example's own items (its ``len(items)``, loops and reads are per example), and
``print`` shows the batch's items, as printing a batch shows its ``repr``: both take
such a list.  Any other callee gets each example's own items where every running example
has the same number of them (``combine(*outs[-2:])``, each example's own last two, at
different positions of the batch's list): argument ``j`` is each example's ``j``-th
item, as ``items[j]`` reads it.  Where their numbers differ the callee would see a
number of arguments that is not every example's own: refused with
``NotImplementedError`` naming the call and two examples' numbers.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Iterator
from typing import Any

import torch

from matchbox.control.runtime import sequences
from matchbox.control.runtime.columns import Column, Columns
from matchbox.control.runtime.helper_results import rewritten
from matchbox.control.runtime.masks import current_mask
from matchbox.control.runtime.select import user_line
from matchbox.extending import capturing, fails, reads_values


def zip_rows(zip_fn: Any, rows: Any, /, **kwargs: Any) -> Any:
    """``zip(*rows)``; of a list whose rows only some examples have, each example's own
    columns: one per element of a row, each holding its own rows' elements (recorded),
    and none for an example without rows (a :class:`Column` records which have it)."""
    if zip_fn is not builtins.zip or set(kwargs) - {"strict"}:
        return zip_fn(*rows, **kwargs)
    if type(rows) is not list and type(rows) is not tuple and type(rows) is not Column:
        rows = list(rows)  # (``*`` reads an iterable whole, too)
    present = sequences.per_example_presence(rows)
    if present is None:
        return zip_fn(*rows, **kwargs)
    if not all(isinstance(row, (tuple, list)) for row in rows):
        kind = next(type(r).__name__ for r in rows if not isinstance(r, (tuple, list)))
        raise NotImplementedError(
            f"@batch: zip(*rows) ({user_line()}) of a list of per-example items (each "
            f"example's own steps) that are not tuples (a {kind}): zip would iterate each "
            "item itself; each example's own columns are kept for rows that are tuples "
            "([(a, b) for ...]). Stack the items (torch.stack(rows, 1)) and index the "
            "stacked tensor instead")
    widths = sorted({len(row) for row in rows})
    if len(widths) > 1:
        raise NotImplementedError(
            f"@batch: zip(*rows) ({user_line()}) of a list whose items only some examples "
            f"have, and whose rows differ in length ({widths}): the number of columns would "
            "differ between examples; make every row the same length, or take the columns "
            "one by one ([row[j] for row in rows])")
    has_rows = present.any(0)
    if capturing() is None and reads_values(has_rows) and bool(has_rows.all()):
        has_rows = None  # every example has a row: each has every column
    records = [sequences.presence(row) for row in rows]
    columns = [Column([_own(row[j], record) for row, record in zip(rows, records)], has_rows)
               for j in range(widths[0])]
    return Columns(columns)


def _own(part: Any, record: Any) -> Any:
    """A row's element, recording the examples that have the row (a part of a row that
    holds no record of its own, a plain tensor or number, is every example's)."""
    if record is None or sequences.presence(part) is record:
        return part
    return sequences.per_example_item(record, part, "a column of zip(*rows)")


def spread(fn: Any, items: Any) -> Any:
    """The arguments ``*items`` gives ``fn``: each example's own where ``items`` is a list
    some of whose items a running example does not have (see the module docstring)."""
    if isinstance(items, Iterator):
        items = tuple(items)  # (``*`` reads an iterator whole, too)
    elif type(items) is not list and type(items) is not tuple and type(items) is not Column:
        return items
    present = sequences.per_example_presence(items)
    if present is None or _takes_every_item(fn):
        return items
    lacking = ~present.all(0)
    running = current_mask()
    if running is not None:
        lacking = lacking & running

    def error() -> NotImplementedError:
        return _spread_error(fn, present, running)

    if capturing() is None:
        if not bool(lacking.any()):  # one sync: every running example has every item
            return items
        own = _own_items(items, present, running)
        if own is None:
            raise error()
        return own
    # A graph cannot count each example's items: it takes them all, and where an example
    # lacks one the call runs again eagerly (which takes each example's own, or raises).
    fails(lacking, error)
    return items


def _own_items(items: Any, present: torch.Tensor, running: torch.Tensor | None
               ) -> tuple[Any, ...] | None:
    """Each running example's own items, argument ``j`` its ``j``-th (``items[j]``), where
    every running example has as many; ``None`` where their numbers differ."""
    counts = present.sum(0)
    if running is not None:
        counts = counts[running]
    if not counts.numel():
        return tuple(items)  # no example runs the call: what it gives is discarded
    count = int(counts[0])
    if not bool((counts == count).all()):
        return None
    return tuple(sequences.get_item(items, j) for j in range(count))


def _counts(present: torch.Tensor, running: torch.Tensor | None) -> str:
    """Two running examples' numbers of items that differ, written out."""
    counts = present.sum(0)
    if running is not None:
        counts = torch.where(running, counts, -1)
    real = [(j, n) for j, n in enumerate(counts.tolist()) if n >= 0]
    first = real[0]
    other = next(((j, n) for j, n in real if n != first[1]), first)
    return f"example {first[0]} has {first[1]}, example {other[0]} has {other[1]}"


def _takes_every_item(fn: Any) -> bool:
    """``print``, or a function ``@batch`` rewrote whose positional parameters are only
    ``*args``: it holds each example's own items."""
    if fn is builtins.print:
        return True
    function = getattr(fn, "__func__", fn)
    if not inspect.isfunction(function) or not (
            rewritten(function) or getattr(function, "__matchbox_batch__", False)):
        return False
    code = function.__code__
    bound = 1 if getattr(fn, "__self__", None) is not None else 0
    return bool(code.co_flags & inspect.CO_VARARGS) and code.co_argcount == bound


def _spread_error(fn: Any, present: torch.Tensor, running: torch.Tensor | None
                  ) -> NotImplementedError:
    differ = (f"the running examples have different numbers of them "
              f"({_counts(present, running)})")
    if fn is builtins.zip:
        return NotImplementedError(
            f"@batch: zip(..., *rows) ({user_line()}) spreads a list whose items only some "
            f"examples have among other arguments, and {differ}: each example would zip "
            "its own rows, which a batch keeps only for zip(*rows) alone; put the other "
            "sequences into the list first (zip(*[a, *rows]))")
    if fn is builtins.map:
        return NotImplementedError(
            f"@batch: map(f, *rows) ({user_line()}) spreads a list whose items only some "
            f"examples have, and {differ}: each example would map over its own rows; write "
            "a comprehension over the columns ([f(*column) for column in zip(*rows)], with "
            "f a function @batch rewrote that takes *args), which gives each example its own")
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or "f"
    return NotImplementedError(
        f"@batch: {name}(*items) ({user_line()}) spreads a list whose items only some "
        f"examples have (a step past an example's end) into arguments, and {differ}: in "
        "the loop over examples each example passes only its own items, so the number of "
        "arguments differs between examples, and one call cannot take each example's "
        f"own. Pass the list itself ({name}(items): max(items), torch.stack(items, 1)) or "
        "loop over it; a function @batch rewrote that takes only *args (def f(*items)) "
        "may take it")
