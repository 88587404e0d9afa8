"""Variables that hold a Python number for some examples and a tensor for others.

``v = 0`` and then ``v = x.sum(1)`` under a per-example condition: in the loop over examples
``v`` is an ``int`` for the examples that did not take the branch and a tensor for the
others, so ``isinstance(v, int)`` (``type(v) is int``, ``isinstance(v, numbers.Number)``)
answers per example.  Under ``@batch`` the merge (``select``) lifts the number into the
batch, and the test answered ``False`` for every example, silently.

So such a merge records (here, in the outermost ``@batch`` call's own state, core's
``call_state``, by a weak reference to the batch's data, so that no batch is kept alive)
which examples hold a number and the numbers' types; a
later merge of a recorded batch carries the record over for the examples that keep it.  A
type test of a recorded batch (``type_tests``) is refused where a running example holds a
number and a number would answer differently from the batch.  Only the merged value itself is
recorded: a value computed from it (``v + 1``) is a new batch, not recorded.
"""

from __future__ import annotations

import functools
import numbers
import operator
import weakref
from collections.abc import Callable
from typing import Any

import torch

from matchbox.control import naming
from matchbox.control.runtime.masks import _MASK
from matchbox.extending import call_state, fails
from matchbox.masked_batch import MaskedBatch

_KEY = "matchbox.control.number_merges"

#: ``[made]``: whether a record was ever made (in any call): until one is, a merge of two
#: batches has none to carry over and looks up no call's state.
_RECORDED = [False]


def merged(mask: torch.Tensor, new: Any, old: Any, result: Any, name: str) -> Any:
    """``result``, the selection of ``new`` (for ``mask``) and ``old`` (for the others) as
    variable ``name``, recorded where one side is a Python number and the other a batch, or
    is recorded."""
    if type(result) is not MaskedBatch:
        return result
    if ((type(new) is MaskedBatch and type(old) is MaskedBatch)  # the commonest merge
            or not (_is_number(new) or _is_number(old))):
        if not _RECORDED[0]:
            return result  # no record made yet, in any call: neither side can be one
        state = call_state(create=False)
        if state is None or not state.get(_KEY):
            return result  # and nothing recorded: neither side can be
    if name.endswith(" flag") or naming.is_reserved(name):
        return result  # (the rewriting's flags: break, continue, return)
    # Which examples hold a number, computed when a type test asks (_Holding): a merge costs
    # no op (a counter merged every step of a loop is recorded every step).
    parts: list[tuple[Any, torch.Tensor, bool]] = []
    samples: tuple[Any, ...] = ()
    if _is_number(new) and type(old) is MaskedBatch:
        parts, samples = [(None, mask, True)], (new,)
    elif _is_number(old) and type(new) is MaskedBatch:
        parts, samples = [(None, mask, False)], (old,)
    state = call_state(create=bool(parts))
    if state is None:
        return result
    records = state.get(_KEY)
    if records:
        for side, ran in ((new, True), (old, False)):
            found = _record(records, side)
            if found is not None:
                parts.append((found[1], mask, ran))
                samples += found[2]
    if parts:
        holding = _Holding(parts)
        records = state.setdefault(_KEY, {})
        _RECORDED[0] = True
        key = id(result._data)

        def forget(_: Any, records: dict[int, Any] = records, key: int = key) -> None:
            found = records.get(key)
            if found is not None and found[0]() is None:
                del records[key]

        # By the batch's data, which (unlike a MaskedBatch) a weak reference can hold: the
        # record ends with it, and keeps no batch of a long loop alive; a batch of the same
        # data (the merge's without its region guard) is the same variable's value.
        records[key] = (weakref.ref(result._data, forget), holding, samples)
    return result


class _Holding:
    """Which examples hold a number after a merge, computed at the first call: the *or* of
    its parts, each ``(earlier, mask, ran)`` the examples of ``earlier`` (a ``_Holding``;
    ``None``: every example) that ran the region (``mask``) or did not (``ran`` false).
    Computed without recursion (a loop's counter makes a chain as long as its steps)."""

    __slots__ = ("parts", "value")

    def __init__(self, parts: list[tuple[Any, torch.Tensor, bool]]):
        self.parts, self.value = parts, None

    def __call__(self) -> torch.Tensor:
        stack = [self]
        while stack:
            node = stack[-1]
            waiting = [e for e, _, _ in node.parts if e is not None and e.value is None]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            if node.value is None:
                node.value = functools.reduce(operator.or_, (
                    (m if ran else ~m) if e is None else e.value & (m if ran else ~m)
                    for e, m, ran in node.parts))
                node.parts = []  # computed: the chain behind it can go
        return self.value


def _record(records: dict[int, Any], obj: Any) -> Any:
    if type(obj) is not MaskedBatch:
        return None
    found = records.get(id(obj._data))
    if found is None or found[0]() is not obj._data:
        return None
    return found


def refuse_a_type_test(obj: MaskedBatch, test: Callable[[Any], bool], what: str,
                       line: str) -> None:
    """Refuse ``what`` (``isinstance(v, int)``, ``type(v) is int``), whose answer for a
    value is ``test(value)``, of ``obj`` where it is recorded and a running example holds a
    number for which ``test`` answers differently from the batch."""
    state = call_state()
    records = None if state is None else state.get(_KEY)
    found = None if not records else _record(records, obj)
    if found is None:
        return
    answer = test(obj)
    if all(test(sample) == answer for sample in found[2]):
        return
    running = _MASK.get()
    holding = found[1]() if running is None else found[1]() & running
    kinds = ", ".join(sorted({type(s).__name__ for s in found[2]}))

    def error() -> NotImplementedError:
        return NotImplementedError(
            f"@batch: {what} ({line}) of a variable that is a Python number ({kinds}) for some "
            "examples and a tensor for others (a number assigned where a per-example condition "
            "assigned a tensor): under @batch it is one MaskedBatch for every example, so the "
            "test would give every example the batch's answer, where the loop's differs "
            "between them. Give the variable one type on every path (v = torch.zeros(...) "
            "where it is 0), or keep a flag of which path was taken")

    if fails(holding, error):
        raise error()


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, torch.Tensor)
