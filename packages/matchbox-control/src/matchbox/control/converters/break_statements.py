"""Pass 1: ``break`` becomes a per-example flag.

``while test: ... break ...`` becomes ``mb__break_n = False`` and a loop that
runs while ``not mb__break_n and test``; ``break`` sets the flag and the rest
of the iteration is guarded (see ``jumps``).  A ``for`` loop gets the flag as
an extra test, checked on every step.  A loop's ``else`` runs for the
examples that did not break: ``if not mb__break_n: <else>`` after the loop.
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control import templates
from matchbox.control.context import Context
from matchbox.control.converters.jumps import LoopFlagVisitor, add_loop_test, transform_body


class _Breaks(LoopFlagVisitor):
    jump, kind = gast.Break, "break"

    def finish(self, node: Any, flag: str, body: list[Any]) -> Any:
        node.body = body
        add_loop_test(node, templates.replace_expr("mb__.not_(flag)", origin=node, flag=flag))
        before = templates.replace("flag = False", origin=node, flag=flag)
        after = []
        if node.orelse:
            after = templates.replace("if not flag:\n    orelse", origin=node.orelse[0],
                                      flag=flag, orelse=node.orelse)
            node.orelse = []
        return before + [node] + after


def transform(function: Any, ctx: Context) -> None:
    transform_body(function, _Breaks(ctx))
