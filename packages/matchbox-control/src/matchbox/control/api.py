"""``@batch``: rewrite a function, method or class once, when it is decorated."""

from __future__ import annotations

import builtins
import copy
import dataclasses
import inspect
import linecache
import types
from typing import Any

import gast

from matchbox.control import loader, naming, parsing
from matchbox.control.context import Context
from matchbox.control.converters import convert_function

_MARK = "__matchbox_batch__"


@dataclasses.dataclass
class Conversion:
    """The rewriting of one ``def``: shared by every function object made from it."""

    code: types.CodeType
    tree: Any  # the rewritten gast FunctionDef
    decorators: list[Any]  # the decorator expressions written on the def
    filename: str
    _source: str | None = None

    @property
    def source(self) -> str:
        if self._source is None:
            self._source = loader.to_source(self.tree)
        return self._source


# Keyed by the original code object: a def run many times (a closure made in
# a loop, a class body executed again) is rewritten once.
_CACHE: dict[types.CodeType, Conversion] = {}


def batch(obj: Any) -> Any:
    """Rewrite ``obj``'s control flow so that it runs per example on batches.

    ``obj`` is a function, a method, or a class (every function defined in its
    body is rewritten: methods, static and class methods, properties).  The
    rewriting happens here, once; the result runs like the original on plain
    values and tensors, and per example on ``MaskedBatch`` arguments.
    """
    if isinstance(obj, type):
        return _convert_class(obj)
    if isinstance(obj, (staticmethod, classmethod)):
        return type(obj)(batch(obj.__func__))
    if isinstance(obj, property):
        return property(*(None if f is None else batch(f)
                          for f in (obj.fget, obj.fset, obj.fdel)), obj.__doc__)
    if isinstance(obj, types.MethodType):
        return types.MethodType(batch(obj.__func__), obj.__self__)
    if getattr(obj, _MARK, False):
        return obj
    if isinstance(obj, types.FunctionType) and naming.RUNTIME in obj.__code__.co_freevars:
        # A def nested in a decorated function (`@matchbox.batch def inner` in its body) was
        # rewritten with it: its code closes over the runtime.  Rewriting its source again
        # bound `mb__` twice (a SyntaxError about a name the user never wrote).
        setattr(obj, _MARK, True)
        return obj
    if isinstance(obj, types.FunctionType) and not hasattr(obj, "__wrapped__"):
        return _convert(obj)
    inner = inspect.unwrap(obj) if callable(obj) else None
    if isinstance(inner, types.FunctionType) and inner is not obj:
        return _convert_wrapped(obj, inner)
    raise TypeError(
        f"@batch expects a function, a method or a class, got {type(obj).__name__}"
    )


def conversion_of(fn: types.FunctionType) -> Conversion:
    """The rewriting of ``fn``'s ``def`` (done and cached on first use)."""
    conversion = _CACHE.get(fn.__code__)
    if conversion is None:
        node, filename = parsing.function_def(fn)
        decorators = list(node.decorator_list)
        node = copy.deepcopy(node)
        node.decorator_list = []
        convert_function(node, Context(filename, fn.__qualname__))
        conversion = Conversion(loader.compile_function(node, fn, filename), node, decorators,
                                filename)
        _CACHE[fn.__code__] = conversion
    return conversion


def _convert(fn: types.FunctionType) -> types.FunctionType:
    new = loader.instantiate(conversion_of(fn).code, fn)
    setattr(new, _MARK, True)
    return new


def _convert_wrapped(wrapper: Any, inner: types.FunctionType) -> Any:
    """``@batch`` above other decorators: rewrite the innermost function, decorate again.

    The decorators written below ``@batch`` on the ``def`` (all of them when
    ``@batch`` is not among them, as on a method of a decorated class) are
    evaluated again and applied, innermost first, to the rewritten function.
    """
    conversion = conversion_of(inner)
    below = _decorators_below_batch(conversion.decorators, inner)
    if not below:
        raise TypeError(
            f"@batch: {inner.__qualname__} is wrapped by a decorator that is not written on "
            "its def, so it cannot be applied again to the rewritten function; put @batch "
            "closest to the def (below the other decorators)"
        )
    result: Any = _convert(inner)
    scope = _scope(inner)
    for expression in reversed(below):
        decorator = eval(compile(_expression(expression), conversion.filename, "eval"),  # noqa: S307
                         inner.__globals__, scope)
        result = decorator(result)
    return result


def _decorators_below_batch(decorators: list[Any], fn: types.FunctionType) -> list[Any]:
    scope = {**fn.__globals__, **_scope(fn)}
    for i, expression in enumerate(decorators):
        target = expression.func if isinstance(expression, gast.Call) else expression
        if _resolve(target, scope) is batch:
            return decorators[i + 1:]
    return decorators


def _resolve(node: Any, scope: dict[str, Any]) -> Any:
    """The value of a dotted name, without calling anything (None if unknown)."""
    if isinstance(node, gast.Name):
        return scope.get(node.id, getattr(builtins, node.id, None))
    if isinstance(node, gast.Attribute):
        owner = _resolve(node.value, scope)
        return None if owner is None else getattr(owner, node.attr, None)
    return None


def _scope(fn: types.FunctionType) -> dict[str, Any]:
    values = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    return values


def _expression(node: Any) -> Any:
    import ast

    tree = gast.gast_to_ast(gast.Expression(body=node))
    return ast.fix_missing_locations(tree)


def _convert_class(cls: type) -> type:
    for name, value in list(vars(cls).items()):
        function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        if isinstance(value, property):
            if any(f is not None and _generated(f) for f in (value.fget, value.fset, value.fdel)):
                continue
        elif not isinstance(function, types.FunctionType) or _generated(function):
            continue
        setattr(cls, name, batch(value))
    return cls


def _generated(fn: types.FunctionType) -> bool:
    """Code generated from a string (dataclass, namedtuple methods): nothing to rewrite."""
    fn = inspect.unwrap(fn)
    filename = fn.__code__.co_filename
    return filename.startswith("<") and not linecache.getlines(filename, fn.__globals__)


def source(obj: Any) -> str:
    """The rewritten source of a function or method (of every method, for a class).

    ``obj`` need not be decorated: the rewriting is done (and cached) if needed.
    """
    if isinstance(obj, type):
        parts = []
        for value in vars(obj).values():
            function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            if isinstance(function, types.FunctionType):
                parts.append(source(function))
        return "\n".join(parts)
    if isinstance(obj, (types.MethodType, staticmethod, classmethod)):
        obj = obj.__func__
    if not isinstance(obj, types.FunctionType):
        raise TypeError(f"source() expects a function, a method or a class, got "
                        f"{type(obj).__name__}")
    # A rewritten function's __wrapped__ is the user's; unwrap reaches it
    # through any decorators too.
    return conversion_of(inspect.unwrap(obj)).source
