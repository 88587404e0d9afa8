"""``for`` loops: which examples have each step.

In a loop over examples, each example iterates over its own items: along a
dynamic dimension (``x.unbind(1)``) an example of length ``n`` has ``n``
steps, and ``range(n)`` with ``n`` a batch of per-example sizes gives each
example its own count.  The batched loop runs every step that some example
has; a step's execution mask says which examples have it.

- An item (or a component of a ``zip``/``enumerate`` tuple) that is a batch
  exists for the examples where it is real: a step of an ``unbind`` along a
  dynamic dimension is padding for the examples that have ended, and so is
  an item that a masked loop appended for the examples that did not run.
  A tuple item exists where all of its batch components do.
- Items that are not batches exist for every example (a Python list has the
  same length for every example).

``for_steps`` yields ``(mask, item)``; the mask is ``None``/the outer mask
when every running example has the step (plain Python then), a bool tensor
otherwise.  Steps that no example has are skipped when that is known without
a per-step device sync (materialised sequences, ranges).
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from matchbox.control.runtime.columns import Column
from matchbox.control.runtime.masks import Mask
from matchbox.control.runtime.select import user_line
from matchbox.control.runtime.unbinding import prefix_steps
from matchbox.extending import (
    BATCH_SIZES,
    capturing,
    combine_masks,
    fails,
    fit_mask,
    reads_values,
    refuse_batch_size_number,
    remember_mask_view,
    running,
)
from matchbox.extending import EXAMPLE_SCALAR as SCALAR
from matchbox.extending import mark_example_scalar as mark
from matchbox.extending import mask_lengths as _lengths
from matchbox.functional import stack
from matchbox.masked_batch import MaskedBatch


def for_steps(iterable: Any, outer: Mask) -> Iterator[tuple[Mask, Any]]:
    """Each item of ``iterable`` with the mask of the examples that have it."""
    if isinstance(iterable, _Stepped):
        return _masked_steps(iterable.present, iterable.items, outer)
    if (isinstance(iterable, (tuple, list)) and iterable
            and set(map(type, iterable)) == _BATCHES):  # (every item a batch, in C)
        return _sequence_steps(iterable, outer)
    return _lazy_steps(iterable, outer)


_BATCHES = {MaskedBatch}


def example_real(item: Any) -> torch.Tensor | None:
    """Which examples have ``item`` (a ``(batch,)`` bool tensor), ``None`` for all.

    An item that records which examples have it (appended, or made by a
    comprehension step, under a per-example condition: ``sequences``) says so;
    another batch exists where it is real.
    """
    if type(item) is MaskedBatch:
        present = getattr(item, "_present", None)
        if present is not None:
            return present
        mask = item._mask
        if mask is None:
            return None
        batch = mask.size(0)
        flat = mask.reshape(batch, -1)
        return flat[:, 0] if flat.size(1) == 1 else flat.any(1)
    if type(item) is Column:  # a column of zip(*rows): where any of its items is
        return item.present
    if type(item) is tuple:
        _check_batch_sizes(item)
        return combine_masks([example_real(component) for component in item])
    return None


def _check_batch_sizes(parts: Any) -> None:
    # Compared, not put in a set: a symbolic size (matchbox.compile) has no hash.
    sizes: list[Any] = []
    for p in parts:
        if type(p) is MaskedBatch and not any(p.data.size(0) == s for s in sizes):
            sizes.append(p.data.size(0))
    if len(sizes) > 1:
        raise ValueError(f"zip: the sequences hold batches of different batch sizes "
                         f"{sorted(map(int, sizes))}; every batch in a @batch function must "
                         "hold the same examples")


def _lazy_steps(iterable: Iterable[Any], outer: Mask) -> Iterator[tuple[Mask, Any]]:
    # Items are produced one at a time (a generator keeps its laziness); a
    # step that no example has still runs, fully masked, to spare a sync.
    for item in iterable:
        present = example_real(item)
        if present is None:
            yield outer, item
            continue
        if type(item) is tuple:
            item = _restrict(item, present)
        yield (present if outer is None else outer & present), item


def _restrict(item: tuple[Any, ...], present: torch.Tensor) -> tuple[Any, ...]:
    """The batch components of a ``zip`` step, each real only where the step exists.

    ``zip`` of sequences of different lengths: where one sequence has ended,
    the other's step is real but not part of the loop; computing with it must
    not send gradient to it (``0 * nan`` from the ended one's padding).
    """
    parts = [c for c in item if type(c) is MaskedBatch]
    if len(parts) < 2:
        return item
    return tuple(_only_present(c, present) if type(c) is MaskedBatch else c for c in item)


def _only_present(batch: MaskedBatch, present: torch.Tensor) -> MaskedBatch:
    data = batch.data  # (a region's deferred gradient guard applies when read)
    view = present.view(data.size(0), *(1,) * (data.dim() - 1))
    if data.requires_grad and torch.is_grad_enabled():
        data = torch.where(view, data, data.detach())
    mask = view if batch._mask is None else batch._mask & view
    mask = _lengths.restricted(fit_mask(mask, data, batch.dims), batch, present)
    return mark(MaskedBatch._make(data, mask, batch.dims), batch._scalar)


def _sequence_steps(items: Any, outer: Mask) -> Iterator[tuple[Mask, Any]]:
    present = _presence(items)
    if present is None:
        return ((outer, item) for item in items)
    return _masked_steps(present, items, outer, from_items=True)


def _presence(items: Any) -> torch.Tensor | None:
    """Which examples have each item of a sequence of batches, ``(steps, batch)``;
    ``None`` when every example has every item."""
    masks = list(map(_mask_of, items))
    # Every item is a batch here: a direct look at each one's record.
    recorded = any(getattr(item, "_present", None) is not None for item in items)
    if not recorded and all(m is None for m in masks):
        return None
    batch = items[0].data.size(0)
    if not recorded and all(m is not None and m.shape == masks[0].shape for m in masks):
        present = torch.stack(masks).reshape(len(items), batch, -1).any(-1)
        if _lengths.any_carried(items):
            # An item empty in part (all-false mask, lengths not all zero) is present.
            present = present | torch.stack([_lengths.of(item).ne(0).any(1)
                                             for item in items])
        return present
    ones = torch.ones(batch, dtype=torch.bool, device=items[0].data.device)
    return torch.stack([ones if r is None else r for r in map(example_real, items)])


_mask_of = operator.attrgetter("_mask")


def _masked_steps(present: torch.Tensor, items: Any, outer: Mask, from_items: bool = False
                  ) -> Iterator[tuple[Mask, Any]]:
    """Steps of a sequence whose per-step masks are known in advance (``(steps, batch)``;
    ``from_items``: made from the items' own records, ``_presence``)."""
    if outer is not None:
        present = present & outer
    if capturing() is not None or not reads_values(present):
        # While capturing, and eagerly where reading the counts is a device sync:
        # every step runs under its mask, as a hand-written padded loop does.
        return _every_step_masked(present, items, outer, from_items)
    return _counted_steps(present, items, outer, from_items)


def _every_step_masked(present: torch.Tensor, items: Any, outer: Mask, from_items: bool
                       ) -> Iterator[tuple[Mask, Any]]:
    """Every step runs under its mask (no count is read): while capturing a graph, and
    eagerly where a host read is a device sync (``_masking.HOST_READS``)."""
    for mask, item in zip(present.unbind(0), items):
        if type(item) is tuple:
            item = _restrict(item, mask)
        elif outer is None:
            mask = _remember_items_mask(mask, item, from_items)
        yield mask, item


def _counted_steps(present: torch.Tensor, items: Any, outer: Mask, from_items: bool
                   ) -> Iterator[tuple[Mask, Any]]:
    # One sync for the whole loop: how many running examples have each step;
    # one call for every step's mask.
    counts = present.sum(1).tolist()
    step_masks = present.unbind(0)
    running = present.size(1) if outer is None else int(outer.sum())
    for step, item in enumerate(items):
        count = counts[step]
        if count == 0:
            continue
        if count == running:
            # Every running example has this step: no masking needed.  With no
            # outer mask that is every example, so the item's all-true mask is
            # dropped and the step runs as fast as a batch without padding; under
            # an outer mask the item keeps it (the examples that do not run the
            # loop may have padding there, which must not pass for real values).
            yield outer, (_without_mask(item) if outer is None else item)
            continue
        mask = step_masks[step]
        if type(item) is tuple:
            item = _restrict(item, mask)
        elif outer is None:
            mask = _remember_items_mask(mask, item, from_items)
        yield mask, item


def _remember_items_mask(mask: torch.Tensor, item: Any, from_items: bool) -> torch.Tensor:
    """Let the step's mask, viewed as ``(batch, 1)``, be the item's own one-per-example mask.

    The two are equal; handing back the item's very tensor lets ops see it by
    identity (``_masking.and_running``, a merge): merging ``h = cell(x_t, h)``,
    whose result is real where ``x_t`` is, then needs no ``and`` of the two masks.
    An item of one value per example (``(batch,)`` mask) gives its mask as the
    step's: a condition on the item (``if x_t == 0``) is then seen to lie within
    the step (``mask_and``), and costs no *and* with it.  Returns the step's mask.
    """
    if type(item) is MaskedBatch:
        recorded = getattr(item, "_present", None)
        own = item._mask
        if recorded is not None:
            # A step's mask made from this record (``_presence``) has its values.
            if from_items and recorded.shape == mask.shape:
                mask = recorded
            if own is not None and own.numel() == own.size(0):
                remember_mask_view(mask, own)
            return mask
        if own is not None and own.numel() == own.size(0):
            if own.shape == mask.shape and _lengths.carried(own) is None:
                return own
            remember_mask_view(mask, own)
    return mask


def _without_mask(item: Any) -> Any:
    if type(item) is MaskedBatch and item._mask is not None and not any(item.dims):
        return mark(MaskedBatch._make(item.data, None, item.dims), item._scalar)
    return item


class _Stepped:
    """Items with their per-step masks known in advance (a batch range, an enumerate,
    a zip); ``kind`` is the builtin it stands for (only a range can be reversed)."""

    __slots__ = ("items", "present", "kind")

    def __init__(self, items: Any, present: torch.Tensor, kind: str):
        self.items = items
        self.present = present
        self.kind = kind

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)


def iter_range(range_fn: Any, *args: Any) -> Any:
    """``range(*args)``; with batch bounds, each example's own range; ``x.size(0)`` of a
    batch raises ``TypeError`` (each example's ``range(1)`` has one step, the batch's B).

    The steps run to the largest example's count; step ``k`` has ``start +
    k * step`` as a plain int when ``start`` and ``step`` are the same for
    every example, as a batch of per-example ints otherwise.
    """
    if range_fn is not builtins.range:
        return range_fn(*args)
    for a in args:  # x.size(0): 1 step in each example, B here; x.maxsize(d): n, T
        if type(a) in BATCH_SIZES:
            refuse_batch_size_number(a)
    if not any(type(a) is MaskedBatch for a in args):
        return range_fn(*args)
    if not 1 <= len(args) <= 3:
        raise TypeError(f"range expected 1 to 3 arguments, got {len(args)}")
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (
        (args[0], args[1], 1) if len(args) == 2 else args)
    batch = next(a for a in args if type(a) is MaskedBatch)
    size, device = batch.data.size(0), batch.data.device
    values = [_per_example_int(v, size, device, name)
              for v, name in ((start, "start"), (stop, "stop"), (step, "step"))]
    (first, real_start), (last, real_stop), (stride, real_step) = values
    zero = stride == 0
    if fails(running(zero)):
        raise ValueError("range() arg 3 must not be zero")
    # An example that does not run the loop may have a zero step: its count goes unused.
    stride = torch.where(zero, 1, stride)
    count = torch.where(stride > 0, (last - first + stride - 1).div(stride, rounding_mode="floor"),
                        (last - first + stride + 1).div(stride, rounding_mode="floor"))
    count = count.clamp(min=0) * (real_start & real_stop & real_step)
    capture = capturing()
    if capture is not None:
        # range(n) of sizes read from a batch: as many steps as that batch's padding.
        sizes = stop.data if len(args) == 1 and type(stop) is MaskedBatch else None
        steps = capture.steps_for(count, sizes)
    else:
        steps = int(count.max()) if size else 0
    present = torch.arange(steps, device=device).unsqueeze(1) < count.unsqueeze(0)
    if type(start) is not MaskedBatch and type(step) is not MaskedBatch:
        items: list[Any] = list(builtins.range(int(start), int(start) + steps * int(step),
                                               int(step)))
    else:
        items = [mark(MaskedBatch._make(first + k * stride, None, ()), SCALAR)
                 for k in builtins.range(steps)]
    return _Stepped(items, present, "range")


def _per_example_int(value: Any, size: int, device: Any, name: str):
    if type(value) is MaskedBatch:
        if value.dims or value.data.dtype.is_floating_point or value.data.dtype.is_complex:
            raise TypeError(
                f"range(): the {name} must be an int or a batch of per-example ints "
                f"(dims == ()), got a batch with dims {value.dims} and dtype {value.dtype}"
            )
        real = value._mask.reshape(size) if value._mask is not None else torch.ones(
            size, dtype=torch.bool, device=device)
        return value.data.to(torch.int64), real
    if isinstance(value, torch.Tensor):
        value = int(value)
    if not isinstance(value, int):
        raise TypeError(f"range(): the {name} must be an int, got {type(value).__name__}")
    return (torch.full((size,), value, dtype=torch.int64, device=device),
            torch.ones(size, dtype=torch.bool, device=device))


def iter_enumerate(enumerate_fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``enumerate(...)``; the count is each example's own.

    Along a dynamic dimension an example's steps come first, so the count of
    a step is the same for every example that has it, and stays a plain int.
    When examples have steps after a missing one (``reversed``), each example
    counts its own steps: the index is then a batch of per-example ints.
    """
    if (enumerate_fn is not builtins.enumerate or not 1 <= len(args) + len(kwargs) <= 2
            or set(kwargs) - {"iterable", "start"}):
        return enumerate_fn(*args, **kwargs)
    bound = dict(zip(("iterable", "start"), args), **kwargs)
    items, start = bound.get("iterable"), bound.get("start", 0)
    if "iterable" not in bound or isinstance(start, MaskedBatch):
        return enumerate_fn(*args, **kwargs)
    steps = _known_steps(items)
    if steps is None:
        return enumerate_fn(_in_place_lazily(items, "enumerate"), start)
    items, present = steps
    if present is None:
        return enumerate_fn(items, start)
    # Prefix-shaped (no example has a step after one it lacks): plain counts.  (While
    # capturing, the layout is not known, unless the items are the steps of a dynamic
    # dimension: per-example counts serve both.)
    if prefix_steps(items) or (capturing() is None
                               and not bool((present[1:] & ~present[:-1]).any())):
        return _Stepped(list(enumerate_fn(items, start)), present, "enumerate")
    counts = present.long().cumsum(0) - 1 + start
    indexed = [(mark(MaskedBatch._make(counts[k], None, ()), SCALAR), item)
               for k, item in enumerate(items)]
    return _Stepped(indexed, present, "enumerate")


def iter_reversed(reversed_fn: Any, sequence: Any) -> Any:
    """``reversed(sequence)``; a batch range's steps reversed with their masks."""
    if reversed_fn is builtins.reversed:
        if isinstance(sequence, _Stepped):
            if sequence.kind != "range":
                raise TypeError(f"'{sequence.kind}' object is not reversible")
            return _Stepped(sequence.items[::-1], sequence.present.flip(0), "range")
        if isinstance(sequence, (tuple, list)):
            return list(sequence)[::-1]  # a list, which zip and enumerate read step by step
    return reversed_fn(sequence)


def iter_zip(zip_fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``zip(...)``; per example, zip pairs each example's own steps.

    The batched steps pair positions.  Where every argument gives each
    example its steps first (a sequence along a dynamic dimension, a range), the
    two agree.  An argument whose steps for some example come after a missing
    one (``reversed`` of a dynamic dimension: a short example's steps come
    last) has its steps moved to the front for each example first.
    """
    if zip_fn is not builtins.zip or kwargs or not args:
        return zip_fn(*args, **kwargs)
    known = [_known_steps(arg) for arg in args]
    if any(k is None for k in known):
        # A lazy iterable: plain zip, which keeps the laziness.
        return zip_fn(*(_in_place_lazily(arg, "zip") for arg in args))
    _check_batch_sizes([item for items, _ in known for item in items[:1]])
    if all(present is None for _, present in known):
        return zip_fn(*(items for items, _ in known))
    # Each example's own steps first, then cut at the shortest: cut first, an example
    # whose steps of one list sit past the other's end lost them (a user trial: two lists
    # appended in the two sides of an `if`).
    known = [(items, own) if own is None else _own_steps_first(items, own)
             for items, own in known]
    count = min(len(items) for items, _ in known)
    columns, present = [], None
    for items, own in known:
        if own is not None:
            present = own[:count] if present is None else present & own[:count]
        columns.append(items[:count])
    return _Stepped(list(zip_fn(*columns)), present, "zip")


def _in_place_lazily(iterable: Any, name: str) -> Iterator[Any]:
    """``iterable`` read lazily, refused at an item that an example has after one it lacks
    (``itertools.chain(x.unbind(1), [eos])``, a generator of steps): a plain count or
    pairing goes by position over every example's items, which is then not that
    example's own (a user trial)."""
    lacked = None  # per example: an item it lacks came before
    for item in iterable:
        real = example_real(item)
        if lacked is not None:
            having = lacked if real is None else lacked & real
            if fails(having, lambda: _out_of_place_error(name)):
                raise _out_of_place_error(name)
        if real is not None:
            lacked = ~real if lacked is None else lacked | ~real
        yield item


def _out_of_place_error(name: str) -> NotImplementedError:
    return NotImplementedError(
        f"@batch: {name}() over a lazy iterable (a generator, itertools.chain) ({user_line()}) "
        "reaches an item that some example has after one it lacks (a step past its end): "
        f"{name}() would go by position over every example's items, not over its own; "
        f"give {name}() a list ([*x.unbind(1), eos]), whose items each example counts as "
        "its own")


def _known_steps(iterable: Any) -> tuple[list[Any], torch.Tensor | None] | None:
    """The items of a materialised sequence and which examples have each step
    (``(steps, batch)``; ``None`` when every example has every step); ``None``
    for a lazy iterable."""
    if isinstance(iterable, _Stepped):
        return list(iterable.items), iterable.present
    if type(iterable) is builtins.reversed:
        iterable = list(iterable)  # a view of a sequence: reading it has no side effects
    if not isinstance(iterable, (tuple, list)):
        return None
    items = list(iterable)
    if not items or not all(type(item) is MaskedBatch for item in items):
        return items, None
    return items, _presence(items)


def _own_steps_first(items: list[Any], present: torch.Tensor) -> tuple[list[Any], torch.Tensor]:
    """Each example's present steps moved to the front, in order (a no-op for prefixes)."""
    if present.size(0) < 2 or (capturing() is None
                               and not bool((present[1:] & ~present[:-1]).any())):
        return items, present
    if all(isinstance(item, int) and not isinstance(item, bool) for item in items):
        # A reversed batch range: each step's value, the same for every example.
        values = torch.tensor(items, device=present.device).unsqueeze(1).expand_as(present)
        items = [mark(MaskedBatch._make(v, None, ()), SCALAR) for v in values.unbind(0)]
    if not all(type(item) is MaskedBatch for item in items):
        raise NotImplementedError(
            "@batch: zip of an argument whose steps come, for some example, after steps it "
            "does not have (as reversed(...) of a dynamic dimension gives them), and whose "
            "items are not batches or ints (an enumerate, a zip): each example's own steps "
            "cannot be paired; zip the sequences first, then enumerate the zip"
        )
    # Each item real only where its step is present; a dynamic stack gathers each
    # example's steps to the front (core's stack_batches).
    steps = [_only_present(item, real) for item, real in zip(items, present.unbind(0))]
    moved = list(stack(steps, 1, dynamic=True).unbind(1))
    kinds = {item._scalar for item in items}  # numbers (a range's), or (1,) tensors
    if len(kinds) == 1 and not moved[0].dims:
        moved = [mark(item, kinds.pop()) for item in moved[:1]] + [
            mark(item, moved[0]._scalar) for item in moved[1:]]
    positions = torch.arange(present.size(0), device=present.device).unsqueeze(1)
    return moved, positions < present.sum(0).unsqueeze(0)
