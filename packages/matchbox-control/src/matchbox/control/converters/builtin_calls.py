"""Pass 6: builtins, list reads and type tests whose answer differs between examples.

| written                                  | becomes                                   |
|------------------------------------------|-------------------------------------------|
| ``sum(xs)``, ``max``, ``min``, ``any``,  | ``mb__.call(sum, xs)``: per example where |
| ``all``, ``len``, ``int``, ``float``,    | the callable is the builtin at run time   |
| ``bool``, ``isinstance``, ``reduce``,    | (``runtime.calls``), else the call itself |
| ``functools.reduce``, ``torch.is_tensor``|                                           |
| ``x.item()``                             | ``mb__.item(x)``                          |
| ``x.unbind(d)``, ``torch.unbind(x, d)``  | ``mb__.unbind(x, d)``: steps along a      |
|                                          | dynamic dim record their examples         |
| ``obj[i]``, ``obj[a:b]`` (one index,     | ``mb__.get_item(obj, i)``: a list's items |
| read)                                    | per example (``runtime.sequences``)       |
| ``a, b = items``, ``a, *rest = items``   | ``... = mb__.unpack(items, 2, None)``:    |
|                                          | each example unpacks its own items        |
| ``if items:``, ``while items:``, ``not`` | ``mb__.truth(items)``: each example's own |
| ``items``, ``a if items else b``         | list's emptiness; ``items and x``, ``or``: |
|                                          | ``mb__.operand(items)`` refuses such a list|
| ``type(x) is T`` (``is not``, ``==``,    | ``mb__.compare_type(type, x, 'is', T)``:  |
| ``!=``)                                  | warns where ``x`` is a batch, ``T`` a     |
|                                          | tensor class                              |
| ``zip(*rows)``                           | ``mb__.zip_rows(zip, rows)``: each        |
|                                          | example's own columns                     |
| ``f(*items)`` (a spread)                 | ``f(*mb__.spread(f, items))``: refused a  |
|                                          | list only some examples' items are in     |
|                                          | (``runtime.star_args``)                   |
| any other call ``f(...)``                | ``mb__.call(f, ...)``: a list's writes    |
|                                          | reached as values (``add = items.append``)|
|                                          | per example; a list refused to a function |
|                                          | ``@batch`` did not rewrite                |
| an argument ``it``, ``self.it``,         | ``mb__.held(it)``: a shared iterator      |
| ``its[0]`` of such a call                | under a per-example condition, refused to |
|                                          | a call that reads it (``runtime.calls``)  |
| ``[*it]``, ``a, b = it``, ``f(*it)``,    | ``mb__.whole(it, what)``: refused such an |
| ``items.extend(it)``                     | iterator (``runtime.iterables``)          |
| ``str(n)``, ``repr``, ``format``,        | ``mb__.text(n, what)``: refused a value   |
| ``f"{n}"``, ``fmt.format(n)``,           | that differs between examples, except in  |
| ``"%d" % n``                             | ``print``/logging arguments, an assert's  |
|                                          | message, a raise (``runtime.text``)       |

Inside a user's ``lambda`` too (``add = lambda v: items.append(v)``, ``lambda: len(items)``),
which runs whenever it is called: what this pass writes looks the callable and the mask up
then.  Left as written: calls without arguments, the iterables a ``for`` statement or a fold
recognises (``range``, ``enumerate``, ``zip``, ``reversed``; elsewhere ``zip`` and
``enumerate`` are routed, ``list(zip(a, b))``), ``next``/``iter``/``islice`` of an iterator
made in the call (``next(self.parameters())``, ``next(iter(self.parameters()))``), what needs its caller's frame (``super``,
``locals``, ...), and in-place writes, which pass 8 (``assignments``) masks.

Which callable a name means is known only when the call runs, so the
runtime checks it: a user's own ``sum`` or ``max`` is called as it is.  An
index that is a tuple (``x[:, t]``) cannot index a list and is left alone, so
the common tensor indexing costs nothing.  It runs after ``comprehensions``
(their thunks hold calls too) and before ``control_flow``.
"""

from __future__ import annotations

import builtins
from typing import Any

import gast

from matchbox.control import naming, templates
from matchbox.control.analysis import names
from matchbox.control.context import Context
from matchbox.control.converters.assignments import _changes_in_place, index_expression
from matchbox.control.converters.control_flow import (
    _ITERATORS,
    _iterable,
    rows_zipped,
    zip_of_rows,
)
from matchbox.control.runtime.calls import ATTRIBUTES, NAMES
from matchbox.control.runtime.effects import CONTAINER_WRITES, LIST_AND_DICT_WRITES

_TYPE_COMPARISONS = {gast.Is: "is", gast.IsNot: "is not", gast.Eq: "==", gast.NotEq: "!="}


def _lowered_callable(func: Any) -> bool:
    return ((isinstance(func, gast.Name) and func.id in NAMES)
            or (isinstance(func, gast.Attribute) and func.attr in ATTRIBUTES))


_FOLDS = frozenset({"sum", "max", "min", "any", "all", "reduce"})
_SET_AND_DEQUE_WRITES = CONTAINER_WRITES - LIST_AND_DICT_WRITES

#: Calls left as written: iterables that ``for`` recognises by name, and builtins that
#: read their caller's frame or cannot take a list to write.  ``zip`` and ``enumerate``
#: outside a ``for``, a comprehension or a fold (``list(zip(a, b))``) reach ``runtime.calls``,
#: which refuses a list some of whose examples' items are not their first ones (it pairs by
#: position).
_UNROUTED = frozenset({"range", "reversed", "super",
                       "locals", "vars", "globals", "eval", "exec", "breakpoint", "dir",
                       "print", "type", "getattr", "hasattr", "setattr", "id", "callable"})


_KEY_READS = frozenset({"keys", "values", "items", "copy"})

#: A list's, dict's or set's methods that read an iterable argument whole (``items.extend(it)``).
_WHOLE_READS = frozenset({"extend", "update", "difference_update", "intersection_update",
                          "symmetric_difference_update"})


def _routed(node: Any) -> bool:
    """Whether a call goes through ``mb__.call`` for the lists it may hand over."""
    func = node.func
    if not node.args and not node.keywords:
        # Hands nothing over, but ``queue.popleft()``: a set's or deque's write (a list's
        # or dict's goes to pass 8), which ``runtime.calls`` refuses under a condition.
        # ``d.keys()``, ``d.items()``: a dict's keys, refused where only some examples
        # added one (``runtime.dict_keys``).
        # ``take()``, ``self.take()``: a helper of the user's, which ``runtime.calls``
        # refuses under a condition where it reads a shared iterator it is not given
        # (``self.it``, a global, one it closes over). (Not a builtin's name: ``super()``
        # and ``locals()`` read their caller's frame.)
        if isinstance(func, gast.Name):
            return not hasattr(builtins, func.id) and not func.id.startswith("mb__")
        return isinstance(func, gast.Attribute) and (
            func.attr in _SET_AND_DEQUE_WRITES or func.attr in _KEY_READS
            or (isinstance(func.value, gast.Name) and func.value.id == "self"))
    if _runtime_call(node) is not None or _changes_in_place(node):
        return False
    if _iterator_reader(func) and node.args and _made_here(node.args[0]):
        # ``next(iter(xs))``, ``next(self.parameters())``: an iterator made here, which no
        # other example's code shares (``runtime.calls`` refuses ``next`` of a shared one
        # under a per-example condition, and ``iter(it)`` of one, which is ``it`` itself).
        return False
    return not (isinstance(func, gast.Name) and func.id in _UNROUTED)


def _held(arg: Any) -> Any:
    """An argument held by a name, an attribute or an item (``list(it)``, ``f(self.it)``) as
    ``mb__.held(arg)``: a shared iterator, which ``runtime.calls`` refuses to a call that
    would read it under a per-example condition (``runtime.iterables``); an argument made
    in the call (``list(map(f, xs))``) is no other example's and is left."""
    if _held_syntax(arg):
        return templates.replace_expr("mb__.held(arg)", origin=arg, arg=arg)
    return arg


def _whole(arg: Any, what: str) -> Any:
    """An iterable read whole (``[*it]``, ``a, b = it``, ``f(*it)``, ``items.extend(it)``)
    held by a name, an attribute or an item as ``mb__.whole(arg, what)``: refused where it
    is a shared iterator under a per-example condition (``runtime.iterables``)."""
    if _held_syntax(arg):
        return templates.replace_expr("mb__.whole(arg, what)", origin=arg, arg=arg,
                                      what=templates.constant(what))
    return arg


#: Calls whose arguments are shown, not used: text of a batch there is its ``repr``, as
#: meant (``print(f"n={n}")``, ``logger.info(...)``, ``warnings.warn(...)``).
_SHOWING_NAMES = frozenset({"print"})
_SHOWING_ATTRIBUTES = frozenset({"debug", "info", "warning", "warn", "error", "critical",
                                 "exception", "log", "write"})


def _shows_text(node: Any) -> bool:
    """Whether ``node`` prints, logs or warns (or is an ``assert``'s ``mb__.assert_``)."""
    func = node.func
    if isinstance(func, gast.Name):
        return func.id in _SHOWING_NAMES
    if isinstance(func, gast.Attribute):
        return func.attr in _SHOWING_ATTRIBUTES or _runtime_call(node) == "assert_"
    return False


_TEXT_CALLS = frozenset({"str", "repr", "ascii", "format"})


def _check_text(node: Any) -> None:
    """``str(n)``, ``repr(n)``, ``format(n, spec)`` and ``fmt.format(n)`` with their values
    through ``mb__.text``, which refuses one that differs between examples
    (``runtime.text``)."""
    func = node.func
    if isinstance(func, gast.Name) and func.id in _TEXT_CALLS:
        if node.args and not isinstance(node.args[0], gast.Starred):
            node.args[0] = _text(node.args[0], f"{func.id}()")
    elif isinstance(func, gast.Attribute) and func.attr in ("format", "format_map"):
        node.args = [a if isinstance(a, gast.Starred) else _text(a, f"str.{func.attr}()")
                     for a in node.args]
        for keyword in node.keywords:
            keyword.value = _text(keyword.value, f"str.{func.attr}()")


def _text(value: Any, what: str) -> Any:
    if isinstance(value, gast.Constant):
        return value
    return templates.replace_expr("mb__.text(value, what)", origin=value, value=value,
                                  what=templates.constant(what))


def _held_syntax(arg: Any) -> bool:
    """Whether ``arg`` reads an existing object: a name (not the rewriting's own), an
    attribute or an item."""
    if isinstance(arg, gast.Name):
        return not naming.is_reserved(arg.id)
    return isinstance(arg, gast.Attribute) or (
        isinstance(arg, gast.Call) and _runtime_call(arg) == "get_item")


def _name(func: Any) -> str:
    return func.id if isinstance(func, gast.Name) else getattr(func, "attr", "")


def _iterator_reader(func: Any) -> bool:
    """``next(...)``, ``iter(...)``, ``islice(...)``, ``itertools.islice(...)``."""
    return ((isinstance(func, gast.Name) and func.id in ("next", "iter", "islice"))
            or (isinstance(func, gast.Attribute) and func.attr == "islice"))


def _made_here(node: Any) -> bool:
    """Whether ``node`` is a call that makes a new object (``iter(xs)``, ``self.parameters()``),
    not one reading an existing one (``its[0]``, ``getattr(self, 'it')``)."""
    return (isinstance(node, gast.Call) and _runtime_call(node) in (None, "call")
            and _name(node.func) != "getattr")


def _type_call(node: Any) -> bool:
    return (isinstance(node, gast.Call) and isinstance(node.func, gast.Name)
            and node.func.id == "type" and len(node.args) == 1 and not node.keywords)


def _for_iterables(node: Any) -> list[int]:
    """The ids of the calls in ``node`` that ``control_flow._iterable`` takes to the runtime
    (a ``for``'s or a fold's ``zip(a, b)``, ``enumerate(zip(...))``), which this pass leaves."""
    if not (isinstance(node, gast.Call) and isinstance(node.func, gast.Name)
            and node.func.id in _ITERATORS):
        return []
    return [id(node)] + [i for arg in node.args for i in _for_iterables(arg)]


def _fold_sequence(node: Any) -> Any:
    """The sequence argument of a fold (``sum(zip(a, b))``), else None."""
    if not _lowered_callable(node.func) or _name(node.func) not in _FOLDS:
        return None
    position = 1 if _name(node.func) == "reduce" else 0
    return node.args[position] if len(node.args) > position else None


class _BuiltinCalls(names.ScopeTransformer):
    # A user's lambda too (``lambda: len(items)``, ``lambda v: add(v)``): what this pass
    # writes looks the callable and the mask up when the call runs.
    enters_lambdas = True

    def __init__(self) -> None:
        super().__init__()
        self._for_iterables: set[int] = set()
        self._shown = 0  # inside a print's, logging call's, assert's or raise's arguments

    def visit_Raise(self, node: Any) -> Any:
        self._shown += 1
        self.generic_visit(node)
        self._shown -= 1
        return node

    def visit_JoinedStr(self, node: Any) -> Any:
        self.generic_visit(node)
        if not self._shown:
            for part in node.values:
                if isinstance(part, gast.FormattedValue):
                    part.value = _text(part.value, "an f-string")
        return node

    def visit_BinOp(self, node: Any) -> Any:
        self.generic_visit(node)
        if (not self._shown and isinstance(node.op, gast.Mod)
                and isinstance(node.left, gast.Constant) and isinstance(node.left.value, str)):
            node.right = _text(node.right, "%-formatting")
        return node

    def visit_For(self, node: Any) -> Any:
        self._for_iterables.update(_for_iterables(node.iter))
        return self.generic_visit(node)

    def visit_AnnAssign(self, node: Any) -> Any:
        # A local variable's annotation is never evaluated: left as written.
        node.target = self.visit(node.target)
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_Call(self, node: Any) -> Any:
        self._for_iterables.update(_for_iterables(_fold_sequence(node)))
        shown = _shows_text(node)
        self._shown += shown
        self.generic_visit(node)
        self._shown -= shown
        if zip_of_rows(node):
            return rows_zipped(node)
        _check_spreads(node)
        if not self._shown:
            _check_text(node)
        if isinstance(node.func, gast.Attribute) and node.func.attr in _WHOLE_READS:
            node.args = [a if isinstance(a, gast.Starred) else _whole(a, f"{node.func.attr}()")
                         for a in node.args]
        runtime = _runtime_call(node)
        if runtime in ("not_", "if_exp") and node.args:
            node.args[0] = _truth(node.args[0], "truth")
            return node
        if runtime in ("and_", "or_") and node.args:
            node.args[0] = _truth(node.args[0], "operand")
            return node
        if _lowered_callable(node.func) and not any(
                isinstance(a, gast.Starred) for a in node.args):
            new = templates.replace_expr("mb__.call(function)", origin=node, function=node.func)
            args = list(node.args)
            # The sequence a fold reads: range/enumerate/zip/reversed as a for
            # statement's (``sum(range(n))`` with per-example ``n``).
            position = 1 if _name(node.func) == "reduce" else 0
            if _name(node.func) in _FOLDS and len(args) > position:
                args[position] = _iterable(args[position])
            new.args.extend(args)
            new.keywords.extend(node.keywords)
            return new
        if (isinstance(node.func, gast.Attribute) and node.func.attr == "item"
                and not node.args and not node.keywords):
            return templates.replace_expr("mb__.item(obj)", origin=node, obj=node.func.value)
        if isinstance(node.func, gast.Attribute) and node.func.attr == "unbind":
            new = templates.replace_expr("mb__.unbind(owner)", origin=node,
                                         owner=node.func.value)
            new.args.extend(node.args)
            new.keywords.extend(node.keywords)
            return new
        if _routed(node) and id(node) not in self._for_iterables:
            new = templates.replace_expr("mb__.call(function)", origin=node, function=node.func)
            new.args.extend(_held(a) for a in node.args)
            for keyword in node.keywords:
                if keyword.arg is not None:
                    keyword.value = _held(keyword.value)
            new.keywords.extend(node.keywords)
            return new
        return node

    def visit_List(self, node: Any) -> Any:
        # ``[*it]``, ``(*it,)``, ``{*it}``: the display reads the iterator whole.
        self.generic_visit(node)
        if isinstance(getattr(node, "ctx", gast.Load()), gast.Load):
            for element in node.elts:
                if isinstance(element, gast.Starred):
                    element.value = _whole(element.value, "a starred item ([*it])")
        return node

    visit_Tuple = visit_Set = visit_List

    def visit_If(self, node: Any) -> Any:
        self.generic_visit(node)
        node.test = _truth(node.test, "truth")
        return node

    visit_While = visit_If

    def visit_Assign(self, node: Any) -> Any:
        self.generic_visit(node)
        (target, *more) = node.targets
        if (more or not isinstance(target, (gast.Tuple, gast.List))
                or isinstance(node.value, (gast.Tuple, gast.List))):
            return node  # one target, not a swap of a literal tuple (``a, b = b, a``)
        stars = [i for i, e in enumerate(target.elts) if isinstance(e, gast.Starred)]
        node.value = templates.replace_expr(
            "mb__.unpack(value, count, star)", origin=node,
            value=_whole(node.value, "unpacking (a, b = it)"),
            count=templates.constant(len(target.elts)),
            star=templates.constant(stars[0] if stars else None))
        return node

    def visit_Subscript(self, node: Any) -> Any:
        self.generic_visit(node)
        if not isinstance(node.ctx, gast.Load) or isinstance(node.slice, gast.Tuple):
            return node
        return templates.replace_expr("mb__.get_item(obj, index)", origin=node, obj=node.value,
                                      index=index_expression(node.slice))

    def visit_Compare(self, node: Any) -> Any:
        self.generic_visit(node)
        if len(node.ops) != 1 or type(node.ops[0]) not in _TYPE_COMPARISONS:
            return node
        left, right = node.left, node.comparators[0]
        if not _type_call(left):
            left, right = right, left
            if not _type_call(left):
                return node
        op = templates.constant(_TYPE_COMPARISONS[type(node.ops[0])])
        return templates.replace_expr("mb__.compare_type(type_fn, obj, op, other)", origin=node,
                                      type_fn=left.func, obj=left.args[0], op=op, other=right)


def _check_spreads(node: Any) -> None:
    """``f(*items)`` as ``f(*mb__.spread(f, items))``: refused a list some of whose items
    a running example does not have (``runtime.star_args``).  The callee is read again
    where it is a name or an attribute; another (``fs[0](*items)``) is not known."""
    if not any(isinstance(a, gast.Starred) for a in node.args):
        return
    callee = node.func
    runtime = _runtime_call(node)
    if runtime is not None:
        if runtime not in ("iter_zip", "iter_enumerate", "iter_range", "iter_reversed"):
            return  # (what the rewriting wrote spreads nothing of the user's)
        callee = node.args[0]  # mb__.iter_zip(zip, a, *rows), a for's or comprehension's
    if not _plain_reference(callee):
        callee = templates.constant(None)
    for arg in node.args:
        if isinstance(arg, gast.Starred):
            arg.value = templates.replace_expr("mb__.spread(fn, items)", origin=arg, fn=callee,
                                               items=_whole(arg.value, "a spread (f(*it))"))


def _plain_reference(node: Any) -> bool:
    """A name, or attributes of a name (``f``, ``self.cell``, ``torch.max``)."""
    while isinstance(node, gast.Attribute):
        node = node.value
    return isinstance(node, gast.Name)


def _runtime_call(node: Any) -> str | None:
    """The name of the runtime helper a call ``mb__.name(...)`` calls, else None."""
    func = node.func
    if (isinstance(func, gast.Attribute) and isinstance(func.value, gast.Name)
            and func.value.id == naming.RUNTIME):
        return func.attr
    return None


def _truth(test: Any, helper: str) -> Any:
    """A condition that may be a list (a name, an attribute, an item): through
    ``mb__.truth`` (each example's own list's emptiness) or ``mb__.operand`` (an
    ``and``/``or`` operand: refused for a list only some examples' items)."""
    if isinstance(test, gast.Name) and naming.is_reserved(test.id):
        return test  # a flag the rewriting made (break, continue, return)
    if isinstance(test, (gast.Name, gast.Attribute)) or (
            isinstance(test, gast.Call) and _runtime_call(test) == "get_item"):
        return templates.replace_expr(f"mb__.{helper}(test)", origin=test, test=test)
    return test


def transform(function: Any, ctx: Context) -> None:
    visitor = _BuiltinCalls()
    function.body = [s for statement in function.body
                     for s in _as_list(visitor.visit(statement))]


def _as_list(result: Any) -> list[Any]:
    return result if isinstance(result, list) else [result]
