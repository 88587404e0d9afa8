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
``del``, attribute or item writes, container or in-place tensor methods), except that
it may append to lists it does not otherwise use (``states.append(h)``, once a step):
its effect is then exactly the state it hands back and the items it appends, which
the scan emits step by step.
"""

from __future__ import annotations

import copy
from typing import Any

import gast

from matchbox.control import anno, naming, templates
from matchbox.control.runtime.effects import CONTAINER_WRITES


def may_scan(node: Any) -> bool:
    """Whether the body of the ``for`` ``node`` changes only its local variables, and the
    lists of :func:`appended_lists`."""
    lists = appended_lists(node)
    appends = {id(statement.value) for statement in node.body
               if _append_to(statement) in lists}
    for child in (c for statement in node.body for c in gast.walk(statement)):
        if isinstance(child, (gast.Return, gast.Yield, gast.YieldFrom, gast.Global,
                              gast.Nonlocal, gast.Delete, gast.Break, gast.FunctionDef,
                              gast.AsyncFunctionDef, gast.ClassDef, gast.Await,
                              gast.With, gast.AsyncWith, gast.Try)):
            return False
        if isinstance(child, (gast.Attribute, gast.Subscript)) and isinstance(
                child.ctx, (gast.Store, gast.Del)):
            return False
        if (isinstance(child, gast.Call) and isinstance(child.func, gast.Attribute)
                and id(child) not in appends and not _runtime_call(child)):
            name = child.func.attr
            if name in CONTAINER_WRITES or (name.endswith("_") and not name.startswith("_")):
                return False
    return True


def appended_lists(node: Any) -> list[str]:
    """The variables the body of the loop ``node`` uses only as ``name.append(value)``,
    once, in a statement of the body itself (not under an ``if`` or a loop): a list that
    gains one item per step, which a scan emits as its per-step output."""
    calls = [_append_to(statement) for statement in node.body]
    uses: dict[str, int] = {}
    parts = [node.target] if isinstance(node, gast.For) else []
    for child in (c for part in (*parts, *node.body) for c in gast.walk(part)):
        if isinstance(child, gast.Name):
            uses[child.id] = uses.get(child.id, 0) + 1
    return [name for name in dict.fromkeys(calls)
            if name is not None and calls.count(name) == 1 and uses[name] == 1]


def _runtime_call(call: Any) -> bool:
    """A call of Matchbox's runtime (``mb__.not_(flag)``): not a method of the user's."""
    return isinstance(call.func.value, gast.Name) and call.func.value.id == naming.RUNTIME


def _append_to(statement: Any) -> str | None:
    """``name`` when ``statement`` is ``name.append(value)``."""
    call = statement.value if isinstance(statement, gast.Expr) else None
    if (isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute)
            and call.func.attr == "append" and isinstance(call.func.value, gast.Name)
            and len(call.args) == 1 and not call.keywords
            and not isinstance(call.args[0], gast.Starred)):
        return call.func.value.id
    return None


def for_as_scan(function: str, subs: dict[str, Any], outputs: list[str], constants: list[str],
                plain: list[Any], appended: list[str]) -> list[Any]:
    """The ``for`` as ``if mb__.scan_capturing(): <scan_for> else: <plain>``.

    A loop with ``break`` (or ``return``) narrows each step's mask by its flags first, as
    the plain loop does; its early exit, when no example is left, is not needed: while a
    graph is captured every step runs, masked."""
    state = ", ".join(outputs) + ","
    arguments = ", ".join([subs["step"], subs["item"], *outputs, *constants])
    values = ", ".join([*outputs, *constants]) + ","
    lists = _positions(appended, constants)
    body = copy.deepcopy(subs["body"])
    if subs["extra"] is not None:  # examples that broke out (or returned) run no more steps
        body = templates.replace("""
            step = mb__.narrow(step, mb__EXTRA)
            if step is not False:
                mb__BODY
        """, origin=subs["origin"], step=subs["step"], mb__BODY=body,
            mb__EXTRA=copy.deepcopy(subs["extra"]))
    # Placeholders with reserved names: a user's variable may be called `items`.
    scan = templates.replace(f"""
        def {function}({arguments}):
            mb__BODY
            return ({state})
        ({state}) = mb__.scan_for(mb__ITEMS, {subs["outer"]}, {function}, ({values}),
                                  {len(outputs)}, ({lists}))
    """, origin=subs["origin"], mb__BODY=body, mb__ITEMS=_scanned_items(subs["items"]))
    return _scan_or_plain("mb__.scan_capturing()", subs["origin"], scan, plain)


def _scanned_items(items: Any) -> Any:
    """The ``for``'s sequence for ``scan_for``: ``x.unbind(d)`` (``mb__.unbind(x, d)`` by
    now) as ``mb__.unbind_steps(x, d)``, whose steps along a dynamic dimension are not
    taken apart (their number may then stay a symbol in the graph)."""
    items = copy.deepcopy(items)
    if (isinstance(items, gast.Call) and isinstance(items.func, gast.Attribute)
            and _runtime_call(items) and items.func.attr == "unbind"):
        items.func.attr = "unbind_steps"
    return items


def while_as_scan(function: str, subs: dict[str, Any], outputs: list[str],
                  constants: list[str], plain: list[Any], appended: list[str]) -> list[Any]:
    """The ``while`` (after its ``loop_start``) as ``if mb__.scan_while_capturing(mask):
    <scan_while> else: <plain>``: one iteration and its test as a function of the loop's
    mask and state."""
    mask = subs["mask"]
    state = ", ".join([mask, *outputs]) + ","
    arguments = ", ".join([mask, *outputs, *constants])
    values = ", ".join([mask, *outputs, *constants]) + ","
    lists = _positions(appended, constants)
    scan = templates.replace(f"""
        def {function}({arguments}):
            mb__BODY
            with mb__.masked({mask}, {subs["outer"]}):
                {mask} = mb__.scan_loop_mask({mask}, mb__TEST)
            return ({state})
        ({state}) = mb__.scan_while({function}, ({values}), {len(outputs) + 1}, ({lists}))
    """, origin=subs["origin"], mb__BODY=copy.deepcopy(subs["body"]),
        mb__TEST=copy.deepcopy(subs["test"]))
    return _scan_or_plain(f"mb__.scan_while_capturing({mask})", subs["origin"], scan, plain)


def _positions(appended: list[str], constants: list[str]) -> str:
    """The positions, among ``constants``, of the ``appended`` lists, as a tuple's items."""
    return "".join(f"{constants.index(name)}," for name in appended if name in constants)


def _scan_or_plain(test: str, origin: Any, scan: list[Any], plain: list[Any]) -> list[Any]:
    """``if <test>: <scan> else: <plain>``; the scan's function is part of this scope."""
    anno.set_(scan[0], templates.THUNK, True)  # (analysis.names.is_scope)
    return templates.replace(f"""
        if {test}:
            mb__SCAN
        else:
            mb__PLAIN
    """, origin=origin, mb__SCAN=scan, mb__PLAIN=plain)
