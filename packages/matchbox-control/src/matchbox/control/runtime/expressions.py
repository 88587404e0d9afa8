"""Expressions whose value may differ between examples: ``and``, ``or``, ``not``,
chained comparisons, ``a if c else b`` and ``assert``.

With plain operands each is exactly the Python expression (short-circuiting
included).  With a batch operand it is evaluated per example: ``a and b`` is
``b`` where ``a`` holds and ``a`` elsewhere; both sides of a conditional
expression run (each under its mask, and only if some example takes it) and
are selected per example.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch

from matchbox.control.runtime.dict_keys import refuse_partial_keys
from matchbox.control.runtime.masks import _MASK, guard, masked, nobody, per_example_truth
from matchbox.control.runtime.select import select
from matchbox.extending import fails
from matchbox.masked_batch import MaskedBatch

Thunk = Callable[[], Any]


def _is_bool_like(value: Any) -> bool:
    if type(value) is MaskedBatch:
        return value.data.dtype == torch.bool
    return isinstance(value, bool)


def _truth_batch(truth: torch.Tensor) -> MaskedBatch:
    return MaskedBatch._make(truth, None, ())


def _for_examples_where(left: MaskedBatch, holds: torch.Tensor, right: Thunk) -> Any:
    """``right()`` run for the examples where ``holds``; ``_SKIPPED`` if there are none.

    Per example, Python evaluates the right operand of ``and``/``or`` only
    where the left one does not decide: it runs under that mask, so that an
    operand valid only there (``i < n and x[:, i] > 0``) is checked only there.
    """
    outer = _MASK.get()
    needed = holds if outer is None else outer & holds
    if nobody(needed):
        return _SKIPPED
    with masked(needed, outer):
        return right()
    return _SKIPPED  # it raised, for no example (``masks.ran_for_nobody``)


_SKIPPED = object()


def _right_operand(left: MaskedBatch, needed: torch.Tensor, right: Thunk, pure: bool) -> Any:
    """The right operand of ``and``/``or`` for the examples in ``needed``.

    A ``pure`` operand (a comparison of names and constants, see
    ``converters.expressions``) is computed for every example: it has no effect
    to keep from the others, and that spares the ``.any()`` of a masked run.
    Should it fail (a name assigned only on some examples' paths), it is run
    again as Python would run it, only where needed, so that it fails only if
    an example needs it.
    """
    if pure:
        try:
            return right()
        except Exception:  # run again where needed, which raises again if it must
            pass
    return _for_examples_where(left, needed, right)


def and_(left: Any, right: Thunk, pure: bool = False) -> Any:
    """``left and right()``."""
    if type(left) is not MaskedBatch:
        return left if not left else right()
    holds = per_example_truth(left)
    value = _right_operand(left, holds, right, pure)
    if value is _SKIPPED:
        return left
    if _is_bool_like(value):
        if type(value) is not MaskedBatch:
            return _truth_batch(holds) if value else _truth_batch(holds & False)
        return _truth_batch(holds & per_example_truth(value))
    return select(holds, value, left, "the right operand of 'and'")


def or_(left: Any, right: Thunk, pure: bool = False) -> Any:
    """``left or right()``."""
    if type(left) is not MaskedBatch:
        return left if left else right()
    holds = per_example_truth(left)
    value = _right_operand(left, ~holds, right, pure)
    if value is _SKIPPED:
        return left
    if _is_bool_like(value):
        if type(value) is not MaskedBatch:
            return _truth_batch(holds | True) if value else _truth_batch(holds)
        return _truth_batch(holds | per_example_truth(value))
    return select(holds, left, value, "the right operand of 'or'")


def not_(value: Any) -> Any:
    """``not value``."""
    if type(value) is not MaskedBatch:
        return not value
    return _truth_batch(~per_example_truth(value))


_COMPARE = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne, "is": operator.is_, "is not": operator.is_not,
    "in": lambda a, b: a in _keys_of(b), "not in": lambda a, b: a not in _keys_of(b),
}


def _keys_of(container: Any) -> Any:
    """``container``, refused where it is a dict with a key only some running examples
    added (``k in d``: ``dict_keys``)."""
    if isinstance(container, dict):
        refuse_partial_keys(container, "k in d")
    return container


def compare(left: Any, *rest: Any) -> Any:
    """A chained comparison ``left op1 right1() op2 right2() ...``.

    ``rest`` alternates operator names and thunks; each operand is evaluated
    once, and not at all once the chain is false (plain values).
    """
    result: Any = None
    for i in range(0, len(rest), 2):
        if i and type(result) is not MaskedBatch and not result:
            return result
        right = rest[i + 1]()
        step = _COMPARE[rest[i]](left, right)
        # ``step`` is computed already: ``pure`` spares a masked run of the thunk.
        result = step if i == 0 else and_(result, lambda step=step: step, pure=True)
        left = right
    return result


def _unguarded(value: Any) -> Any:
    return value


def if_exp(test: Any, then: Callable[[Any], Any], orelse: Callable[[Any], Any]) -> Any:
    """``then(g) if test else orelse(g)``.

    Each side reads the local variables through ``g``: under a batch condition
    ``g`` guards their gradients with that side's mask (as the regions of an
    ``if`` statement do); otherwise it returns them as they are.
    """
    if type(test) is not MaskedBatch:
        return then(_unguarded) if test else orelse(_unguarded)
    outer = _MASK.get()
    holds = per_example_truth(test)
    taken = holds if outer is None else outer & holds
    other = ~holds if outer is None else outer & ~holds
    if nobody(taken):
        return orelse(_unguarded)
    if nobody(other):
        return then(_unguarded)
    a = b = _SKIPPED  # a side that raised for no example (``masks.ran_for_nobody``)
    with masked(taken):
        a = then(lambda value: guard(taken, outer, value))
    with masked(other):
        b = orelse(lambda value: guard(other, outer, value))
    if a is _SKIPPED or b is _SKIPPED:
        return a if b is _SKIPPED else b
    return select(holds, a, b, "a conditional expression")


def assert_(test: Any, message: Thunk | None = None) -> None:
    """``assert test, message()``: every running example must satisfy ``test``."""
    if type(test) is not MaskedBatch:
        if not test:
            raise AssertionError(*(() if message is None else (message(),)))
        return
    holds = per_example_truth(test)
    outer = _MASK.get()
    failing = ~holds if outer is None else outer & ~holds
    if fails(failing):
        examples = failing.nonzero().flatten().tolist()
        text = "" if message is None else f"{message()} "
        raise AssertionError(f"{text}(fails for examples {examples})")
