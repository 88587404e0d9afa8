"""A ``for`` that ``matchbox.compile`` may capture as a loop (``scan``), not unrolled.

Pass 5 (``control_flow``) emits such a ``for`` twice: the plain masked loop, and,
used only while a graph is captured and torch has ``scan``, its body as a function of
the loop's state (``runtime.structured``)::

    if mb__.scan_capturing():
        def mb__loop_7(mb__step_3, mb__item_4, h, self):
            <the region>
            return (h,)
        (h,) = mb__.scan_for(items, mb__mask, mb__loop_7, (h, self), 1)
    else:
        <the loop>

Only a body that changes nothing but its local variables qualifies (no ``break``,
``continue``'s flags are locals; no ``return``, ``yield``, ``global``, ``nonlocal``,
``del``, attribute or item writes, container or in-place tensor methods): its effect
is then exactly the state it hands back.
"""

from __future__ import annotations

import copy
from typing import Any

import gast

from matchbox.control import anno, templates
from matchbox.control.runtime.effects import CONTAINER_WRITES


def may_scan(node: Any) -> bool:
    """Whether the body of the ``for`` ``node`` changes only its local variables."""
    for child in (c for statement in node.body for c in gast.walk(statement)):
        if isinstance(child, (gast.Return, gast.Yield, gast.YieldFrom, gast.Global,
                              gast.Nonlocal, gast.Delete, gast.Break, gast.FunctionDef,
                              gast.AsyncFunctionDef, gast.ClassDef, gast.Await,
                              gast.With, gast.AsyncWith, gast.Try)):
            return False
        if isinstance(child, (gast.Attribute, gast.Subscript)) and isinstance(
                child.ctx, (gast.Store, gast.Del)):
            return False
        if isinstance(child, gast.Call) and isinstance(child.func, gast.Attribute):
            name = child.func.attr
            if name in CONTAINER_WRITES or (name.endswith("_") and not name.startswith("_")):
                return False
    return True


def for_as_scan(function: str, subs: dict[str, Any], outputs: list[str], constants: list[str],
                plain: list[Any]) -> list[Any]:
    """The ``for`` as ``if mb__.scan_capturing(): <scan_for> else: <plain>``."""
    state = ", ".join(outputs) + ","
    arguments = ", ".join([subs["step"], subs["item"], *outputs, *constants])
    values = ", ".join([*outputs, *constants]) + ","
    # Placeholders with reserved names: a user's variable may be called `items`.
    scan = templates.replace(f"""
        def {function}({arguments}):
            mb__BODY
            return ({state})
        ({state}) = mb__.scan_for(mb__ITEMS, {subs["outer"]}, {function}, ({values}),
                                  {len(outputs)})
    """, origin=subs["origin"], mb__BODY=copy.deepcopy(subs["body"]), mb__ITEMS=subs["items"])
    anno.set_(scan[0], templates.THUNK, True)  # part of this scope (analysis.names.is_scope)
    return templates.replace("""
        if mb__.scan_capturing():
            mb__SCAN
        else:
            mb__PLAIN
    """, origin=subs["origin"], mb__SCAN=scan, mb__PLAIN=plain)
