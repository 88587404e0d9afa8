"""Comprehensions and generator expressions, per example.

In the loop over examples ``[f(x) for x in xs]`` has one item for each of the
example's own steps.  Rewritten (``converters.comprehensions``) it runs like
a ``for`` statement that appends: each clause is a call, the rest of the
comprehension a thunk called for each step under the step's execution mask::

    [f(x) for x in xs if c(x)]
    mb__.list_comp(mb__.comp_for(xs, None, lambda mb__g, x:
        mb__.comp_if(c(mb__g(x)), lambda mb__g: f(x))))

A clause gives a :class:`Stream` of ``(mask, value)`` pairs: each value with
the examples that produce it (the comprehension's own mask where every running
example does).  ``mb__g`` guards the gradients of the function's variables read
in a step, as a region does (``masks.guard``).  Then:

| written              | gives                                                     |
|----------------------|-----------------------------------------------------------|
| ``[...]``            | a list; an item some examples do not have is padding for  |
|                      | them and records it (``sequences``): ``len``, ``[-1]``,    |
|                      | ``for``, ``sum``, ``F.stack(dynamic=True)`` see each       |
|                      | example's own items                                       |
| ``(...)``            | a generator of the same items, lazily                     |
| ``{...}`` (set, dict)| the set or dict where every running example has every     |
|                      | item; otherwise ``NotImplementedError`` (a Python set or  |
|                      | dict cannot hold items for only some examples)            |

Steps are the ``for`` statement's (``iteration.for_steps``).  With plain
iterables and conditions every helper is the Python comprehension itself.
Nothing is yielded while a mask is set: a generator's consumer runs under its
own mask, and each step's code runs under the step's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from matchbox.control.runtime.iteration import for_steps
from matchbox.control.runtime.masks import _MASK, _and, _Masked, condition, guard, nobody
from matchbox.control.runtime.sequences import per_example_item
from matchbox.extending import capturing

_END = object()


class Stream:
    """The ``(mask, value)`` pairs of a comprehension clause."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: Any):
        self.pairs = pairs


_EMPTY = Stream(())


def _unguarded(value: Any) -> Any:
    return value


def _guard_for(mask: Any, outer: Any) -> Callable[[Any], Any]:
    return _unguarded if mask is outer else functools.partial(guard, mask, outer)


def comp_for(iterable: Any, target: Any, body: Callable[..., Any]) -> Stream:
    """``for <target> in iterable`` followed by the rest of the comprehension (``body``).

    ``target`` says how a step unpacks into ``body``'s parameters (after the
    guard): ``None`` for one name, a tuple (of ``None``, tuples and one ``"*"``)
    for a tuple target.
    """
    outer = _MASK.get()
    return Stream(_steps(for_steps(iterable, outer), outer, target, body))


def _steps(steps: Iterator[Any], outer: Any, target: Any,
           body: Callable[..., Any]) -> Iterator[tuple[Any, Any]]:
    while True:
        # A step that raised for no example (``masks.ran_for_nobody``) has no item.
        step = result = _END
        with _Masked(outer):  # the iterable's own code runs under the clause's mask
            step = next(steps, _END)
        if step is _END:
            return
        mask, item = step
        values = (item,) if target is None else tuple(_unpack(item, target))
        with _Masked(mask):
            result = body(_guard_for(mask, outer), *values)
        if result is _END:
            continue
        if type(result) is Stream:
            yield from result.pairs
        else:
            yield mask, result


def comp_if(test: Any, body: Callable[[Any], Any]) -> Stream:
    """``if test`` followed by the rest of the comprehension: per example, a filter."""
    outer = _MASK.get()
    truth = condition(test)
    if truth is False:
        return _EMPTY
    if truth is True:
        mask = outer
    else:
        mask = _and(outer, truth)
        if nobody(mask):
            return _EMPTY
    result = _END  # unless it raised for no example (``masks.ran_for_nobody``)
    with _Masked(mask):
        result = body(_guard_for(mask, outer))
    if result is _END:
        return _EMPTY
    return result if type(result) is Stream else Stream(((mask, result),))


def list_comp(stream: Stream) -> list[Any]:
    """``[...]``: an item some examples do not have is padding for them, recorded."""
    outer = _MASK.get()
    return [value if mask is outer else per_example_item(mask, value,
                                                         "an item of a list comprehension")
            for mask, value in stream.pairs]


def gen_exp(stream: Stream) -> Iterator[Any]:
    """``(...)``: the list comprehension's items, one at a time."""
    outer = _MASK.get()
    for mask, value in stream.pairs:
        yield value if mask is outer else per_example_item(
            mask, value, "an item of a generator expression")


def set_comp(stream: Stream) -> set[Any]:
    outer = _MASK.get()
    return {_for_every_example(mask, outer, value, "set") for mask, value in stream.pairs}


def dict_comp(stream: Stream) -> dict[Any, Any]:
    outer = _MASK.get()
    result = {}
    for mask, (key, value) in stream.pairs:
        result[key] = _for_every_example(mask, outer, value, "dict")
    return result


def _for_every_example(mask: Any, outer: Any, value: Any, kind: str) -> Any:
    if mask is not outer and not _every_running(mask, outer):
        raise NotImplementedError(
            f"@batch: a {kind} comprehension whose items only some examples have (its steps "
            f"or its filter differ between examples): a Python {kind} cannot hold an item "
            "for only some examples. Use a list comprehension, whose items are each "
            "example's own, or a for loop")
    return value


def _every_running(mask: Any, outer: Any) -> bool:
    """Whether a step's mask holds for every running example, read on the host: where
    reads are a device sync, steps run masked even when every example has them, and a
    Python set or dict needs to know (one read per item)."""
    if not isinstance(mask, torch.Tensor) or capturing() is not None:
        return False
    every = mask if outer is None else mask | ~outer
    return bool(every.all())


def _unpack(item: Any, target: Any) -> Iterator[Any]:
    """The values of ``item`` unpacked like the assignment target ``target`` describes."""
    if target is None:
        yield item
        return
    values = tuple(item)
    if "*" in target:
        star = target.index("*")
        after = len(target) - star - 1
        if len(values) < star + after:
            raise ValueError(f"not enough values to unpack (expected at least {star + after}, "
                             f"got {len(values)})")
        parts = list(zip(target[:star], values[:star]))
        parts.append(("*", list(values[star:len(values) - after])))
        parts += list(zip(target[star + 1:], values[len(values) - after:]))
    else:
        if len(values) != len(target):
            if len(values) > len(target):
                raise ValueError(f"too many values to unpack (expected {len(target)})")
            raise ValueError(f"not enough values to unpack (expected {len(target)}, "
                             f"got {len(values)})")
        parts = list(zip(target, values))
    for spec, value in parts:
        if spec == "*":
            yield value
        else:
            yield from _unpack(value, spec)
