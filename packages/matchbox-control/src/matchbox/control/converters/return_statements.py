"""Pass 3: ``return`` anywhere becomes a per-example flag and a return value.

``return v`` becomes ``mb__retval_n = v; mb__returned_n = True``; what follows
is guarded by ``if not mb__returned_n:`` (see ``jumps``), every loop holding
a return stops for the examples that returned, and the function ends with one
``return``.  Merged like any variable, the return value holds each example's
own.  A function whose only ``return`` is its last statement is left as it is.
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control import templates
from matchbox.control.analysis import names
from matchbox.control.context import Context
from matchbox.control.converters.jumps import JumpLowering, add_loop_test


def transform(function: Any, ctx: Context) -> None:
    returns = [n for n in names.walk_body(function) if isinstance(n, gast.Return)]
    if not returns or (len(returns) == 1 and function.body[-1] is returns[0]):
        return
    flag, value = ctx.namer.new("returned"), ctx.namer.new("retval")

    def replace(jump: Any) -> list[Any]:
        result = jump.value if jump.value is not None else templates.constant(None)
        return templates.replace("value = result\nflag = True", origin=jump, value=value,
                                 result=result, flag=flag)

    def on_loop(loop: Any) -> None:
        add_loop_test(loop, templates.replace_expr("mb__.not_(flag)", origin=loop, flag=flag))

    lowering = JumpLowering(gast.Return, flag, replace, into_loops=True, on_loop=on_loop)
    docstring, body = _split_docstring(function.body)
    body = lowering.block(body)
    start = templates.replace("flag = False\nvalue = mb__.Undefined('the return value')",
                              origin=function, flag=flag, value=value)
    end = templates.replace("return mb__.return_value(value, flag)", origin=returns[-1],
                            value=value, flag=flag)
    function.body = docstring + start + body + end


def _split_docstring(body: list[Any]) -> tuple[list[Any], list[Any]]:
    first = body[0] if body else None
    if (isinstance(first, gast.Expr) and isinstance(first.value, gast.Constant)
            and isinstance(first.value.value, str)):
        return [first], body[1:]
    return [], body
