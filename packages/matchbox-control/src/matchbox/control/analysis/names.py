"""Which names a piece of code reads and writes, in the scope of one function.

Nested functions, lambdas and classes are their own scopes: the names they
bind are not the function's, and the names they read are counted as read
where they are defined (a conservative choice: a closure may run later).
Comprehension variables are local to the comprehension, except for ``:=``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gast

from matchbox.control import anno
from matchbox.control.templates import THUNK

SCOPES = (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda, gast.ClassDef)


def is_scope(node: Any) -> bool:
    """A nested scope; a thunk the rewriting made (a lambda called at once) is not one."""
    return isinstance(node, SCOPES) and not anno.get(node, THUNK, False)


class ScopeTransformer(gast.NodeTransformer):
    """A transformer of one function's own scope.

    Nested functions and classes are converted on their own, and a user's
    lambda is a scope of its own, run whenever it is called: they are left as
    written, but by a transformer that sets ``enters_lambdas``.  A thunk the
    rewriting made is part of this scope and is visited.
    """

    #: Whether a user's lambda is visited: by a pass whose rewriting reads nothing of
    #: this scope but the runtime's context (the mask its code runs under), so that
    #: ``lambda v: items.append(v)`` appends per example as the statement would.
    enters_lambdas = False

    def visit_FunctionDef(self, node: Any) -> Any:
        # A function the rewriting made (a `for` body captured as a scan) is a thunk.
        return node if is_scope(node) else self.generic_visit(node)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node: Any) -> Any:
        if is_scope(node) and not self.enters_lambdas:
            return node
        return self.generic_visit(node)


def walk_scope(node: Any) -> Iterator[Any]:
    """Every node of ``node`` that belongs to the enclosing scope.

    A function, lambda or class (``node`` itself included) is yielded, since
    it binds its name, but not its body; its decorators and default values
    are evaluated in the enclosing scope and are yielded.
    """
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        if is_scope(current):
            todo.extend(_evaluated_outside(current))
            continue
        todo.extend(gast.iter_child_nodes(current))


def walk_body(function: Any) -> Iterator[Any]:
    """Every node of ``function``'s own scope (its body, nested scopes excluded)."""
    for statement in function.body:
        yield from walk_scope(statement)


def _evaluated_outside(scope: Any) -> list[Any]:
    if isinstance(scope, gast.Lambda):
        return list(scope.args.defaults) + [d for d in scope.args.kw_defaults if d]
    if isinstance(scope, gast.ClassDef):
        return list(scope.decorator_list) + list(scope.bases) + list(scope.keywords)
    args = scope.args
    return (list(scope.decorator_list) + list(args.defaults)
            + [d for d in args.kw_defaults if d is not None])


def reads(node: Any) -> set[str]:
    """Names loaded by ``node`` (nested scopes included: a closure reads them too)."""
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name)
            and isinstance(n.ctx, gast.Load)}


def writes(node: Any) -> set[str]:
    """Names bound by ``node`` in the function's own scope."""
    bound = set()
    comprehension_targets = set()
    for n in walk_scope(node):
        if isinstance(n, gast.comprehension):
            comprehension_targets.update(id(t) for t in gast.walk(n.target))
    for n in walk_scope(node):
        if isinstance(n, gast.Name) and isinstance(n.ctx, (gast.Store, gast.Del)):
            if id(n) not in comprehension_targets:
                bound.add(n.id)
        elif isinstance(n, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, (gast.Import, gast.ImportFrom)):
            for alias in n.names:
                if alias.name != "*":
                    bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(n, gast.ExceptHandler) and n.name is not None:
            bound.add(n.name.id if isinstance(n.name, gast.Name) else n.name)
    return bound


def item_writes(statements: list[Any]) -> set[str]:
    """Local variables whose items or slices ``statements`` assign (``x[i] = v``,
    ``x[i] += v``): the write may make a plain tensor a batch, which the variable
    then holds (``runtime.effects.set_item``)."""
    found = set()
    for statement in statements:
        for n in walk_scope(statement):
            if (isinstance(n, gast.Subscript) and isinstance(n.ctx, gast.Store)
                    and isinstance(n.value, gast.Name)):
                found.add(n.value.id)
            elif (isinstance(n, gast.AugAssign) and isinstance(n.target, gast.Subscript)
                  and isinstance(n.target.value, gast.Name)):
                found.add(n.target.value.id)
    return found


def block_writes(statements: list[Any]) -> set[str]:
    bound: set[str] = set()
    for statement in statements:
        bound |= writes(statement)
    return bound


def declared_outside(function: Any) -> set[str]:
    """Names the function declares ``global`` or ``nonlocal``."""
    return declared_outside_of(function.body)


def declared_outside_of(statements: list[Any]) -> set[str]:
    found = set()
    for statement in statements:
        for n in walk_scope(statement):
            if isinstance(n, (gast.Global, gast.Nonlocal)):
                found.update(n.names)
    return found


def parameters(function: Any) -> list[str]:
    args = function.args
    every = list(args.posonlyargs) + list(args.args) + list(args.kwonlyargs)
    every += [a for a in (args.vararg, args.kwarg) if a is not None]
    return [a.id for a in every]


def local_names(function: Any) -> set[str]:
    """The function's local variables: parameters and names it binds."""
    bound = set(parameters(function)) | block_writes(function.body)
    return bound - declared_outside(function)


def captured(function: Any) -> set[str]:
    """Names read inside nested functions and lambdas (a closure may read them at any time)."""
    names: set[str] = set()
    for n in walk_body(function):
        if is_scope(n):
            names |= {m.id for m in gast.walk(n) if isinstance(m, gast.Name)}
    return names


def uses_dynamic_scope(function: Any) -> bool:
    """Whether the function reads its variables by name (``locals()``, ``eval``...)."""
    for n in walk_body(function):
        if isinstance(n, gast.Call) and isinstance(n.func, gast.Name) and n.func.id in (
                "locals", "vars", "eval", "exec", "dir"):
            return True
    return False
