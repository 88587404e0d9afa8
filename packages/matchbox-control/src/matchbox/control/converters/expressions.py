"""Pass 4: expressions whose value may differ between examples.

| written                 | becomes                                                |
|-------------------------|--------------------------------------------------------|
| ``a and b and c``       | ``mb__.and_(a, lambda: mb__.and_(b, lambda: c))``      |
| ``a or b``              | ``mb__.or_(a, lambda: b)``                             |
| ``a and n < 3``         | ``mb__.and_(a, lambda: n < 3, pure=True)``             |
| ``not a``               | ``mb__.not_(a)``                                       |
| ``a < b <= c``          | ``mb__.compare(a, '<', lambda: b, '<=', lambda: c)``   |
| ``a if c else b``       | ``mb__.if_exp(c, lambda mb__g: a, lambda mb__g: b)``,  |
|                         | local reads ``x`` in a side written ``mb__g(x)``       |
| ``assert c, m``         | ``if __debug__: mb__.assert_(c, lambda: m)``           |

Later operands are thunks, so they are evaluated when (and only as often as)
Python would evaluate them; the runtime helpers are plain Python for plain
operands (see ``runtime.expressions``).  A right operand that only compares
names and constants (``steps < max_steps``, a loop's second condition) is
marked ``pure``: it cannot change anything, so with a batch on the left it is
computed once for every example instead of under a mask, which spares a
device sync per evaluation.
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control import anno, naming, templates
from matchbox.control.analysis import names
from matchbox.control.context import Context

PLAIN = "plain"  # an `if` the control-flow pass leaves as it is

_COMPARE = {
    gast.Lt: "<", gast.LtE: "<=", gast.Gt: ">", gast.GtE: ">=", gast.Eq: "==",
    gast.NotEq: "!=", gast.Is: "is", gast.IsNot: "is not", gast.In: "in",
    gast.NotIn: "not in",
}


class _Expressions(gast.NodeTransformer):
    def __init__(self, locals_: set[str]):
        self.locals = locals_

    def visit_FunctionDef(self, node: Any) -> Any:
        return node  # converted on its own

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_BoolOp(self, node: Any) -> Any:
        self.generic_visit(node)
        helper = "and_" if isinstance(node.op, gast.And) else "or_"
        result = node.values[-1]
        for value in reversed(node.values[:-1]):
            pure = ", pure=True" if _is_pure_comparison(result) else ""
            result = templates.replace_expr(f"mb__.{helper}(left, lambda: right{pure})",
                                            origin=node, left=value, right=result)
        return result

    def visit_UnaryOp(self, node: Any) -> Any:
        self.generic_visit(node)
        if not isinstance(node.op, gast.Not):
            return node
        return templates.replace_expr("mb__.not_(value)", origin=node, value=node.operand)

    def visit_Compare(self, node: Any) -> Any:
        self.generic_visit(node)
        if len(node.ops) < 2 and not isinstance(node.ops[0], (gast.In, gast.NotIn)):
            return node  # (``k in d`` reads a dict's keys: ``runtime.dict_keys``)
        parts = ", ".join(f"'{_COMPARE[type(op)]}', lambda: right_{i}"
                          for i, op in enumerate(node.ops))
        rights = {f"right_{i}": c for i, c in enumerate(node.comparators)}
        return templates.replace_expr(f"mb__.compare(left, {parts})", origin=node,
                                      left=node.left, **rights)

    def visit_IfExp(self, node: Any) -> Any:
        self.generic_visit(node)
        # Each side reads the function's local variables through `mb__g`, which
        # guards their gradients with that side's mask (see runtime.masks.guard),
        # as an `if` statement's regions do; reads stay where and when they were.
        body = GuardedReads(self.locals).visit(node.body)
        orelse = GuardedReads(self.locals).visit(node.orelse)
        return templates.replace_expr(
            "mb__.if_exp(test, lambda mb__g: body, lambda mb__g: orelse)", origin=node,
            test=node.test, body=body, orelse=orelse)

    def visit_Assert(self, node: Any) -> Any:
        self.generic_visit(node)
        if node.msg is None:
            new = templates.replace("if __debug__:\n    mb__.assert_(test)", origin=node,
                                    test=node.test)
        else:
            new = templates.replace("if __debug__:\n    mb__.assert_(test, lambda: msg)",
                                    origin=node, test=node.test, msg=node.msg)
        anno.set_(new[0], PLAIN, True)
        return new


_ORDERINGS = (gast.Lt, gast.LtE, gast.Gt, gast.GtE, gast.Eq, gast.NotEq)


def _is_pure_comparison(node: Any) -> bool:
    """Whether ``node`` is one comparison (``<``, ``==``, ...) of names, constants and
    attributes of names: evaluating it has no effect but its value."""
    return (isinstance(node, gast.Compare) and len(node.ops) == 1
            and isinstance(node.ops[0], _ORDERINGS)
            and _is_plain_operand(node.left) and _is_plain_operand(node.comparators[0]))


def _is_plain_operand(node: Any) -> bool:
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub):
        node = node.operand
    if isinstance(node, gast.Attribute):
        node = node.value
    return isinstance(node, (gast.Name, gast.Constant))


GUARD = "mb__g"  # the parameter of a thunk that guards its reads with its own mask


class GuardedReads(gast.NodeTransformer):
    """Reads of the function's variables ``x`` become ``mb__g(x)``.

    Also inside a thunk without a guard of its own (a later operand of
    ``and``/``or``, a chained comparison's), which runs at once under the same
    mask.  Not inside one with its own guard (a conditional expression's side),
    a user's lambda (it runs when it is called), or a comprehension, whose reads
    the comprehensions pass guards with its steps' masks.
    """

    def __init__(self, variables: set[str]):
        self.variables = variables

    def visit_Name(self, node: Any) -> Any:
        if (isinstance(node.ctx, gast.Load) and node.id in self.variables
                and not naming.is_reserved(node.id)):
            return templates.replace_expr(f"{GUARD}(value)", origin=node, value=node)
        return node

    def visit_Lambda(self, node: Any) -> Any:
        own_guard = any(isinstance(a, gast.Name) and a.id == GUARD for a in node.args.args)
        if not names.is_scope(node) and not own_guard:  # a thunk of this scope's
            return self.generic_visit(node)
        return node

    def _leave(self, node: Any) -> Any:
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _leave


def transform(function: Any, ctx: Context) -> None:
    visitor = _Expressions(names.local_names(function))
    function.body = [s for statement in function.body
                     for s in _as_list(visitor.visit(statement))]


def _as_list(result: Any) -> list[Any]:
    return result if isinstance(result, list) else [result]
