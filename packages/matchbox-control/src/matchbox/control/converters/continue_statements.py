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
from matchbox.control.converters.jumps import LoopFlagVisitor, transform_body


class _Continues(LoopFlagVisitor):
    jump, kind = gast.Continue, "continue"

    def finish(self, node: Any, flag: str, body: list[Any]) -> Any:
        node.body = templates.replace("flag = False", origin=node.body[0], flag=flag) + body
        return node


def transform(function: Any, ctx: Context) -> None:
    transform_body(function, _Continues(ctx))
