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
from matchbox.control.converters.jumps import (
    JumpLowering,
    LoopVisitor,
    add_loop_test,
    transform_body,
)


class _Breaks(LoopVisitor):
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def lower_loop(self, node: Any) -> Any:
        flag = self.ctx.namer.new("break")
        lowering = JumpLowering(
            gast.Break, flag, into_loops=False,
            replace=lambda jump: templates.replace("flag = True", origin=jump, flag=flag))
        if not lowering.contains(gast.Module(body=node.body, type_ignores=[])):
            return node
        node.body = lowering.block(node.body)
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
