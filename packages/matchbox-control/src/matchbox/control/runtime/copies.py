"""Batches stored as copies where the loop over examples stores the tensor itself.

Under a per-example condition a batch stored in a container is stored for the running
examples only: a dict item or an attribute (``d[k] = h``, ``obj.h = h``) is merged with
the old one where there is one (a ``where``, a new tensor), and a list item
(``hs.append(h)``) or a new key's item is a new batch over ``h``'s data, a copy where the
region's gradient guard applied (``h`` requires grad).  In the loop over examples the item *is* ``h``: a later in-place update
(``h.mul_(10)``, ``h += 1``, ``h[:, 0] = v``, ``torch.relu_(h)``) reaches it, and here it
would not, silently.  (A dict item or an attribute replaced so is a copy of the old one
too, for the examples that do not store: an update of the old batch misses it as well.)

So such a store records which batch's data was copied into which item, and for which
examples (:func:`stored`), and core calls :func:`watch` before every in-place write into
a batch (``matchbox.extending.watch_writes``): a write into a recorded batch, while its
copy lives and for some example the copy stands for, is refused with
``NotImplementedError``.  A write that reaches the copy too (it shares the data written:
a list item without a guard, an update in the region that stored it) is not.  The
records live in the outermost ``@batch`` call's own state (core's ``call_state``), by
weak references (they keep no tensor alive): they end with the call.

A variable assigned under a per-example condition (``a = b``) is merged into a copy as
well, but not recorded: a variable merged in a loop step is merged again at the next
step's end, after its in-place updates, so a refusal at the update would refuse loops
that equal the loop over examples (README, limitations).
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any

import torch

from matchbox.control.runtime.select import _RUNTIME
from matchbox.extending import BATCH_VIEWS, call_state, fails, watch_writes
from matchbox.masked_batch import MaskedBatch

_KEY = "matchbox.control.copies"


# A record: (source, copy, examples, negated, what, where): the data tensor ``copy``
# (weakly) holds the data tensor ``source``'s (weakly) values for ``examples`` (or for the
# others, ``negated``), where the loop holds ``source`` itself; ``what`` it is and
# ``where`` it was stored (:func:`_user_code`).
_Copy = tuple


class _Records:
    __slots__ = ("by_source", "limit")

    def __init__(self) -> None:
        self.by_source: dict[int, list[_Copy]] = {}  # id of the source's data: its copies
        self.limit = 256

    def add(self, source: torch.Tensor, record: _Copy) -> None:
        found = self.by_source.get(id(source))
        if found is None:
            self.by_source[id(source)] = [record]
            if len(self.by_source) > self.limit:
                self._prune()
        else:
            found.append(record)

    def _prune(self) -> None:
        """Drop the records of dead tensors (amortised: when the records doubled)."""
        self.by_source = {k: live for k, copies in self.by_source.items()
                          if (live := [c for c in copies if c[0]() is not None
                                       and c[1]() is not None])}
        self.limit = max(256, 2 * len(self.by_source))


def stored(mask: torch.Tensor, value: Any, item: Any, what: str, old: Any = None) -> None:
    """``value`` (and ``old``) stored as ``item`` under ``mask``: ``item`` holds ``value``
    for the examples in ``mask`` and ``old`` for the others.  Records each batch among
    them (and those it guards) whose data ``item`` does not share."""
    if type(value) is MaskedBatch and type(item) is MaskedBatch:
        if old is None and value._data is item._data and not item._data.requires_grad:
            return  # a list item over the value's own data (no guard): no copy
        pairs = [(value, item, False)]
    else:
        pairs = []
        _pair(value, item, False, pairs)
    if old is not None:
        _pair(old, item, True, pairs)
    records: _Records | None = None
    where: tuple[Any, int] | None = None
    for source, copy, negated in pairs:
        data = copy._data
        batch: Any = source
        while batch is not None:
            held = batch._data
            if held is not data:
                if records is None:
                    state = call_state(create=True)
                    if state is None:
                        return  # not in a @batch call
                    records = state.get(_KEY)
                    if records is None:
                        records = state[_KEY] = _Records()
                        watch_writes(watch)
                    where = _user_code()
                records.add(held, (weakref.ref(held), weakref.ref(data), mask, negated, what,
                                   where))
            # A gradient guard (runtime.masks.guard) stands for the batch it guards,
            # which an update after the region writes.
            batch = getattr(batch, "_guards", None)


def _user_code() -> tuple[Any, int]:
    """(code, instruction) of the user's code running now, whose line :func:`_line`
    finds when an error needs it (``select.user_line`` finds it at once)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename in _RUNTIME_FILES:
        frame = frame.f_back
    return (None, 0) if frame is None else (frame.f_code, frame.f_lasti)


def _line(where: tuple[Any, int]) -> str:
    code, instruction = where
    if code is None:
        return "line unknown"
    line = next((n for start, end, n in code.co_lines() if start <= instruction < end), None)
    return f"{code.co_filename}, line {line}"


_RUNTIME_FILES = frozenset(os.path.join(_RUNTIME, name) for name in os.listdir(_RUNTIME))


def _pair(value: Any, item: Any, negated: bool,
          pairs: list[tuple[MaskedBatch, MaskedBatch, bool]]) -> None:
    kind = type(value)
    if kind is MaskedBatch:
        if type(item) is MaskedBatch:
            pairs.append((value, item, negated))
    elif kind in BATCH_VIEWS:
        if type(item) is kind:
            _pair(value.batch, item.batch, negated, pairs)
    elif isinstance(value, tuple) and isinstance(item, tuple) and len(value) == len(item):
        for part, stored_part in zip(value, item):
            _pair(part, stored_part, negated, pairs)


def watch(target: Any, mask: Any, name: str) -> None:
    """Before an in-place write into the batch ``target`` (and the batches it guards) for
    the examples in ``mask`` (``None``: every example): refuse it where it would not reach
    a live copy recorded by :func:`stored` (see the module docstring)."""
    state = call_state()
    if state is None:
        return
    records = state.get(_KEY)
    if records is None:
        return
    if type(target) is not MaskedBatch:
        if type(target) not in BATCH_VIEWS:
            return
        target = target.batch
    written = []
    batch = target
    while batch is not None:
        data = batch._data
        written.append(data)
        batch = getattr(batch, "_guards", None)
    by_source = records.by_source
    for data in written:
        for key in (data, data._base):
            if key is None:
                continue
            copies = by_source.get(id(key))
            if copies:
                _check(copies, key, written, mask, name)


def _check(copies: list[_Copy], source: torch.Tensor, written: list[torch.Tensor],
           mask: Any, name: str) -> None:
    for held, kept, examples, negated, what, where in copies:
        if held() is not source:
            continue  # a dead tensor's record, its id reused
        copy = kept()
        if copy is None or _reaches(copy, written):
            continue
        if negated:
            examples = ~examples
        if isinstance(mask, torch.Tensor) and mask.shape == examples.shape:
            examples = examples & mask
        stored_where = f"{what} stored under a per-example condition ({_line(where)})"

        def error(what: str = stored_where) -> NotImplementedError:
            return NotImplementedError(_message(name, what))

        if fails(examples, error):
            raise error()


def _reaches(copy: torch.Tensor, written: list[torch.Tensor]) -> bool:
    """Whether a write into ``written`` reaches ``copy`` (the same tensor, or views of
    one)."""
    base = copy if copy._base is None else copy._base
    for data in written:
        if data is copy or data is base or data._base is base:
            return True
    return False


def _message(name: str, what: str) -> str:
    if name.startswith("'"):
        update = f"the in-place update of {name}"  # h += v (runtime.effects)
    elif "=" in name:
        update = f"the in-place write {name}"  # x[i] = value (core's setitem)
    else:
        update = f"the in-place update {name.removeprefix('the batch written by ')}()"
    return (
        f"@batch: {update} would not reach {what}, which holds a copy of the batch "
        "updated: in the loop over examples the stored item is the "
        "tensor itself and sees the update, here it would keep the old values. Write the "
        "update out of place (h = h * 10, h = h + v, h = torch.relu(h)) and store the "
        "value the item is to hold: store after the update, or store h.clone() where "
        "the item is to keep the values it had")
