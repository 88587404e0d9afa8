"""``itertools.starmap``, ``itertools.accumulate`` and ``collections.deque`` of steps that
only some examples have.

In the loop over examples each of these sees the example's own items.  Of a batch's
steps (``x.unbind(1)`` along a dynamic dimension, a comprehension over them, a list
appended under a per-example condition) the builtins see every example's items, and
what they make records nothing: ``len(list(itertools.accumulate(x.unbind(1))))`` was
the longest example's count for every example, silently.  Routed through
``runtime.calls.call`` (as ``map`` is), the calls below run per example:

| call                                   | per example                               |
|----------------------------------------|-------------------------------------------|
| ``itertools.starmap(f, steps)``        | the generator ``(f(*s) for s in steps)``  |
|                                        | (``comprehensions``): its own results,    |
|                                        | recorded                                  |
| ``itertools.accumulate(steps[, f],``   | its own running totals (``f`` folded over |
| ``initial=...)``                       | its own items, as ``functools.reduce``    |
|                                        | does: ``folds``), recorded                |
| ``collections.deque(steps[, maxlen])``,| ``NotImplementedError`` where a running   |
| a deque's ``append``/``extend`` (and   | example lacks an item: a deque cannot     |
| ``...left``) of such items             | keep which examples have one (its         |
|                                        | ``len``, ``[i]`` and ``maxlen`` would     |
|                                        | count every example's); write a list      |

Of items every example has, each is the builtin itself.

:func:`shared_iterable` refuses an iterator held by a variable, an attribute or an item
(``for v in it``, ``[f(v) for v in self.it]``, ``sum(it)``) that a ``for``, a comprehension
or a fold reads under a per-example condition: it is one object shared by every example, so
reading it would advance it for the examples that do not run this code too (as ``next(it)``
would, which ``runtime.calls`` refuses there).  Any other call under a per-example condition
that is given such an iterator (``list(it)``, ``tuple(it)``, ``sorted(it)``, ``map(f, it)``,
``itertools.takewhile(p, it)``, ``",".join(it)``, a helper ``@batch`` did not rewrite) is
refused the same way: the rewriting writes an argument held by a name, an attribute or an
item as ``mb__.held(it)`` (``converters.builtin_calls``), which marks a shared iterator under
a per-example condition for :func:`hand_over`.  A function ``@batch`` rewrote is handed the
iterator (its own reads are refused there), and so are the calls that do not read it
(``isinstance(it, T)``, ``id(it)``).
"""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import operator
import types
from collections.abc import Callable, Iterator
from typing import Any

from matchbox.control.runtime import comprehensions
from matchbox.control.runtime.dict_keys import refuse_partial_keys
from matchbox.control.runtime.folds import _Fold
from matchbox.control.runtime.helper_results import unrewritten
from matchbox.control.runtime.iteration import example_real, for_steps
from matchbox.control.runtime.masks import _MASK, _Masked, guard
from matchbox.control.runtime.select import merge, user_line
from matchbox.control.runtime.sequences import per_example_item, per_example_presence
from matchbox.extending import fails
from matchbox.masked_batch import MaskedBatch

_END = object()


def shared_iterable(iterable: Any) -> Any:
    """``iterable``, which a ``for``, comprehension or fold is to read (the rewriting routes
    one written as a name, attribute or item here, ``converters.control_flow``); refused
    where it is an iterator and the code runs under a per-example condition."""
    if isinstance(iterable, dict):
        refuse_partial_keys(iterable, "a loop over a dict")
    elif isinstance(iterable, Iterator) and _MASK.get() is not None:
        raise NotImplementedError(
            f"@batch: a for statement, comprehension or fold reads a shared "
            f"{type(iterable).__name__} under a per-example condition ({user_line()}): the "
            "iterator is one object shared by every example, so reading it would advance "
            "it for the examples that do not run this code too. Read it where every example "
            "runs (items = list(it) before the condition), then loop over the list")
    return iterable


class Held:
    """A shared iterator given to a call under a per-example condition (:func:`held`), for
    ``calls.call`` to refuse or hand over (:func:`hand_over`)."""

    __slots__ = ("iterator",)

    def __init__(self, iterator: Iterator[Any]) -> None:
        self.iterator = iterator


def held(value: Any) -> Any:
    """An argument of a call written as a name, an attribute or an item (``list(it)``):
    ``value`` itself, or, where it is an iterator and the code runs under a per-example
    condition, marked (:class:`Held`) for the call to decide."""
    if type(value) is MaskedBatch or _MASK.get() is None or not isinstance(value, Iterator):
        return value  # (a batch first: no iterator, and no abc check)
    return Held(value)


def whole(value: Any, what: str) -> Any:
    """``value``, which ``what`` reads whole (``[*it]``, ``a, b = it``, ``f(*it)``,
    ``items.extend(it)``): refused where it is an iterator and the code runs under a
    per-example condition (the rewriting passes only one held by a name, an attribute or
    an item: ``converters.builtin_calls``)."""
    if _MASK.get() is not None and isinstance(value, Iterator):
        _refuse_a_shared_read(what, value)
    return value


#: Calls that may be given a shared iterator under a per-example condition: they do not
#: read it (``next``, ``iter`` and ``islice`` refuse it themselves: ``runtime.calls``).
NOT_READING = frozenset({id, type, callable, repr, hash, isinstance, issubclass, bool, len,
                         next, iter, itertools.islice})


def hand_over(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
              rewritten: Callable[[Any], bool]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` of ``fn(...)`` with each :class:`Held` iterator handed over
    where ``fn`` does not read it or reads it per example (``rewritten(fn)``: code ``@batch``
    rewrote), else refused: ``fn`` would advance it for every example."""
    marked = [v.iterator for v in (*args, *kwargs.values()) if type(v) is Held]
    if marked:
        try:
            handed = fn in NOT_READING
        except TypeError:  # an unhashable callable
            handed = False
        if not (handed or rewritten(fn)):
            _refuse_a_shared_argument(fn, marked[0])
    return (tuple(v.iterator if type(v) is Held else v for v in args),
            {k: v.iterator if type(v) is Held else v for k, v in kwargs.items()})


def _refuse_a_shared_argument(fn: Any, iterator: Iterator[Any]) -> None:
    target = fn.func if isinstance(fn, functools.partial) else fn
    name = getattr(target, "__qualname__", None) or type(target).__name__
    module = getattr(target, "__module__", None)
    if module in ("itertools", "functools", "operator", "collections"):
        name = f"{module}.{name}"
    if isinstance(target, (types.FunctionType, types.MethodType)):
        kind = type(iterator).__name__
        raise NotImplementedError(
            f"@batch: {name}() is given a shared {kind} under a per-example condition "
            f"({user_line()}), and @batch did not rewrite {name}: the iterator is one object "
            "shared by every example, so what it reads of it would advance it for the "
            f"examples that do not run this code too. {_ADVICE}")
    _refuse_a_shared_read(f"{name}()", iterator)


def _refuse_a_shared_read(what: str, iterator: Iterator[Any]) -> None:
    raise NotImplementedError(
        f"@batch: {what} reads a shared {type(iterator).__name__} under a per-example "
        f"condition ({user_line()}): the iterator is one object shared by every example, so "
        f"reading it would advance it for the examples that do not run this code too. "
        f"{_ADVICE}")


_ADVICE = ("Read it where every example runs (items = list(it) before the condition), "
           "then use the list")


def refuse_unseen_reads(fn: Any, owner: Any, function: types.FunctionType,
                        names: tuple[str, ...]) -> None:
    """Refuse a call, under a per-example condition, of ``function`` (a helper ``@batch``
    did not rewrite; ``owner``: what it is bound to, or ``None``; ``names``: the global
    and attribute names its code reads, :func:`code_names`) where it reaches a shared
    iterator without being given it: one it closes over, a global it names, or an
    attribute of ``owner`` it names (``self.it``).  Its reads would advance the iterator
    for the examples that do not run the call too, where no argument shows it to the
    rewriting.  (What it calls in turn is not looked into.)"""
    found = None
    for cell in function.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # a variable not yet assigned
            continue
        if _ITERATOR_TYPES[type(value)]:
            found = ("closes over", value)
    if found is None:
        scope = function.__globals__
        attributes = getattr(owner, "__dict__", None) if owner is not None else None
        for name in names:
            value = scope.get(name)
            if value is not None and _ITERATOR_TYPES[type(value)]:
                found = (f"reads the global {name}, which is", value)
                break
            value = attributes.get(name) if attributes is not None else None
            if value is not None and _ITERATOR_TYPES[type(value)]:
                found = (f"reads self.{name}, which is", value)
                break
    if found is None:
        return
    how, iterator = found
    name = getattr(function, "__qualname__", None) or type(fn).__name__
    raise NotImplementedError(
        f"@batch: {name}() {how} a shared {type(iterator).__name__}, and it is called under "
        f"a per-example condition ({user_line()}), but @batch did not rewrite {name}: the "
        "iterator is one object shared by every example, so what it reads of it would "
        "advance it for the examples that do not run this code too. Decorate "
        f"{name} with @matchbox.batch and pass it the iterator, or {_ADVICE[0].lower()}"
        f"{_ADVICE[1:]}")


class _IteratorTypes(dict):  # type -> whether its objects are iterators, on first use
    def __missing__(self, kind: type) -> bool:
        verdict = self[kind] = issubclass(kind, Iterator)
        return verdict


_ITERATOR_TYPES: dict[type, bool] = _IteratorTypes()

# Types seen to be no iterators (``_ITERATOR_TYPES``), as a set for one subset test.
_NOT_ITERATORS: set[type] = {type(None)}

# An empty cell (a variable not yet assigned) compares equal to no full one.
_EMPTY_CELL = types.CellType()


def names_to_check(function: types.FunctionType) -> tuple[str, ...]:
    """The names of :func:`code_names` of ``function``'s code that may hold an iterator:
    not those of a module, a function or a class in its globals (``torch``, ``F``, a
    helper), which are definitions, not state."""
    scope = function.__globals__
    return tuple(n for n in code_names(function.__code__)
                 if not isinstance(scope.get(n), _DEFINITIONS))


_DEFINITIONS = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


@functools.cache
def code_names(code: types.CodeType) -> tuple[str, ...]:
    """The global and attribute names ``code`` (and code nested in it) reads."""
    names = dict.fromkeys(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.update(dict.fromkeys(code_names(const)))
    return tuple(names)


def stepped(iterable: Any) -> bool:
    """Whether ``iterable`` may hold items only some examples have: a list or tuple one
    of whose items (or a tuple item's parts) is a batch not real for every example or
    records which examples have it, or a lazy iterable."""
    if type(iterable) is list or type(iterable) is tuple:
        return any(example_real(item) is not None for item in iterable)
    return isinstance(iterable, Iterator)


def starmap_(call: Callable[..., Any], function: Any, iterable: Any) -> Any:
    """``itertools.starmap(function, iterable)``: of steps only some examples have, the
    generator ``(function(*s) for s in iterable)``, each example's own results."""
    if not stepped(iterable):
        return itertools.starmap(function, iterable)
    return comprehensions.gen_exp(comprehensions.comp_for(
        iterable, None, lambda guard_, item: call(function, *map(guard_, item))))


def accumulate_(call: Callable[..., Any], iterable: Any, func: Any = None, *,
                initial: Any = None) -> Any:
    """``itertools.accumulate(iterable, func, initial=initial)``: of steps only some
    examples have, each example's own running totals, one item per item it has."""
    if not stepped(iterable):
        return itertools.accumulate(iterable, func, initial=initial)
    return _accumulated(call, iterable, operator.add if func is None else func, initial)


def _accumulated(call: Callable[..., Any], iterable: Any, func: Any,
                 initial: Any) -> Iterator[Any]:
    outer = _MASK.get()
    if initial is not None:
        yield initial
        fold = _Fold(outer, initial)
    else:
        fold = _Fold(outer)
    steps = for_steps(iterable, outer)
    while True:
        with _Masked(outer):  # the iterable's own code runs under the call's mask
            step = next(steps, _END)
        if step is _END:
            return
        mask, item = step
        if fold.started is not False:
            running = fold.later(mask)
            with _Masked(running):
                new = call(func, guard(running, outer, fold.value), guard(running, outer, item))
            fold.value = merge(running, outer, new, fold.value, "itertools.accumulate()")
        fold.first(mask, item, "itertools.accumulate()")
        if mask is outer:
            yield fold.value
        else:
            yield per_example_item(mask, fold.value, "an item of itertools.accumulate()")


def deque_(iterable: Any = (), maxlen: Any = None) -> collections.deque[Any]:
    """``collections.deque(iterable, maxlen)``, refused items only some examples have."""
    items = list(iterable) if isinstance(iterable, Iterator) else iterable
    refuse_in_a_deque(items, "collections.deque()")
    return collections.deque(items, maxlen)


#: A deque's methods that add items, which ``refuse_in_a_deque`` checks.
DEQUE_ADDS = {"append": False, "appendleft": False, "extend": True, "extendleft": True}


def deque_add(obj: collections.deque[Any], name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments of ``obj.name(*args)`` (a deque's ``append``/``extend``...), refused an
    item only some examples have; an iterator ``extend`` reads is read into a list."""
    if len(args) != 1:
        return args
    if not DEQUE_ADDS[name]:
        refuse_in_a_deque((args[0],), f"deque.{name}()")
        return args
    items = list(args[0]) if isinstance(args[0], Iterator) else args[0]
    refuse_in_a_deque(items, f"deque.{name}()")
    return (items,)


def refuse_in_a_deque(items: Any, what: str) -> None:
    """Refuse ``items`` for a deque where a running example lacks one (recorded: a step of
    ``x.unbind(1)`` past its end, an item a comprehension over such steps made): where
    every running example has every item, the deque is every example's own."""
    if type(items) is not list and type(items) is not tuple:
        return
    present = per_example_presence(items)
    if present is None:
        return
    outer = _MASK.get()
    lacking = (~present).any(0)
    if outer is not None:
        lacking = lacking & outer

    line = user_line()  # now: a deferred check makes the error later, elsewhere

    def error() -> NotImplementedError:
        return NotImplementedError(
            f"@batch: {what} ({line}) of items only some examples have (steps of a "
            "dynamic dimension, or a list made from them): a deque cannot keep which "
            "examples have an item, so its len(), [i] and maxlen would count every "
            "example's items, padding included. Keep them in a list (items = list(steps), "
            "window = items[-n:] for a maxlen), which keeps each example's own, or write a "
            "for loop")

    if fails(lacking, error):
        raise error()


def refuse_unseen_iterators(fn: Any) -> None:
    """Refuse ``fn`` (a helper, called under a per-example condition) where it is not code
    ``@batch`` rewrote and reaches a shared iterator it is not given
    (:func:`refuse_unseen_reads`)."""
    if type(fn) is types.MethodType:
        owner, function = fn.__self__, fn.__func__
    elif type(fn) is types.FunctionType:
        owner, function = None, fn
    else:  # an nn.Module
        owner, function = fn, getattr(type(fn), "forward", None)
    code = getattr(function, "__code__", None)
    if type(code) is not types.CodeType:
        return
    names = _UNSEEN.get(code)
    if names is None:
        names = _UNSEEN[code] = (names_to_check(function) if unrewritten(function)
                                 and inspect.isfunction(function) else False)
    if names is False or not (names or function.__closure__):
        return
    # First the types of what it reaches, in C (map): an iterator among them is rare.
    kinds = set(map(type, map(function.__globals__.get, names)))
    attributes = getattr(owner, "__dict__", None) if owner is not None else None
    if attributes is not None:
        kinds.update(map(type, map(attributes.get, names)))
    if function.__closure__:
        kinds.update(type(cell.cell_contents) for cell in function.__closure__
                     if cell != _EMPTY_CELL)
    if kinds <= _NOT_ITERATORS or not any(_ITERATOR_TYPES[kind] for kind in kinds):
        _NOT_ITERATORS.update(kinds)
        return
    refuse_unseen_reads(fn, owner, function, names)


# code object -> the names a helper's code reads, or False for code not checked (code
# @batch rewrote, torch's and Matchbox's).
_UNSEEN: dict[types.CodeType, tuple[str, ...] | bool] = {}
