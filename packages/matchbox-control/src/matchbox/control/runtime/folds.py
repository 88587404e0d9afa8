"""``sum``, ``max``, ``min``, ``any``, ``all`` and ``functools.reduce``, per example.

In the loop over examples each of these folds the example's own items.  Over
a batched sequence (``x.unbind(1)``, a comprehension, a list appended under a
per-example condition) an item some examples do not have is padding for them:
Python's own ``sum`` would add it and make their result padding.  Here each
item is folded in only for the examples that have it (the steps and masks of
a ``for`` statement, ``iteration.for_steps``), as a ``for`` loop would::

    total = start
    for x in items:
        total = total + x        # merged: examples without x keep their total

| call                         | per example                                        |
|------------------------------|----------------------------------------------------|
| ``sum(items, start)``        | ``start`` plus its own items                       |
| ``max(items)``, ``min``      | its first largest (smallest) item, compared as     |
| (``key=``, ``default=``)     | Python compares (``key(x) > key(best)``, one truth |
|                              | value per example); ``ValueError`` naming the      |
|                              | examples without items unless ``default`` is given |
| ``max(a, b, ...)``, ``min``  | the same over the arguments: ``where(b > a, b, a)``, |
|                              | the gradient to the one chosen (``torch.maximum``  |
|                              | would split it on ties)                            |
| ``any(items)``, ``all``      | a batch of per-example truth values                |
| ``functools.reduce(f, items[, initial])`` | ``f`` folded over its own items; ``TypeError`` |
|                              | naming the examples without items and no initial   |

With plain items (every example has each, and no batch is compared) each is
Python's own function.  Every item is computed for every example that has
some later item too; ``any``/``all`` stop early only where every item is
plain, as Python does.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable
from typing import Any

import torch

from matchbox.control.runtime.iteration import for_steps
from matchbox.control.runtime.masks import _MASK, _Masked, condition, guard, per_example_truth
from matchbox.control.runtime.select import merge, only_active, select
from matchbox.masked_batch import MaskedBatch

_MISSING = object()


def _steps(iterable: Any) -> tuple[Any, list[tuple[Any, Any]]]:
    outer = _MASK.get()
    return outer, list(for_steps(iterable, outer))


def _plain(outer: Any, steps: list[tuple[Any, Any]]) -> bool:
    """Every running example has every item and no item is a batch."""
    return all(mask is outer and type(item) is not MaskedBatch for mask, item in steps)


def sum_(iterable: Any, /, start: Any = 0) -> Any:
    """``sum(iterable, start)``: each example's ``start`` plus its own items."""
    outer, steps = _steps(iterable)
    if all(mask is outer for mask, _ in steps):
        return builtins.sum([item for _, item in steps], start)
    total = start
    for mask, item in steps:
        with _Masked(mask):
            new = total + item
        total = merge(mask, outer, new, total, "sum()")
    return total


class _Fold:
    """A per-example accumulator: which examples have a value yet (``started``)."""

    def __init__(self, outer: Any, value: Any = _MISSING):
        self.outer = outer
        self.value = value
        # True: every running example; False: none; else a (batch,) bool tensor.
        self.started: Any = value is not _MISSING

    def first(self, mask: Any, item: Any, name: str) -> None:
        """``item`` becomes the value of the examples in ``mask`` that have none yet."""
        if self.started is True:
            return
        if self.started is False:
            if mask is self.outer:
                self.value, self.started = item, True
            else:
                self.value, self.started = only_active(mask, item, name), mask
            return
        fresh = mask & ~self.started if mask is not None else ~self.started
        self.value = select(fresh, item, self.value, name)
        self.started = self.started | fresh

    def later(self, mask: Any) -> Any:
        """The examples of ``mask`` that already have a value."""
        if self.started is True:
            return mask
        if mask is None:
            return self.started
        return mask & self.started

    def missing(self) -> str:
        """Which running examples have no value (no item): ``""`` if none, else words."""
        if self.started is True:
            return ""
        if self.started is False:
            return " (for every example)"
        empty = ~self.started if self.outer is None else self.outer & ~self.started
        examples = empty.nonzero().flatten().tolist()
        return f" for examples {examples}" if examples else ""


def _pick(name: str, better: Callable[[Any, Any], Any], steps: list[tuple[Any, Any]], outer: Any,
          key: Any, default: Any) -> Any:
    """``max``/``min``: per example, its first item whose key is ``better`` than the best's."""
    value, best = _Fold(outer), _Fold(outer)
    for mask, item in steps:
        with _Masked(mask):
            keyed = item if key is None else key(item)
        if value.started is not False:
            running = value.later(mask)
            with _Masked(running):
                test = better(keyed, best.value)
            truth = condition(test) if type(test) is not MaskedBatch else per_example_truth(
                test, f"{name}() comparison")
            if truth is True and running is outer:
                value.value, best.value = item, keyed
            elif truth is not False:
                take = running if truth is True else (truth if running is None else
                                                      running & truth)
                value.value = select(take, item, value.value, f"{name}()")
                best.value = select(take, keyed, best.value, f"{name}()")
        value.first(mask, item, f"{name}()")
        best.first(mask, keyed, f"{name}()")
    missing = value.missing()
    if not missing:
        return value.value
    if default is _MISSING:
        raise ValueError(f"{name}() arg is an empty sequence{missing}")
    if value.started is False:
        return default
    return select(value.started, value.value, default, f"{name}()")


def _extreme(name: str, builtin: Callable[..., Any], better: Callable[[Any, Any], Any],
             args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    key, default = kwargs.get("key"), kwargs.get("default", _MISSING)
    if set(kwargs) - {"key", "default"} or not args:
        return builtin(*args, **kwargs)
    outer = _MASK.get()
    if len(args) > 1:
        if default is not _MISSING or not any(type(a) is MaskedBatch for a in args):
            return builtin(*args, **kwargs)
        steps = [(outer, a) for a in args]
    else:
        outer, steps = _steps(args[0])
        if _plain(outer, steps) and key is None:
            return builtin((item for _, item in steps), **kwargs)
    return _pick(name, better, steps, outer, key, default)


def max_(*args: Any, **kwargs: Any) -> Any:
    """``max(...)`` per example (see the module's table)."""
    return _extreme("max", builtins.max, lambda a, b: a > b, args, kwargs)


def min_(*args: Any, **kwargs: Any) -> Any:
    """``min(...)`` per example."""
    return _extreme("min", builtins.min, lambda a, b: a < b, args, kwargs)


def _truths(name: str, iterable: Any, stop_at: bool) -> Any:
    """``any`` (``stop_at`` True) or ``all`` (False) over each example's own items."""
    outer = _MASK.get()
    decided: Any = None  # (batch,) bool: the examples an item of their own has decided
    for mask, item in for_steps(iterable, outer):
        if type(item) is MaskedBatch:
            truth: Any = per_example_truth(item, f"value tested by {name}()")
        else:
            truth = condition(item)
        if type(truth) is bool and mask is outer:  # the same item for every running example
            if truth is not stop_at:
                continue
            if decided is None:
                return stop_at  # Python's short cut
            return MaskedBatch._make(torch.full_like(decided, stop_at), None, ())
        if type(truth) is bool:
            if truth is not stop_at:
                continue
            hits = mask
        else:
            hits = truth if stop_at else ~truth
            if mask is not None:
                hits = mask & hits
        decided = hits if decided is None else decided | hits
    if decided is None:
        return not stop_at
    return MaskedBatch._make(decided if stop_at else ~decided, None, ())


def any_(iterable: Any) -> Any:
    return _truths("any", iterable, True)


def all_(iterable: Any) -> Any:
    return _truths("all", iterable, False)


def reduce_(function: Any, iterable: Any, *initial: Any) -> Any:
    """``functools.reduce(function, iterable[, initial])`` over each example's own items."""
    if len(initial) > 1:
        return functools.reduce(function, iterable, *initial)
    outer, steps = _steps(iterable)
    if all(mask is outer for mask, _ in steps):
        return functools.reduce(function, [item for _, item in steps], *initial)
    fold = _Fold(outer, *initial)
    for mask, item in steps:
        if fold.started is not False:
            running = fold.later(mask)
            with _Masked(running):
                new = function(guard(running, outer, fold.value), item)
            fold.value = merge(running, outer, new, fold.value, "reduce()")
        fold.first(mask, item, "reduce()")
    missing = fold.missing()
    if missing:
        raise TypeError(f"reduce() of empty iterable with no initial value{missing}")
    return fold.value
