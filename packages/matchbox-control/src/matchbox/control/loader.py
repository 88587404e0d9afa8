"""Turning the rewritten tree into a function that runs like the user's.

The rewritten ``def`` is compiled inside a factory function whose parameters
are the runtime (``mb__``) and the original function's free variables, so the
new function's closure can be made of the original's own cells (a closure
sees later changes to the variables it captured, and ``super()`` finds its
``__class__`` cell).  The code is compiled with the user's filename and the
user's line numbers, so tracebacks and ``inspect`` point at the user's code;
the new function has the original's globals, defaults, name and metadata.
"""

from __future__ import annotations

import ast
import copy
import types
from typing import Any

import gast

from matchbox.control import naming, runtime, templates
from matchbox.control.errors import UnsupportedConstructError

FACTORY = "mb__factory"


def compile_function(node: Any, fn: Any, filename: str) -> types.CodeType:
    """The code object of the rewritten ``def`` ``node``."""
    node = copy.deepcopy(node)
    # The code's first line is the original's (its first decorator's line), as
    # inspect.getsource expects.
    node.lineno = fn.__code__.co_firstlineno
    parameters = [naming.RUNTIME, *fn.__code__.co_freevars]
    # The def must not bind its own name in the factory: a recursive call
    # would read the factory's variable instead of the global (or, for a
    # nested function, the enclosing function's cell, a factory parameter).
    own = "" if node.name in parameters else f"    global {node.name}\n"
    # The placeholder is a reserved name: the template's text holds the user's names
    # (the function's, its closure's), and one named like the placeholder would be taken
    # for it.
    factory = templates.replace(
        f"def {FACTORY}({', '.join(parameters)}):\n{own}    mb__body\n    return {node.name}",
        origin=node, mb__body=[node])[0]
    module = ast.fix_missing_locations(gast.gast_to_ast(gast.Module(body=[factory],
                                                                    type_ignores=[])))
    try:
        code = compile(module, filename, "exec", dont_inherit=True)
    except SyntaxError as error:
        if "too many statically nested blocks" not in str(error):
            raise
        raise UnsupportedConstructError(
            "this many nested branches", filename, error.lineno or node.lineno, node.name,
            "the rewritten function runs each branch in a `with` block, nested in the one "
            "before it where a branch follows a `return`, `break` or `continue` or sits in "
            "another's `else` (`elif`), and Python allows 20 nested blocks. Split the "
            "function into smaller @matchbox.batch functions, or replace the chain of cases "
            "with a lookup (a tensor or list indexed by the case)") from error
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return next(c for c in factory_code.co_consts
                if isinstance(c, types.CodeType) and c.co_name == node.name)


def instantiate(code: types.CodeType, fn: Any) -> types.FunctionType:
    """A function running ``code`` with ``fn``'s globals, closure cells and defaults."""
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    cells[naming.RUNTIME] = types.CellType(runtime)
    closure = tuple(cells[name] for name in code.co_freevars)
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    new.__doc__ = fn.__doc__
    new.__annotations__ = fn.__annotations__
    new.__dict__.update(fn.__dict__)
    new.__wrapped__ = fn
    return new


def to_source(node: Any) -> str:
    """Readable source of a (rewritten) tree: astor, or ``ast.unparse`` where astor fails."""
    tree = gast.gast_to_ast(node)
    try:
        import astor

        return astor.to_source(tree)
    except Exception:  # astor 0.8 cannot print some newer nodes
        return ast.unparse(tree) + "\n"
