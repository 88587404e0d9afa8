"""Pass 2: ``continue`` becomes a per-example flag.

The flag is cleared at the start of every iteration; ``continue`` sets it and
the rest of the iteration is guarded by ``if not mb__continue_n:`` (see
``jumps``), so the examples that continued skip it and the loop goes on.
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control import templates
from matchbox.control.context import Context
from matchbox.control.converters.jumps import JumpLowering, LoopVisitor, transform_body


class _Continues(LoopVisitor):
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def lower_loop(self, node: Any) -> Any:
        flag = self.ctx.namer.new("continue")
        lowering = JumpLowering(
            gast.Continue, flag, into_loops=False,
            replace=lambda jump: templates.replace("flag = True", origin=jump, flag=flag))
        if not lowering.contains(gast.Module(body=node.body, type_ignores=[])):
            return node
        node.body = (templates.replace("flag = False", origin=node.body[0], flag=flag)
                     + lowering.block(node.body))
        return node


def transform(function: Any, ctx: Context) -> None:
    transform_body(function, _Continues(ctx))
