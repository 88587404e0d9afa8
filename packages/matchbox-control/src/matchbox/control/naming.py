"""Names of the generated code.

Every name the rewriting introduces starts with ``mb__`` (``mb__`` itself is
the runtime module), which user code may not use: a function that does is
refused at decoration time.  Masks and flags are ``mb__<kind>_<n>``; the
saved value of a user variable ``x`` is ``mb__old_x_<n>``, so the two can
never collide.
"""

from __future__ import annotations

import itertools

PREFIX = "mb__"
RUNTIME = "mb__"
ENTRY_MASK = "mb__mask"


class Namer:
    """Fresh names for one converted function (and the functions nested in it)."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new(self, kind: str) -> str:
        return f"{PREFIX}{kind}_{next(self._counter)}"

    def number(self) -> int:
        return next(self._counter)


def saved(variable: str, number: int) -> str:
    """The name holding ``variable``'s value from before region ``number``."""
    return f"{PREFIX}old_{variable}_{number}"


def is_reserved(identifier: str) -> bool:
    return identifier.startswith(PREFIX)


_LABELS = {"retval": "the return value", "returned": "the 'returned' flag",
           "break": "the 'break' flag", "continue": "the 'continue' flag"}


def label(variable: str) -> str:
    """How messages name a variable (generated ones by what they stand for)."""
    if not is_reserved(variable):
        return variable
    kind = variable[len(PREFIX):].rsplit("_", 1)[0]
    return _LABELS.get(kind, variable)
