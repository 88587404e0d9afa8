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
from matchbox.control.runtime.effects import LIST_AND_DICT_WRITES


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
            if name in LIST_AND_DICT_WRITES or (name.endswith("_") and not name.startswith("_")):
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


def read_only_by_calls(function: Any) -> dict[str, list[Any]]:
    """The list variables a scanned ``for`` may hand back with the items it appended still
    stacked (``runtime.structured.StepOutputs``), each with the calls that read it.

    A list qualifies when every use of its name is in a statement of the function's own
    body, outside any compound statement, nested function or lambda: ``name = [...]``;
    ``name.append(v)``, once, directly in the body of such a ``for``; and, after pass 6,
    an argument of ``mb__.call(f, ...)`` (``F.stack(states, 1)``).  Those calls
    then go through ``mb__.call_steps``, which stacks the items or makes them a list
    first: nothing else can see the list, so nothing sees it other than as a list.
    """
    parents = {id(child): node for node in gast.walk(function)
               for child in gast.iter_child_nodes(node)}
    top = {id(statement) for statement in function.body}
    top_loops = {id(s) for s in function.body if isinstance(s, gast.For)}
    calls: dict[str, list[Any]] = {}
    appends: dict[str, int] = {}
    refused: set[str] = set()
    for node in gast.walk(function):
        if not isinstance(node, gast.Name) or node is function:
            continue
        parent = parents.get(id(node))
        use = _list_use(node, parent, parents, top, top_loops)
        if use is None:
            refused.add(node.id)
        elif use == "append":
            appends[node.id] = appends.get(node.id, 0) + 1
        elif use != "made":
            calls.setdefault(node.id, []).append(use)
    return {name: calls.get(name, []) for name, count in appends.items()
            if count == 1 and name not in refused}


def _list_use(node: Any, parent: Any, parents: dict[int, Any], top: set[int],
              top_loops: set[int]) -> Any:
    """How the name ``node`` is used: ``"made"`` (``name = [...]`` in the body),
    ``"append"`` (``name.append(v)`` in a top-level ``for``'s body), the call it is an
    argument of (``mb__.call(f, name)``, ``mb__.call(f, tensors=name)``, in a statement of
    the body), or ``None`` (any other use)."""
    if isinstance(node.ctx, gast.Store):
        assign = parent
        if (isinstance(assign, gast.Assign) and assign.targets == [node] and id(assign) in top
                and isinstance(assign.value, gast.List)
                and not any(isinstance(e, gast.Starred) for e in assign.value.elts)):
            return "made"
        return None
    if not isinstance(node.ctx, gast.Load):
        return None
    if isinstance(parent, gast.Attribute) and parent.attr == "append":
        call = parents.get(id(parent))
        statement = parents.get(id(call))
        loop = parents.get(id(statement))
        if (isinstance(call, gast.Call) and call.func is parent and isinstance(statement, gast.Expr)
                and loop is not None and id(loop) in top_loops and statement in loop.body
                and _append_to(statement) == node.id):
            return "append"
        return None
    if (isinstance(parent, gast.Call) and isinstance(parent.func, gast.Attribute)
            and _runtime_call(parent) and parent.func.attr == "held"):
        node, parent = parent, parents.get(id(parent))  # mb__.call(f, mb__.held(name))
    call = parents.get(id(parent)) if isinstance(parent, gast.keyword) else parent
    if (isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute)
            and _runtime_call(call) and call.func.attr == "call"
            and (parent is not call or any(arg is node for arg in call.args[1:]))
            and _in_a_simple_statement(call, parents, top)):
        return call
    return None


def _in_a_simple_statement(node: Any, parents: dict[int, Any], top: set[int]) -> bool:
    """Whether ``node`` is part of a statement of the function's body that is not a
    compound statement, and not inside a lambda."""
    while id(node) not in top:
        node = parents.get(id(node))
        if node is None or isinstance(node, gast.Lambda) or (
                isinstance(node, gast.stmt) and id(node) not in top):
            return False
    return not isinstance(node, (gast.For, gast.While, gast.If, gast.With, gast.Try,
                                 gast.FunctionDef, gast.ClassDef, gast.AsyncFor,
                                 gast.AsyncWith, gast.AsyncFunctionDef))


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
                plain: list[Any], appended: list[str], stacked: list[str] = ()) -> list[Any]:
    """The ``for`` as ``if mb__.scan_capturing(): <scan_for> else: <plain>``.

    A loop with ``break`` (or ``return``) narrows each step's mask by its flags first, as
    the plain loop does; its early exit, when no example is left, is not needed: while a
    graph is captured every step runs, masked.  ``stacked``: appended lists that only
    calls read after the loop (:func:`read_only_by_calls`), which ``scan_for`` hands back
    after the state."""
    state = ", ".join(outputs) + ","
    arguments = ", ".join([subs["step"], subs["item"], *outputs, *constants])
    values = ", ".join([*outputs, *constants]) + ","
    appended = [name for name in appended if name in constants]
    lists = "".join(f"{constants.index(name)}," for name in appended)
    stacked = [name for name in stacked if name in appended]
    returned = state + "".join(f" {name}," for name in stacked)
    kept = "".join(f"{appended.index(name)}," for name in stacked)
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
        ({returned}) = mb__.scan_for(mb__ITEMS, {subs["outer"]}, {function}, ({values}),
                                     {len(outputs)}, ({lists}), ({kept}))
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
