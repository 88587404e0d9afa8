"""Calls of Python builtins whose answer differs between examples.

The rewriting (``converters.builtin_calls``) routes calls written with these
names through :func:`call`, which looks the callable up at run time (the name
may be rebound) and runs the per-example version of the ones below; any other
callable is called as it is.

| callable                              | per example                        |
|---------------------------------------|------------------------------------|
| ``sum``, ``max``, ``min``, ``any``, ``all``, ``functools.reduce`` | ``folds`` |
| ``len``                               | ``sequences.length``               |
| ``copy.deepcopy``                     | ``sequences.deep_copy``            |
| ``int``, ``float``, ``bool``          | ``scalars``                        |
| ``round``, ``divmod``, ``math.*``,    | ``python_numbers`` (``round(v)``;  |
| ``torch.tensor([a, b])``              | the others refused, saying how)    |
| ``isinstance``, ``torch.is_tensor``   | ``type_tests`` (warns for a batch) |
| ``map`` of steps only some examples   | a generator, as ``(f(s) for s in   |
| have (``map(f, x.unbind(1))``)        | steps)`` (``comprehensions``)      |
| ``itertools.starmap``/``accumulate``  | ``iterables`` (a deque of such     |
| of such steps, ``collections.deque``  | steps refused)                     |

Every other call of the rewritten code reaches :func:`call` too (``converters.builtin_calls``),
for the Python lists it hands over.  A list's ``append``/``extend``/``+=`` reached some other
way than ``items.append(v)`` (``add = items.append; add(v)``, ``list.append(items, v)``,
``items.__iadd__([v])``, ``operator.iadd(items, [v])``, ``getattr(items, "append")(v)``, a
lambda) appends for the running examples only, as ``items.append(v)`` does;
``operator.setitem(d, k, v)`` writes as ``d[k] = v``, ``operator.delitem`` and the other
in-place operators as ``del d[k]`` and ``s |= v`` (refused under a per-example condition).
``iter(it)``/``itertools.islice(it, n)`` of a shared iterator are refused there as ``next``
is, and ``zip``/``enumerate`` outside a ``for`` of a list some of whose examples' items are
not their first ones.  A function that
``@batch`` did not rewrite (a helper without the decorator) cannot keep a list per example:
it is refused a list whose items only some examples have, and, under a per-example
condition, any list (it may append to it for every example), saying to decorate it; what
it returns is refused where a running example has no value in it (the last state of a
loop it ran past the example's end: ``helper_results``).
"""

from __future__ import annotations

import bisect
import builtins
import collections
import copy
import functools
import heapq
import inspect
import itertools
import operator
import random
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from matchbox.control.runtime import (
    comprehensions,
    folds,
    iterables,
    python_numbers,
    scalars,
    sequences,
    type_tests,
)
from matchbox.control.runtime.columns import Column
from matchbox.control.runtime.dict_keys import refuse_partial_keys
from matchbox.control.runtime.effects import (
    CONTAINER_WRITES,
    SHARED_TYPES,
    aug_assign,
    call_method,
    delete_item,
    set_item,
)
from matchbox.control.runtime.helper_results import (
    PYTHON_CALLABLES,
    forward_of,
    needs_no_checks,
    refuse_absent_examples,
    rewritten,
)
from matchbox.control.runtime.masks import current_mask
from matchbox.control.runtime.select import user_line
from matchbox.extending import fails
from matchbox.masked_batch import MaskedBatch

_LOWERED: dict[Any, Callable[..., Any]] = {
    builtins.sum: folds.sum_, builtins.max: folds.max_, builtins.min: folds.min_,
    builtins.any: folds.any_, builtins.all: folds.all_, functools.reduce: folds.reduce_,
    builtins.len: sequences.length, copy.deepcopy: sequences.deep_copy,
    builtins.int: scalars.int_, builtins.float: scalars.float_, builtins.bool: scalars.bool_,
    builtins.isinstance: type_tests.isinstance_, torch.is_tensor: type_tests.is_tensor,
    builtins.round: python_numbers.round_, builtins.divmod: python_numbers.divmod_,
}

#: The names a call may be written with to reach :func:`call` (a function's own
#: name, or the attribute of a module: ``functools.reduce``, ``torch.is_tensor``).
NAMES = frozenset({"sum", "max", "min", "any", "all", "len", "int", "float", "bool",
                   "isinstance", "reduce", "is_tensor"})
ATTRIBUTES = frozenset({"reduce", "is_tensor"})


def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, per example where ``fn`` is one of the builtins above, and
    with the Python lists it is given kept per example (see the module docstring)."""
    kind = type(fn)
    key = (fn.__func__ if kind is types.MethodType and type(fn.__self__) not in SHARED_TYPES
           else (fn.__dict__.get("forward") or kind.forward)  # (forward_of's, inline)
           if isinstance(fn, torch.nn.Module) else None)
    if key is not None:  # a method or a module: called as it is where nothing is to check
        plain = needs_no_checks(fn, key)
        if plain:
            if current_mask() is None or not _some_held_or_container(args, kwargs):
                return fn(*args, **kwargs)
        elif plain is None and not _some_held_or_container(args, kwargs):
            # a helper: only its own reads (under a condition) and its result to check
            if current_mask() is not None:
                iterables.refuse_unseen_iterators(fn)
            result = fn(*args, **kwargs)
            refuse_absent_examples(fn, result)
            return result
    if current_mask() is not None and (iterables.Held in map(type, args) or (
            kwargs and iterables.Held in map(type, kwargs.values()))):
        args, kwargs = iterables.hand_over(fn, args, kwargs, _reads_per_example)
    try:
        lowered, unbound = _LOWERED.get(fn), _UNBOUND_WRITES.get(fn)
    except TypeError:  # an unhashable callable
        lowered = unbound = None
    if lowered is not None:
        return lowered(*args, **kwargs)
    if isinstance(fn, functools.partial):  # what it holds is handed over as the arguments are
        return call(fn.func, *fn.args, *args, **{**fn.keywords, **kwargs})
    owner = getattr(fn, "__self__", None)
    if type(owner) in SHARED_TYPES:
        return _container_method(owner, getattr(fn, "__name__", ""), args, kwargs)
    if unbound is not None and args and type(args[0]) in SHARED_TYPES:
        return _container_method(args[0], unbound, args[1:], kwargs)
    if (unbound is not None and args and type(args[0]) in _PLAIN_TENSORS
            and current_mask() is not None):
        _refuse_a_plain_tensor_write(fn)
    if args or kwargs:
        python_numbers.refuse_number_functions(fn, args, kwargs)
        _refuse_lists_to_unconverted(fn, args, kwargs)
        if args and isinstance(args[0], dict) and fn in _KEY_READERS:
            refuse_partial_keys(args[0], f"{fn.__name__}()")
    helper = type(fn) in PYTHON_CALLABLES or isinstance(fn, torch.nn.Module)
    if helper and current_mask() is not None:
        iterables.refuse_unseen_iterators(fn)  # self.it, a global or closed-over iterator it reads
    result = fn(*args, **kwargs)
    if helper:
        refuse_absent_examples(fn, result)  # a helper's loop run past an example's end
    return result


def _some_held_or_container(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether an argument is a held iterator, a container, a bound method of one, a column."""
    for value in args:
        if type(value) in _HELD_OR_REFUSED:
            return True
    return bool(kwargs) and any(type(v) in _HELD_OR_REFUSED for v in kwargs.values())




def _reads_per_example(fn: Any) -> bool:
    """Whether ``fn`` is code ``@batch`` rewrote (a decorated function, a lambda or method
    of one, a module whose ``forward`` is decorated), whose reads are per example."""
    if isinstance(fn, functools.partial):
        fn = fn.func
    fn = forward_of(fn) if isinstance(fn, torch.nn.Module) else fn
    function = getattr(fn, "__func__", fn)
    return inspect.isfunction(function) and (
        getattr(function, "__matchbox_batch__", False) or rewritten(function))


# A container's in-place operators, as an augmented assignment writes them.
_AUGMENTED = {"__iadd__": "+=", "__isub__": "-=", "__imul__": "*=", "__ior__": "|=",
              "__iand__": "&=", "__ixor__": "^="}

# Unbound spellings of a container's writes: ``list.append(items, v)``, ``dict.__setitem__``,
# and ``operator``'s (``operator.setitem(d, k, v)``, ``operator.iadd``, ``iconcat``, ``ior``).
_UNBOUND_WRITES: dict[Any, str] = {
    **{getattr(kind, name): name for kind in SHARED_TYPES
       for name in (*CONTAINER_WRITES, *_AUGMENTED, "__setitem__", "__delitem__")
       if hasattr(kind, name)},
    **{getattr(operator, name.replace("__", "")): name
       for name in (*_AUGMENTED, "__setitem__", "__delitem__")},
    operator.iconcat: "__iadd__",
}


def _container_method(obj: Any, name: str, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
    """A method of a list or dict called as a value: its writes as ``obj.name(...)``'s,
    ``obj[k] = v``'s, ``del obj[k]``'s and ``obj op= v``'s (for the running examples, or
    refused under a per-example condition, as those statements are)."""
    if not kwargs:
        if name == "__setitem__" and len(args) == 2:
            set_item(current_mask(), obj, *args)
            return None
        if name == "__delitem__" and len(args) == 1:
            delete_item(current_mask(), obj, *args)
            return None
        if name in _AUGMENTED and len(args) == 1:
            return aug_assign(current_mask(), _AUGMENTED[name], obj, args[0],
                              type(obj).__name__)
    if name in CONTAINER_WRITES:
        return call_method(current_mask(), obj, name, *args, **kwargs)
    if name in _KEY_READS and isinstance(obj, dict):
        refuse_partial_keys(obj, f"dict.{name}()")
    elif name == "get" and args and isinstance(obj, dict):  # its default, for some examples
        refuse_partial_keys(obj, "dict.get()", args[0])
    return getattr(obj, name)(*args, **kwargs)


# A dict's methods and the builtins that read its keys (refused where a running example
# lacks a key added under a per-example condition: ``dict_keys``).
_KEY_READS = frozenset({"keys", "values", "items", "copy", "__len__", "__contains__",
                        "__iter__"})
_KEY_READERS = frozenset({builtins.list, builtins.tuple, builtins.sorted, builtins.set,
                          builtins.frozenset, builtins.dict, builtins.iter,
                          builtins.enumerate, builtins.zip, builtins.reversed})


def _refuse_lists_to_unconverted(fn: Any, args: tuple[Any, ...],
                                 kwargs: dict[str, Any]) -> None:
    """Refuse a list that a function ``@batch`` did not rewrite would get wrong: one it is
    given, or one it closes over (a factory's inner function)."""
    function = getattr(fn, "__func__", fn)
    if not inspect.isfunction(function):
        _refuse_container_writes_as_values(fn, args, kwargs)
        return
    if function.__closure__ is None and not _some_container(args, kwargs):
        return  # nothing it could be refused (a model's own method: self.cell(x, h))
    if getattr(function, "__matchbox_batch__", False) or rewritten(function):
        return
    module = (getattr(function, "__module__", None) or "").partition(".")[0]
    if module in ("torch", "matchbox") or function in _COPIES:
        return
    masked = current_mask() is not None
    for value in (*args, *kwargs.values()):
        if type(value) in _MAY_BE_REFUSED:
            _refuse_list_to(function, value, "is given", masked)
    if function.__closure__:
        # A container it closes over only where its code may write one (``items.append``):
        # a factory's function reading its list of layers or its config is common.
        writes = masked and may_write_a_container(function.__code__)
        for value in closed_over(function):
            if type(value) in _MAY_BE_REFUSED:
                _refuse_list_to(function, value, "closes over", writes)


# ``copy.copy(items)``: a new list of the same items, each keeping the record of the
# examples that have it, as ``list(items)`` does (``copy.deepcopy``: ``sequences``).
_COPIES = frozenset({copy.copy})

# What ``_refuse_list_to`` may refuse: lists, dicts, sets, deques, their bound methods, and
# the columns of ``zip(*rows)`` (``runtime.columns``).
_MAY_BE_REFUSED = frozenset({*SHARED_TYPES, types.BuiltinMethodType, Column})
_HELD_OR_REFUSED = _MAY_BE_REFUSED | {iterables.Held}


def _some_container(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    for value in args:
        if type(value) in _MAY_BE_REFUSED:
            return True
    return bool(kwargs) and any(type(v) in _MAY_BE_REFUSED for v in kwargs.values())


def _refuse_list_to(function: types.FunctionType, value: Any, how: str, masked: bool) -> None:
    """Refuse ``value``, which ``function`` (not rewritten) ``how`` ('is given', 'closes
    over'), where it is a list only some examples' items are in, or, ``masked`` (under a
    per-example condition), any list or dict or a write method of one."""
    name = getattr(function, "__qualname__", "the function")
    if (type(value) is list or type(value) is Column) and sequences.has_records(value):
        what = "a column of zip(*rows)" if type(value) is Column else "a list"
        raise NotImplementedError(
            f"@batch: {name}() {how} {what} whose items only some examples have "
            f"({user_line()}), but @batch did not rewrite {name}: its len(), [i] and "
            "loops would see every example's items, padding included. Decorate "
            f"{name} with @matchbox.batch, which keeps each example's own items")
    if masked and (type(value) in SHARED_TYPES or _container_write(value)):
        raise NotImplementedError(
            f"@batch: {name}() {how} a Python {type(value).__name__} under a "
            f"per-example condition ({user_line()}), but @batch did not rewrite {name}: "
            "the container is shared by every example, so what it writes there (an "
            "append) would happen for the examples that do not run this code too. "
            f"Decorate {name} with @matchbox.batch, or write to the container here")


@functools.cache
def may_write_a_container(code: types.CodeType) -> bool:
    """Whether ``code`` (or code nested in it) calls a method that writes a list, dict,
    set or deque by name, or an augmented assignment or item write could reach one."""
    if _WRITE_NAMES.intersection(code.co_names):
        return True
    return any(isinstance(c, types.CodeType) and may_write_a_container(c)
               for c in code.co_consts)


# The names by which code writes a container: its write methods, item and augmented
# writes, and the runtime's in code the rewriting made (``mb__.call_method(mask, items,
# 'append', v)``: the method's name is then a constant).
_WRITE_NAMES = CONTAINER_WRITES | {
    "__setitem__", "__iadd__", "__ior__", "setitem", "iadd", "ior",
    "call_method", "set_item", "aug_item", "aug_assign", "delete_item"}


def closed_over(function: types.FunctionType) -> Iterator[Any]:
    """The values of the variables ``function`` closes over (a factory's ``items``)."""
    for cell in function.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:  # a variable not yet assigned
            continue


def _container_write(value: Any) -> bool:
    """Whether ``value`` is a list's or dict's write method (``items.append``)."""
    # A bound list or dict method is a builtin method; asking anything else (a batch)
    # for ``__self__`` costs an AttributeError.
    return (type(value) is types.BuiltinMethodType
            and type(getattr(value, "__self__", None)) in SHARED_TYPES
            and getattr(value, "__name__", "") in CONTAINER_WRITES)


def _refused_under_a_condition(fn: Any) -> Callable[..., Any]:
    """``fn``, which changes what it is given first in place (a heap, a sorted list, an
    iterator), refused under a per-example condition: the Python object is shared by every
    example, and the call would change it for all of them."""

    def changing(*args: Any, **kwargs: Any) -> Any:
        if args and current_mask() is not None:
            _refuse_a_shared_write(fn, args[0])
        return fn(*args, **kwargs)

    return changing


# As the builtins above, through the same table: ``heapq.heappush(heap, v)``, ``next(it)``.
_LOWERED.update({fn: _refused_under_a_condition(fn) for fn in (
    heapq.heappush, heapq.heappop, heapq.heappushpop, heapq.heapreplace, heapq.heapify,
    bisect.insort, bisect.insort_left, bisect.insort_right, random.shuffle, builtins.next)})


def _reading_a_shared_iterator(fn: Any) -> Callable[..., Any]:
    """``fn``, which reads the iterator it is given first (``iter(it)`` is ``it`` itself,
    ``itertools.islice(it, n)``), refused under a per-example condition where that is an
    iterator, shared by every example; of a list (a new iterator) it is not refused.  The
    rewriting leaves ``islice(self.parameters(), n)`` (an iterator made in the call, shared by
    nothing) unrouted, as ``next``'s (``converters.builtin_calls``)."""

    def reading(*args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], Iterator) and current_mask() is not None:
            _refuse_a_shared_write(fn, args[0])
        if args and type(args[0]) is list and sequences.has_records(args[0]):
            _refuse_items_out_of_place(fn, args[0])  # (its first items by position)
        return fn(*args, **kwargs)

    return reading


def _pairing(fn: Any) -> Callable[..., Any]:
    """``zip``/``enumerate`` outside a ``for``, a comprehension or a fold (``list(zip(a, b))``):
    refused a list whose items only some examples have where an example's items are not
    its first ones (appended under a condition in a loop: it has items 0 and 2), which it
    would pair by position across every example's items (a ``for`` moves each example's
    own first).  Where each example's items come first (a comprehension over
    ``x.unbind(1)``), position ``i`` is each example's item ``i``, as in the loop."""

    def pairing(*args: Any, **kwargs: Any) -> Any:
        for a in args:
            if type(a) is list and sequences.has_records(a):
                _refuse_items_out_of_place(fn, a)
        return fn(*args, **kwargs)

    return pairing


def _refuse_items_out_of_place(fn: Any, items: list[Any]) -> None:
    """Refuse ``fn`` of ``items`` if some example has an item after one it lacks."""
    present = sequences.per_example_presence(items)
    if present is None or len(items) < 2:
        return
    later = present[1:] & ~present[:-1]  # an item an example has after one it lacks

    def error() -> NotImplementedError:
        return NotImplementedError(
            f"@batch: {fn.__name__}() ({user_line()}) of a list some of whose examples' "
            "items are not their first ones (appended under a per-example condition): it "
            "takes the items by position across every example's items, where each example's "
            "own differ; " + (
                f"write the {fn.__name__} in a for statement or a comprehension, which pairs "
                "each example's own" if fn in (builtins.zip, builtins.enumerate) else
                "loop over the list itself (for v in items), which takes each example's own"))

    if fails(later, error):
        raise error()


_LOWERED.update({fn: _pairing(fn) for fn in (builtins.zip, builtins.enumerate)})


def _map(fn: Any, *iterables: Any, **kwargs: Any) -> Any:
    """``map(fn, steps)`` as the generator ``(fn(s) for s in steps)``, per example: each
    example's own items, recorded as a comprehension's (``runtime.comprehensions``), so
    that ``list(map(f, x.unbind(1)))[-1]`` is each example's own last result (the builtin
    calls ``fn`` on every step, and the results record nothing: the last was a step past
    the shorter examples' end, silently).  Over several iterables, of their ``zip``.  The
    builtin itself where no iterable can hold items only some examples have."""
    if current_mask() is not None:
        _refuse_container_writes_as_values(builtins.map, (fn, *iterables), {})
    if kwargs or not iterables or not any(_stepped(it) for it in iterables):
        return builtins.map(fn, *iterables, **kwargs)
    if len(iterables) == 1:
        return comprehensions.gen_exp(comprehensions.comp_for(
            iterables[0], None, lambda guard, item: call(fn, guard(item))))
    return comprehensions.gen_exp(comprehensions.comp_for(
        call(builtins.zip, *iterables), (None,) * len(iterables),
        lambda guard, *items: call(fn, *map(guard, items))))


def _stepped(iterable: Any) -> bool:
    """Whether ``iterable`` may hold items only some examples have: a list or tuple of
    such items (recorded, or batches with a mask), or a lazy iterable."""
    if type(iterable) is list or type(iterable) is tuple:
        return any(type(item) is MaskedBatch and (item._present is not None
                                                  or item._mask is not None)
                   for item in iterable)
    return isinstance(iterable, Iterator)


_LOWERED[builtins.map] = _map
# ``itertools.starmap``/``accumulate`` of steps, per example as ``map`` is; a deque of them
# refused (``runtime.iterables``).
_LOWERED.update({itertools.starmap: functools.partial(iterables.starmap_, call),
                 itertools.accumulate: functools.partial(iterables.accumulate_, call),
                 collections.deque: iterables.deque_})

# ``next(iter(it))``: ``iter`` of an iterator is the iterator, which ``next`` then advances.
_LOWERED.update({fn: _reading_a_shared_iterator(fn) for fn in (builtins.iter, itertools.islice)})
_ADVANCING = frozenset({builtins.next, builtins.iter, itertools.islice})


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _refuse_a_plain_tensor_write(fn: Any) -> None:
    """``operator.setitem(t, i, v)``, ``operator.iadd(t, v)`` of a plain tensor under a
    per-example condition: no variable to make a batch of (as ``t[i] = v`` makes one)."""
    name = getattr(fn, "__name__", "the write")
    raise NotImplementedError(
        f"@batch: {name}() of a plain tensor under a per-example condition ({user_line()}) "
        "would change it for every example, also for those that do not run this code; "
        f"write the statement ({'t[i] = v' if 'setitem' in name else 't += v'}), which "
        "@batch rewrites for the running examples, or make the tensor a batch")


def _refuse_a_shared_write(fn: Any, target: Any) -> None:
    name = f"{getattr(fn, '__module__', None) or 'builtins'}.{fn.__name__}".removeprefix(
        "builtins.").removeprefix("_")
    verb = "advance" if fn in _ADVANCING else "change"
    raise NotImplementedError(
        f"@batch: {name}() under a per-example condition ({user_line()}): the "
        f"{type(target).__name__} it {verb}s is shared by every example, so it would {verb} "
        "for the examples that do not run this code too. Call it where every example runs "
        "it, or keep the per-example values in a list (items.append) or a tensor")


def _refuse_container_writes_as_values(fn: Any, args: tuple[Any, ...],
                                       kwargs: dict[str, Any]) -> None:
    """``map(items.append, values)`` under a per-example condition: the builtin calls the
    write for every example."""
    if not _some_container(args, kwargs) or current_mask() is None:
        return  # (a module called on tensors: self.cell(x, h))
    if any(_container_write(v) for v in (*args, *kwargs.values())):
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", "the callable"))
        raise NotImplementedError(
            f"@batch: a list's or dict's write method is given to {name}() under a "
            f"per-example condition ({user_line()}): {name} would call it for every "
            "example, also those that do not run this code. Write the loop out here "
            "(for v in values: items.append(v)), which appends for the running examples")
