"""The columns of ``zip(*rows)``: sequences that only some examples have.

In the loop over examples ``zip(*rows)`` zips each example's own rows: an example
with rows gets one column per element of a row, and column ``j`` holds its own
rows' ``j``-th elements (as many as it has rows); an example without rows gets
no column.  Under ``@batch`` the rows of a list whose items only some examples
have (``runtime.sequences``) give columns whose items keep their records (each
example's own), and a column itself records the examples that have it.

A plain tuple's record is that of all its parts (a ``zip`` step exists where each
of its sequences has it); a column is a sequence, which an example has where it
has any of its items, so it is a tuple of its own type, :class:`Column`, that
holds its record (``present``: a ``(batch,)`` bool tensor, ``None`` for every
example).  This module is a leaf: the sequences, iteration and select modules
read the record.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


class Column(tuple):
    """A column of ``zip(*rows)``: a tuple whose items record their examples, and which
    records the examples that have it (``present``; ``None``: every example)."""

    present: Any = None

    def __new__(cls, items: Iterable[Any] = (), present: Any = None) -> Column:
        column = super().__new__(cls, items)
        column.present = present
        return column

    def __reduce__(self) -> Any:
        return (Column, (tuple(self), self.present))


class Columns:
    """The iterator ``zip(*rows)`` gives: its columns, once (as ``zip`` is an iterator)."""

    __slots__ = ("_columns",)

    def __init__(self, columns: list[Column]):
        self._columns: Iterator[Column] = iter(columns)

    def __iter__(self) -> Columns:
        return self

    def __next__(self) -> Column:
        return next(self._columns)
