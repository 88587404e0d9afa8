"""What a ``for`` captured as a ``scan`` appended to a list, kept stacked.

A scan's per-step outputs come out stacked along a new first dimension, as many as
the loop has steps.  Appended to a Python list one by one, they fix that number (a list
has a length), so a graph captured with symbolic sizes would hold for one padded
length only.  Where nothing but calls reads the list after the loop
(``converters.structured.read_only_by_calls``, the demo's ``F.stack(states, 1)``),
``scan_for`` hands back a :class:`StepOutputs` in its place, and those calls go through
:func:`call_steps`:

- ``matchbox.functional.stack(states, d)`` and ``torch.stack(states, d)`` (a new dynamic
  dimension, not the batch's), of items static in every dimension, are built from the
  stacked outputs as they are (``matchbox.ops.shape.stack_run``): the same batch as the
  stack of the list, with no per-step op;
- any other call gets the list itself, its items taken apart first (the list the loop
  would have built; the graph then holds for this number of steps, as before).
"""

from __future__ import annotations

from typing import Any

import torch

import matchbox.functional
from matchbox.compiler import loop_state
from matchbox.control.runtime.calls import call
from matchbox.ops.shape import stack_run


def runs(structure: Any, ys: list[torch.Tensor]) -> list[tuple[Any, list[torch.Tensor]]]:
    """For each list a scan's step appended to (``structure``: a tuple, per list, of the
    items one step appended), the structure of those items and their tensors, stacked."""
    out = []
    leaves = iter(ys)
    for items in structure[1]:
        count = sum(1 for _ in loop_state.metas(items))
        out.append((items, [next(leaves) for _ in range(count)]))
    return out


class StepOutputs:
    """The items a list holds after a scanned ``for`` appended to it: ``head`` (what it
    held before the scan, the unrolled steps' items included), then the scanned steps',
    ``structure`` (a tuple of the items one step appended) and ``ys`` (their tensors,
    stacked along a new first dimension)."""

    def __init__(self, head: list[Any], structure: Any, ys: list[torch.Tensor]):
        self.head, self.structure, self.ys = head, structure, ys
        self._listed = False

    def listed(self) -> list[Any]:
        """The list the loop would have built: ``head``, the scanned items appended to it
        (once; every later read gets the same list)."""
        if not self._listed:
            self._listed = True
            for parts in zip(*(y.unbind(0) for y in self.ys)):
                self.head.extend(loop_state.unflatten(self.structure, iter(parts)))
        return self.head

    def stackable(self) -> bool:
        """Whether :meth:`stack` may join the scanned items without taking them apart: one
        batch a step, static in every dimension, its lengths not carried."""
        items = self.structure[1]
        if len(items) != 1 or items[0][0] != "batch":
            return False
        _, dims, present, *_ = items[0]
        return not any(dims) and not present[2]

    def stack(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``fn(self, *args, **kwargs)`` where ``fn`` stacks the items into a new dynamic
        dimension without taking them apart; ``None`` where it cannot."""
        if self._listed or not self.stackable():
            return None
        dim = _argument(args, kwargs, 0, "dim", 0 if fn is torch.stack else None)
        if not isinstance(dim, int):
            return None
        if fn is matchbox.functional.stack:
            if _argument(args, kwargs, 1, "dynamic", None) not in (None, True) or len(args) > 2 \
                    or set(kwargs) - {"dim", "dynamic"}:
                return None
        elif fn is torch.stack:
            # torch.stack makes a dynamic dimension of items that record their examples
            # (not of a batch dimension's view).
            rank = self.ys[0].dim()
            if len(args) > 1 or set(kwargs) - {"dim"} or dim % rank == 0 or not (
                    self.structure[1][0][2][3]
                    or any(getattr(item, "_present", None) is not None for item in self.head)):
                return None
        else:
            return None
        data, mask = self.ys[0], self.ys[1] if self.structure[1][0][2][1] else None
        op = "matchbox.functional.stack" if fn is matchbox.functional.stack else "torch.stack"
        return stack_run(op, self.head, data, mask, dim)


def call_steps(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(fn, *args, **kwargs)`` at a call site handed a list a scanned ``for``
    appended to: a stack of its items built from the stacked outputs, any other call
    given the list itself."""
    try:
        name = None if args else _ITEMS_KEYWORD.get(fn)
    except TypeError:  # an unhashable callable
        name = None
    if name is not None and type(kwargs.get(name)) is StepOutputs:  # stack(tensors=items)
        kwargs = dict(kwargs)
        args = (kwargs.pop(name),)
    if args and type(args[0]) is StepOutputs:
        result = args[0].stack(fn, args[1:], kwargs)
        if result is not None:
            return result
    args = tuple(a.listed() if type(a) is StepOutputs else a for a in args)
    kwargs = {k: v.listed() if type(v) is StepOutputs else v for k, v in kwargs.items()}
    return call(fn, *args, **kwargs)


#: The keyword of each stack's list of items.
_ITEMS_KEYWORD = {torch.stack: "tensors", matchbox.functional.stack: "sequences"}


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], position: int, name: str,
              default: Any) -> Any:
    return args[position] if len(args) > position else kwargs.get(name, default)
