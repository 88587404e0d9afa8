"""``for`` loops that ``matchbox.compile`` captures as loops (``scan``), not unrolled.

For a ``for`` whose body only rebinds local variables (no ``break``, ``return``,
writes to objects, ``global``/``nonlocal``), pass 5 (``converters.control_flow``)
also emits the body as a function of the loop's state, used only while a graph is
captured and torch has ``scan``::

    if mb__.scan_capturing():
        def mb__loop_7(mb__step_3, mb__item_4, h, self):
            ...                                   # the region, as in the loop
            return (h,)
        (h,) = mb__.scan_for(items, mb__mask, mb__loop_7, (h, self), 1)
    else:
        for mb__step_3, mb__item_4 in mb__.for_steps(items, mb__mask):
            ...

:func:`scan_for` hands the steps to ``matchbox.compiler.loops.scan_steps``, which runs
the first steps unrolled and the rest as one ``scan`` node when it can, else unrolled:
the same steps, the same ops per step as the ``for``.  The loop stays unrolled when the
variables it only reads include a list, dict or other object a step may change (or a
bound method or closure that may write one: ``push = items.append``), and when the
sequence is not materialised (a generator).
"""

from __future__ import annotations

import gc
import types
from typing import Any

import torch
from torch import nn

from matchbox.compiler import loop_steps, loops
from matchbox.control.runtime import calls, step_outputs
from matchbox.control.runtime.effects import SHARED_CONTAINERS
from matchbox.control.runtime.iteration import _remember_items_mask, _Stepped, for_steps
from matchbox.control.runtime.masks import Mask, narrow
from matchbox.control.runtime.select import Undefined
from matchbox.control.runtime.unbinding import steps_present, unbind, unbound_dimension
from matchbox.extending import capturing, has_zero_padding, mark_zero_padding
from matchbox.masked_batch import MaskedBatch

_PLAIN = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device)


def scan_capturing() -> bool:
    """Whether a ``for`` may be captured as a ``scan`` (capturing, and torch has it)."""
    return loops.enabled()


def scan_for(items: Any, outer: Mask, body: Any, values: tuple[Any, ...], n_state: int,
             appended: tuple[int, ...] = (), stacked: tuple[int, ...] = ()) -> tuple[Any, ...]:
    """The loop's state (``values[:n_state]``) after running ``body`` for every step of
    ``items``; ``values[n_state:]`` are the variables the body reads and does not keep.

    ``appended``: positions, among those, of lists the body only appends to (once a
    step, ``states.append(h)``).  Each step appends to a list of its own, whose items are
    the scan's per-step outputs; they are appended to the real lists after the loop, in
    the steps' order: what the loop would have appended.

    ``stacked``: positions, among ``appended``, of lists that only calls read after the
    loop (``converters.structured.read_only_by_calls``).  Each comes back after the
    state: the list, or a :class:`StepOutputs` holding the scan's outputs as they are,
    stacked, where taking them apart would fix their number."""
    constants = tuple(values[n_state:])
    state = tuple(values[:n_state])
    if not _may_scan(items, state, constants, appended, values):
        if isinstance(items, _Unbound):
            items = items.listed()
        for mask, item in for_steps(items, outer):
            state = body(mask, item, *state, *constants)
        return state + tuple(constants[appended[j]] for j in stacked)
    whole = outer is None  # the steps' masks are not narrowed by an outer one

    def step(mask_item: tuple[Any, Any], *args: Any) -> tuple[Any, ...]:
        mask, item = mask_item
        if whole and isinstance(mask, torch.Tensor):
            _remember_items_mask(mask, item, False)  # as for_steps does for each step
        return _with_own_lists(lambda *a: body(mask, item, *a), args, n_state, appended)

    return _scanned(step, state, _steps(items, outer), constants, appended, stacked)


def unbind_steps(owner: Any, *args: Any, **kwargs: Any) -> Any:
    """The items of a ``for`` over ``owner.unbind(...)`` that a scan may take.

    Along a dynamic dimension whose padded size is a symbol (``matchbox.compile``'s
    symbolic sizes), the steps are not taken apart: a list of them would fix their
    number, and the graph would hold for one padded length only.  :func:`scan_for`
    takes them as slices (``loop_steps.SlicedSteps``): the same steps, recording the
    same examples, as :func:`~matchbox.control.runtime.unbinding.unbind`'s.  Anything
    else is that ``unbind``'s list."""
    batch, d = unbound_dimension(owner, args, kwargs)
    if d is not None and sum(batch.dims) == 1 and isinstance(batch.data.size(d), torch.SymInt):
        return _Unbound(batch, d, lambda: unbind(owner, *args, **kwargs))
    return unbind(owner, *args, **kwargs)


class _Unbound:
    """The steps of ``batch.unbind(d)`` along its one dynamic dimension, not taken apart."""

    def __init__(self, batch: MaskedBatch, d: int, listed: Any):
        self.batch, self.d, self.listed = batch, d, listed

    def steps(self, outer: Mask) -> loop_steps.SlicedSteps:
        """Each step's mask (the examples that have it, within ``outer``) and batch."""
        batch, d = self.batch, self.d
        data, mask, present = batch.data, batch._mask, steps_present(batch, d)
        dims = batch.dims[:d - 1] + batch.dims[d:]
        zero_padding = has_zero_padding(batch)

        def make(take: loop_steps.Take) -> tuple[Any, MaskedBatch]:
            row = take(present, 0)
            step = MaskedBatch._make(take(data, d), take(mask, d), dims)
            step._present = row
            if zero_padding:  # views of zero padding are zero padding, as unbind's
                mark_zero_padding(step)
            return (row if outer is None else row & outer), step

        return loop_steps.SlicedSteps(data.size(d), make)


def scan_while_capturing(mask: Mask) -> bool:
    """Whether a ``while`` whose first iteration runs ``mask`` may be captured as a
    ``scan`` (capturing, torch has it, ``while`` loops are scanned, and the loop's test
    is per example)."""
    return isinstance(mask, torch.Tensor) and loops.whiles_too() and loops.enabled()


def scan_while(body: Any, values: tuple[Any, ...], n_state: int,
               appended: tuple[int, ...] = ()) -> tuple[Any, ...]:
    """The state (``values[:n_state]``, the loop's mask first) after a captured ``while``.

    As the unrolled loop does while a graph is captured, ``body`` (one iteration, then
    the test narrowing the mask) runs the capture's step bound of times, the last ones
    for no example; some example still running after them is the graph's overflow flag
    (the call is captured again with twice the bound)."""
    constants = tuple(values[n_state:])
    state = tuple(values[:n_state])
    capture = capturing()
    bound = capture.bound
    if _may_scan([], state[1:], constants, appended, values):
        steps = list(state[0].new_zeros(bound).unbind(0))  # scan's length; read by no step

        def step(_: Any, *args: Any) -> tuple[Any, ...]:
            return _with_own_lists(body, args, n_state, appended)

        state = _scanned(step, state, steps, constants, appended)
    else:
        for _ in range(bound):
            state = body(*state, *constants)
    capture.overflows.append(state[0].any())
    return state


def scan_loop_mask(active: torch.Tensor, test: Any) -> torch.Tensor:
    """The examples that run the next iteration of a ``while`` captured as a scan: as
    ``loop_mask``, but a mask every step (no example, rather than ``False``)."""
    running = narrow(active, test)
    return active & False if running is False else running


def _with_own_lists(body: Any, args: tuple[Any, ...], n_state: int,
                    appended: tuple[int, ...]) -> tuple[Any, ...]:
    """``body(*args)``, appending to lists of its own in place of the ``appended`` ones,
    followed by the items each of those got (what the step emits)."""
    args = list(args)
    own: list[list[Any]] = []
    for i in appended:
        own.append([])
        args[n_state + i] = own[-1]
    return (*body(*args), *(tuple(items) for items in own))


def _scanned(step: Any, state: tuple[Any, ...], steps: Any, constants: tuple[Any, ...],
             appended: tuple[int, ...], stacked: tuple[int, ...] = ()) -> tuple[Any, ...]:
    """The state after ``loops.scan_emits``, the items its steps emitted appended to the
    real lists, in the steps' order, followed by the ``stacked`` lists (see
    :func:`scan_for`)."""
    state, emitted, scanned = loops.scan_emits(step, state, steps, constants)
    lists = [constants[i] for i in appended]
    for step_items in emitted:
        for target, items_of_step in zip(lists, step_items):
            target.extend(items_of_step)
    if scanned is None:
        return state + tuple(lists[j] for j in stacked)
    structure, ys = scanned
    out = []
    for j, (target, run) in enumerate(zip(lists, step_outputs.runs(structure, ys))):
        items = step_outputs.StepOutputs(target, *run)
        out.append(items if j in stacked and items.stackable() else items.listed())
    return state + tuple(out[j] for j in stacked)


def _may_scan(items: Any, state: tuple[Any, ...], constants: tuple[Any, ...],
              appended: tuple[int, ...], values: tuple[Any, ...]) -> bool:
    """Whether the steps are materialised, and no step can change a value other than
    through the state it hands back and the lists it appends to."""
    if not isinstance(items, (tuple, list, _Stepped, _Unbound)):  # a generator
        return False
    if not all(type(constants[i]) is list and _held_only_by(constants[i], values, constants)
               for i in appended):
        return False
    if len({id(constants[i]) for i in appended}) < len(appended):
        return False
    others = [c for i, c in enumerate(constants) if i not in appended]
    return all(map(_unchanging, others)) and not any(
        type(v) in (list, dict) for v in state)


def _steps(items: Any, outer: Mask) -> Any:
    """``list(for_steps(items, outer))``.  For the steps of a dynamic dimension (each
    records its examples, see ``runtime.unbinding.unbind``) the masks are the rows of one
    tensor, not a stack of every step's: the graph then does not grow with the steps."""
    if isinstance(items, _Unbound):
        return items.steps(outer)
    if (isinstance(items, (tuple, list)) and items
            and all(type(i) is MaskedBatch and i._present is not None for i in items)):
        present = loop_steps.stacked([i._present for i in items])
        if outer is not None:
            present = present & outer
        return list(zip(present.unbind(0), items))
    return list(for_steps(items, outer))


def _unchanging(value: Any) -> bool:
    """Whether a step cannot change ``value`` in a way the graph would miss."""
    if type(value) in _PLAIN or isinstance(value, (torch.Tensor, MaskedBatch, Undefined)):
        return True
    if isinstance(value, nn.Module):  # its attributes are watched by the capture
        return True
    if isinstance(value, (types.BuiltinMethodType, types.MethodType, types.FunctionType)):
        return not _may_reach_a_container(value, set())
    if type(value) is tuple:
        return all(map(_unchanging, value))
    return False


def _may_reach_a_container(value: Any, seen: set[int]) -> bool:
    """Whether a function or bound method may write a list, dict, set or deque: one bound
    to it (``push = items.append``), or one it closes over and its code writes, directly
    or through another closure.  A step of a scan runs once, while it is traced: it would
    write once for every step."""
    if id(value) in seen:  # (a recursive closure)
        return False
    seen.add(id(value))
    if isinstance(value, (types.BuiltinMethodType, types.MethodType)):
        return isinstance(getattr(value, "__self__", None), SHARED_CONTAINERS)
    if not isinstance(value, types.FunctionType):
        return False
    cells = list(calls.closed_over(value))
    if calls.may_write_a_container(value.__code__) and any(
            isinstance(v, SHARED_CONTAINERS) for v in cells):
        return True
    return any(_may_reach_a_container(v, seen) for v in cells if callable(v))


def _held_only_by(items: list[Any], *tuples: tuple[Any, ...]) -> bool:
    """Whether nothing but frames' local variables and ``tuples`` holds the list ``items``.

    Each step of a scan appends to a list of its own, and the real list gets the items
    after the loop: a function that reads the list during the loop (a closure over it,
    a method reading it through an attribute, another container) would see it without
    them.  Such a list keeps the loop unrolled.  (Asked once per captured loop.)"""
    return all(isinstance(holder, types.FrameType) or any(holder is t for t in tuples)
               for holder in gc.get_referrers(items))
