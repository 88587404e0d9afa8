"""Definite assignment: which local variables are bound on every path to a statement.

A region saves the variables it merges before it runs; one that may still be
unbound there (first assigned inside a branch or a loop) is bound to
``Undefined`` at the start of the function instead, so the save never fails.
Annotation: ``DEFINED_BEFORE`` on each ``if`` and loop.
"""

from __future__ import annotations

from typing import Any

import gast

from matchbox.control import anno
from matchbox.control.analysis import names

DEFINED_BEFORE = "defined_before"


def analyze(function: Any) -> None:
    _block(function.body, frozenset(names.parameters(function)))


def _block(statements: list[Any], defined: frozenset[str]) -> frozenset[str]:
    for statement in statements:
        defined = _statement(statement, defined)
    return defined


def _statement(node: Any, defined: frozenset[str]) -> frozenset[str]:
    if isinstance(node, (gast.If, gast.While, gast.For)):
        anno.set_(node, DEFINED_BEFORE, defined)
    if isinstance(node, gast.If):
        return defined | (_block(node.body, defined) & _block(node.orelse, defined))
    if isinstance(node, gast.While):
        _block(node.body, defined)
        return _block(node.orelse, defined)
    if isinstance(node, gast.For):
        _block(node.body, defined | names.writes(node.target))
        return _block(node.orelse, defined)
    if isinstance(node, gast.With):
        bound = frozenset().union(*[names.writes(i.optional_vars) for i in node.items
                                    if i.optional_vars is not None])
        return _block(node.body, defined | bound)
    if isinstance(node, gast.Try):
        for block in [node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]]:
            _block(block, defined)
        return defined
    if isinstance(node, gast.Delete):
        return defined - {t.id for t in node.targets if isinstance(t, gast.Name)}
    return defined | names.writes(node)
