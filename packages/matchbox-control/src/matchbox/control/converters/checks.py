"""Refuse, at decoration time, the constructs that cannot run in SIMT form.

Each error names the construct, the file, the line and the function, and
says what to do instead.
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control.analysis import names
from matchbox.control.context import Context
from matchbox.control.naming import is_reserved

_CONTROL = (gast.If, gast.While, gast.For, gast.Break, gast.Continue, gast.Return)
_BRANCHING = (gast.If, gast.While, gast.For)


def check(function: Any, ctx: Context) -> None:
    if isinstance(function, gast.AsyncFunctionDef):
        raise ctx.unsupported("an async function", function,
                              "write the function with def; a batch runs synchronously")
    _check_reserved(function, ctx)
    for node in names.walk_body(function):
        _check_node(node, ctx)
    _check_under_control_flow(function.body, ctx, inside=False)


def _check_node(node: Any, ctx: Context) -> None:
    if isinstance(node, (gast.Yield, gast.YieldFrom)):
        raise ctx.unsupported(
            "yield (a generator function)", node,
            "every example would have to be suspended at its own point; write the "
            "generator without @batch and call @batch functions from it")
    if isinstance(node, (gast.Await, gast.AsyncFor, gast.AsyncWith)):
        raise ctx.unsupported("await / async for / async with", node,
                              "a batch runs synchronously; await outside the @batch function")
    if isinstance(node, gast.Try) and _contains(node, _CONTROL):
        raise ctx.unsupported(
            "a try statement around if/while/for/break/continue/return", node,
            "an exception raised for one example would stop every example at once; move the "
            "control flow out of the try block (or into an undecorated helper)")
    if isinstance(node, gast.With) and any(_is_suppress(item.context_expr)
                                           for item in node.items):
        raise ctx.unsupported(
            "contextlib.suppress", node,
            "an error raised for only some examples would be suppressed for every example; "
            "write try/except, whose except clause refuses such an error")
    if isinstance(node, gast.Nonlocal):
        # A nested function that rebinds an enclosing variable, called under a per-example
        # condition, would rebind it for every example (and in a loop the rebinding is
        # not merged per step): a silent wrong answer, refused for every nonlocal.
        variables = ", ".join(node.names)
        raise ctx.unsupported(
            f"nonlocal {variables}", node,
            "a function that rebinds a variable of its enclosing function cannot do so for "
            "only the examples that call it; return the new value and assign it where the "
            f"variable lives ({node.names[0]} = add({node.names[0]}, v), with add "
            "returning it)")
    if isinstance(node, gast.Match):
        raise ctx.unsupported("the match statement", node, "use if/elif/else")
    if isinstance(node, gast.BoolOp):
        _refuse_walrus(node.values[1:], "a later operand of and/or", ctx)
    elif isinstance(node, gast.IfExp):
        _refuse_walrus([node.body, node.orelse], "a branch of a conditional expression", ctx)
    elif isinstance(node, gast.Compare) and len(node.ops) > 1:
        _refuse_walrus(node.comparators[1:], "a chained comparison", ctx)


def _is_suppress(expression: Any) -> bool:
    """``suppress(...)`` or ``contextlib.suppress(...)``, by name."""
    if not isinstance(expression, gast.Call):
        return False
    func = expression.func
    return ((isinstance(func, gast.Name) and func.id == "suppress")
            or (isinstance(func, gast.Attribute) and func.attr == "suppress"))


def _refuse_walrus(operands: list[Any], where: str, ctx: Context) -> None:
    for operand in operands:
        for n in names.walk_scope(operand):
            if isinstance(n, gast.NamedExpr):
                raise ctx.unsupported(
                    f"an assignment expression (:=) in {where}", n,
                    "that operand is evaluated lazily (per example), so it cannot bind a "
                    "variable; assign it in a statement before")


def _check_under_control_flow(statements: list[Any], ctx: Context, inside: bool) -> None:
    """Writes that cannot be masked: global/nonlocal names and ``del`` under a branch or loop."""
    for statement in statements:
        if isinstance(statement, _BRANCHING):
            blocks = [statement.body, statement.orelse]
            for block in blocks:
                _check_under_control_flow(block, ctx, inside=True)
            continue
        if isinstance(statement, gast.With):
            _check_under_control_flow(statement.body, ctx, inside)
            continue
        if not inside:
            continue
        if isinstance(statement, gast.Delete) and any(
                isinstance(t, gast.Name) for t in statement.targets):
            raise ctx.unsupported(
                "del of a local variable inside if/while/for", statement,
                "a variable cannot be deleted for only some examples; assign None or leave "
                "it")
    if not inside:
        outside = names.declared_outside_of(statements)
        if outside:
            for statement in statements:
                _check_outside_writes(statement, outside, ctx, inside=False)


def _check_outside_writes(node: Any, outside: set[str], ctx: Context, inside: bool) -> None:
    if isinstance(node, _BRANCHING):
        for block in (node.body, node.orelse):
            for statement in block:
                _check_outside_writes(statement, outside, ctx, inside=True)
        return
    if isinstance(node, gast.With):
        for statement in node.body:
            _check_outside_writes(statement, outside, ctx, inside)
        return
    if inside:
        written = names.writes(node) & outside
        if written:
            name = sorted(written)[0]
            raise ctx.unsupported(
                f"a write to the global/nonlocal variable '{name}' inside if/while/for", node,
                "it cannot be changed for only some examples; return the value, or store it "
                "in an attribute (obj.attr = ... is masked per example)")


def _contains(node: Any, types: tuple[type, ...]) -> bool:
    return any(isinstance(n, types) for n in names.walk_scope(node) if n is not node)


def _check_reserved(function: Any, ctx: Context) -> None:
    for node in gast.walk(function):
        identifier = None
        if isinstance(node, gast.Name):
            identifier = node.id
        elif isinstance(node, (gast.FunctionDef, gast.ClassDef)):
            identifier = node.name
        if identifier is not None and is_reserved(identifier):
            raise ctx.unsupported(
                f"the name '{identifier}'", node,
                "names starting with 'mb__' are reserved for the code @batch generates; "
                "rename it")
