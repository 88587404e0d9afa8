"""Code generation from readable templates.

A template is Python source in which some names are placeholders::

    replace('''
        mask_then, mask_else = mb__.branch(outer, test)
        if mask_then is not False:
            body
    ''', origin=node, mask_then="mb__then_3", test=node.test, body=new_body)

A placeholder is replaced by a string (a renamed name), an expression node
(copied, with its load/store context fixed) or a list of statements (when the
placeholder stands alone as a statement).  Every node the template creates
takes the source location of ``origin``, the user's statement it stands for,
so that tracebacks point at the user's own line; substituted user nodes keep
their own locations.
"""

from __future__ import annotations

import copy
import textwrap
from typing import Any

import gast

from matchbox.control import anno

_LOCATION = ("lineno", "col_offset", "end_lineno", "end_col_offset")
THUNK = "thunk"


def replace(template: str, origin: Any = None, **subs: Any) -> list[Any]:
    """The statements of ``template`` with the placeholders in ``subs`` replaced."""
    tree = gast.parse(textwrap.dedent(template))
    for node in gast.walk(tree):
        for attribute in _LOCATION:
            if hasattr(node, attribute):
                delattr(node, attribute)
        if isinstance(node, gast.Lambda):
            # A template's lambdas are thunks, called at once by the runtime
            # helper they are passed to: not closures (see analysis.names).
            anno.set_(node, THUNK, True)
    body = _Substitute(subs).visit(tree).body
    if origin is not None:
        for statement in body:
            copy_location(statement, origin)
    return body


def replace_expr(template: str, origin: Any = None, **subs: Any) -> Any:
    """The expression of ``template`` with the placeholders in ``subs`` replaced."""
    (statement,) = replace(template, origin, **subs)
    return statement.value


def copy_location(tree: Any, origin: Any) -> Any:
    """Give every node of ``tree`` without a location the first line of ``origin``.

    Only its first line: CPython 3.11 reports a method call that spans lines
    (``mb__.branch(...)`` given a whole ``if`` statement's extent) at the line
    where the method's name ends, so a generated call would point at the last
    line of the user's block instead of its ``if``/``while``/``for`` line.
    """
    line = getattr(origin, "lineno", None)
    column = getattr(origin, "col_offset", None)
    one_line = getattr(origin, "end_lineno", None) == line
    location = {"lineno": line, "col_offset": column, "end_lineno": line,
                "end_col_offset": getattr(origin, "end_col_offset", None) if one_line else column}
    for node in gast.walk(tree):
        if "lineno" in getattr(node, "_attributes", ()) and getattr(node, "lineno", None) is None:
            for attribute in _LOCATION:
                setattr(node, attribute, location[attribute])
    return tree


def name(identifier: str, ctx: Any = None) -> Any:
    return gast.Name(id=identifier, ctx=ctx or gast.Load(), annotation=None, type_comment=None)


def constant(value: Any) -> Any:
    return gast.Constant(value=value, kind=None)


def set_ctx(node: Any, ctx: Any) -> Any:
    """Set the load/store context of a (possibly nested) target expression."""
    if isinstance(node, (gast.Name, gast.Attribute, gast.Subscript)):
        node.ctx = ctx
    elif isinstance(node, (gast.Tuple, gast.List)):
        node.ctx = ctx
        for element in node.elts:
            set_ctx(element, ctx)
    elif isinstance(node, gast.Starred):
        node.ctx = ctx
        set_ctx(node.value, ctx)
    return node


class _Substitute(gast.NodeTransformer):
    def __init__(self, subs: dict[str, Any]):
        self.subs = subs

    def visit_Name(self, node: Any) -> Any:
        if node.id not in self.subs:
            return node
        value = self.subs[node.id]
        if isinstance(value, str):
            node.id = value
            return node
        if isinstance(value, list):
            raise ValueError(f"template: statement list '{node.id}' used as an expression")
        return set_ctx(copy.deepcopy(value), node.ctx)

    def visit_Expr(self, node: Any) -> Any:
        if isinstance(node.value, gast.Name) and isinstance(self.subs.get(node.value.id), list):
            return list(self.subs[node.value.id])
        return self.generic_visit(node)
