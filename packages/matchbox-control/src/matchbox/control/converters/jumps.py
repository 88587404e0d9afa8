"""Lowering a jump (``break``, ``continue``, ``return``) to a per-example flag.

The jump becomes ``flag = True``; every statement after one that may have
jumped is guarded by ``if not flag:``.  Under a batch condition the flag is
a batch (the examples that jumped), so each guard is a branch like any
other: the examples that jumped skip the rest, the others run it.  With a
plain flag this is exactly the jump.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gast

from matchbox.control import anno, templates
from matchbox.control.analysis import names
from matchbox.control.context import Context

_LOOPS = (gast.For, gast.While)


class JumpLowering:
    """Lowers the jumps of one kind in a block.

    ``jump``: the statement type; ``flag``: the flag's name; ``replace``: the
    statements standing for one jump; ``into_loops``: whether jumps inside
    nested loops are this lowering's (``return``) or the nested loop's own
    (``break``, ``continue``); ``on_loop``: called with each loop that
    contains a lowered jump (``return`` makes the loop stop for the examples
    that returned).
    """

    def __init__(self, jump: type, flag: str, replace: Callable[[Any], list[Any]],
                 into_loops: bool, on_loop: Callable[[Any], None] | None = None):
        self.jump = jump
        self.flag = flag
        self.replace = replace
        self.into_loops = into_loops
        self.on_loop = on_loop

    def contains(self, node: Any) -> bool:
        todo = [node]
        while todo:
            current = todo.pop()
            if isinstance(current, self.jump):
                return True
            if isinstance(current, names.SCOPES) or (
                    current is not node and isinstance(current, _LOOPS) and not self.into_loops):
                continue
            todo.extend(gast.iter_child_nodes(current))
        return False

    def block(self, statements: list[Any]) -> list[Any]:
        out: list[Any] = []
        for i, statement in enumerate(statements):
            if isinstance(statement, self.jump):
                out.extend(self.replace(statement))
                return out  # anything after the jump is unreachable
            if not self.contains(statement):
                out.append(statement)
                continue
            out.append(self._compound(statement))
            rest = self.block(statements[i + 1:])
            if rest:
                out.extend(templates.replace(
                    "if not flag:\n    rest", origin=rest[0], flag=self.flag, rest=rest))
            return out
        return out

    def _compound(self, node: Any) -> Any:
        if isinstance(node, (gast.If, gast.With)):
            node.body = self.block(node.body)
            if isinstance(node, gast.If):
                node.orelse = self.block(node.orelse)
            return node
        if isinstance(node, _LOOPS) and self.into_loops:
            node.body = self.block(node.body)
            node.orelse = self.block(node.orelse)
            if self.on_loop is not None:
                self.on_loop(node)
            return node
        raise AssertionError(f"unexpected {type(node).__name__} holding a jump")


def add_loop_test(loop: Any, test: Any) -> None:
    """Make ``loop`` stop for the examples where ``test`` (a runtime expression) is false.

    A ``while`` gets ``test and <its test>``; a ``for`` keeps the test as an
    annotation that the control-flow pass checks on every step.
    """
    if isinstance(loop, gast.While):
        loop.test = templates.replace_expr("mb__.and_(extra, lambda: test)", origin=loop.test,
                                           extra=test, test=loop.test)
        return
    existing = anno.get(loop, anno.EXTRA_TEST)
    if existing is not None:
        test = templates.replace_expr("mb__.and_(extra, lambda: existing)", origin=loop,
                                      extra=test, existing=existing)
    anno.set_(loop, anno.EXTRA_TEST, test)


class LoopFlagVisitor(gast.NodeTransformer):
    """Lowers each loop's own ``jump`` (``break`` or ``continue``) to a flag of its own.

    Loops are visited innermost first; nested functions and classes are left
    alone.  The jump sets the flag (``mb__<kind>_n``) and the rest of the
    iteration is guarded; :meth:`finish` gets a loop that holds the jump, the
    flag and the loop's body so lowered, and returns what replaces the loop.
    """

    jump: type
    kind: str

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def visit_FunctionDef(self, node: Any) -> Any:
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef

    def visit_While(self, node: Any) -> Any:
        self.generic_visit(node)
        return self.lower_loop(node)

    visit_For = visit_While

    def lower_loop(self, node: Any) -> Any:
        flag = self.ctx.namer.new(self.kind)
        lowering = JumpLowering(
            self.jump, flag, into_loops=False,
            replace=lambda jump: templates.replace("flag = True", origin=jump, flag=flag))
        if not lowering.contains(gast.Module(body=node.body, type_ignores=[])):
            return node
        return self.finish(node, flag, lowering.block(node.body))

    def finish(self, node: Any, flag: str, body: list[Any]) -> Any:  # pragma: no cover
        raise NotImplementedError


def transform_body(function: Any, visitor: gast.NodeTransformer) -> None:
    body: list[Any] = []
    for statement in function.body:
        result = visitor.visit(statement)
        body.extend(result if isinstance(result, list) else [result])
    function.body = body
