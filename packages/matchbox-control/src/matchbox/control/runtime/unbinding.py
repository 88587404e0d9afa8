"""The steps of ``x.unbind(d)``: which examples have each.

Along a dynamic dimension each step records the examples that have it (``_present``), by
their lengths: ``len(x.unbind(1))``, ``x.unbind(1)[-1]`` and a ``for`` over the steps are
each example's own (``runtime.sequences``, ``runtime.iteration``).  Along a static
dimension, or of a batch without padding, every example has every step.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from matchbox.extending import capturing, lengths_along
from matchbox.masked_batch import MaskedBatch


def unbind(owner: Any, *args: Any, **kwargs: Any) -> Any:
    """A call written ``owner.unbind(...)`` (``x.unbind(1)``, ``torch.unbind(x, 1)``).

    Along a dynamic dimension each step records the examples that have it, so
    that ``len(x.unbind(1))``, ``x.unbind(1)[-1]`` and slices of the steps are
    each example's own, as in the loop.
    """
    steps = torch.unbind(*args, **kwargs) if owner is torch else owner.unbind(*args, **kwargs)
    batch, d = unbound_dimension(owner, args, kwargs)
    if d is None:
        _every_example_has(batch, steps)
        return steps
    if capturing() is None and _rest_size(batch, d) == 1:
        # One mask entry per example and step: each step's record is a view of the mask,
        # the step's own (one memory: ``same_mask`` tells a condition on the step that
        # it lies within the step, with no *and*).  (Eager only: a captured scan takes
        # the steps' records as rows of one tensor of its own.)
        steps_first = batch._mask.movedim(d, 0)
        present = steps_first.reshape(*steps_first.shape[:2])
    else:
        present = steps_present(batch, d)
    for k, (step, row) in enumerate(zip(steps, present.unbind(0))):
        step._present = row
        # Each example's steps come first (a dynamic dimension's extent is a prefix):
        # ``enumerate`` counts them with plain ints, also while capturing.
        row._unbind_step = (present, k)
    return steps


def unbound_dimension(owner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                      ) -> tuple[Any, int | None]:
    """The value a call written ``owner.unbind(*args, **kwargs)`` takes apart, and the
    dimension, when it is a dynamic dimension of a batch with a mask (else ``None``)."""
    if owner is torch:
        batch, rest = (args[0], args[1:]) if args else (kwargs.get("input"), ())
    else:
        batch, rest = owner, args
    if type(batch) is not MaskedBatch or batch._mask is None:
        return batch, None
    dim = rest[0] if rest else kwargs.get("dim", 0)
    d = dim % batch.dim() if type(dim) is int else 0
    return batch, (d if d and batch.dims[d - 1] else None)


def steps_present(batch: MaskedBatch, d: int) -> torch.Tensor:
    """``(steps, batch)``: which examples have each step of ``batch`` along its dynamic
    dimension ``d``: those it is shorter than, by the lengths, not by the mask, which is
    all false for an example empty in another dimension (sentences of no words, ``(1, 3,
    0, H)``: its three steps, each empty; a user trial found them skipped)."""
    steps = torch.arange(batch._mask.size(d), device=batch._mask.device)
    return steps.unsqueeze(1) < lengths_along(batch, d).unsqueeze(0)


def _every_example_has(batch: Any, steps: Any) -> None:
    """The steps of ``x.unbind(d)``, ``d > 0``, along a static dimension or of a batch
    without padding: every example has each of them (the batch's own record, if it has
    one), also one empty in another dimension, whose steps' masks are all false (``x`` of
    shape ``(1, 0, 3)``: ``x.unbind(2)`` has three steps; a user trial found them
    skipped as steps that example does not have)."""
    if type(batch) is not MaskedBatch or not steps or type(steps[0]) is not MaskedBatch:
        return
    if steps[0].data.size(0) != batch.data.size(0):
        return  # dimension 0 (each example's own): one step, the batch's
    if batch._mask is None and steps[0]._mask is None and batch._present is None:
        return  # every example has every step, and the steps say so (no record needed)
    present = batch._present
    if present is None:
        present = torch.ones(batch.data.size(0), dtype=torch.bool, device=batch.data.device)
    for step in steps:
        step._present = present


def _rest_size(batch: MaskedBatch, d: int) -> Any:
    # The size of the rest spelled out, not -1: a reshape cannot infer it when the
    # dimension has no step (every example empty in it).
    return math.prod(batch._mask.movedim(d, 0).shape[2:])


def prefix_steps(items: Any) -> bool:
    """Whether ``items`` are steps of one ``unbind`` along a dynamic dimension, in
    order: each example has a prefix of them, so a step's count is the same for
    every example that has it, known without reading values."""
    origins = [getattr(getattr(item, "_present", None), "_unbind_step", None) for item in items]
    if not origins or origins[0] is None:
        return False
    whole = origins[0][0]
    return all(origin is not None and origin[0] is whole and origin[1] == k
               for k, origin in enumerate(origins))
