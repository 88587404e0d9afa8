"""Pass 9: an ``except`` clause first asks whether what it caught was raised for only some
of the examples that ran the ``try`` (``mb__.refuse_caught()``), and a ``raise`` marks its
error with the examples that raise it (``raise mb__.raising(error)``).

The loop over examples sends only the examples whose check failed (an index out of
range, a reduction over an empty example) into ``except``, and the others on through
the ``try``; a batch raises once, for all of them, and cannot split there. Such an
error is refused, naming it; one raised for every example running the ``try`` (or one
no per-example check raised) is caught as written.
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control import templates
from matchbox.control.analysis import names
from matchbox.control.context import Context


def transform(function: Any, ctx: Context) -> None:
    for node in names.walk_body(function):
        if isinstance(node, gast.Try):
            for handler in node.handlers:
                handler.body[:0] = templates.replace("mb__.refuse_caught()", origin=handler)
        elif isinstance(node, gast.Raise) and node.exc is not None:
            # Under a per-example condition only some examples raise: a caller's except
            # (in another @batch function) refuses it as it refuses a check's error.
            node.exc = templates.replace_expr("mb__.raising(error)", origin=node,
                                              error=node.exc)
