"""Pass 5: comprehensions and generator expressions, per example.

Python runs a comprehension as a loop of its own, which the ``for`` statement's
rewriting never sees: over the steps of a dynamic dimension every example
would get the longest example's number of items, the others' being padding.
Each clause becomes a runtime call and the rest of the comprehension a
thunk, run for each step under the step's mask (``runtime.comprehensions``)::

    [f(x) for x in xs if c]
    mb__.list_comp(mb__.comp_for(xs, None, lambda mb__g, x:
        mb__.comp_if(c, lambda mb__g: f(x))))

- The target of a ``for`` clause becomes the thunk's parameters (a tuple
  target is described by the second argument: ``(None, (None, "*"))`` for
  ``i, (a, *b)``); as in Python, the comprehension's variables are its own.
- The first iterable is evaluated where the comprehension is, the others and
  the filters in the thunk of the clause before them, as Python evaluates them.
- ``range``/``enumerate``/``zip``/``reversed`` iterables go through the runtime
  as a ``for`` statement's do (per-example bounds and counts).
- Reads of the function's variables inside a thunk become ``mb__g(x)``, which
  guards their gradients with the step's mask, as a region does.

It runs after ``expressions`` (so the ``and``/``or``/``if``-``else`` inside
are per example already) and before ``control_flow``, whose liveness then
sees the thunks' reads where the comprehension is.  Refused at decoration
time: a ``:=`` inside a comprehension (it would bind in the thunk) and targets
that are attributes or items.
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control import templates
from matchbox.control.analysis import names
from matchbox.control.context import Context
from matchbox.control.converters.control_flow import _iterable
from matchbox.control.converters.expressions import GuardedReads

_HELPERS = {gast.ListComp: "list_comp", gast.GeneratorExp: "gen_exp",
            gast.SetComp: "set_comp", gast.DictComp: "dict_comp"}


class _Comprehensions(names.ScopeTransformer):
    def __init__(self, ctx: Context, locals_: set[str]):
        self.ctx = ctx
        self.locals = locals_

    def _lower(self, node: Any) -> Any:
        self.generic_visit(node)  # inner comprehensions first
        self._check(node)
        if isinstance(node, gast.DictComp):
            element = gast.Tuple(elts=[node.key, node.value], ctx=gast.Load())
        else:
            element = node.elt
        stream = self._clauses(node, node.generators, element, bound=set())
        return templates.replace_expr(f"mb__.{_HELPERS[type(node)]}(mb__stream)", origin=node,
                                      mb__stream=stream)

    visit_ListComp = visit_GeneratorExp = visit_SetComp = visit_DictComp = _lower

    def _clauses(self, node: Any, generators: list[Any], element: Any, bound: set[str]) -> Any:
        """The ``comp_for``/``comp_if`` calls of ``generators``, innermost ``element``."""
        if not generators:
            return self._guarded(element, bound)
        first, rest = generators[0], generators[1:]
        spec, parameters = self._target(first.target)
        inside = bound | set(parameters)
        body = self._clauses(node, rest, element, inside)
        for test in reversed(first.ifs):
            body = templates.replace_expr("mb__.comp_if(mb__test, lambda mb__g: mb__body)",
                                          origin=node, mb__test=self._guarded(test, inside),
                                          mb__body=body)
        iterable = _iterable(first.iter)
        if bound:  # a later clause's iterable is evaluated in the clause before
            iterable = self._guarded(iterable, bound)
        return templates.replace_expr(
            f"mb__.comp_for(mb__items, {spec!r}, lambda mb__g, {', '.join(parameters)}: "
            "mb__body)", origin=node, mb__items=iterable, mb__body=body)

    def _target(self, target: Any) -> tuple[Any, list[str]]:
        """How a step unpacks (``None`` for one name) and the parameters it binds."""
        parameters: list[str] = []

        def unpacking(node: Any) -> Any:
            if isinstance(node, gast.Name):
                parameters.append(node.id)
                return None
            if isinstance(node, (gast.Tuple, gast.List)):
                parts = []
                for element in node.elts:
                    if isinstance(element, gast.Starred) and isinstance(element.value, gast.Name):
                        parameters.append(element.value.id)
                        parts.append("*")
                    else:
                        parts.append(unpacking(element))
                return tuple(parts)
            raise self.ctx.unsupported(
                "a comprehension target that is not a name or a tuple of names", node,
                "write the loop as a for statement")

        spec = unpacking(target)
        # Python assigns a name bound twice (`for _, _ in pairs`) last: the earlier
        # parameters get unused names, as a lambda cannot repeat one.
        for i, name in enumerate(parameters):
            if name in parameters[i + 1:]:
                parameters[i] = self.ctx.namer.new("unused")
        return spec, parameters

    def _guarded(self, expression: Any, bound: set[str]) -> Any:
        return GuardedReads(self.locals - bound).visit(expression)

    def _check(self, node: Any) -> None:
        for inner in names.walk_scope(node):
            if isinstance(inner, gast.NamedExpr):
                raise self.ctx.unsupported(
                    "an assignment expression (:=) inside a comprehension", inner,
                    "a comprehension runs per example, as a function of its own, so it "
                    "cannot bind the function's variables; write the loop as a for "
                    "statement")


def transform(function: Any, ctx: Context) -> None:
    visitor = _Comprehensions(ctx, names.local_names(function))
    function.body = [s for statement in function.body
                     for s in _as_list(visitor.visit(statement))]


def _as_list(result: Any) -> list[Any]:
    return result if isinstance(result, list) else [result]
