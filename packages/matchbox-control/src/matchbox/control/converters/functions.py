"""Pass 7: the function's prologue, then the functions nested in it.

Every converted function starts by reading the execution mask it was called
under (``mb__mask = mb__.entry_mask()``) and binding to ``Undefined`` the
variables a region may save before the user's code assigned them; its body then
runs in ``with mb__.deferred_checks(name):``, where the outermost call reads the
checks that ops deferred (``matchbox.extending.deferred_checks``).  A
function defined inside it is converted the same way, on its own.
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control import anno, naming, templates
from matchbox.control.analysis import names
from matchbox.control.context import Context
from matchbox.control.converters.control_flow import UNDEFINED


def add_prologue(function: Any) -> None:
    prologue = templates.replace(f"{naming.ENTRY_MASK} = mb__.entry_mask()", origin=function)
    for variable in sorted(anno.get(function, UNDEFINED, ())):
        prologue += templates.replace("var = mb__.Undefined(label)", origin=function,
                                      var=variable, label=templates.constant(variable))
    body = function.body
    first = body[0] if body else None
    docstring = (isinstance(first, gast.Expr) and isinstance(first.value, gast.Constant)
                 and isinstance(first.value.value, str))
    head, body = (body[:1], body[1:]) if docstring else ([], body)
    # The checks of ops that can go on safely (an index in range, parts real for the
    # same examples) are read when the outermost @batch call ends, with one device sync,
    # on an accelerator (matchbox.extending.deferred_checks), instead of once per op.
    # The function's name is for the note of an error raised by a later call
    # (matchbox.set_async_checks).
    # The outermost call's return value leaves @batch: a dict in it whose keys only some
    # examples added is refused there (runtime.dict_keys), while the call's records last.
    for node in names.walk_body(function):
        if isinstance(node, gast.Return) and node.value is not None:
            node.value = templates.replace_expr("mb__.leaving(value, outermost)", origin=node,
                                                value=node.value, outermost=OUTERMOST)
    scope = templates.replace("with mb__.deferred_checks(name) as outermost:\n    mb__body",
                              origin=function, name=templates.constant(function.name),
                              outermost=OUTERMOST, mb__body=body or [gast.Pass()])
    function.body = head + prologue + scope


# Whether the call is the outermost @batch call (what deferred_checks' `with` gives).
OUTERMOST = "mb__outermost"


def nested_functions(function: Any) -> list[Any]:
    """The functions defined directly in ``function``'s scope (not in nested ones)."""
    return [n for n in names.walk_body(function)
            if isinstance(n, (gast.FunctionDef, gast.AsyncFunctionDef)) and names.is_scope(n)]


def nested_context(ctx: Context, function: Any) -> Context:
    return ctx.nested(function.name)
