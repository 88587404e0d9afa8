"""``zip(*rows)`` of a list whose items only some examples have.

In the loop over examples ``*rows`` spreads each example's own rows.  Under
``@batch`` one list holds every example's rows (``runtime.sequences``), so a plain
``zip(*rows)`` would zip every example's rows by position, and a column would count
only for the examples that have every row.  The rewriting (``converters.builtin_calls``,
``control_flow``) writes ``zip(*rows)`` as ``mb__.zip_rows(zip, rows)``: each example's
own columns (``runtime.columns``).
"""

from __future__ import annotations

import builtins
from typing import Any

from matchbox.control.runtime import sequences
from matchbox.control.runtime.columns import Column, Columns
from matchbox.control.runtime.select import user_line
from matchbox.extending import capturing, reads_values


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
